"""The Tier family: one member per tier of the ladder above the model, and callers dispatch
through the registry (a throwaway member put in a tier's place is what the runners then run)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvproof import checking
from kvproof.judge import Judgement
from kvproof.layout import Layout
from kvproof.replay import core
from kvproof.tiers import registry
from kvproof.tiers.base import TierRunner
from kvproof.tiers.batch import Answers
from kvproof.tiers.row import Row
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

    def __init__(self, tier: Tier, ask: str | None) -> None:
        self.tier, self.ask, self.part = tier, ask, "consumer" if ask else None

    what = "throwaway result"

    def result(self, raw):
        return f"parsed {raw}"

    def judge(self, layout, result) -> Judgement:
        return Judgement(Verdict.WARN, self.tier, note=f"throwaway saw {result}")

    def row(self, name, layout, env_name, result) -> Row:
        return Row(name, layout, env_name, None, self.judge(layout, result))

    def carries(self, row) -> bool:
        return row.judgement is not None and row.judgement.note.startswith("throwaway")

    def replay_row(self, row, release) -> Row:
        return replace(row, release=release, asked=self.tier)

    def outside_rows(self, named, env_map, prior, **how) -> list[Row]:
        return [Row(n, lay, "nowhere", None, self.judge(lay, "a boot"), release="9.9.9", asked=self.tier)
                for n, lay in named]

    def detail(self, row) -> str:
        return "throwaway detail"

    def data(self, row) -> dict:
        return {"throwaway": True}


@pytest.fixture
def stand_in(request):
    tier, ask = request.param
    real = registry.runner(tier)
    registry.unregister(tier)
    registry.register(Throwaway(tier, ask))
    yield tier
    registry.unregister(tier)
    registry.register(real)


@pytest.mark.parametrize("stand_in", [(Tier.CONSUMER, "consumer")], indirect=True)
def test_a_worker_tier_is_judged_and_shown_by_its_member(stand_in):
    reply = Answers.from_reply([], (stand_in,), {"consumer": {"k": {"said": "reply"}}})
    assert reply.parts == {"consumer": {"k": "parsed {'said': 'reply'}"}}
    (row,) = reply.rows([("a", LAYOUT, "k")], "env")
    seen = "throwaway saw parsed {'said': 'reply'}"  # the member parsed its part and judged it
    assert (row.tier, row.verdict, row.judgement.note) == (stand_in, Verdict.WARN, seen)
    shown = core.replay_dict(replace(row, release="0.32.0"))
    assert (shown["detail"], shown["throwaway"]) == ("throwaway detail", True)


@pytest.mark.parametrize("stand_in", [(Tier.ENGINE, None)], indirect=True)
def test_a_tier_outside_the_worker_makes_replays_rows(stand_in):
    (row,) = core.replay([("a", LAYOUT)], [], [stand_in])
    assert (row.tier, row.release, row.judgement.note) == (stand_in, "9.9.9", "throwaway saw a boot")
    assert core.detail(row) == "throwaway detail"
