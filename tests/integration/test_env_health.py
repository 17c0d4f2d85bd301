"""``kvproof env create`` says which tiers work, and an environment that cannot run one is never
reported as ready: it names the tier and the cause and exits 3 (src/kvproof/running/health.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RELEASES, require_env
from kvproof import facts
from kvproof.envs.stand_in_triton import VARIABLE

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NEWEST = facts.MANAGED_RELEASES[-1]


def _create(release: str, mode: str) -> subprocess.CompletedProcess:
    import os
    env = {**os.environ, VARIABLE: mode}
    return subprocess.run([sys.executable, "-m", "kvproof", "env", "create", release], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(NEWEST not in RELEASES, reason="the newest release is not under test")
def test_a_release_whose_tiers_cannot_run_is_not_ready():
    require_env(NEWEST)
    off = _create(NEWEST, "off")  # vLLM's own x86 refusal, no stand-in: no tier can run
    assert off.returncode == 3, off.stdout + off.stderr
    assert "NOT READY" in off.stdout
    lines = [ln for ln in off.stderr.splitlines() if "cannot run here" in ln]
    assert any("the function tier cannot run here" in ln and "Triton" in ln for ln in lines), off.stderr
    ok = _create(NEWEST, "gate")  # probed again: the stand-in's mode is part of what was probed
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ready" in ok.stdout and "works: derive, function, manager, consumer" in ok.stdout
    assert "stand-in: Triton stand-in" in ok.stdout
