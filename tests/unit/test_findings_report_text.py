"""The issue a maintainer files (``kvproof findings report``) speaks vLLM, not kvproof: no
class keys, tiers or reachability words before the last line, the kvproof class id only
there; every open bug with a written report names a serve line, what breaks, the lines
involved and a fix diff. Built from the ledger alone (no vLLM: the runs are empty)."""

from __future__ import annotations

import pytest

from kvproof.findings.fix import diff_path, files_of
from kvproof.findings.ledger import Ledger, Status
from kvproof.findings.report import draft

LEDGER = Ledger.load()
REPORTED = [e for e in LEDGER.entries() if e.status == Status.BUG and e.report]
# kvproof's own words: a maintainer reading them would have to ask what they mean
VOCABULARY = ("Reachability", "reachability", "consumer|", "manager|", "function|", "oracle:", "kvproof",
              "Layout", "tier", "LATENT", "NOT_EXPRESSIBLE", "witness", "Configuration that should reach")


def test_the_open_bugs_have_written_reports():
    assert REPORTED, "no bug entry of the ledger carries a report"


@pytest.mark.parametrize("entry", REPORTED, ids=lambda e: e.id)
def test_issue_speaks_vllm(entry):
    lines = draft(entry, [], []).rstrip().splitlines()
    body, last = "\n".join(lines[:-1]), lines[-1]
    assert entry.id in last and entry.id not in body
    for word in VOCABULARY:
        assert word not in body, f"{entry.id}: the issue says {word!r} before its last line"


@pytest.mark.parametrize("entry", REPORTED, ids=lambda e: e.id)
def test_issue_has_what_a_maintainer_needs(entry):
    rep = entry.report
    text = draft(entry, [], [])
    assert rep["serve"].startswith("vllm serve ") and rep["serve"] in text
    for part in ("breaks", "expected", "fix", "title"):
        assert rep.get(part) and rep[part] in text, f"{entry.id}: report without {part!r}"
    assert rep.get("lines"), f"{entry.id}: no vLLM lines named"
    fix = diff_path(entry.id)
    assert fix is not None, f"{entry.id}: no findings/fixes/{entry.id}.diff"
    assert files_of(fix.read_text()) and "```diff" in text
    assert {ln["file"] for ln in rep["lines"]} <= set(files_of(fix.read_text())), \
        "the lines a report names are in the files its fix changes"


def test_a_class_no_registered_model_builds_is_not_called_a_bug(capsys):
    """58326be22581: real vLLM refuses the layout, but no model the release registers builds
    it; the ledger says latent, `findings report` says so in one line and writes nothing."""
    from kvproof.findings.cli import main

    entry = LEDGER.find("58326be22581")
    assert entry.status == Status.LATENT and not entry.bug_on("0.33.0")
    assert "upstream" not in entry.known_line()
    assert main(["report", entry.id, "--out", "/nonexistent/kvproof-report"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"{entry.id} is not filed upstream (latent): ")


def test_a_fix_that_also_removes_other_symptoms_is_not_a_side_effect():
    """9a8b69482973's fix turns three other entries FAIL -> WARN: an improvement the report names,
    not a failure; a change for the worse (OK -> WARN, WARN -> FAIL, an erring run) is one."""
    from kvproof.findings.fix import FixRun, worsened

    assert worsened({"a": ("FAIL", "WARN"), "b": ("FAIL", "OK"), "c": ("WARN", "OK")}) == {}
    assert worsened({"a": ("OK", "WARN"), "b": ("WARN", "FAIL"), "c": ("FAIL", "ERROR"), "d": ("OK", None)}) == {
        "a": ("OK", "WARN"), "b": ("WARN", "FAIL"), "c": ("FAIL", "ERROR"), "d": ("OK", None)}
    entry = REPORTED[0]
    better = FixRun("0.34.0", 1, 0, "FAIL", "OK", others_changed={"10fb1ddbf752": ("FAIL", "WARN")}, others_checked=9)
    text = draft(entry, [], [], fixes=[better])
    assert "also improves other known results (of 9 checked): 10fb1ddbf752: FAIL -> WARN on 0.34.0" in text
    assert "worse" not in text and better.removes_symptom and not better.others_worse
    worse = FixRun("0.34.0", 1, 0, "FAIL", "OK", others_changed={"10fb1ddbf752": ("OK", "FAIL")}, others_checked=9)
    assert "makes other results worse: 10fb1ddbf752: OK -> FAIL on 0.34.0" in draft(entry, [], [], fixes=[worse])
