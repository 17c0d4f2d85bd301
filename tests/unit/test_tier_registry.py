"""The Tier family: one member per tier of the ladder above the model, and callers dispatch
through the registry (a throwaway member put in a tier's place is what the runners then run)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from kvproof.running import checking
from kvproof.consumer.result import ConsumerResult
from kvproof.envs import Env
from kvproof.judging.judge import Judgement
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof.replay import core
from kvproof.result import Result
from kvproof.tiers import registry
from kvproof.tiers.base import TierRunner
from kvproof.tiers.batch import Answers
from kvproof.tiers.row import ReplayRow, Row
from kvproof.verdicts import Tier, Verdict

LAYOUT = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}], "cache": {"block_size": 16}})


def test_every_tier_above_the_model_has_exactly_one_member():
    members = registry.runners()
    assert sorted(m.tier for m in members) == [t for t in Tier if t != Tier.MODEL]
    assert len({m.tier for m in members}) == len(members)
    with pytest.raises(KeyError):
        registry.runner(Tier.MODEL)
    with pytest.raises(ValueError, match="already has a member"):
        registry.register(type(registry.runner(Tier.CONSUMER))())


def test_the_runners_tier_lists_come_from_the_registry():
    assert checking.CHECK_TIERS == registry.worker_tiers() == (Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER)
    assert core.REPLAY_TIERS == tuple(Tier)[1:]
    # the function and manager tiers share the bridge's Outcome: one reader, one runner row
    assert [m.tier for m in registry.readers(Tier)] == [Tier.FUNCTION, Tier.CONSUMER]
    assert [registry.through(t) for t in Tier if t != Tier.MODEL] == [
        (Tier.FUNCTION,), (Tier.FUNCTION, Tier.MANAGER), (Tier.CONSUMER,), ()]  # a finding's measuring tiers


class Throwaway(TierRunner):
    """Stands in for a tier: the runners must call it, whatever tier it takes the place of."""

    def __init__(self, tier: Tier, serve: str | None) -> None:
        self.tier, self.serve, self.part = tier, serve, "consumer" if serve else None

    what = "throwaway result"

    def result(self, raw) -> Result:
        return self.record(f"parsed {raw}")

    def record(self, own) -> Result:
        return Result(self.tier, own)

    def judge(self, layout, result) -> Judgement:
        return Judgement(Verdict.WARN, self.tier, note=f"throwaway saw {result}")

    def row(self, name, layout, env_name, result) -> Row:
        return Row(name, layout, env_name, result, self.judge(layout, result.payload))

    def carries(self, row) -> bool:
        return row.judgement is not None and row.judgement.note.startswith("throwaway")

    def replay_row(self, row, release) -> ReplayRow:
        return ReplayRow.of(row, release, self.tier)

    def outside_rows(self, named, env_map, prior, **how) -> list[ReplayRow]:
        return [ReplayRow(n, lay, "nowhere", self.record("a boot"), self.judge(lay, "a boot"), "9.9.9", self.tier)
                for n, lay in named]

    def detail(self, row) -> str:
        return "throwaway detail"

    def data(self, row) -> dict:
        return {"throwaway": True}


@pytest.fixture
def stand_in(request):
    tier, serve = request.param
    real = registry.runner(tier)
    registry.unregister(tier)
    registry.register(Throwaway(tier, serve))
    yield tier
    registry.unregister(tier)
    registry.register(real)


@pytest.mark.parametrize("stand_in", [(Tier.CONSUMER, "kvproof.consumer.worker:answers")], indirect=True)
def test_a_worker_tier_is_judged_and_shown_by_its_member(stand_in):
    reply = Answers.from_reply([], (stand_in,), {"consumer": {"k": {"said": "reply"}}})
    assert reply.parts == {"consumer": {"k": Result(stand_in, "parsed {'said': 'reply'}")}}
    (row,) = reply.rows([("a", LAYOUT, "k")], "env")
    seen = "throwaway saw parsed {'said': 'reply'}"  # the member parsed its part and judged it
    assert (row.tier, row.verdict, row.judgement.note) == (stand_in, Verdict.WARN, seen)
    shown = core.replay_dict(ReplayRow.of(row, "0.32.0", stand_in))
    assert (shown["detail"], shown["throwaway"]) == ("throwaway detail", True)


@pytest.mark.parametrize("stand_in", [(Tier.ENGINE, None)], indirect=True)
def test_a_tier_outside_the_worker_makes_replays_rows(stand_in):
    (row,) = core.replay([("a", LAYOUT)], [], [stand_in])
    assert (row.tier, row.release, row.judgement.note) == (stand_in, "9.9.9", "throwaway saw a boot")
    assert core.detail(row) == "throwaway detail"


# a reply part of each worker tier, as the worker sends it
PARTS = {"outcomes": Outcome(LAYOUT.content_hash(), "0.32.0", scheduler_block_size=16, hash_block_size=16,
                             manager_attempted=True, coordinator="UnitaryKVCacheCoordinator").to_dict(),
         "consumer": ConsumerResult(LAYOUT.content_hash(), "0.32.0", scheduler_block_size=16,
                                    hash_block_size=16).to_dict()}


def _rows_of(member: TierRunner) -> list[Row]:
    """A member's rows, made the way the runners make them: from a reply part, or outside the worker
    (the engine tier with no reproducer to find: no boot)."""
    if member.serve is not None:
        runner_row = member.row("a", LAYOUT, "env", member.result(PARTS[member.part]))
        return [runner_row, member.replay_row(runner_row, "0.32.0")]
    return member.outside_rows([("a", LAYOUT)], {"0.32.0": Env("vllm-x", Path("/nowhere"))}, [], synthesise=False)


def test_every_member_makes_the_one_result_record_and_a_row_holds_one():
    """The consumer, engine and function/manager results share one record type (kvproof.result,
    the ground floor), each tier's own record its payload; a row holds that one result."""
    assert [f.name for f in fields(Row)] == ["name", "layout", "env", "result", "judgement"]
    assert [f.name for f in fields(ReplayRow)][5:] == ["release", "asked"]  # replay's own fields, on its own row
    for name in ("outcome", "consumer", "skip", "scheduler_block_size", "hash_block_size", "vllm_version"):
        assert isinstance(getattr(Row, name), property), name  # read from the result, never set
    payloads = set()
    for member in registry.runners():
        for row in _rows_of(member):
            res = row.result
            assert type(res) is Result and res.tier == member.tier, (member.tier, res)
            assert (row.outcome is not None) + (row.consumer is not None) <= 1 and res.payload is not None
            payloads.add(type(res.payload).__name__)
            if member.serve is not None:
                assert (res.vllm_version, res.scheduler_block_size, res.hash_block_size) == ("0.32.0", 16, 16)
                assert row.verdict is not None
            else:
                assert row.verdict is None and row.skip.startswith("no engine reproducer") and res.skip == row.skip
        replayed = _rows_of(member)[-1]
        assert isinstance(replayed, ReplayRow) and replayed.tier == member.tier and replayed.release == "0.32.0"
    assert payloads == {"Outcome", "ConsumerResult", "EngineRun"}


def test_the_registry_answers_what_callers_used_to_branch_on():
    """The queries that replaced tier branches (cli, health, findings, bisect, selftest)."""
    F, M, C, E = Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER, Tier.ENGINE
    assert (registry.default(), registry.streamed()) == (M, C)
    assert [registry.top(t) for t in (F, M, C, E)] == [M, M, C, M]  # fix's grouping of ledger entries
    assert list(registry.skips(checking.CHECK_TIERS)) == [M, C]
    assert list(registry.refused(checking.CHECK_TIERS)) == [E]
    assert "kvproof replay FILE --tier engine" in registry.refused(checking.CHECK_TIERS)[E]


@pytest.mark.parametrize("tier", [Tier.MANAGER, Tier.CONSUMER])
def test_checks_skip_flags_are_the_members(monkeypatch, tier):
    """``check --no-<tier>`` exists because the member says it may be skipped, and drops that tier."""
    from kvproof.commands import cli

    def flags():
        sub = cli._parser()._subparsers._group_actions[0].choices
        return {f for name in ("check", "explain") for a in sub[name]._actions for f in a.option_strings}

    assert f"--no-{tier}" in flags()
    assert tier not in cli._tiers(cli._parse(["check", "--groups", "mla:16", f"--no-{tier}"]))
    monkeypatch.setattr(registry.runner(tier), "skip", "")
    assert f"--no-{tier}" not in flags()


def test_the_health_probe_asks_each_member(monkeypatch):
    """One step per worker tier, in ladder order; the function step also needs a resolved Outcome
    (the member's probe_ok), the others a verdict about vLLM."""
    from types import SimpleNamespace

    from kvproof.running import health
    from kvproof.bridge import client
    from kvproof.tiers import batch as batch_mod

    def row(verdict, resolved=None):
        outcome = None if resolved is None else SimpleNamespace(resolved=resolved)
        return SimpleNamespace(judgement=SimpleNamespace(verdict=verdict), outcome=outcome, message=lambda: "m")

    rows = []
    answers = SimpleNamespace(derivation=lambda c: SimpleNamespace(layout=LAYOUT, error=None), rows=lambda *a: rows)
    monkeypatch.setattr(client, "start_all", lambda envs: [SimpleNamespace(close=lambda: None) for _ in envs])
    monkeypatch.setattr(batch_mod, "batch", lambda *a: answers)
    assert health.TIERS == registry.worker_tiers()
    rows[:] = [row(Verdict.OK, resolved=True), row(Verdict.WARN)]
    assert health.probe(SimpleNamespace(name="e")).steps == {"derive": "ok", "function": "ok", "manager": "ok", "consumer": "ok"}
    rows[:] = [row(Verdict.FAIL, resolved=False), row(Verdict.ERROR)]
    assert health.probe(SimpleNamespace(name="e")).steps == {"derive": "ok", "function": "FAIL: m", "manager": "ok",
                                        "consumer": "ERROR: m"}


def test_a_corpus_files_required_expectations_are_the_members(monkeypatch):
    """kvproof.corpus.required_tiers asks each member (``expected``), names no tier itself."""
    from kvproof import corpus, facts

    release = facts.MANAGED_RELEASES[-1]
    assert corpus.required_tiers(LAYOUT, release) == ("function", "manager")
    monkeypatch.setattr(registry.runner(Tier.CONSUMER), "expected", lambda layout, release: True)
    assert corpus.required_tiers(LAYOUT, release) == ("function", "manager", "consumer")
    assert corpus.required_tiers(LAYOUT, "my-overlay") == ()


def test_the_worker_answers_what_the_registry_asks_and_names_no_tier(monkeypatch):
    """issue 43: tier names are dispatched by the registry and the CLI parser only. A batch
    request carries, per reply part, the serving function and options of the highest member
    asked; the worker calls it over every keyed layout, knowing nothing of tiers."""
    import sys
    import types
    from pathlib import Path

    from kvproof.running import worker

    F, M, C = Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER
    assert registry.asks([F]) == {"outcomes": {"serve": "kvproof.bridge.runtime:outcomes", "with": {"manager": False}}}
    assert registry.asks([F, M, C]) == {"outcomes": {"serve": "kvproof.bridge.runtime:outcomes", "with": {"manager": True}},
                                        "consumer": {"serve": "kvproof.consumer.worker:answers", "with": {}}}
    assert registry.asks([Tier.ENGINE]) == {}
    fake = types.ModuleType("kvproof._serving_stand_in")
    fake.echo = lambda bridge, layouts, tag="": {k: {"tag": tag, "groups": len(lay.groups), "bridge": bridge}
                                                 for k, lay in layouts}
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    reply = worker.batch("B", {"layouts": [{"key": "k1", "layout": LAYOUT.to_dict()}],
                               "asks": {"mine": {"serve": f"{fake.__name__}:echo", "with": {"tag": "t"}}}})
    assert reply == {"derived": {}, "mine": {"k1": {"tag": "t", "groups": 1, "bridge": "B"}}}
    with pytest.raises(ValueError, match="not a kvproof serving function"):
        worker.served("os.path:join")
    source = Path(worker.__file__).read_text()
    assert not [t for t in Tier if f'"{t}"' in source or f"'{t}'" in source]
