"""Speculative decoding at the consumer tier: the REAL scheduler schedules the fake runner's drafts,
rolls back rejected ones, and its managers apply the release's EAGLE rule (one worker per release)."""

from __future__ import annotations

import pytest

from kvproof.tiers.client import consumed
from kvproof.consumer.drafts import Drafts
from kvproof.consumer.stream import Req, Stream, speculating
from kvproof.judging.judge import above_ideal, ideal_hit, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict

from conftest import RELEASES, consumer_worker, require_env
from kvproof import facts

pytestmark = [pytest.mark.integration, pytest.mark.consumer]
# lookahead hashing (VllmConfig.num_hash_lookahead_tokens) replaces the EAGLE block drop from 0.33
LOOKAHEAD_FROM = "0.33.0"

FULL = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                         "cache": {"block_size": 16, "enable_prefix_caching": True}})
HYBRID = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 64}, {"kind": "full_attention", "block_size": 64}],
                           "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align"}})
# r0 computes a 263-token prompt and decodes 6 tokens; r1 (a resend of its prompt) arrives later;
# r2 is r0's next turn: its prompt, its 6 outputs and 9 new tokens
STREAM = Stream((263,), (Req(0, 263, 0, 0, 6), Req(0, 263, 0, 12, 2), Req(suffix_len=9, arrival=20, max_tokens=2,
                                                                           extends=0)), max_num_batched_tokens=512)
METHODS = [Drafts("ngram", 2), Drafts("eagle", 2), Drafts("eagle3", 3, "seeded", 0.5, 5), Drafts("draft_model", 2),
           Drafts("eagle3", 2, "none")]
# MTP from one module, and from one module per draft token (multi-module: 0.33's lookahead k)
MTP = [Drafts("mtp", 3), Drafts("mtp", 3, modules=3), Drafts("mtp", 2, modules=2)]
# DSpark and DFlash block drafters (facts.PARALLEL_DRAFT_METHODS), under an acceptance pattern and as a
# Layout's speculative section alone (what a derivation or a log line gives: every draft accepted)
PARALLEL = [Drafts("dspark", 3), Drafts("dflash", 3), Drafts("dspark", 4, "seeded", 0.5, 5),
            Drafts("dflash", 2, "none")]
SPEC_LAYOUTS = [Layout.from_dict(dict(base.to_dict(), speculative={"method": m, "num_speculative_tokens": 3}))
                for base in (FULL, HYBRID) for m in facts.PARALLEL_DRAFT_METHODS]


def _drafting(lay: Layout, d: Drafts) -> Layout:
    spec_lay, stream = speculating(lay, STREAM, d)
    return spec_lay.with_stream(stream)


@pytest.fixture(scope="module", params=RELEASES)
def runs(request):
    env = require_env(request.param)
    # (base layout, the run's drafts): the drafts' method and length on the Layout, their acceptance
    # on the stream (speculating); SPEC_LAYOUTS speculate on their own
    items = [(lay, d) for lay in (FULL, HYBRID) for d in [None] + METHODS]
    items += [(FULL, d) for d in MTP + PARALLEL]
    items += [(lay, None) for lay in SPEC_LAYOUTS]
    inputs = [lay.with_stream(STREAM) if d is None else _drafting(lay, d) for lay, d in items]
    with consumer_worker(env) as w:
        return request.param, items, consumed(w, inputs)


def test_drafts_are_scheduled_verified_and_rolled_back(runs):
    release, items, results = runs
    for (lay, d), res in zip(items, results):
        if lay.speculative is not None:  # test_a_dspark_layout_gets_a_consumer_verdict
            continue
        what = f"{release} {lay.groups[0].kind} {d and d.label()}"
        assert not res.harness_error and not res.not_expressible and not res.setup_error, (what, res)
        assert judge_consumer(res, lay).verdict < Verdict.LATENT, (what, judge_consumer(res, lay).line())
        if d is None:
            assert res.drafts_proposed == 0
            continue
        assert res.drafts_verified > 0, what  # the scheduler scheduled the drafts and the runner saw them
        if d.accept == "all":
            assert res.drafts_accepted == res.drafts_verified, what
        elif d.accept == "none":
            assert res.drafts_accepted == 0, what
        # every request still produced exactly its max_tokens (rejected drafts were rolled back)
        assert [h["req"] for h in res.hits] == [h["req"] for h in results[items.index((lay, None))].hits]


def test_hits_follow_the_release_eagle_rule(runs):
    """Each admission's hit is what kvproof's rule for the release says (judge.ideal_hit): the
    largest multiple of the block below the common prefix, one unit less where the coordinator
    drops for EAGLE (drop_eagle_block), past the hash lookahead where 0.33 hashes it."""
    release, items, results = runs
    for (lay, d), res in zip(items, results):
        if lay is not FULL:
            continue
        drops = d is not None and facts.eagle_block_drop(d.method, release)
        assert res.eagle_drop == (drops and not res.hash_lookahead), (release, d)
        for h in res.hits:
            assert h["hit"] == ideal_hit(res, h, 16), (release, d, h)
        assert not res.by("spec_hit") and not above_ideal(res)


def test_eagle_drops_a_block_on_the_mamba_hybrid(runs):
    """The field reports (club-3090 #1262, vLLM #52244): under EAGLE-family drafts on an align-mode
    hybrid a resend hits (floor(N/B) - 1) * B tokens, one block less than without drafts."""
    release, items, results = runs
    by = {(lay is HYBRID, d): res for (lay, d), res in zip(items, results)}
    plain, eagle = by[(True, None)], by[(True, Drafts("eagle", 2))]
    p, e = plain.hits[1], eagle.hits[1]  # r1, the resend of r0's 263-token prompt
    assert p["truth"] == e["truth"] == 262
    assert p["hit"] == 256
    if eagle.eagle_drop:
        assert e["hit"] == (262 // 64 - 1) * 64 == 192
    else:  # 0.33: lookahead hashing replaces the drop
        assert e["hit"] == (262 - eagle.hash_lookahead) // 64 * 64



def test_multi_module_mtp_hashes_k_tokens_ahead_from_0_33(runs):
    """A target with several MTP modules (num_nextn_predict_layers, the consumer tier's MTP target
    rebuilt per stream): 0.33+ hashes num_speculative_tokens past each block once several
    modules draft (num_prefill_lookahead_tokens; 0.34 reads the modules from the draft's
    n_predict), one token for a single module; earlier releases drop a block instead. Each hit
    stays within its ideal, the resend hits it."""
    release, items, results = runs
    got = {d: res for (lay, d), res in zip(items, results) if lay is FULL and d in MTP}
    assert set(got) == set(MTP)
    for d, res in got.items():
        assert not res.not_expressible and not res.harness_error, (release, d, res.not_expressible)
        assert not above_ideal(res) and res.hits[1]["hit"] == ideal_hit(res, res.hits[1], 16), (release, d)
        if facts.release_key(release) >= facts.release_key(LOOKAHEAD_FROM):
            assert (res.hash_lookahead, res.eagle_drop) == (d.k if d.modules > 1 else 1, False), (release, d)
        else:
            assert (res.hash_lookahead, res.eagle_drop) == (0, True), (release, d)


def test_the_scheduler_reserves_the_release_lookahead_for_every_method(runs):
    """Each method's drafts as the release schedules them: k drafts per request and step, the
    lookahead slots the release computes (facts.spec_lookahead_slots: k for EAGLE-family and
    draft-model drafters and anchor-sampling DSpark, k + 1 for DFlash's bonus query, none for
    n-gram), and a full-attention group holding from that many to that many plus a block less one
    slots past a drafting request's computed tokens (what allocate_slots reserved)."""
    release, items, results = runs
    for (lay, d), res in zip(items, results):
        if lay is not FULL or d is None:
            continue
        what = (release, d.label())
        want = facts.spec_lookahead_slots(d.method, d.k)
        assert res.lookahead_slots == want, what
        assert res.drafts_scheduled_max == d.k, what
        assert res.slot_slack_min is not None and want <= res.slot_slack_min, (what, res.slot_slack_min)
        assert res.slot_slack_max <= want + 16 - 1, (what, res.slot_slack_max)


def test_dspark_and_dflash_keep_the_block_from_0_33(runs):
    """0.27-0.32 drop the block past a hit for DSpark and DFlash as for EAGLE; from 0.33
    (SpeculativeConfig.needs_eagle_block_drop) they keep it and hash no lookahead, so the resend
    of r0's 263-token prompt hits 256 tokens, not 240."""
    release, items, results = runs
    got = {d: res for (lay, d), res in zip(items, results) if lay is FULL and d in PARALLEL}
    assert set(got) == set(PARALLEL)
    since = facts.CONSUMER_MARKS["parallel_drafts_keep_blocks"][0]
    keeps = facts.release_key(release) >= facts.release_key(since + ".0")
    for d, res in got.items():
        assert (res.eagle_drop, res.hash_lookahead) == (not keeps, 0), (release, d)
        assert res.hits[1]["hit"] == (256 if keeps else 240) == ideal_hit(res, res.hits[1], 16), (release, d)


def test_a_dspark_layout_gets_a_consumer_verdict(runs):
    """A Layout whose speculative method is DSpark or DFlash (every draft accepted) runs the release's
    own drafter config and gets a verdict about vLLM, never UNCHECKED: the real scheduler schedules
    and verifies its drafts with the release's lookahead."""
    release, items, results = runs
    for (lay, _), res in zip(items, results):
        if lay.speculative is None:
            continue
        what = (release, lay.summary())
        j = judge_consumer(res, lay)
        assert res.unchecked is None and not res.not_expressible and not res.harness_error, (what, res.unchecked,
                                                                                           res.not_expressible)
        assert not res.setup_error, (what, res.setup_error)
        assert j.verdict not in (Verdict.UNCHECKED, Verdict.ERROR, Verdict.NOT_EXPRESSIBLE), (what, j.line())
        assert j.verdict < Verdict.LATENT, (what, j.line())  # no ledger class is known for these runs
        assert res.drafts_verified > 0 and res.drafts_accepted == res.drafts_verified, what
        assert res.lookahead_slots == facts.spec_lookahead_slots(lay.speculative.method, 3), what
