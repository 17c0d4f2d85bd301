"""Workers forked from a release's zygote (KVPROOF_WORKER_ZYGOTE=1, on under the test suite)
answer every op as a freshly started worker does, and a zygote is never reused across a
change of what its import read. Real vLLM: a CPU release and the newest (python-only) one."""

from __future__ import annotations

import contextlib
import os

import pytest
from conftest import RELEASES, require_env

from kvproof.bridge import zygotes
from kvproof.bridge.client import Worker
from kvproof.inputs.config import Config
from kvproof.consumer.stream import default_stream
from kvproof.inputs.layout import Layout
from kvproof.tiers import client

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

LAYOUTS = [
    Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                 {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}],
                      "cache": {"block_size": 16, "enable_prefix_caching": True},
                      "kv_connector": "OffloadingConnector"}),
    Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 64, "count": 2},
                                 {"kind": "full_attention", "block_size": 64}],
                      "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align"}}),
    # the seed bug's shape: 0.27 asserts, later releases accept
    Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544, "count": 4},
                                 {"kind": "hidden_state", "block_size": 181}],
                      "cache": {"block_size": 181, "enable_prefix_caching": True, "mamba_cache_mode": "align"}}),
]


def _plain(x):
    """``x`` without measurements of the process (times, peak RSS: a fork's counts start in its
    parent), the only things two runs of one input may differ in."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if "seconds" not in k and "rss" not in k}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _answers(env, started=None) -> dict:
    """Every op's answer of a fresh Worker of ``env``, or of ``started`` (a live one), closed after."""
    with (contextlib.closing(started) if started is not None else Worker(env)) as w:
        kind = type(w.proc).__name__
        info = _plain(w.info)
        environ = w.call({"op": "environ"})["environ"]  # the variables after vLLM's import
        environ.pop("KVPROOF_WORKER_ZYGOTE")  # the one variable the two runs set apart
        run = [o.to_dict() for o in client.outcomes(w, LAYOUTS)]
        derived = [d.raw for d in client.derive(w, [Config(model="gemma2")])]
        consumed = [r.to_dict() for r in client.consumed(w, [lay.with_stream(default_stream(lay)) for lay in LAYOUTS[:2]])]
    return {"kind": kind, "info": info, "environ": environ, "run": _plain(run), "derived": _plain(derived), "consumed": _plain(consumed)}


@pytest.mark.parametrize("release", sorted({"0.32.0", RELEASES[-1]}))
def test_a_forked_worker_answers_as_a_fresh_one(release, monkeypatch):
    env = require_env(release)
    monkeypatch.setenv("KVPROOF_WORKER_POOL", "0")
    monkeypatch.setenv("KVPROOF_WORKER_ZYGOTE", "0")
    fresh = _answers(env)
    monkeypatch.setenv("KVPROOF_WORKER_ZYGOTE", "1")
    forked = _answers(env)
    again = _answers(env)  # a second fork of the same zygote: nothing of the first survives into it
    assert (fresh.pop("kind"), forked.pop("kind"), again.pop("kind")) == ("Popen", "ForkedProc", "ForkedProc")
    env_diff = {k for k in set(fresh["environ"]) | set(forked["environ"])
                if fresh["environ"].get(k) != forked["environ"].get(k)}
    assert not env_diff, {k: (fresh["environ"].get(k), forked["environ"].get(k)) for k in env_diff}
    assert forked == fresh
    assert again == fresh


def test_a_dead_worker_or_zygote_is_replaced(monkeypatch):
    env = require_env("0.32.0")
    monkeypatch.setenv("KVPROOF_WORKER_POOL", "0")
    monkeypatch.setenv("KVPROOF_WORKER_ZYGOTE", "1")
    with Worker(env) as w:
        assert isinstance(w.proc, zygotes.ForkedProc)
        w.proc.kill()
        assert w.proc.wait(timeout=10) == -1
    with Worker(env) as w:  # the zygote forks another
        assert isinstance(w.proc, zygotes.ForkedProc) and client.outcomes(w, LAYOUTS[:1])[0].to_dict()
    k = zygotes.key(env.python, __import__("kvproof.bridge.client", fromlist=["x"]).worker_env())
    pidfile = zygotes.home() / f"{k}.pid"
    os.kill(int(pidfile.read_text()), 9)
    with Worker(env) as w:  # its socket is stale: a new zygote (or a plain worker) serves
        assert client.outcomes(w, LAYOUTS[:1])


def _fake_env(tmp_path):
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "vllm"
    site.mkdir(parents=True)
    (site / "kv_cache_utils.py").write_text("A = 1\n")
    (tmp_path / "env" / "bin").mkdir()
    return tmp_path / "env" / "bin" / "python", site / "kv_cache_utils.py"


def test_the_key_follows_what_the_import_read(tmp_path):
    python, src = _fake_env(tmp_path)
    base = {"PATH": "/bin", "PYTHONHASHSEED": "0", "VLLM_LOGGING_LEVEL": "ERROR"}
    k = zygotes.key(python, base)
    assert zygotes.key(python, dict(base, PYTEST_CURRENT_TEST="x", KVPROOF_OUT="/o")) == k  # read by no import
    assert zygotes.key(python, dict(base, VLLM_LOGGING_LEVEL="WARNING")) != k
    assert zygotes.key(python, dict(base, KVPROOF_TRITON_STAND_IN="off")) != k
    assert zygotes.key(python, dict(base, KVPROOF_CACHE_HOME="/c")) != k  # the release's VLLM_CACHE_ROOT
    src.write_text("A = 22\n")  # an overlay rewritten in place
    assert zygotes.key(python, base) != k


def test_at_the_cap_the_least_recently_used_zygote_goes(monkeypatch):
    """A new zygote past MAX_LIVE stops the least recently used one (its forked workers are
    processes of their own), instead of leaving every later worker of its key to a plain start."""
    import subprocess
    idle = subprocess.Popen(["sleep", "120"])
    fake = zygotes.home() / "0000-test-lru.pid"
    fake.write_text(str(idle.pid))
    os.utime(fake, (1, 1))  # the oldest use of all
    try:
        monkeypatch.setattr(zygotes, "MAX_LIVE", len(zygotes._live()))
        zygotes._make_room()
        assert idle.wait(timeout=10) == -15
        assert not fake.exists()
    finally:
        idle.kill()
        fake.unlink(missing_ok=True)
