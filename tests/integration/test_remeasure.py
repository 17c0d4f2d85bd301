"""``kvproof findings remeasure``: known classes measured again on a release, on real vLLM."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_env
from kvproof import facts
from kvproof.findings.ledger import Ledger
from kvproof.findings.remeasure import record, remeasure

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SEED = "b8167fef1922"  # the seed bug: HybridKVCacheCoordinator's assert, fixed in 0.28.0


def test_the_seed_class_is_present_where_it_fails_and_gone_where_fixed():
    bad, good = facts.SEED_PAIR
    require_env(bad), require_env(good)
    entry = Ledger.load().find(SEED)
    on_bad, = remeasure([entry], bad)
    on_good, = remeasure([entry], good)
    assert on_bad.present and on_bad.verdict == "FAIL", on_bad.line()
    assert not on_good.present and on_good.verdict != "FAIL", on_good.line()


def test_record_writes_only_changed_verdicts(tmp_path):
    bad, _ = facts.SEED_PAIR
    require_env(bad)
    for p in (ROOT / "findings" / "ledger").glob("*.json"):
        shutil.copy(p, tmp_path)
    ledger = Ledger.load(tmp_path)
    entry = ledger.find(SEED)
    got = remeasure([entry], bad)
    assert record(ledger, got) == 0  # the checked-in entry already says FAIL there
    ledger.add(type(entry)(**{**entry.__dict__, "releases": {}}))
    assert record(Ledger.load(tmp_path), got) == 1
    assert Ledger.load(tmp_path).find(SEED).releases == {bad: "FAIL"}


def test_the_command_as_typed_from_the_checkout_root():
    bad, _ = facts.SEED_PAIR
    require_env(bad)
    proc = subprocess.run([sys.executable, "-m", "kvproof", "findings", "remeasure", SEED, "--vllm", bad],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{SEED} fixed: vLLM {bad}: FAIL, still present" in proc.stdout
    bad_input = subprocess.run([sys.executable, "-m", "kvproof", "findings", "remeasure", "--vllm", bad],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad_input.returncode == 2 and len(bad_input.stderr.strip().splitlines()) == 1, bad_input.stderr
