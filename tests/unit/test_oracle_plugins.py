"""The oracle plug-in mechanics (no vLLM): each report reaches the oracles that override its hook,
in their order; an oracle reports only under its own registered ids; hard or soft is the registry's."""

from __future__ import annotations

import hashlib

import pytest

from kvproof.consumer.efficiency_oracle import EfficiencyOracle
from kvproof.consumer.hit_oracle import HitOracle
from kvproof.consumer.observations import Recorder
from kvproof.consumer.oracle import Oracle, RunContext
from kvproof.consumer.oracles import Oracles, standard
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.truth import HashIndex
from kvproof.judging.oracle_ids import OracleId, UnknownOracle


def hb(parent, toks, ahead=()):
    return hashlib.sha256(repr((parent, tuple(toks), tuple(ahead))).encode()).digest()


def ctx_rec():
    res = ConsumerResult("x", "v")
    return RunContext(res, HashIndex(4, hb), [4], []), Recorder(res.observations, res.counts), res


class Heard(Oracle):
    ids = (OracleId.KV_EVENT,)

    def __init__(self, ctx, rec, name: str, log: list) -> None:
        super().__init__(ctx, rec)
        self.name, self.log = name, log

    def event(self, ev) -> None:
        self.log.append((self.name, ev))


def test_a_report_reaches_every_oracle_overriding_its_hook_in_order():
    ctx, rec, _ = ctx_rec()
    log: list = []
    a, b = Heard(ctx, rec, "a", log), Heard(ctx, rec, "b", log)
    Oracles(ctx, [a, HitOracle(ctx, rec), b]).event("ev")
    assert log == [("a", "ev"), ("b", "ev")]
    one = Oracles(ctx, [a])
    assert one.event == a.event  # one listener: its bound method, no call more
    Oracles(ctx, [HitOracle(ctx, rec)]).event("ignored")  # nobody overrides it: a no-op


def test_an_oracle_reports_only_under_its_own_ids():
    ctx, rec, res = ctx_rec()
    with pytest.raises(ValueError, match="HitOracle reports kv_event"):
        HitOracle(ctx, rec).report(OracleId.KV_EVENT, "x", cause="r|p")
    HitOracle(ctx, rec).report(OracleId.SPEC_HIT, "x", cause="r|p")
    assert [(o.oracle, o.cause) for o in res.observations] == [("spec_hit", "r|p")]
    assert type(res.observations[0].oracle) is str  # results stay plain JSON


def test_hard_or_soft_is_the_registrys():
    ctx, rec, _ = ctx_rec()
    assert HitOracle(ctx, rec).hard and not EfficiencyOracle(ctx, rec).hard
    assert all(p.ids for p in standard(ctx, rec))
    with pytest.raises(UnknownOracle):
        rec.add("ghost", "an id nobody registered")


def test_stepped_updates_the_truth_before_the_oracles_judge():
    ctx, rec, _ = ctx_rec()
    seen: list = []

    class Stepped(Oracle):
        ids = (OracleId.HASH_CHAIN,)

        def stepped(self, req) -> None:
            seen.append(self.ctx.truth.longest(req.all_token_ids))

    class Req:
        request_id, all_token_ids, num_computed_tokens = "r0", [1, 2, 3, 4, 5], 5
    o = Oracles(ctx, [Stepped(ctx, rec)])
    o.admit("r0", Req(), Req.all_token_ids)
    o.stepped(["r0", "unknown"])
    assert seen == [5] and len(ctx.index.chains["r0"]) == 1
