"""Bench the proof run: proof time per revision x N, and time to the 0.27 counterexample.

    PYTHONPATH=src python bench/bench_verify.py [--max-n 16] [--timeout 60] [--out bench/results/verify.md]
    .venv/bin/python bench/bench_verify.py --whole [--before REF] [--rounds 3] [--out bench/results/verify_whole.md]

``--whole`` times the whole ``kvproof verify`` (what ``make verify`` runs:
drift, solver queries, induction, reachability labels, baseline) as a
process, side by side: the code at ``--before`` (default: the commit before
issue 45's proof-run work) from a ``git worktree``, then this checkout cold
(an empty result cache), ``--rounds`` times in turn, and at the end this
checkout warm (the cache the last cold run filled). Both caches
are temporary folders (KVPROOF_CACHE_HOME); the environments are the user's.
Runs are sequential; the load average is printed beside them.

Every query runs in a killable worker (kvproof.verify.runner), seconds are the
solver's own time inside the worker (process start excluded). Counterexample
timings are from scratch (no seed from a smaller N) and include the concrete
replay and minimisation.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def _before_ref() -> str:
    """The commit before issue 45's proof-run work (the first that memoised labels, query._evaluated)."""
    out = subprocess.run(["git", "log", "--format=%H", "-S", "def _evaluated(", "--", "spec/query.py"],
                         capture_output=True, text=True, check=True).stdout.split()
    return f"{out[-1]}^" if out else "HEAD"


def _tree_for(worktree: Path, into: Path) -> Path:
    """A PYTHONPATH folder importing ``kvproof`` from ``worktree`` (pyproject's package-dir layout)."""
    pkg = into / "kvproof"
    shutil.copytree(worktree / "src" / "kvproof", pkg, symlinks=True)
    for sub in ("spec", "verify", "fuzz", "findings"):
        if (worktree / sub).is_dir():
            if (pkg / sub).exists():
                shutil.rmtree(pkg / sub)
            (pkg / sub).symlink_to(worktree / sub)
    return into


def _verify(cwd: Path, env: dict, out: Path) -> dict:
    t0 = time.monotonic()
    load = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-m", "kvproof", "verify", "--quiet", "--out", str(out)], cwd=cwd, env=env,
                       capture_output=True, text=True)
    total = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)  # the run and its workers
    m = re.search(r"wall ([\d.]+) s(?: \(solver ([\d.]+) s(?:; (\d+) of (\d+) results from the cache)?)?", p.stdout)
    exit_line = next((ln for ln in p.stdout.splitlines() if ln.startswith("exit ")), f"exit {p.returncode}")
    return {"process": total, "cpu": cpu, "wall": float(m.group(1)) if m else None,
            "solver": float(m.group(2)) if m and m.group(2) else (float(m.group(1)) if m else None),
            "cache": f"{m.group(3)} of {m.group(4)}" if m and m.group(3) else "-", "exit": exit_line,
            "load": load, "code": p.returncode, "tail": (p.stdout + p.stderr)[-2000:]}


def whole(args) -> int:
    from kvproof.settings import settings
    ref = args.before or _before_ref()
    sha = subprocess.run(["git", "rev-parse", "--short", ref], capture_output=True, text=True, check=True).stdout.strip()
    here = Path.cwd()
    tmp = Path(tempfile.mkdtemp(prefix="kvproof-bench-verify-"))
    env_home = str(settings().env_home)
    rows = []
    try:
        wt = tmp / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(wt), ref], check=True, capture_output=True)
        path = _tree_for(wt, tmp / "before-path")
        env = dict(os.environ, PYTHONPATH=str(path), KVPROOF_ENV_HOME=env_home,
                   KVPROOF_CACHE_HOME=str(tmp / "cache-before"))
        after = dict(os.environ, KVPROOF_ENV_HOME=env_home)
        after.pop("PYTHONPATH", None)
        # before and after cold in turn, each with an empty cache: a pair shares the machine's speed
        # of the moment (it drifts by up to 1.5x here), so the ratio is taken pair by pair
        for i in range(args.rounds):
            rows.append((f"before ({sha})", _verify(wt, dict(env, KVPROOF_CACHE_HOME=str(tmp / f"cb{i}")),
                                                   tmp / "out-before")))
            rows.append(("after, cold cache", _verify(here, dict(after, KVPROOF_CACHE_HOME=str(tmp / f"ca{i}")),
                                                      tmp / "out-cold")))
        rows.append(("after, warm cache", _verify(here, dict(after, KVPROOF_CACHE_HOME=str(tmp / f"ca{i}")),
                                                  tmp / "out-warm")))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "before")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    pairs = [(rows[i][1], rows[i + 1][1]) for i in range(0, 2 * args.rounds, 2)]
    wall_ratio = statistics.median(b["process"] / a["process"] for b, a in pairs)
    cpu_ratio = statistics.median(b["cpu"] / a["cpu"] for b, a in pairs)
    lines = ["# bench: the whole proof run (`kvproof verify`, what `make verify` runs)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
             f"z3 {__import__('z3').get_version_string()}; default settings (5 revisions x N = 1..8, induction, "
             "drift over the installed environments, baseline). Runs one after another; the 1-min load average "
             "at each start is read by the script (a shared machine: compare within this table).",
             f"Command: `.venv/bin/python bench/bench_verify.py --whole --before {ref} --rounds {args.rounds}`", "",
             f"**before / after cold, median of {args.rounds} pairs: {wall_ratio:.2f}x wall, {cpu_ratio:.2f}x CPU** "
             "(each pair run back to back; the ratio is taken within a pair)", "",
             "| run | process wall (s) | CPU s (run + workers) | printed wall (s) | solver phase (s) | "
             "results from the cache | load | exit |",
             "|---|---:|---:|---:|---:|---|---:|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['process']:.1f} | {r['cpu']:.1f} | {r['wall'] if r['wall'] is not None else '-'} | "
                     f"{r['solver'] if r['solver'] is not None else '-'} | {r['cache']} | {r['load']:.2f} | "
                     f"{r['exit']} |")
    lines += ["", "Before, the printed wall was the solver phase only; now it is the whole run (drift, solver, "
              "labels, baseline) with the solver phase in brackets. Process wall adds interpreter start-up and "
              "report writing. Cold: no cached result (every query, induction obligation and label computed); "
              "warm: every result the cache holds is reused while its task, z3 and every kvproof source it was "
              "computed from are unchanged (kvproof.verify.cache).", ""]
    bad = [name for name, r in rows if r["code"] != 0]
    for name, r in rows:
        if r["code"] != 0:
            sys.stderr.write(f"{name}: exit {r['code']}\n{r['tail']}\n")
    atomic_write(args.out or "bench/results/verify_whole.md", "\n".join(lines))
    sys.stdout.write("\n".join(lines) + "\n")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = Parser(prog="bench_verify.py")
    ap.add_argument("--whole", action="store_true", help="time the whole kvproof verify: before, cold, warm")
    ap.add_argument("--before", default=None, help="--whole: git ref of the before run")
    ap.add_argument("--rounds", type=int, default=3, help="--whole: before/after pairs (the ratio is their median)")
    ap.add_argument("--max-n", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=1, help="1 = timings without CPU contention")
    ap.add_argument("--out", default=None, help="default bench/results/verify.md (--whole: verify_whole.md)")
    args = ap.parse_args(argv)
    if args.whole:
        return whole(args)
    args.out = args.out or "bench/results/verify.md"
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
