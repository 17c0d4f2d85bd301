"""The one configuration object: every KVPROOF_* variable read in one place."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kvproof import settings as settings_mod
from kvproof.errors import UsageError
from kvproof.settings import HarnessSettings

ROOT = Path(__file__).resolve().parents[2]


def test_harness_defaults(monkeypatch):
    for var in ("KVPROOF_FUZZ_MANAGER", "KVPROOF_FUZZ_PREMISE", "KVPROOF_FUZZ_INSTRUMENT", "KVPROOF_FUZZ_FAST",
                "KVPROOF_FUZZ_MEMO", "KVPROOF_FUZZ_WORKDIR"):
        monkeypatch.delenv(var, raising=False)
    h = HarnessSettings.from_environ()
    assert (h.manager, h.premise, h.instrument, h.fast, h.memo, h.workdir) == \
        ("escalate", "engine", "1", True, True, None)


def test_harness_flags(monkeypatch, tmp_path):
    monkeypatch.setenv("KVPROOF_FUZZ_MANAGER", "always")
    monkeypatch.setenv("KVPROOF_FUZZ_FAST", "0")
    monkeypatch.setenv("KVPROOF_FUZZ_WORKDIR", str(tmp_path))
    h = HarnessSettings.from_environ()
    assert h.manager == "always" and not h.fast and not h.memo and h.workdir == tmp_path


@pytest.mark.parametrize("var,value", [("KVPROOF_FUZZ_MANAGER", "sometimes"), ("KVPROOF_FUZZ_PREMISE", "engin")])
def test_bad_harness_values_are_usage_errors(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(UsageError, match=var):
        HarnessSettings.from_environ()


# A kvproof variable: KVPROOF (the CI recipe's command) or KVPROOF_<NAME>; not KVPROOF-BOOT (a marker).
_VAR = re.compile(r"(?<![\w-])KVPROOF(?:_[A-Z0-9_]*[A-Z0-9])?(?![\w-])")
# Where a script reads one: a shell expansion, or its Python part's os.environ.
_READ = r"(?:\$\{?|environ(?:\.get\(|\[)[\"'])NAME(?![\w])"
_PROSE = (".md", ".json", ".txt", ".rst", ".csv")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if not f.endswith(_PROSE) and (ROOT / f).is_file()]


def _names(text: str) -> set[str]:
    return set(_VAR.findall(text))


def test_every_variable_named_in_the_tree_is_documented():
    """Every KVPROOF_* name in the tree (Python, shell scripts, Makefile, Dockerfile, CI YAML, tests)
    appears in settings.py's table."""
    doc = settings_mod.__doc__ or ""
    used: dict[str, str] = {}
    for f in _tracked():
        for v in _names((ROOT / f).read_text(errors="replace")):
            used.setdefault(v, f)
    assert {"KVPROOF_BASE", "KVPROOF_GPU_LEFT", "KVPROOF_FUZZ_MANAGER"} <= set(used)  # the scan sees all kinds
    missing = sorted(f"{v} ({f})" for v, f in used.items() if not re.search(rf"^{v}\s", doc, re.M))
    assert not missing, f"KVPROOF_* variables named in the tree but not documented in kvproof/settings.py: {missing}"


def test_a_script_documents_each_variable_it_reads_in_its_own_comments():
    reads = 0
    for f in _tracked():
        if not f.endswith(".sh"):
            continue
        text = (ROOT / f).read_text()
        comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        for v in _names(code):
            if re.search(_READ.replace("NAME", v), code):
                reads += 1
                assert v in _names(comments), f"{f} reads {v} but its comments do not describe it"
    assert reads >= 10  # the CI recipe and the GPU script
