"""Minimal reproducers of the consumer-tier findings on real vLLM, and the ones that were ours.

Each real-vLLM test states the CORRECT behaviour and is a strict xfail on the releases
where it is broken, naming the file:line; when a release fixes it the xfail turns into an
XPASS failure and the marker must move. Failures other than the named one are real failures
(``pytest.fail``, not ``AssertionError``, so the xfail does not swallow them).
"""

from __future__ import annotations

import dataclasses

import pytest

from kvproof.bridge.client import Worker
from kvproof.consumer.stream import Req, Stream, default_stream
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.tiers import client
from kvproof.verdicts import Tier, Verdict

from conftest import require_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]
SIMPLE = "SimpleCPUOffloadConnector"  # in 0.27.0, 0.28.0 and 0.32.0

_workers: dict[str, Worker] = {}


def _run(release: str, layout: Layout, stream: Stream):
    if release not in _workers:
        [_workers[release]] = client.start([require_env(release)], (Tier.CONSUMER,))
    [res] = client.consumed(_workers[release], [layout.with_stream(stream)])
    return res


@pytest.fixture(scope="module", autouse=True)
def _close_workers():
    yield
    for w in _workers.values():
        w.close()
    _workers.clear()


def _hard(res):
    return [o for o in res.observations if o.oracle not in ("efficiency",)]


# --- (c) real vLLM bug (0.32.0; 0.27/0.28 emit the right events): SimpleCPUOffload stores a sliding-window block through a stale block id ---
# full attention 16 + sliding window 16 (window 32), as Gemma-2/3 / gpt-oss style hybrids have.
# r0 (256 tokens) prefills in one step; at step 1 its out-of-window sliding-window blocks are freed
# (SlidingWindowManager.remove_skipped_blocks), and r1 (other tokens) gets some of them from the
# tight pool and hashes them in the same schedule(). The connector's own copy of r0's block table
# (simple_kv_offload/manager.py:759 ``state.block_ids[g].extend(new_block_id_groups[g])``) still
# names those block ids; _select_eager_blocks_to_store (manager.py:865-945) only checks
# ``gpu_block.is_null``, finds r1's hashed block at r0's position, stores it and records event
# metadata (token ids, parent hash) of r0's position under r1's block hash; the CPU BlockStored
# event (manager.py:1137) then pairs r1's hash with r0's tokens. r0's real block is never offloaded.
SW_HYBRID = Layout.from_dict({
    "groups": [{"kind": "full_attention", "block_size": 16},
               {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}],
    "cache": {"block_size": 16, "enable_prefix_caching": True}, "kv_connector": SIMPLE})
SW_STREAM = Stream((256, 64), (Req(0, 256, 0, 0, 4), Req(1, 64, 0, 1, 2)), num_blocks=40,
                   max_num_batched_tokens=4096)


STALE_BLOCK = pytest.mark.xfail(strict=True, raises=AssertionError,
                                reason="vLLM 0.32.0 simple_kv_offload/manager.py:759/865: stale sliding-window "
                                       "block ids -> CPU BlockStored pairs another request's hash with these tokens")


@pytest.mark.parametrize("release", ["0.27.0", "0.28.0", pytest.param("0.32.0", marks=STALE_BLOCK)])
def test_simple_cpu_offload_sliding_window_event_pairs_its_own_tokens(release):
    res = _run(release, SW_HYBRID, SW_STREAM)
    hard = _hard(res)
    # Under the engine's sparse retention (0.29+: prefix_cache_retention_interval 0) the stale ids
    # also pair full-attention (group 0) hashes with other positions; the same root cause: with
    # findings/fixes/9a8b69482973.diff laid over 0.32.0 all six observations of both groups go.
    if any(o.oracle != "kv_event" or "SimpleCPUOffloadConnector (BlockStored[CPU])" not in o.cause for o in hard):
        pytest.fail(f"another observation than the known one: {hard}")
    assert res.events_stored > 0
    assert not hard, hard[0].detail  # 0.32.0: "hash #0 ends at token 64, not a block boundary ... [176, 192)"


# --- (b) real vLLM bug (availability): SimpleCPUOffloadScheduler needs a FullAttentionSpec group ---
# manager.py:188-193: ``fa_gidx`` stays -1 without a FullAttentionSpec group and a bare
# ``assert 0 <= self.fa_gidx < len(...)`` kills engine start, for pure sliding-window models and
# pure Mamba models (align mode, prefix caching on) with --kv-transfer-config SimpleCPUOffloadConnector.
@pytest.mark.parametrize("groups,mode", [
    ([{"kind": "sliding_window", "block_size": 16, "sliding_window": 64}], "none"),
    ([{"kind": "mamba", "block_size": 16}], "align"),
], ids=["sliding_window_only", "mamba_only"])
@pytest.mark.parametrize("release,line", [("0.27.0", 102), ("0.28.0", 107), ("0.32.0", 193)])
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="vLLM 0.27.0-0.32.0 simple_kv_offload/manager.py:102/107/193: bare assert, no clear error")
def test_simple_cpu_offload_without_full_attention_says_why(groups, mode, release, line):
    layout = Layout.from_dict({"groups": groups, "cache": {"block_size": 16, "enable_prefix_caching": True,
                                                            "mamba_cache_mode": mode}, "kv_connector": SIMPLE})
    res = _run(release, layout, Stream((64,), (Req(0, 64, 8, 0, 2), Req(0, 64, 8, 2, 2))))
    if res.not_expressible or res.setup_error:
        pytest.skip(f"vLLM {release}: {res.not_expressible or res.setup_error}")
    exc = res.by("exception")
    if not exc:
        return  # runs: fine (either offloads or cleanly disables itself)
    if f"manager.py:{line}" not in exc[0].detail:
        pytest.fail(f"another exception than the known one: {exc[0].detail}")
    # a refusal must say what is wrong; 0.32.0 raises "AssertionError:  @ .../manager.py:193"
    assert not exc[0].detail.split(" @ ")[0].strip().endswith("AssertionError:"), exc[0].detail


# --- (a) real vLLM bug (0.27.0, 0.28.0; fixed in 0.32.0): ExampleHiddenStatesConnector crashes on an abort ---
# of a request that was never scheduled. The connector records a request's output filename only in
# build_connector_meta (for scheduled_new_reqs, example_hidden_states_connector.py:505), but
# Scheduler.finish_requests also frees WAITING requests, and _connector_finished ->
# request_finished_all_groups -> request_finished (:523) does ``self._request_filenames.pop(req_id)``:
# KeyError, i.e. EngineCore dies when a client cancels a queued request. 0.32.0 uses
# ``pop(req_id, None)`` and returns (False, None) (:532; upstream vllm-project/vllm#56841).
# full attention 16 + the hidden-state group the extract_hidden_states path adds (hash 16 on every release).
HS_LAYOUT = Layout.from_dict({
    "groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "hidden_state", "block_size": 16}],
    "cache": {"block_size": 16, "enable_prefix_caching": True}, "kv_connector": "ExampleHiddenStatesConnector"})
# r1 arrives at step 2 and is aborted in the same step, before schedule() (the harness adds, then aborts)
HS_ABORT_WAITING = Stream((64,), (Req(0, 64, 8, 0, 2), Req(0, 32, 8, 2, 2, abort_at=2)))
# the control: r1 is scheduled at step 2 and aborted at step 3 while running
HS_ABORT_RUNNING = Stream((64,), (Req(0, 64, 8, 0, 2), Req(0, 32, 8, 2, 8, abort_at=3)))

ABORT_WAITING = pytest.mark.xfail(
    strict=True, raises=AssertionError,
    reason="vLLM 0.27.0/0.28.0 kv_connector/v1/example_hidden_states_connector.py:523 request_finished: "
           "_request_filenames.pop(req_id) raises KeyError for a request aborted before it was ever scheduled; "
           "fixed in 0.32.0 (pop(req_id, None), :532; vllm-project/vllm#56841)")


@pytest.mark.parametrize("release,line", [pytest.param("0.27.0", 523, marks=ABORT_WAITING),
                                          pytest.param("0.28.0", 523, marks=ABORT_WAITING),
                                          ("0.32.0", 532)])
def test_hidden_states_connector_survives_abort_before_first_schedule(release, line):
    res = _run(release, HS_LAYOUT, HS_ABORT_WAITING)
    if res.not_expressible or res.setup_error:
        pytest.fail(f"vLLM {release} did not run the layout: {res.not_expressible or res.setup_error}")
    if res.connector_class != "ExampleHiddenStatesConnector":
        pytest.fail(f"connector not built: {res.connector_class}")
    hard = _hard(res)
    known = f"KeyError: 'r1' @ vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py:{line} " \
            f"in request_finished"
    if any(o.oracle != "exception" or o.detail != known or o.step != 2 for o in hard):
        pytest.fail(f"another observation than the known one: {hard}")
    if hard and judge_consumer(res, HS_LAYOUT).verdict != Verdict.FAIL:
        pytest.fail(f"the KeyError is not judged FAIL: {judge_consumer(res, HS_LAYOUT).line()}")
    assert not hard, hard[0].detail  # 0.27.0/0.28.0: the real KeyError, judged FAIL (consumer)
    assert judge_consumer(res, HS_LAYOUT).verdict in (Verdict.OK, Verdict.WARN)


@pytest.mark.parametrize("release", ["0.27.0", "0.28.0", "0.32.0"])
def test_hidden_states_connector_abort_after_first_schedule_is_clean(release):
    """The control for the reproducer above: the same request aborted once it has been scheduled
    (its filename recorded) finishes cleanly on every release, so the trigger is the abort of a
    request that never reached build_connector_meta."""
    res = _run(release, HS_LAYOUT, HS_ABORT_RUNNING)
    assert res.connector_class == "ExampleHiddenStatesConnector" and res.connector_calls > 0
    assert not _hard(res), _hard(res)
    assert judge_consumer(res, HS_LAYOUT).verdict in (Verdict.OK, Verdict.WARN)


# --- ours: the oracle, the fake worker, the premise ---------------------------------------------
def test_chunked_local_out_of_window_hit_is_not_a_wrong_hit():
    """(a) chunked_local:37 (chunk 148): r1 shares nothing with r0, yet its lookup returns 148
    tokens of null blocks (single_type_kv_cache_manager.py:1263 ChunkedLocalAttentionManager: every
    chunk left of token max_length is out of every later token's window). Exact by design."""
    layout = Layout.from_dict({"groups": [{"kind": "chunked_local", "block_size": 37}],
                               "cache": {"block_size": 37, "enable_prefix_caching": True}})
    stream = Stream((72, 17), (Req(1, 17, 0, 0, 3), Req(0, 72, 190, 2, 3)), max_num_batched_tokens=64)
    res = _run("0.32.0", layout, stream)
    assert [h["hit"] for h in res.hits] == [0, 148]
    assert [h["truth"] for h in res.hits] == [0, 0]
    assert not _hard(res), _hard(res)
    assert judge_consumer(res, layout).verdict in (Verdict.OK, Verdict.WARN)


def test_simple_cpu_offload_loads_reported_once():
    """(d) under block pressure with CPU hits, the fake worker reports each load event once (as
    simple_kv_offload/worker.py:297 get_finished does), so scheduler.py:3230 never sees a load
    completion for a request already promoted to RUNNING."""
    # the seed's shape (hash 1, fine-grained hits) with the smallest pool the engine accepts and the
    # default stream's first three requests sent again a step later: the resent prompts hit the CPU
    # copies (async loads) and one request is preempted (the default stream alone preempts nothing
    # under the engine's sparse retention, which keeps fewer Mamba blocks)
    layout = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544, "count": 4},
                                          {"kind": "hidden_state", "block_size": 181}],
                               "cache": {"block_size": 181, "enable_prefix_caching": True,
                                         "mamba_cache_mode": "align"}, "kv_connector": SIMPLE})
    base = default_stream(layout)
    again = tuple(dataclasses.replace(r, arrival=r.arrival + 1) for r in base.requests[:3])
    res = _run("0.32.0", layout, dataclasses.replace(base, num_blocks=1, requests=base.requests + again))
    assert res.preemptions > 0 and res.worker_recv_dropped == 0
    assert not _hard(res), _hard(res)
    assert res.efficiency.external_tokens > 0  # CPU loads really happened


@pytest.mark.parametrize("release", ["0.32.0", "0.33.0"])
def test_simple_cpu_offload_connector_stores_the_mamba_eagle_checkpoint(release):
    """(c) class a7ff9c65c29d, ours: under EAGLE an align-mode MambaManager keys the prompt's tail
    state at ``get_mamba_prefill_checkpoint_position`` = n//h*h - h (336 for a 353-token prompt,
    hash 16, Mamba block 32; kv_cache_interface.py:1110 0.32 / :1169 0.33), the resend's hit after
    EAGLE's drop; the CoW copy goes to the connector as a boundary-state offload
    (single_type_kv_cache_manager.py:1887 0.32 / :1904 0.33) and SimpleCPUOffload inserts it under
    that key (simple_kv_offload/manager.py:1082 0.32 / :1117 0.33). The oracle took the key for no
    prompt tail; the third request (its GPU copy evicted) loads the 336 tokens from the CPU."""
    layout = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                          {"kind": "mamba", "block_size": 32}],
                               "cache": {"block_size": 16, "enable_prefix_caching": True,
                                         "mamba_cache_mode": "align"}, "kv_connector": SIMPLE,
                               "speculative": {"method": "eagle3", "num_speculative_tokens": 2}})
    stream = Stream.from_dict({"prefixes": [400, 400], "num_blocks": 40, "max_num_batched_tokens": 4096,
                               "requests": [{"prefix": 0, "prefix_len": 353, "suffix_len": 0, "max_tokens": 4},
                                            {"prefix": 1, "prefix_len": 353, "suffix_len": 0, "arrival": 6,
                                             "max_tokens": 4},
                                            {"prefix": 0, "prefix_len": 353, "suffix_len": 0, "arrival": 14,
                                             "max_tokens": 2}]})
    res = _run(release, layout, stream)
    assert res.eagle_drop and res.alignment == 16
    assert not _hard(res), _hard(res)
    assert [(h["hit"], h["external"]) for h in res.hits] == [(0, 0), (0, 0), (0, 336)]


def test_all_groups_non_cacheable_is_outside_every_model():
    """(b, e) full_attention groups that all opt out of prefix caching (CircularBufferSpec) exist in
    no model; vLLM 0.32.0 then raises in the first reader of the cacheable groups."""
    layout = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 256, "prefix_cacheable": False},
                                          {"kind": "full_attention", "block_size": 1, "prefix_cacheable": False}],
                               "cache": {"block_size": 1, "enable_prefix_caching": True},
                               "kv_connector": "OffloadingConnector"})
    res = _run("0.32.0", layout, Stream((32,), (Req(0, 32, 0, 0, 1),)))
    assert judge_consumer(res, layout).verdict == Verdict.NOT_EXPRESSIBLE
