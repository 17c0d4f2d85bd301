"""Bench the proof run: proof time per revision x N, and time to the 0.27 counterexample.

    PYTHONPATH=src python bench/bench_verify.py [--max-n 16] [--timeout 60] [--out bench/results/verify.md]

Every query runs in a killable worker (kvproof.verify.runner), seconds are the
solver's own time inside the worker (process start excluded). Counterexample
timings are from scratch (no seed from a smaller N) and include the concrete
replay and minimisation.
"""

from __future__ import annotations

import os
import platform
import sys
import time

from kvproof.revisions import DEFAULT_REVISIONS
from kvproof.verify.runner import Pool

from kvproof.cliutil import Parser
from kvproof.fsio import atomic_write

PROOFS = ("hybrid.group_multiple_of_hash[align]", "coordinator.scheduler_multiple_of_hash[any]")
CEX = "hybrid.group_multiple_of_hash[align]"


def run_specs(specs: list[dict], jobs: int) -> list[dict]:
    results: dict[int, dict] = {}
    pool = Pool(jobs)
    try:
        pool.run(list(enumerate(specs)), lambda tid, r: results.__setitem__(tid, r) or [])
    finally:
        pool.close()
    return [results[i] for i in range(len(specs))]


def main(argv=None) -> int:
    ap = Parser(prog="bench_verify.py")
    ap.add_argument("--max-n", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=1, help="1 = timings without CPU contention")
    ap.add_argument("--out", default="bench/results/verify.md")
    args = ap.parse_args(argv)
    ns = list(range(2, args.max_n + 1))
    specs, keys = [], []
    for prop in PROOFS:
        for rev in DEFAULT_REVISIONS:
            for n in ns:
                for premise in ("free", "engine"):
                    specs.append({"revision": rev, "property": prop, "n": n, "premise": premise,
                                  "timeout": args.timeout, "minimise": False})
                    keys.append((prop, rev, n, premise))
    cex_ns = [n for n in (2, 4, 8, 12, 16) if n <= args.max_n]
    for n in cex_ns:
        if n <= args.max_n:
            specs.append({"revision": "0.27", "property": CEX, "n": n, "premise": "engine",
                          "timeout": args.timeout, "minimise": True})
            keys.append(("cex", "0.27", n, "engine"))
    load_start = os.getloadavg()[0]
    t0 = time.monotonic()
    results = run_specs(specs, args.jobs)
    wall = time.monotonic() - t0
    load_end = os.getloadavg()[0]
    table: dict = {}
    for k, r in zip(keys, results):
        table[k] = r
    lines = ["# bench: proof run (kvproof.verify)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
             f"z3 {__import__('z3').get_version_string()}; {args.jobs} worker(s), timeout {args.timeout:g} s per query; "
             f"raw block sizes 1..2^20, dcp in (1,2,3,4,8); wall {wall:.1f} s; 1-min load average {load_start:.2f} at "
             f"the start, {load_end:.2f} at the end (read by the script: a shared machine, compare within a table).",
             f"Command: `.venv/bin/python bench/bench_verify.py --max-n {args.max_n} --timeout {args.timeout:g} "
             f"--jobs {args.jobs}`", ""]
    for prop in PROOFS:
        lines += [f"## Proof time (s), `{prop}`, free / engine premise", "",
                  "| N | " + " | ".join(DEFAULT_REVISIONS) + " |", "|---:|" + "---|" * len(DEFAULT_REVISIONS)]
        for n in ns:
            cells = []
            for rev in DEFAULT_REVISIONS:
                parts = []
                for premise in ("free", "engine"):
                    r = table[(prop, rev, n, premise)]
                    mark = {"PROVED": "", "COUNTEREXAMPLE": " cex", "UNKNOWN": " ?"}.get(str(r["status"]), " " + str(r["status"]))
                    parts.append(f"{r['seconds']:.2f}{mark}")
                cells.append(" / ".join(parts))
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Time to the 0.27 counterexample (`" + CEX + "`, engine premise, from scratch)", "",
              "| N | status | seconds | how | witness |", "|---:|---|---:|---|---|"]
    for n in cex_ns:
        if ("cex", "0.27", n, "engine") in table:
            r = table[("cex", "0.27", n, "engine")]
            lines.append(f"| {n} | {r['status']} | {r['seconds']:.2f} | {r.get('how', '')} | `{r.get('detail', '')}` |")
    lines += ["", "`?` = UNKNOWN (timeout), `cex` = counterexample. CrossHair side by side: not run (see the "
              "issue: CrossHair never proves the fixed resolver and mis-handles math.gcd with 3+ arguments).", ""]
    atomic_write(args.out, "\n".join(lines))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
