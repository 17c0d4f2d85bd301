"""``kvproof findings report``: the three real vLLM bugs of the ledger, each as a standalone
reproducer (imports only vLLM) run with the python of every release under test that the entry
measured (conftest.RELEASES; ``kvproof findings report ID`` itself runs every installed one): it
must fail (exit 1, ``BUG: ...``) exactly on the releases the ledger entry measured the bug on, and
pass (exit 0) on the others. The reports go to tmp_path, never into the checkout, except in
the one test that types the command as the README does (the default, relative out/findings/
of the checkout root): it removes the folder it made and puts back one that was there."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RELEASES, require_env

from kvproof.findings.ledger import Ledger, Status
from kvproof.findings.report import generate
from kvproof.findings.reproducers import script
from kvproof.findings.runs import EXIT_BUG, EXIT_OK

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]

LEDGER = Ledger.load()
# the three real bugs of issue 15 item 6, by their class (file:function, never a line number)
BUGS = {
    "simplecpu-no-full-attention": ("consumer", "vllm/v1/simple_kv_offload/manager.py:__init__"),
    "simplecpu-kv-event-mispairing": ("consumer", "oracle:kv_event"),
    "mamba-all-hidden-states": ("manager", "hybrid.group_multiple_of_hash[not-align]"),
}


def _entry(name):
    tier, where = BUGS[name]
    hits = [e for e in LEDGER.entries() if e.key.tier == tier and where in (e.key.raising_frame, e.key.check)
            and e.status in (Status.BUG, Status.FIXED)]
    assert len(hits) == 1, f"{name}: {len(hits)} ledger entries match {tier} {where}"
    return hits[0]


def _has_env(release):
    from kvproof import envs
    try:
        envs.find(release)
        return True
    except Exception:
        return False


@pytest.mark.parametrize("name", sorted(BUGS))
def test_reproducer_imports_only_vllm(name):
    tree = ast.parse(script(_entry(name)))
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "kvproof" not in mods
    assert mods <= {"vllm", "torch", "dataclasses", "inspect", "json", "os", "sys", "tempfile"}, mods


@pytest.mark.parametrize("name", sorted(BUGS))
def test_reproducer_fails_exactly_on_affected_releases(name, tmp_path):
    entry = _entry(name)
    releases = [r for r in sorted(entry.releases) if r in RELEASES and _has_env(r)]
    if not releases:
        pytest.skip(f"{name}: none of {sorted(entry.releases)} is under test here")
    folder, runs = generate(entry, tmp_path, releases)
    assert (folder / "repro.py").exists() and (folder / "issue.md").exists()
    evidence = json.loads((folder / "evidence.json").read_text())
    assert [r["release"] for r in evidence["runs"]] == releases
    for run in runs:
        bug = entry.releases[run.release] in ("FAIL", "ERROR")
        assert run.rc == (EXIT_BUG if bug else EXIT_OK), f"vLLM {run.release}: exit {run.rc}: {run.last}"
        assert run.last.startswith("BUG: " if bug else "OK: "), run.last
    assert any(r.rc == EXIT_BUG for r in runs), f"{name}: reproduced nowhere"
    if entry.status == Status.FIXED:
        assert any(r.rc == EXIT_OK for r in runs), f"{name}: fixed in {entry.fixed_in}, but no run passed"
    draft = (folder / "issue.md").read_text()
    title = (entry.report or {}).get("title") or entry.title
    assert title in draft and "### Suggested fix" in draft and "(none written yet)" not in draft


@pytest.mark.parametrize("name, releases", [
    ("simplecpu-no-full-attention", ("0.32.0",)),
    ("simplecpu-kv-event-mispairing", ("0.28.0", "0.32.0")),  # OK, then BUG
])
def test_report_as_the_readme_types_it(name, releases, tmp_path):
    """``kvproof findings report ID`` from the checkout root, into its default relative
    out/findings/ (issue 41 item 6: the script ran at out/findings/ID/out/findings/ID/repro.py,
    exit 2 everywhere, and issue.md still said "expected BUG")."""
    for r in releases:
        require_env(r)
    entry = _entry(name)
    out = REPO / "out"
    folder = out / "findings" / entry.id
    made = [p for p in (out, out / "findings") if not p.exists()]
    kept = tmp_path / "kept"
    if folder.exists():  # someone's report: set aside, put back after
        shutil.move(str(folder), kept)
    try:
        proc = subprocess.run([sys.executable, "-m", "kvproof", "findings", "report", entry.id, "--no-fix"]
                              + [a for r in releases for a in ("--vllm", r)],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        for r in releases:
            want = "BUG" if entry.releases[r] in ("FAIL", "ERROR") else "OK"
            assert any(ln.startswith(f"  {entry.id} vLLM {r}: exit {int(want == 'BUG')} (expected {want}) {want}: ")
                       for ln in lines), proc.stdout
        assert lines[-1] == f"wrote {folder}/issue.md, repro.py, evidence.json"
        evidence = json.loads((folder / "evidence.json").read_text())
        assert [(x["release"], x["as_expected"]) for x in evidence["runs"]] == [(r, True) for r in releases]
        issue = (folder / "issue.md").read_text()
        assert "can't open file" not in issue and (folder / "repro.py").exists()
        assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging folder left
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if kept.exists():
            shutil.move(str(kept), folder)
        for p in reversed(made):
            try:
                p.rmdir()  # only if empty: another report may have arrived meanwhile
            except OSError:
                pass
