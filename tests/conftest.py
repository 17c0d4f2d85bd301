"""Shared fixtures: real vLLM workers, one per release per test session.

`make test` builds the environments of its releases first (RELEASES) and sets
KVPROOF_REQUIRE_ENVS=1, so a missing environment fails there instead of
silently skipping; a bare `pytest` on a machine without them skips.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import pytest

from kvproof import envs
from kvproof.bridge.client import Worker
from kvproof.errors import EnvError
from kvproof.settings import settings
from kvproof import facts
from kvproof.verdicts import Tier

# A closed worker's process serves the test process's next worker of the same release and
# variables (kvproof.bridge.client.POOL; tests/integration/test_worker_pool.py): most tests start
# a worker, and vLLM's import is most of a short test. KVPROOF_WORKER_POOL=0 turns it off.
os.environ.setdefault("KVPROOF_WORKER_POOL", "1")
# Every worker of every process the tests start (the CLI's subprocesses included) forks from a
# per-release parent that imported vLLM once (kvproof.bridge.zygotes;
# tests/integration/test_worker_zygote.py). KVPROOF_WORKER_ZYGOTE=0 turns it off.
os.environ.setdefault("KVPROOF_WORKER_ZYGOTE", "1")

# The releases tests run on, from the one release list (src/kvproof/facts/__init__.py): KVPROOF_RELEASES
# (the Makefile's RELEASES; default the ci subset: oldest, the seed pair, newest CPU, newest).
RELEASES: tuple[str, ...] = tuple(envs.resolve(list(settings().releases)))
# Of those, the releases with their own CPU wheel: the tiers that need the release's compiled
# kernels (engine boots) or a measured table per release (derive).
CPU_RELEASES: tuple[str, ...] = tuple(r for r in RELEASES if r in facts.CPU_RELEASES)


@contextlib.contextmanager
def consumer_worker(env: envs.Env) -> Iterator[Worker]:
    """A started worker of ``env`` with the consumer tier's time limit (``tiers.client.start``), closed after."""
    from kvproof.tiers import client

    [w] = client.start([env], (Tier.CONSUMER,))
    try:
        yield w
    finally:
        w.close()


def require_env(release: str) -> envs.Env:
    try:
        return envs.find(release)
    except EnvError as err:
        if os.environ.get("KVPROOF_REQUIRE_ENVS") == "1":
            pytest.fail(str(err))
        pytest.skip(str(err))


_workers: dict[str, Worker] = {}


def worker_for(release: str) -> Worker:
    """A live bridge worker for ``release`` (vLLM imported once per session)."""
    if release not in _workers:
        _workers[release] = Worker(require_env(release))
        _workers[release].start()
    return _workers[release]


@pytest.fixture(scope="session")
def workers():
    yield worker_for
    for w in _workers.values():
        w.close()
    _workers.clear()
