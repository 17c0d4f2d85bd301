"""``kvproof findings report``: the three real vLLM bugs of the ledger, each as a standalone
reproducer (imports only vLLM) run with every installed release's python: it must fail
(exit 1, ``BUG: ...``) exactly on the releases the ledger entry measured the bug on, and
pass (exit 0) on the others. The reports go to tmp_path, never into the checkout."""

from __future__ import annotations

import ast
import json

import pytest

from kvproof.findings.ledger import Ledger, Status
from kvproof.findings.report import generate
from kvproof.findings.reproducers import script
from kvproof.findings.runs import EXIT_BUG, EXIT_OK

pytestmark = [pytest.mark.integration]

LEDGER = Ledger.load()
# the three real bugs of issue 15 item 6, by their class (file:function, never a line number)
BUGS = {
    "simplecpu-no-full-attention": ("consumer", "vllm/v1/simple_kv_offload/manager.py:__init__"),
    "simplecpu-kv-event-mispairing": ("consumer", "oracle:kv_event"),
    "mamba-all-hidden-states": ("manager", "hybrid.group_multiple_of_hash[not-align]"),
}


def _entry(name):
    tier, where = BUGS[name]
    hits = [e for e in LEDGER.entries() if e.key.tier == tier and where in (e.key.frame, e.key.check)
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
    releases = [r for r in sorted(entry.releases) if _has_env(r)]
    assert releases, f"{name}: none of {sorted(entry.releases)} installed"
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
