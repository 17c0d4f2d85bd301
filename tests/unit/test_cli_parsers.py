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
