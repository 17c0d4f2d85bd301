"""The README's "what each command remembers" paragraph, checked against the code.

The README says ``kvproof verify`` reads its baseline and never the ledger, that
check, fuzz, selftest, compare and ``bisect --matrix`` read the ledger, and that
replay checks the corpus files' recorded expectations, not the ledger. Every
import graph in the package reaches findings.ledger through some lazy import, so
this reads what each command's own modules *call*: ``Ledger.load`` (or
kvproof.findings.ledger's ``checked_in()`` / ``known(row)``, which load it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# A read of the ledger: a load, an import of it (its per-process loader and per-row lookup too).
READS_LEDGER = re.compile(r"\bLedger\.load\b|findings\.ledger\b|from kvproof\.findings import ledger")

CLAIM = ("`kvproof verify` reads its baseline (`verify/baseline.json`) and never the ledger;\n"
         "`kvproof check` (the known-class column), `fuzz`, `selftest` (through its fuzz\n"
         "campaigns), `compare` and `bisect --matrix` (`make matrix`) read the ledger;\n"
         "`kvproof replay` checks the expectations recorded in each corpus file, not the\n"
         "ledger.")

# command -> the files whose calls the claim is about
LEDGER_READERS = {
    "check": ["src/kvproof/commands/cli.py"],
    "fuzz": ["fuzz/run.py", "fuzz/harness.py"],
    "selftest": ["fuzz/run.py"],  # selftest.layers.fuzz_classes runs `kvproof fuzz` and reads its classes
    "compare": ["src/kvproof/commands/compare.py"],
    "bisect --matrix": ["src/kvproof/replay/bisect.py"],
}
NOT_READERS = {
    "verify": sorted(str(p.relative_to(ROOT)) for p in (ROOT / "verify").glob("*.py")),
    "replay": ["src/kvproof/replay/cli.py", "src/kvproof/replay/core.py"],
}


def _reads(rel: str) -> list[str]:
    return READS_LEDGER.findall((ROOT / rel).read_text())


def test_the_readme_states_the_claim_and_not_the_old_one():
    assert CLAIM in README, "the README's memory paragraph changed: update this test with the code"
    assert "the one memory verify" not in README


@pytest.mark.parametrize("command", sorted(LEDGER_READERS))
def test_each_named_ledger_reader_reads_the_ledger(command):
    assert any(_reads(f) for f in LEDGER_READERS[command]), f"{command} no longer reads the ledger"


@pytest.mark.parametrize("command", sorted(NOT_READERS))
def test_verify_and_replay_do_not_read_the_ledger(command):
    hits = {f: r for f in NOT_READERS[command] if (r := _reads(f))}
    assert not hits, f"{command} reads the ledger now ({hits}): say so in the README"


def test_selftest_reaches_the_ledger_through_its_fuzz_campaigns():
    layers = (ROOT / "src/kvproof/selftest/layers.py").read_text()
    assert "from kvproof.fuzz.run import read_classes" in layers and '"kvproof", "fuzz"' in layers


def test_verify_reads_its_baseline():
    assert 'FILE = "baseline.json"' in (ROOT / "verify/baseline.py").read_text()
    assert "from kvproof.verify import baseline" in (ROOT / "verify/cli.py").read_text()
