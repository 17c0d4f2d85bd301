"""``kvproof compare`` on real releases: one worker call per release, admissions matched, the
report written atomically (the diff logic itself: tests/unit/test_drafts.py)."""

from __future__ import annotations

import json

import pytest

from kvproof.commands import compare

from conftest import require_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]


def test_compare_two_releases_over_generated_and_ledger_inputs(tmp_path, capsys):
    for release in ("0.27.0", "0.28.0"):
        require_env(release)
    out = tmp_path / "cmp.json"
    rc = compare.main(["--from", "0.27.0", "--to", "0.28.0", "--generated", "4", "--spec-share", "1",
                       "findings/ledger/9a8b69482973.json", "--out", str(out)])
    report = json.loads(out.read_text())
    assert rc == (1 if report["classes"] else 0)
    assert report["releases"] == ["0.27.0", "0.28.0"] and report["inputs"] == 5
    # every generated stream drafts; their admissions were matched request by request
    assert report["requests_compared"] >= 8, report
    printed = capsys.readouterr().out
    assert printed.startswith("release differential 0.27.0 -> 0.28.0: 5 inputs")
    for key, regs in report["classes"].items():  # a regression names its first bad release
        assert key.startswith("consumer|regression:hits@0.28.0[") and all(r["release"] == "0.28.0" for r in regs)
