"""Each bench script at its smallest setting runs to the end and writes its table.

``make bench`` once died at its fuzz step (``classes[0]``: a KeyError after a campaign's
classes became a dict) and its table in bench/results/ stayed older than the code, unnoticed.
The scripts that finish in seconds at their smallest setting run in every ``make test``;
the slow ones (minutes even when small: the proof run twice, a fresh vLLM import per naive
run, fuzz campaigns, CrossHair, a release differential with its campaign, the self-test's
overlays, a wheel of another commit) run with ``KVPROOF_BENCH_SMOKE=1`` (``make bench-smoke``).
Every ``bench/bench_*.py`` must have a setting here, so a new script gets one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvproof import envs

from conftest import require_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
REL = envs.DEFAULT_RELEASE

FAST = {
    "bench_verify.py": ["--max-n", "2", "--timeout", "5"],
    "bench_spec.py": ["--blocks", "64", "--vllm", REL],
    "bench_replay.py": ["--no-engine", "--vllm", REL],
    "bench_consumers.py": ["--n", "2", "--seconds", "10", "--releases", REL],
    "bench_campaign.py": ["--n", "3", "--vllm", REL, "--before", "HEAD"],  # the --before path too
}
SLOW = {
    "bench_bridge.py": ["--n", "20", "--naive", "1", "--vllm", REL],
    "bench_induction.py": ["--revisions", "0.32"],
    "bench_crosshair.py": ["--timeout", "2"],
    "bench_fuzz.py": ["--runs", "200", "--rounds", "1", "--seeds", "1", "--ttf-limit", "5", "--cov-seconds", "2"],
    "bench_continuous.py": ["--seconds", "10", "--box", "5"],
    "bench_differential.py": ["--max", "2", "--campaign-seconds", "5", "--vllm", REL, "--vllm", "0.33.0"],
    "bench_derive.py": ["--vllm", REL],
    "bench_check.py": ["--reps", "1", "--vllm", REL],
    "bench_selftest.py": ["--mutants", "hash_is_one", "--seconds", "1", "--probes", "10", "--batch", "1"],
    "bench_report.py": ["--vllm", REL, "--no-fix", "--runs", "warm"],
    "bench_zygote.py": ["--vllm", REL, "--repeat", "1"],
    "bench_witness.py": ["--vllm", REL, "--model", "gemma2", "a4fac601160a"],
    "bench_verify_phases.py": [],
}
SMOKE_ALL = os.environ.get("KVPROOF_BENCH_SMOKE") == "1"


def test_every_bench_script_has_a_smallest_setting():
    scripts = {p.name for p in (ROOT / "bench").glob("bench_*.py")}
    assert scripts == set(FAST) | set(SLOW), f"bench scripts without a setting here: {sorted(scripts - set(FAST) - set(SLOW))}"


@pytest.mark.parametrize("script", sorted(FAST) + sorted(SLOW))
def test_bench_script_runs_to_its_table(script, tmp_path):
    if script in SLOW and not SMOKE_ALL:
        pytest.skip("minutes even at its smallest setting: KVPROOF_BENCH_SMOKE=1 (make bench-smoke)")
    require_env(REL)
    out = tmp_path / "table.md"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *(FAST | SLOW)[script], "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    text = out.read_text()
    assert text.startswith("#") and "|---" in text, text[:500]
