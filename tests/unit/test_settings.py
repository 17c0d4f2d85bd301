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
                "KVPROOF_FUZZ_MEMO", "KVPROOF_FUZZ_WORKDIR", "KVPROOF_FUZZ_COLLECT"):
        monkeypatch.delenv(var, raising=False)
    h = HarnessSettings.from_environ()
    assert (h.manager, h.premise, h.instrument, h.fast, h.memo, h.workdir, h.collect) == \
        ("escalate", "engine", "1", True, True, None, False)


def test_harness_flags(monkeypatch, tmp_path):
    monkeypatch.setenv("KVPROOF_FUZZ_MANAGER", "always")
    monkeypatch.setenv("KVPROOF_FUZZ_FAST", "0")
    monkeypatch.setenv("KVPROOF_FUZZ_COLLECT", "1")
    monkeypatch.setenv("KVPROOF_FUZZ_WORKDIR", str(tmp_path))
    h = HarnessSettings.from_environ()
    assert h.manager == "always" and not h.fast and not h.memo and h.collect and h.workdir == tmp_path


@pytest.mark.parametrize("var,value", [("KVPROOF_FUZZ_MANAGER", "sometimes"), ("KVPROOF_FUZZ_PREMISE", "engin")])
def test_bad_harness_values_are_usage_errors(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(UsageError, match=var):
        HarnessSettings.from_environ()


def test_every_variable_the_code_reads_is_documented():
    """A KVPROOF_* name in src/, spec/, verify/ or fuzz/ appears in settings.py's table."""
    doc = settings_mod.__doc__ or ""
    files = subprocess.run(["git", "ls-files", "src", "spec", "verify", "fuzz"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    used = set()
    for f in files:
        if f.endswith(".py"):
            used |= set(re.findall(r"KVPROOF_[A-Z0-9_]*[A-Z0-9]\b", (ROOT / f).read_text()))
    missing = sorted(v for v in used if not re.search(rf"^{v}\s", doc, re.M))
    assert not missing, f"KVPROOF_* variables read but not documented in kvproof/settings.py: {missing}"
