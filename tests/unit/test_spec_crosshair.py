"""CrossHair checks the contracts of tests/crosshair_model.py on the model (bounded, about 40 s).

CrossHair enumerates small integer inputs (see the module docstring for why
they are realized); a clean run is no counterexample within the budget, not
a proof. The second test shows the same path reports a violated contract,
so a clean run is not a vacuous one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import crosshair as _crosshair  # noqa: F401 -- the dev extra installs crosshair and z3: missing fails, not skips
import z3  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 150  # hard stop for one crosshair process; the checks take ~40 s and ~5 s


def crosshair(target: str, per_condition: float, cwd: Path) -> subprocess.CompletedProcess:
    # tests/ on the path: the contracts (tests/crosshair_model.py) are dev code, not in the wheel
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"),
                                                                 os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "crosshair", "check", target,
                           "--per_condition_timeout", str(per_condition)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=BUDGET_S)


def test_model_contracts_have_no_counterexample():
    out = crosshair("tests/crosshair_model.py", 5, ROOT)
    assert out.returncode == 0 and "error" not in out.stdout, out.stdout + out.stderr


def test_crosshair_reports_a_violated_contract_through_the_same_path(tmp_path):
    """The 0.27 seed bug (Mamba fallback to the lcm in align mode) as a contract: CrossHair finds it."""
    (tmp_path / "seed_027.py").write_text(textwrap.dedent('''
        from kvproof.outcome import Outcome
        from crosshair_model import DCP_VALUES, MAX, facts, model, returned


        def hybrid_align_engine_027(m: int, a: int, dcp_i: int) -> Outcome:
            """
            pre: 1 <= m <= MAX and 1 <= a <= MAX
            pre: 0 <= dcp_i < len(DCP_VALUES)
            post: not returned(__return__) or all(g % __return__.hash_block_size == 0 for g in __return__.group_block_sizes)
            """
            return model(0, (facts.KINDS.index("mamba"), facts.KINDS.index("full_attention")), (m, a), min(m, a),
                         dcp_i)
    '''))
    out = crosshair("seed_027.py", 10, tmp_path)
    assert out.returncode != 0 and "false when calling hybrid_align_engine_027" in out.stdout, out.stdout + out.stderr
