"""docs/ci/check_vllm_pr.sh on a local vLLM checkout generated from the installed 0.32.0 (integration).

(a) the unchanged checkout is green; (b) one commit seeding a resolver
regression is red and the summary names the change. The overlay lives in a
private env home (hard-link copy of the release), so nobody else's drift
check sees it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_overlay import RELEASE, RESOLVER, checkout, git, home  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "ci" / "check_vllm_pr.sh"
CHECKOUT_ROOT = Path(__file__).resolve().parents[2]


def run_script(home: Path, src: Path, work: Path, consumers: bool = True) -> tuple[int, str]:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "KVPROOF_ENV_HOME": str(home), "PATH": f"{bindir}:{os.environ['PATH']}",
           "KVPROOF_FUZZ_SECONDS": "5", "KVPROOF_VERIFY_ARGS": "--revisions 0.32 --max-groups 2 --jobs 1",
           "KVPROOF_WORK": str(work), "KVPROOF_SUMMARY": str(work / "summary.md"),
           "KVPROOF_CORPUS_DIR": str(CHECKOUT_ROOT / "corpus"), "KVPROOF_OUT": str(work / "out"),
           "KVPROOF_LEDGER_DIR": str(CHECKOUT_ROOT / "findings" / "ledger"), "KVPROOF_DIFF_INPUTS": "3",
           "KVPROOF_CONSUMER_SECONDS": "20", "KVPROOF_CONSUMERS": "1" if consumers else "0",
           # the same path with four of the self-test's known inputs (the gate's default is all of them,
           # each replayed on the base and the overlay): the test checks the wiring, not the set
           "KVPROOF_KNOWN_INPUTS": "4"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    p = subprocess.run(["bash", str(SCRIPT), str(src), "HEAD"], capture_output=True, text=True, env=env,
                       cwd=str(work.parent), timeout=600)
    return p.returncode, (work / "summary.md").read_text() if (work / "summary.md").exists() else p.stderr


def test_green_then_red(home, checkout, tmp_path):  # noqa: F811
    rc, summary = run_script(home, checkout, tmp_path / "a")
    assert rc == 0, summary
    assert "kvproof: green" in summary and "changed Python files: none" in summary
    # the consumer tier ran: the differential compared admissions, the consumers fuzz ran inputs
    assert "consumer differential: no input newly FAILs, no request hits less" in summary
    assert re.search(r"admissions compared", summary) and "- consumers fuzz" in summary and "new class on the PR" not in summary
    f = checkout / RESOLVER
    f.write_text(f.read_text().replace("    return scheduler_block_size, hash_block_size\n",
                                       "    return scheduler_block_size, scheduler_block_size\n"))
    git(checkout, "commit", "-qam", "resolver: hash block follows the scheduler block")
    rc, summary = run_script(home, checkout, tmp_path / "b", consumers=False)  # a resolver change: steps 1-4
    assert rc == 1, summary
    assert "kvproof: RED" in summary
    assert "resolver: hash block follows the scheduler block" in summary  # names the change
    assert RESOLVER in summary
    assert "newly FAIL" in summary or "violation" in summary
    assert not (home / "pr-check").exists()  # the script removes its overlay
