"""The ClusterFuzzLite build script's steps, run locally (no docker, no PyInstaller).

``KVPROOF_CFLITE_LOCAL=1`` swaps only ``compile_python_fuzzer`` for a launcher
that runs the entry point with a managed environment's Python; everything
else (entry points found, seed corpus zip, dictionary, options) is the real
script. The built fuzzer then runs its seed corpus like ClusterFuzzLite would.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from kvproof.bridge.client import worker_env
from conftest import require_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_build_sh_produces_runnable_fuzzers(tmp_path):
    env = require_env("0.32.0")
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "kvproof").symlink_to(ROOT)
    proc = subprocess.run(["bash", str(ROOT / ".clusterfuzzlite" / "build.sh")], capture_output=True, text=True,
                          env={**os.environ, "KVPROOF_CFLITE_LOCAL": "1", "SRC": str(src), "OUT": str(out),
                               "PYTHON": str(env.python)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("fuzz_contracts", "fuzz_conformance"):
        exe = out / name
        assert os.access(exe, os.X_OK) and "LLVMFuzzerTestOneInput" in exe.read_text()
        with zipfile.ZipFile(out / f"{name}_seed_corpus.zip") as z:
            assert len(z.namelist()) == len(list((ROOT / "fuzz" / "seeds").iterdir()))
        assert (out / f"{name}.dict").read_text() == (ROOT / "fuzz" / "kvproof.dict").read_text()
        assert "max_len = 256" in (out / f"{name}.options").read_text()
    seeds = tmp_path / "seeds"
    with zipfile.ZipFile(out / "fuzz_contracts_seed_corpus.zip") as z:
        z.extractall(seeds)
    run = subprocess.run([str(out / "fuzz_contracts"), "-runs=200", f"-dict={out / 'fuzz_contracts.dict'}",
                          "-max_len=256", str(seeds)], capture_output=True, text=True, timeout=300,
                         env=worker_env({"KVPROOF_FUZZ_CORPUS_OUT": str(tmp_path / "crashes"),
                                         "KVPROOF_FUZZ_WORKDIR": str(tmp_path / "work")}), cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Done 200 runs" in run.stdout + run.stderr
