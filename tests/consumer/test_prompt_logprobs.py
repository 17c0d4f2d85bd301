"""A request asking prompt logprobs limits its own prefix-cache reads: 0.34 reads up to its first
scored row and asks no KV connector (Request.get_prefix_cache_hit_limit, skip_reading_external_kv);
earlier releases skip prefix-cache reads for it (SamplingParams' default). Driven on the real
scheduler, bare and under SimpleCPUOffloadConnector, on every release under test."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import RELEASES, consumer_worker, require_env
from kvproof import facts
from kvproof.tiers.client import consumed
from kvproof.consumer.stream import Req, Stream
from kvproof.judging.judge import above_ideal, ideal_hit, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict

pytestmark = [pytest.mark.integration, pytest.mark.consumer]
CAP_FROM = facts.CONSUMER_MARKS["prompt_logprobs_hit_cap"][0] + ".0"
LAYOUT = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                           "cache": {"block_size": 16, "enable_prefix_caching": True}})


def _stream(start: int | None) -> Stream:
    # r0 computes a 200-token prefix; r1 shares it and asks prompt logprobs from ``start``
    return Stream((200,), (Req(0, 200, 0, 0, 2), Req(0, 200, 5, 6, 2, prompt_logprobs_from=start)))


@pytest.mark.parametrize("release", RELEASES)
def test_prompt_logprobs_limit_the_hit(release):
    env = require_env(release)
    conn = dataclasses.replace(LAYOUT, kv_connector="SimpleCPUOffloadConnector")
    items = [(LAYOUT, _stream(None)), (LAYOUT, _stream(0)), (LAYOUT, _stream(100)), (conn, _stream(100))]
    with consumer_worker(env) as w:
        results = consumed(w, [lay.with_stream(s) for lay, s in items])
    capped = facts.release_key(release) >= facts.release_key(CAP_FROM)
    expected = [192, 0, 96 if capped else 0, 96 if capped else 0]
    for (lay, st), res, want in zip(items, results, expected):
        what = (release, lay.kv_connector, st.requests[1].prompt_logprobs_from)
        assert judge_consumer(res, lay).verdict is Verdict.OK, (what, judge_consumer(res, lay).line())
        r1 = next(h for h in res.hits if h["req"] == 1)
        assert (r1["hit"], r1["external"]) == (want, 0), (what, r1)
        assert r1["hit"] == ideal_hit(res, r1, 16) and not above_ideal(res), (what, r1)
