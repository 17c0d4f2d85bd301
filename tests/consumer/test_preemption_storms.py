"""Preemption storms and Mamba decode turns on the real scheduler, every release under test.

0.34 re-sends a preempted request in full as a new one (``scheduled_new_reqs``, scheduler.py
1619-1626) and publishes Mamba prefix states after every output under synchronous scheduling
with prefix caching (2454-2470). A storm (four requests decoding 60 tokens each in 10 blocks)
must preempt, finish, and be judged by the oracles: OK or WARN, or FAIL only in a class the
ledger knows (full attention + sliding window under SimpleCPUOffloadConnector: 9a8b69482973).
A Mamba conversation's next turn must hit the prompt's state, and never past its true prefix.
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import RELEASES, consumer_worker, require_env
from kvproof.judging.classkey import class_key
from kvproof.tiers.client import consumed
from kvproof.consumer.stream import Req, Stream
from kvproof.judging.judge import above_ideal, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict
from kvproof.findings import ledger

pytestmark = [pytest.mark.integration, pytest.mark.consumer]
PC = {"block_size": 16, "enable_prefix_caching": True}
LAYOUTS = {
    "full": {"groups": [{"kind": "full_attention", "block_size": 16}], "cache": PC},
    "swa": {"groups": [{"kind": "full_attention", "block_size": 16},
                       {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}], "cache": PC},
    "mamba": {"groups": [{"kind": "mamba", "block_size": 64}, {"kind": "full_attention", "block_size": 64}],
              "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align"}},
}
CONNECTORS = (None, "SimpleCPUOffloadConnector", "OffloadingConnector")
STORM = Stream((100,), tuple(Req(0, 100, 20 + i, i, 60) for i in range(4)), 10, 256, 4)


def _layout(name: str, conn: str | None) -> Layout:
    return Layout.from_dict({**LAYOUTS[name], "kv_connector": conn})


@pytest.mark.parametrize("release", RELEASES)
def test_a_preemption_storm_preempts_finishes_and_is_judged(release):
    env = require_env(release)
    items = [(_layout(n, c), STORM) for n in LAYOUTS for c in CONNECTORS]
    items += [(_layout("full", "SimpleCPUOffloadConnector"), dataclasses.replace(STORM, offload="lazy"))]
    with consumer_worker(env) as w:
        results = consumed(w, [lay.with_stream(s) for lay, s in items])
    for (lay, st), res in zip(items, results):
        j = judge_consumer(res, lay)
        what = (release, lay.content_hash(), lay.kv_connector, st.offload, j.line())
        assert res.preemptions > 0 and not res.by("stalled"), what
        assert len({h["req"] for h in res.hits}) == len(st.requests), (what, res.hits)
        assert not above_ideal(res), what
        if j.verdict >= Verdict.FAIL:
            entry = ledger.checked_in().get(class_key(j, lay))
            assert entry is not None, ("a new class under a preemption storm", what)
        else:
            assert j.verdict <= Verdict.WARN, what


@pytest.mark.parametrize("release", RELEASES)
def test_a_mamba_next_turn_hits_the_prompt_state_and_no_further_than_it_shares(release):
    env = require_env(release)
    lay = _layout("mamba", None)
    # r0: a 100-token prompt decoding 60 tokens; r1, after it finished: its prompt, outputs and 10 more
    turn = Stream((100,), (Req(0, 100, 0, 0, 60), Req(suffix_len=10, arrival=70, max_tokens=2, extends=0)))
    with consumer_worker(env) as w:
        (res,) = consumed(w, [lay.with_stream(turn)])
    j = judge_consumer(res, lay)
    assert j.verdict <= Verdict.WARN, (release, j.line())
    r1 = next(h for h in res.hits if h["req"] == 1)
    assert r1["lcp"] == 159 and 64 <= r1["hit"] <= r1["lcp"] and r1["hit"] % 64 == 0, (release, r1)
