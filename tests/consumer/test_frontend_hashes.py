"""Prompt block hashes a frontend computes (0.34 ``EngineCoreRequest.block_hashes``): one computed
from the ``PrefixHashConfig`` the engine publishes is trusted and hits, hashes and emits exactly what
engine-side hashing does; one that breaks that config in a field is shown with what the engine then
does (ignores it, or trusts hashes that differ from its own), and is never a verdict about vLLM.
Driven on the real scheduler (``kvproof.consumer.frontend``); a release before 0.34 takes no such
hashes (NOT_EXPRESSIBLE)."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import RELEASES, consumer_worker, require_env
from kvproof import facts
from kvproof.tiers.client import consumed
from kvproof.inputs.layout import Speculative
from kvproof.consumer.stream import default_stream
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict

pytestmark = [pytest.mark.integration, pytest.mark.consumer]
SINCE = facts.CONSUMER_MARKS["frontend_block_hashes"][0] + ".0"
PC = {"block_size": 16, "enable_prefix_caching": True}
PLAIN = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}], "cache": PC})
# hash block 16 under a scheduler block of 32: the frontend hashes at the finer size
HYBRID = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32},
                                      {"kind": "sliding_window", "block_size": 16, "sliding_window": 64}],
                           "cache": PC})
# 0.34 keeps lookahead hashes under this connector: the config's lookahead is not 0
OFFLOAD = dataclasses.replace(PLAIN, kv_connector="SimpleCPUOffloadConnector")


def _cases():
    eagle3 = Speculative("eagle3", 2)
    for lay, spec in ((PLAIN, None), (PLAIN, eagle3), (HYBRID, None), (OFFLOAD, eagle3)):
        lay = dataclasses.replace(lay, speculative=spec)
        yield lay, default_stream(lay)


def _facts(res):
    return ([(h["req"], h["hit"], h.get("external", 0)) for h in res.hits], res.events_stored,
            res.connector_calls, res.hash_block_size)


@pytest.mark.parametrize("release", RELEASES)
def test_a_frontend_hashing_by_the_published_config_changes_nothing(release):
    env = require_env(release)
    cases = list(_cases())
    items = [x for lay, s in cases for x in ((lay, s), (lay, dataclasses.replace(s, hasher="frontend")))]
    with consumer_worker(env) as w:
        results = consumed(w, [lay.with_stream(s) for lay, s in items])
    takes = facts.release_key(release) >= facts.release_key(SINCE)
    for k in range(0, len(items), 2):
        (lay, s), engine, front = items[k], results[k], results[k + 1]
        what = (release, lay.content_hash(), lay.speculative)
        assert judge_consumer(engine, lay).verdict <= Verdict.WARN, (what, judge_consumer(engine, lay).line())
        if not takes:
            assert judge_consumer(front, lay).verdict is Verdict.NOT_EXPRESSIBLE, (what, front.not_expressible)
            assert "block_hashes" in front.not_expressible
            continue
        fe = front.frontend
        assert fe["trusted"] == fe["requests"] == len(s.requests) + sum(r.resend_at is not None for r in s.requests), \
            (what, fe)
        assert fe["ignored"] == fe["differ"] == 0, (what, fe)
        assert judge_consumer(front, lay).verdict == judge_consumer(engine, lay).verdict, \
            (what, judge_consumer(front, lay).line())
        assert _facts(front) == _facts(engine), what
        assert any(h["hit"] for h in front.hits), (what, front.hits)  # the stream shares a prefix
    if takes:  # the lookahead case is one: the connector keeps lookahead hashes on 0.34
        assert results[-1].hash_lookahead > 0, results[-1].hash_lookahead


@pytest.mark.parametrize("release", [r for r in RELEASES if facts.release_key(r) >= facts.release_key(SINCE)])
def test_a_frontend_that_breaks_the_config_is_shown_not_judged(release):
    env = require_env(release)
    drafting = dataclasses.replace(OFFLOAD, speculative=Speculative("eagle3", 2))
    s = default_stream(drafting)
    items = [(drafting, dataclasses.replace(s, hasher=h)) for h in facts.CONTRACT_BREAKING_HASHERS]
    with consumer_worker(env) as w:
        results = consumed(w, [lay.with_stream(s) for lay, s in items])
    seen = {}
    for (lay, st), res in zip(items, results):
        j = judge_consumer(res, lay)
        assert j.verdict is Verdict.UNSUPPORTED, (st.hasher, j.line())
        assert "PrefixHashConfig" in j.note and f"{st.hasher}: the engine trusted" in j.note, j.note
        seen[st.hasher] = res.frontend
    # twice the hash block size: the count never matches a prompt of a full block, so the engine
    # ignores them and hashes itself
    big = seen["frontend-other-block-size"]
    assert big["ignored"] > 0 and big["differ"] == 0, big
    # another none hash: the count matches, the engine trusts them, and every one differs
    other = seen["frontend-other-none-hash"]
    assert other["trusted"] == other["requests"] and other["differ"] > 0, other
    # no lookahead: trusted where the count happens to match (prompt % 16 >= lookahead), and then wrong
    nola = seen["frontend-no-lookahead"]
    assert nola["differ"] > 0 and nola["differ"] == nola["trusted"], nola
