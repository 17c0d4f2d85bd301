"""``kvproof findings report``'s runs, without vLLM: each release's environment is a stand-in
(KVPROOF_ENV_HOME in tmp_path holding ``<env>/bin/python``, a tiny script, and a manifest),
which is what the report sees of an environment; nothing of vLLM is imitated.

- a relative output folder (the README's default ``out/findings``) runs the script it wrote,
  never a doubled path (issue 41 item 6: ``.../out/findings/ID/out/findings/ID/repro.py``);
- a run that did not run (exit neither 0 nor 1, a traceback, a timeout, no environment) writes
  nothing and leaves an earlier report as it was; the CLI says so in one line, exit 3;
- the script runs on every managed release installed, and a release the ledger entry has not
  measured is shown as run, never counted as unexpected."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvproof import envs, facts
from kvproof.findings.cli import main
from kvproof.findings.ledger import Ledger
from kvproof.findings.report import generate
from kvproof.findings.runs import (EXIT_NO_ENV, EXIT_TIMEOUT, ReproducerDidNotRun, installed_releases, run_pytest,
                                   run_script)

ENTRY = Ledger.load().find("9a8b69482973")  # a consumer bug: FAIL on 0.30.0-0.33.0, OK before

# The stand-in interpreters: each sees the arguments python would (the script's path last).
SAYS_BUG = """import os, sys
p = sys.argv[-1]
if not os.path.exists(p):
    sys.stderr.write(f"{sys.argv[0]}: can't open file {p!r}: [Errno 2] No such file or directory\\n")
    sys.exit(2)
print(f"BUG: stand-in ran {p} in {os.getcwd()}")
sys.exit(1)
"""
SAYS_OK = """import sys
print("OK: stand-in")
"""
CANNOT_OPEN = """import sys
sys.stderr.write(f"{sys.argv[0]}: can't open file {sys.argv[-1]!r}: [Errno 2] No such file or directory\\n")
sys.exit(2)
"""
TRACEBACK = """import sys
print("INFO some log line")
sys.stderr.write("Traceback (most recent call last):\\nModuleNotFoundError: No module named 'vllm'\\n")
sys.exit(1)
"""
SLEEPS = """import time
time.sleep(30)
"""


def stand_in(home: Path, release: str, body: str) -> Path:
    """An environment for ``release`` under ``home`` whose python runs ``body``."""
    root = home / envs.EnvSpec.parse(release).name
    (root / "bin").mkdir(parents=True, exist_ok=True)
    py = root / "bin" / "python"
    py.write_text(f"#!{sys.executable}\n" + body)
    py.chmod(0o755)
    (root / envs.MANIFEST).write_text(json.dumps({"vllm": release}))
    return py


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "envs"
    h.mkdir()
    monkeypatch.setenv("KVPROOF_ENV_HOME", str(h))
    return h


def test_a_relative_output_folder_runs_the_script_it_wrote(home, tmp_path, monkeypatch):
    stand_in(home, "0.32.0", SAYS_BUG)
    monkeypatch.chdir(tmp_path)
    folder, runs = generate(ENTRY, Path("out") / "findings", ["0.32.0"])
    assert folder == (tmp_path / "out" / "findings" / ENTRY.id) and folder.is_absolute()
    (run,) = runs
    assert run.rc == 1 and run.ran and run.as_expected, run.last
    ran = Path(run.last.split(" ran ", 1)[1].split(" in ", 1)[0])
    assert ran.is_absolute() and ran.name == "repro.py" and ran.parent.parent == folder.parent, run.last
    assert sorted(p.name for p in (tmp_path / "out" / "findings").iterdir()) == [ENTRY.id]  # no staging left
    assert {"repro.py", "evidence.json", "issue.md"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "evidence.json").read_text())["runs"][0]["rc"] == 1


def test_run_script_and_run_pytest_take_a_relative_path(home, tmp_path, monkeypatch):
    stand_in(home, "0.32.0", SAYS_BUG)
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "repro.py").write_text("")
    monkeypatch.chdir(tmp_path)
    (run,) = run_script(Path("rel") / "repro.py", ["0.32.0"], ENTRY)
    assert run.rc == 1 and run.ran, run.last
    (test,) = run_pytest(Path("rel") / "repro.py", ["0.32.0"])
    assert test.rc == 1 and test.ran, test.last


@pytest.mark.parametrize("body, rc, cause", [
    (CANNOT_OPEN, 2, "exit 2: "),
    (TRACEBACK, 1, "exit 1: ModuleNotFoundError: No module named 'vllm'"),
    (SLEEPS, EXIT_TIMEOUT, "timed out after"),
    (None, EXIT_NO_ENV, "no environment for "),
], ids=["cannot-open", "traceback", "timeout", "no-env"])
def test_a_run_that_did_not_run_writes_nothing(home, tmp_path, monkeypatch, body, rc, cause):
    stand_in(home, "0.32.0", SAYS_BUG)
    if body is not None:
        stand_in(home, "0.33.0", body)
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "out" / "findings" / ENTRY.id
    folder.mkdir(parents=True)
    earlier = {"repro.py": "# an earlier good run\n", "evidence.json": "{}\n", "issue.md": "# earlier\n"}
    for name, text in earlier.items():
        (folder / name).write_text(text)
    runs = run_script(Path("nowhere.py") if body is None else Path("x.py"), ["0.33.0"], ENTRY, timeout=1)
    assert runs[0].rc == rc and not runs[0].ran and not runs[0].as_expected
    with pytest.raises(ReproducerDidNotRun) as err:
        generate(ENTRY, Path("out") / "findings", ["0.32.0", "0.33.0"], timeout=1)
    text = str(err.value)
    assert "vLLM 0.33.0 (" in text and cause in text and "0.32.0" not in text, text
    assert "nothing written" in text and "not a verdict about vLLM" in text
    assert err.value.exit_code == 3
    assert {p.name: p.read_text() for p in folder.iterdir()} == earlier  # untouched
    assert sorted(p.name for p in folder.parent.iterdir()) == [ENTRY.id]  # no staging folder left


def test_no_earlier_report_and_a_run_that_did_not_run_leaves_no_folder(home, tmp_path, monkeypatch):
    stand_in(home, "0.32.0", CANNOT_OPEN)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ReproducerDidNotRun):
        generate(ENTRY, Path("out") / "findings", ["0.32.0"])
    assert list((tmp_path / "out" / "findings").iterdir()) == []


def test_the_cli_says_in_one_line_which_release_did_not_run(home, tmp_path, monkeypatch, capsys):
    stand_in(home, "0.32.0", CANNOT_OPEN)
    monkeypatch.chdir(tmp_path)
    assert main(["report", ENTRY.id, "--no-fix", "--vllm", "0.32.0"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert "vLLM 0.32.0 (exit 2: " in err and "can't open file" in err and ENTRY.id in err
    assert not (tmp_path / "out" / "findings" / ENTRY.id).exists()


def test_every_installed_managed_release_runs_and_a_new_one_is_not_unexpected(home, tmp_path, monkeypatch, capsys):
    """A release managed after the entry was measured (the next minor past the newest): its run
    is what is known of it."""
    major, minor, _ = facts.MANAGED_RELEASES[-1].split(".")
    new = f"{major}.{int(minor) + 1}.0"
    monkeypatch.setattr(facts, "MANAGED_RELEASES", facts.MANAGED_RELEASES + (new,))
    assert new not in ENTRY.releases
    for r in ("0.28.0", "0.32.0"):
        stand_in(home, r, SAYS_OK if r == "0.28.0" else SAYS_BUG)
    stand_in(home, new, SAYS_BUG)
    assert installed_releases(ENTRY) == ["0.28.0", "0.32.0", new]
    monkeypatch.chdir(tmp_path)
    assert main(["report", ENTRY.id, "--no-fix"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in out[:3]] == [f"  {ENTRY.id} vLLM {r}" for r in ("0.28.0", "0.32.0", new)]
    assert "(not in the ledger yet: BUG as run)" in out[2] and "(expected BUG)" in out[1], out
    folder = tmp_path / "out" / "findings" / ENTRY.id
    runs = json.loads((folder / "evidence.json").read_text())["runs"]
    assert [(r["release"], r["expected"], r["result"], r["as_expected"]) for r in runs] == [
        ("0.28.0", "OK", "OK", True), ("0.32.0", "BUG", "BUG", True), (new, None, "BUG", True)]
    issue = (folder / "issue.md").read_text()
    assert f"vLLM {new}: not in the ledger yet: BUG as run" in issue
    assert f"| {new} | 1 | not in the ledger yet: BUG as run |" in issue


def test_vllm_restricts_and_a_wrong_result_is_still_unexpected(home, tmp_path, monkeypatch, capsys):
    stand_in(home, "0.28.0", SAYS_BUG)  # the ledger says OK on 0.28.0
    stand_in(home, "0.32.0", SAYS_BUG)
    assert main(["report", ENTRY.id, "--no-fix", "--vllm", "0.28.0", "--out", str(tmp_path / "o")]) == 1
    out = capsys.readouterr().out
    assert "vLLM 0.28.0: exit 1 (expected OK)" in out and "0.32.0" not in out


def test_a_measured_release_the_entry_lacks_is_run_as_new(home, tmp_path):
    stand_in(home, "0.32.0", SAYS_OK)
    entry = replace(ENTRY, releases={r: v for r, v in ENTRY.releases.items() if r != "0.32.0"})
    _, (run,) = generate(entry, tmp_path, ["0.32.0"])
    assert run.expected is None and run.result == "OK" and run.as_expected
    assert run.expectation() == "not in the ledger yet: OK as run"
