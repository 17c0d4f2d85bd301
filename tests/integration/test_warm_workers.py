"""A worker forked from a report's warm python (kvproof.bridge.warm.Hosts.worker: the host ran a
reproducer's imports, the child then imports kvproof's bridge and serves) answers every op as a
freshly started worker does: the variables after vLLM's import, the function/manager tiers,
derivation and the consumer tier. Real vLLM: the newest release, where a report's fix check
runs (the two newest affected releases); the reproducer scripts' own runs are covered on every
kind of environment by test_warm_host and the report tests."""

from __future__ import annotations

import pytest
from conftest import RELEASES, require_env
from kvproof.findings.ledger import Ledger
from kvproof.findings.reproducers import script
from test_worker_zygote import _answers

from kvproof.bridge import warm

pytestmark = [pytest.mark.integration, pytest.mark.consumer]


def test_a_worker_forked_from_the_warm_python_answers_as_a_fresh_one(monkeypatch, tmp_path):
    env = require_env(RELEASES[-1])
    monkeypatch.setenv("KVPROOF_WORKER_POOL", "0")
    monkeypatch.setenv("KVPROOF_WORKER_ZYGOTE", "0")
    fresh = _answers(env)
    repro = tmp_path / "repro.py"
    repro.write_text(script(Ledger.load().find("9a8b69482973")))  # a consumer reproducer's imports
    with warm.Hosts(repro) as hosts:
        # a second fork of the same host: nothing of the first survives into it
        got = [_answers(env, hosts.worker(env)) for _ in range(2)]
    assert fresh.pop("kind") == "Popen" and [g.pop("kind") for g in got] == ["ForkedProc"] * 2
    for g in got:
        diff = {k for k in set(fresh["environ"]) | set(g["environ"]) if fresh["environ"].get(k) != g["environ"].get(k)}
        assert not diff, {k: (fresh["environ"].get(k), g["environ"].get(k)) for k in diff}
        assert g == fresh
