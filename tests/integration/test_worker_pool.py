"""The worker pool (KVPROOF_WORKER_POOL=1, on under the test suite): a closed worker's live
process serves the next worker of the same environment and variables, and answers as a new
process does. Real vLLM (0.32.0)."""

from __future__ import annotations

import pytest

from kvproof.bridge import client
from kvproof.consumer.stream import default_stream
from kvproof.inputs.layout import Layout
from kvproof.tiers.client import consumed

from conftest import require_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

HYBRID = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                      {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}],
                           "cache": {"block_size": 16, "enable_prefix_caching": True},
                           "kv_connector": "OffloadingConnector"})
MAMBA = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 64, "count": 2},
                                     {"kind": "full_attention", "block_size": 64}],
                          "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align"}})


def _answer(w: client.Worker, lay: Layout) -> dict:
    d = consumed(w, [lay.with_stream(default_stream(lay))])[0].to_dict()
    d.pop("seconds", None)
    return d


def test_a_pooled_process_is_reused_and_answers_as_a_new_one(monkeypatch):
    env = require_env("0.32.0")
    monkeypatch.setenv("KVPROOF_WORKER_POOL", "0")
    with client.Worker(env) as w:  # a process of its own, closed for good
        fresh = _answer(w, HYBRID)
        first = w.proc.pid
    assert not any(p.pid == first for _, p, _ in client.POOL.idle)
    monkeypatch.setenv("KVPROOF_WORKER_POOL", "1")
    with client.Worker(env) as w:
        _answer(w, MAMBA)  # another input first: the reused process has a history
        pid = w.proc.pid
    with client.Worker(env) as w:
        assert w.proc.pid == pid, "the pool's process was not reused"
        assert _answer(w, HYBRID) == fresh
        assert w.info  # the handshake ran on the reused process


def test_other_variables_or_a_dead_process_start_a_new_one(monkeypatch):
    env = require_env("0.32.0")
    monkeypatch.setenv("KVPROOF_WORKER_POOL", "1")
    with client.Worker(env) as w:
        pid = w.proc.pid
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")  # the worker would run otherwise: not that process
    with client.Worker(env) as w:
        assert w.proc.pid != pid
        other = w.proc
    other.kill()
    other.wait()
    with client.Worker(env) as w:
        assert w.proc.pid != other.pid and w.proc.poll() is None
