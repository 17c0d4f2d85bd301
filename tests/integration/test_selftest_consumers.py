"""A behavioural consumer mutant through the self-test's own path, on the installed vLLM 0.32.0.

``kvproof selftest --consumers`` lays each mutant over a hard-link copy of the release
(``overlay.make``) and runs the known consumer inputs (``kvproof.selftest.known``) on the base and
on the overlay (``layers.start_consumers`` / ``run_consumers`` / ``known``). Here: the base is
clean on every hand-written input (no FAIL: a FAIL on an overlay is the mutant's), and the
BlockStored payload off-by-one (``event_tokens_shifted``) is killed by the known layer, its first
catch a kv_event observation of the block pool. Real vLLM in its environment's subprocess.
"""

from __future__ import annotations

import os

import pytest
from conftest import require_env

from kvproof.envs import overlay
from kvproof.selftest import known
from kvproof.selftest import behaviour as B
from kvproof.selftest.mutants import BY_NAME, RELEASE
from kvproof.settings import settings

pytestmark = pytest.mark.integration
MUTANT = "event_tokens_shifted"


def test_behavioural_mutant_is_killed_by_the_known_inputs():
    base = require_env(RELEASE)
    m = BY_NAME[MUTANT]
    home = settings().cache_home / "selftest-envs"  # beside the release: hard links need one filesystem
    name = f"test-mut-{os.getpid()}"
    made = overlay.make(name, RELEASE, {m.file: m.source(overlay.site_packages(base.root))},
                        {"mutant": m.name, "test": __name__}, where=home, force=True)
    items = known.hand()
    try:
        workers = B.start_consumers([base, made.env])
        try:
            base_w, mut_w = workers
            base_j = B.run_consumers(base_w, items)
            got = B.run_consumers(mut_w, items)
            fails = [(n, b.line) for (n, _, _), b in zip(items, base_j) if b.failed]
            assert fails == [], fails  # every known input is clean on the release itself

            def confirm(idx):
                sub = [items[i] for i in idx]
                return B.run_consumers(base_w, sub), B.run_consumers(mut_w, sub)
            cells = B.known(items, base_j, got, 0.0, confirm)
        finally:
            for w in workers:
                w.close()
    finally:
        overlay.remove(name, where=home)
    assert cells["known"].caught is True, cells["known"].detail
    first = next(g for b, g in zip(base_j, got) if B.consumer_new(b, g))
    assert first.failed and "kv_event" in first.line, first.line
    assert cells["differential"].caught is not None
