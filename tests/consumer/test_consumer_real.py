"""The consumer tier on the real scheduler of each release (vLLM runs in its env subprocess)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from kvproof.bridge.client import Worker, worker_env
from kvproof.tiers import client
from kvproof.consumer.stream import Req, Stream, default_stream
from kvproof.judging.judge import above_ideal, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof import facts
from kvproof.revisions import revision_for
from kvproof.verdicts import Tier, Verdict

from conftest import require_env

pytestmark = pytest.mark.integration
RELEASES = ("0.27.0", "0.28.0", "0.32.0")

# full attention 16 + sliding window 32: every release resolves (scheduler 32, hash 16).
HYBRID = {"groups": [{"kind": "full_attention", "block_size": 16},
                     {"kind": "sliding_window", "block_size": 32, "sliding_window": 128}],
          "cache": {"block_size": 16, "enable_prefix_caching": True}}
# r0: 200-token prefix + 10; r1 arrives at step 3 sharing 150 tokens; r2 at step 6 shares
# all 200 (its 20-token suffix is new), and is resent at step 12 (then 219 reusable: all but the last).
STREAM = Stream((200,), (Req(0, 200, 10, 0, 2), Req(0, 150, 5, 3, 2), Req(0, 200, 20, 6, 3, resend_at=12)),
                max_num_batched_tokens=64)
TRUTH = [0, 150, 200, 219]
SEED = {"groups": [{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}],
        "cache": {"block_size": 181, "enable_prefix_caching": True, "mamba_cache_mode": "align"}}

_workers: dict[str, Worker] = {}


def consumer_verdict(res, layout=None):
    j = judge_consumer(res, layout)
    return j.verdict, j.tier, j.line() or j.note


@pytest.fixture(scope="module", params=RELEASES)
def cw(request):
    release = request.param
    if release not in _workers:
        [w] = client.start([require_env(release)], (Tier.CONSUMER,))
        _workers[release] = w
        request.addfinalizer(w.close)
    return _workers[release]


def test_normal_hybrid_runs_clean_with_hand_computed_efficiency(cw):
    [res] = client.consumed(cw, [Layout.from_dict(HYBRID).with_stream(STREAM)])
    hard = [o for o in res.observations if o.oracle not in ("efficiency",)]
    assert hard == [], hard
    assert (res.scheduler_block_size, res.hash_block_size) == (32, 16)
    a = res.alignment
    assert a in (16, 32)
    assert [h["truth"] for h in res.hits] == TRUTH
    # r1 shares 150 tokens of r0's prompt, where no request ends: under the engine's default sparse
    # retention (prefix_cache_retention_interval 0, 0.29+) the sliding-window group keeps no window
    # at 128 and r1 hits nothing; dense (0.27, 0.28 have no such field) it hits 128.
    sparse = facts.release_key(res.vllm_version) >= facts.release_key("0.29.0")
    want = [0 if sparse and i == 1 else t // a * a for i, t in enumerate(TRUTH)]
    assert [h["hit"] for h in res.hits] == want
    e = res.efficiency
    assert e.reusable_tokens == 569 and e.prompt_tokens == 210 + 155 + 220 + 220
    assert e.hit_tokens == sum(want)
    assert res.events_stored > 0
    assert consumer_verdict(res)[0] == Verdict.OK


def _seed_bug(release: str) -> bool:
    """The release falls back to hash = LCM for the seed layout (fixed in SEED_PAIR[1])."""
    return facts.release_key(release) < facts.release_key(facts.SEED_PAIR[1])


def _lacks_hma(release: str, connector: str) -> bool:
    """The release's connector class does not implement SupportsHMA (facts.HYBRID_CONNECTORS,
    read back from each release by tests/integration/test_facts.py): the engine turns the hybrid
    KV cache manager off for it, so a hybrid layout never reaches its scheduler side. Of the
    consumer connectors that is ExampleConnector, in every managed release."""
    return connector not in facts.release_connectors(release, revision_for(release))[1]


@pytest.mark.parametrize("connector", facts.CONSUMER_CONNECTORS)
def test_connectors_clean_or_not_expressible(cw, connector):
    release = cw.info["vllm"]
    layout = Layout.from_dict(dict(HYBRID, kv_connector=connector))
    if connector == facts.HIDDEN_STATES_CONNECTOR:  # it needs its own hidden-state group
        layout = Layout.from_dict(dict(SEED, kv_connector=connector))
    [res] = client.consumed(cw, [layout.with_stream(STREAM)])
    verdict, _, reason = consumer_verdict(res, layout)
    if connector == facts.HIDDEN_STATES_CONNECTOR and _seed_bug(release):
        assert verdict == Verdict.FAIL  # the seed bug: hash = LCM, the coordinator asserts
        return
    if _lacks_hma(release, connector):
        assert verdict == Verdict.NOT_EXPRESSIBLE and "SupportsHMA" in reason, reason
        return
    assert verdict in (Verdict.OK, Verdict.WARN), reason
    assert res.connector_class and res.connector_calls > 0
    assert not res.by("stalled")


@pytest.mark.parametrize("connector", (None, "SimpleCPUOffloadConnector", "OffloadingConnector"))
def test_seed_layout(cw, connector):
    """0.28/0.32: hash 1, fine-grained hits; the CPU pool probes interior hash boundaries
    (not a pairing bug) and the offload jobs complete (no stall). 0.27: the seed assertion."""
    release = cw.info["vllm"]
    layout = Layout.from_dict(dict(SEED, kv_connector=connector))
    [res] = client.consumed(cw, [layout.with_stream(default_stream(layout))])
    verdict, _, reason = consumer_verdict(res, layout)
    if _seed_bug(release):  # 0.27: hash = LCM -> coordinator / offloading config assert
        assert res.hash_block_size == 98464, res.hash_block_size
        assert verdict == Verdict.FAIL and "divisible" in reason, reason
        return
    assert verdict in (Verdict.OK, Verdict.WARN), reason
    assert res.hash_block_size == 1 and not res.by("connector") and not res.by("kv_event")
    assert not res.by("stalled")
    assert not above_ideal(res)
    if connector and release == "0.32.0":
        # the scheduler asks a connector after the scheduler-block-aligned part of the local hit
        # (0: the scheduler block is 98464) and takes its claim only when longer than the local
        # tail (scheduler.py partial_tail): OffloadingConnector's 2172 tokens (12 hidden-state
        # blocks) replace the 1632-token local hit; SimpleCPU's 1632 equal it, nothing is loaded
        loads = connector == "OffloadingConnector"
        assert (res.efficiency.external_tokens > 0) == loads, res.hits



# kvproof finding 047644c41341 (consumer|oracle:stalled): OffloadingConnector with tp = dcp = 2 and
# prefix caching off. r1 arrives while r0's store job is pending; its CPU lookup is HIT_PENDING
# (the connector answers None: "ask again") until the job completes, which the scheduler counts
# as pending_count = parallel_config.world_size worker reports (offloading/scheduler.py). The
# fake worker once reported each job from one worker only, so the job never completed and r1
# waited forever: a harness stall, not a vLLM hang.
OFFLOAD_TP2 = {"groups": [{"kind": "full_attention", "block_size": 16}], "kv_connector": "OffloadingConnector",
               "cache": {"block_size": 16, "enable_prefix_caching": False}, "dcp": 2}
SAME_PROMPT_LATER = Stream((176,), (Req(0, 176, 1, 0, 4), Req(0, 176, 0, 3, 1)), max_num_batched_tokens=256,
                           max_num_seqs=2)


def test_offload_jobs_complete_under_tensor_parallelism(cw):
    """Every one of the world_size workers reports each transfer job (the executor's
    KVOutputAggregator sums their kv_connector_worker_meta), so stores complete and a later
    request that waits on them runs."""
    layout = Layout.from_dict(OFFLOAD_TP2)
    [res] = client.consumed(cw, [layout.with_stream(SAME_PROMPT_LATER)])
    verdict, _, reason = consumer_verdict(res, layout)
    assert not res.by("stalled"), res.observations
    assert verdict in (Verdict.OK, Verdict.WARN), reason
    assert res.steps < 20, res.steps


PATCHED = textwrap.dedent("""
    import json, sys
    from vllm.v1.core import kv_cache_utils
    from kvproof.consumer.worker import run_one
    from kvproof.consumer.stream import Stream
    from kvproof.inputs.layout import Layout
    mode, layout, stream = sys.argv[1], Layout.from_dict(json.loads(sys.argv[2])), Stream.from_dict(json.loads(sys.argv[3]))
    if mode == "resolver":   # a resolver whose hash does not divide a group
        real = kv_cache_utils.resolve_kv_cache_block_sizes
        def wrong(kv_cfg, vcfg):
            sched, h = real(kv_cfg, vcfg)
            return sched, 2 * h
        kv_cache_utils.resolve_kv_cache_block_sizes = wrong
    else:                    # requests hashed at twice the size the block pool believes
        real_hasher = kv_cache_utils.get_request_block_hasher
        kv_cache_utils.get_request_block_hasher = lambda size, fn: real_hasher(2 * size, fn)
    print("RESULT " + json.dumps(run_one(layout, stream).to_dict()))
""")


def _patched(release: str, mode: str):
    from kvproof.consumer.result import ConsumerResult
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", PATCHED, mode, json.dumps(HYBRID), STREAM.to_json()],
                          capture_output=True, text=True, env=worker_env(), timeout=600)
    # the consumer worker module parks stdout on stderr (vLLM prints); the RESULT line may be on either
    line = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stderr[-2000:]
    return ConsumerResult.from_dict(json.loads(line[-1][7:]))


@pytest.mark.parametrize("release", ("0.28.0",))
def test_oracles_catch_patched_resolver(release):
    res = _patched(release, "resolver")
    verdict, _, reason = consumer_verdict(res)
    assert verdict == Verdict.FAIL and res.by("exception"), reason
    assert "hash_block_size" in reason or "divisible" in reason


@pytest.mark.parametrize("release", ("0.28.0",))
def test_hash_chain_oracle_catches_hasher_at_twice_the_size(release):
    """Requests hashed at 2x the size the block pool believes: the chain no longer names the
    request's tokens at the hash granularity (hash_chain; the real block pool then also raises
    IndexError in cache_full_blocks). No hit is served here, so this is not a prefix_hit check:
    test_prefix_hit_oracle.py shows that oracle catching a wrong hit the real pool served."""
    res = _patched(release, "hasher")
    verdict, _, reason = consumer_verdict(res)
    assert verdict == Verdict.FAIL, reason
    assert res.by("hash_chain"), res.observations


# The harness's measurement of connector hits. OffloadingConnector at dcp = 1: r1 arrives long after
# r0 finished and its store job completed, so the connector finds all 11 chunks (176 tokens) on the
# CPU and loads them asynchronously; the scheduler then resumes r1 at num_tokens - 1 = 175 computed
# (_update_waiting_for_remote_kv) without a second local lookup. The efficiency oracle once credited
# an async load only when a later local lookup returned it, so with prefix caching off it reported
# 0 of 175 tokens hit, and with it on it took the load out of the earlier GPU hit (144 + 16).
OFFLOAD_DCP1 = {"groups": [{"kind": "full_attention", "block_size": 16}], "kv_connector": "OffloadingConnector",
                "cache": {"block_size": 16, "enable_prefix_caching": False}}
SAME_PROMPT_MUCH_LATER = Stream((176,), (Req(0, 176, 1, 0, 4), Req(0, 176, 0, 40, 1)), max_num_batched_tokens=256,
                                max_num_seqs=2)


@pytest.mark.parametrize("prefix_caching", (False, True))
def test_async_connector_load_counts_as_external_hit(cw, prefix_caching):
    layout = Layout.from_dict(dict(OFFLOAD_DCP1, cache=dict(OFFLOAD_DCP1["cache"],
                                                            enable_prefix_caching=prefix_caching)))
    [res] = client.consumed(cw, [layout.with_stream(SAME_PROMPT_MUCH_LATER)])
    assert not [o for o in res.observations if o.oracle != "efficiency"], res.observations
    r1 = res.hits[1]
    assert r1["truth"] == 175
    # pc off: everything comes from the CPU; pc on: r0's 10 full GPU blocks, then the last chunk
    # from the CPU, of which the scheduler keeps all but the last token
    assert (r1["hit"], r1["external"]) == ((160, 15) if prefix_caching else (0, 175)), r1
    assert res.efficiency.hit_tokens + res.efficiency.external_tokens == 175
