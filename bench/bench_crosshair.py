"""Z3 model vs CrossHair on the real installed resolver, side by side.

The question: does `hybrid.group_multiple_of_hash` hold in align mode with
prefix caching on and the engine's cache block size (smallest group), for
N = 2 (Mamba + attention) and N = 3 (two Mamba + attention) groups, block
sizes 1..2^20? Z3 answers on the model (kvproof.spec); CrossHair explores the
real vLLM code inside each release's environment (bench/crosshair/). CrossHair
can find a counterexample but cannot prove: "no counterexample" after its
timeout is not a proof. crosshair-tool is one of the environment tools
(kvproof.envs.TOOLS); environments built before it was added need
`<env>/bin/pip install crosshair-tool==0.0.112`.
Usage: python bench/bench_crosshair.py [--timeout 60]; writes bench/results/crosshair.md.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from kvproof import facts
from kvproof.spec import revision_for
from kvproof.spec.properties import BY_KEY
from kvproof.spec.query import Query

from kvproof import envs
from kvproof.bridge.client import worker_env
from kvproof.cliutil import Parser
from kvproof.fsio import atomic_write

HERE = Path(__file__).resolve().parent
RELEASES = (facts.SEED_PAIR[0], envs.DEFAULT_RELEASE)  # the seed bug's release and the newest CPU one
HARNESSES = {2: "hybrid_align_2", 3: "hybrid_align_3"}


def z3_row(release: str, n: int, timeout: float) -> dict:
    t0 = time.perf_counter()
    result = Query(revision_for(release), BY_KEY["hybrid.group_multiple_of_hash[align]"], n, "engine").run(
        timeout, minimise=False)
    return {"verdict": str(result.status), "seconds": time.perf_counter() - t0}


def crosshair_row(release: str, n: int, timeout: float) -> dict:
    env = envs.find(release)
    extra = {"PYTHONPATH": f"{worker_env()['PYTHONPATH']}:{HERE / 'crosshair'}"}
    t0 = time.perf_counter()
    proc = subprocess.run([str(env.python), str(HERE / "crosshair" / "run_crosshair.py"), str(timeout),
                           HARNESSES[n]], capture_output=True, text=True, env=worker_env(extra),
                          timeout=timeout * 4 + 120)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"verdict": f"ERROR ({(proc.stderr.strip().splitlines() or ['?'])[-1][:80]})",
                "seconds": time.perf_counter() - t0, "detail": ""}
    row = json.loads(lines[-1])
    return {"verdict": row["verdict"], "seconds": row["seconds"], "detail": "; ".join(row["messages"])[:140]}


def main() -> None:
    ap = Parser(prog="bench_crosshair.py")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--out", default=str(HERE / "results" / "crosshair.md"))
    args = ap.parse_args()
    lines = ["# Z3 model vs CrossHair on the real resolver", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared). `hybrid.group_multiple_of_hash` in align mode, prefix "
             f"caching on, engine cache block size, block sizes 1..2^20; timeout {args.timeout:.0f} s per question.",
             f"Command: `.venv/bin/python bench/bench_crosshair.py --timeout {args.timeout:.0f}`", "",
             "| vLLM | N | load before / after | Z3 model | Z3 s | CrossHair (real code) "
             "| CrossHair s (analysis, import excluded) | CrossHair detail |",
             "|---|---|---|---|---|---|---|---|"]
    for release in RELEASES:
        for n in HARNESSES:
            before = os.getloadavg()[0]
            z = z3_row(release, n, args.timeout)
            c = crosshair_row(release, n, args.timeout)
            lines.append(f"| {release} | {n} | {before:.2f} / {os.getloadavg()[0]:.2f} | {z['verdict']} | {z['seconds']:.2f} | {c['verdict']} | "
                         f"{c['seconds']:.1f} | {c.get('detail', '').replace('|', '/')} |")
            print(lines[-1], flush=True)
    lines += ["", "CrossHair's 'no counterexample' is the end of its time budget, never a proof; Z3's PROVED "
              "covers every layout of that size in the model (whose agreement with the code is "
              "tests/integration/test_conformance.py)."]
    atomic_write(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
