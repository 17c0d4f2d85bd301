"""The parsers' atheris target runs for a few seconds in CI and finds nothing."""

from __future__ import annotations

import random
import subprocess

import pytest

from kvproof.bridge.client import worker_env
from kvproof.fuzz.parsers import one_input
from conftest import require_env

pytestmark = pytest.mark.integration


def test_parsers_never_raise_anything_but_a_one_line_error():
    rng = random.Random(7)
    hostile = [b"\x01block_sizes=[" + b"9" * 5000 + b"], hash_block_size=3", b"\x02mamba:" + b"9" * 5000,
               b"\x00" + b"[" * 50_000, b"\x00" + b'{"groups": [{"kind": "mamba", "block_size": 1e400}]}']
    for data in hostile + [bytes(rng.randrange(256) for _ in range(rng.randrange(64))) for _ in range(5000)]:
        one_input(data)


def test_atheris_campaign_on_the_parsers(tmp_path):
    env = require_env("0.27.0")  # any interpreter with atheris; the environments have it
    proc = subprocess.run([str(env.python), "-m", "kvproof.fuzz.parsers", "-max_total_time=8", "-max_len=512",
                           str(tmp_path)], capture_output=True, text=True, env=worker_env(), timeout=180,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done" in proc.stderr and "ERROR" not in proc.stderr
