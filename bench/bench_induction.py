"""Bench the every-N proof: its cost inside the proof run, and the ground-axiom builder.

    .venv/bin/python bench/bench_induction.py [--revisions 0.27,0.32] [--out bench/results/induction.md]

Two tables, side by side on this machine:

* the proof run (``kvproof verify --no-drift --no-baseline --no-corpus``) with
  ``--no-induction`` and with the induction (the default), wall seconds;
* building the ground axioms of every induction obligation of a revision:
  ``kvproof.spec.lemmas.divisibility_axioms`` (terms built through Z3's C API)
  against the same instances built with z3py's ``Implies``/``And`` (the builder
  before the change, kept here as the reference), with the fact counts, which must
  be equal.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time

import z3

from kvproof.cliutil import Parser
from kvproof.fsio import atomic_write
from kvproof.spec import induction as I
from kvproof.spec import lemmas


def reference_axioms(terms, positive=None, chains=()):
    """The z3py builder (same instances, built with the coercing ``z3.Implies``/``z3.And``)."""
    terms = list(terms)
    pos = list(positive) if positive is not None else [z3.BoolVal(True)] * len(terms)
    guard = {id(t): p for t, p in zip(terms, pos)}
    D = lemmas.D
    out = []
    for a, pa in zip(terms, pos):
        out.append(z3.Implies(pa, D(a, a)))
        for b, pb in zip(terms, pos):
            if a is b:
                continue
            out.append(z3.Implies(z3.And(pa, pb, D(a, b)), a <= b))
            out.append(z3.Implies(z3.And(pb, a == 1), D(a, b)))
    t = z3.BoolVal(True)
    for A, B, C in chains:
        for a in A:
            for b in B:
                for c in C:
                    if a is b or b is c or a is c:
                        continue
                    g = [guard.get(id(a), t), guard.get(id(b), t), guard.get(id(c), t)]
                    out.append(z3.Implies(z3.And(*g, D(a, b), D(b, c)), D(a, c)))
    return out


def builder_times(revision: str) -> tuple[float, float, int, int]:
    """Seconds to build every obligation's axioms with each builder, and the fact counts."""
    ctx = I._context(revision, I.M.MAX_BLOCK, I.M.dcp_set(I.M.DCP_VALUES))
    inputs = []
    for oid in I.obligation_ids(revision):
        kind, _, rest = oid.partition(":")
        if kind == "conclusion":
            key, _, premise = rest.rpartition(":")
            hyps, goal = ctx.conclusion(key, premise)
        else:
            hyps, goal = getattr(ctx, kind)(rest)
        terms, apps = I._collect(hyps + [z3.Not(goal)])
        ids = {h.get_id() for h in ctx.hubs()} | {t.get_id() for t in apps}
        mid = [t for t in terms if t.get_id() in ids]
        inputs.append((terms, [t >= 1 for t in terms], [(terms, mid, terms)]))
    counts = []
    times = []
    for build in (lemmas.divisibility_axioms, reference_axioms):
        t0 = time.perf_counter()
        n = sum(len(build(terms, pos, chains)) for terms, pos, chains in inputs)
        times.append(time.perf_counter() - t0)
        counts.append(n)
    return times[0], times[1], counts[0], counts[1]


def run_wall(extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "kvproof", "verify", "--no-drift", "--no-baseline", "--no-corpus",
                        "--quiet", "--out", out, *extra], check=False, capture_output=True)
        return time.monotonic() - t0


def main(argv=None) -> int:
    ap = Parser(prog="bench_induction.py")
    ap.add_argument("--revisions", default="0.27,0.32")
    ap.add_argument("--out", default="bench/results/induction.md")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    lines = ["# bench: the every-N proof (kvproof.spec.induction)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
             f"z3 {z3.get_version_string()}; 1-min load average {load:.2f} at the start.",
             "Command: `.venv/bin/python bench/bench_induction.py`", "",
             "## The proof run, wall seconds (`kvproof verify --no-drift --no-baseline --no-corpus`)", "",
             "| --no-induction | default (with induction) | ratio |", "|---:|---:|---:|"]
    without, with_ = run_wall(["--no-induction"]), run_wall([])
    lines += [f"| {without:.1f} | {with_:.1f} | {with_ / without:.2f}x |", "",
              "## Ground axioms of every obligation: z3py reference vs C-API builder, seconds", "",
              "| revision | z3py reference | kvproof | speed-up | facts (equal) |", "|---|---:|---:|---:|---|"]
    for rev in [r.strip() for r in args.revisions.split(",") if r.strip()]:
        fast, ref, n_fast, n_ref = builder_times(rev)
        lines.append(f"| {rev} | {ref:.2f} | {fast:.2f} | {ref / fast:.1f}x | {n_fast} / {n_ref}"
                     f"{'' if n_fast == n_ref else ' DIFFER'} |")
    lines.append(f"\n1-min load average at the end: {os.getloadavg()[0]:.2f}.")
    atomic_write(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
