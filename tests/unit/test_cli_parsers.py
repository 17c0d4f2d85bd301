"""Scripts outside ``kvproof``'s own CLI parse with the one base (kvproof.cliutil.Parser):
a usage error is one line on stderr and exit 2, never argparse's usage block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_drift_usage_error_is_one_line_exit_2(capsys):
    from kvproof.verify import drift
    assert drift.main(["--count", "many"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("python -m kvproof.verify.drift: argument --count"), err


@pytest.mark.parametrize("argv", [["--seconds", "soon"], ["--no-such-option"]])
def test_bench_selftest_usage_error_is_one_line_exit_2(argv):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_selftest.py"), *argv],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_selftest.py: "), proc.stderr


@pytest.mark.parametrize("script,argv", [("bench_continuous.py", ["--seconds", "soon"]),
                                         ("bench_continuous.py", ["--vllm", "9.9.9"]),
                                         ("bench_derive.py", ["--no-such-option"]),
                                         ("bench_derive.py", ["--vllm", "9.9.9"])])
def test_bench_usage_error_is_one_line_exit_2(script, argv):
    """A bad option or a release without an environment: one line, exit 2, nothing written."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *argv, "--out", "/nonexistent/x.md"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: "), proc.stderr
