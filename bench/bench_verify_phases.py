"""Where the proof run's time goes: ``kvproof verify --no-cache`` before and after, phase by phase.

    .venv/bin/python bench/bench_verify_phases.py [--before REF] [--out bench/results/verify_phases.md]

Runs the whole ``kvproof verify --no-cache`` (what ``make verify`` runs on a
fresh clone: the result cache is keyed by the package's location, so a clone
starts cold) as a process, first the code at ``--before`` from a ``git
worktree``, then this checkout. Per run: process wall, the CPU seconds of the
process and of its workers (getrusage of the children: on a shared machine
CPU seconds move less than wall), the printed phases (drift, solver, labels,
corpus, baseline; start-up = process wall - printed wall), the workers'
seconds per task kind, and whether both runs give the same verdicts (every
row's status per revision/property/N and premise, every induction
obligation, every property's verdict, reachability label, witness config and
all-N verdict, the exit code and the baseline comparison). Witness text is
not compared: Z3 may return another witness of the same verdict.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verify import _tree_for  # the bench folder is no package

from kvproof.cliutil import Parser
from kvproof.fsio import atomic_write


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(cwd: Path, env: dict, out: Path) -> dict:
    load, c0, t0 = os.getloadavg()[0], _cpu(), time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kvproof", "verify", "--no-cache", "--quiet", "--out", str(out)],
                       cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - t0, _cpu() - c0
    data = json.loads((out / "verify.json").read_text()) if (out / "verify.json").exists() else {}
    return {"process": wall, "cpu": cpu, "load": load, "load_end": os.getloadavg()[0], "code": p.returncode,
            "data": data, "tail": (p.stdout + p.stderr)[-2000:]}


def verdicts(d: dict) -> dict:
    """Everything a verdict is, without the witness text (see the module doc)."""
    rows = {f"{r['revision']} {r['property']} N={r['n']} {pr}": (r.get(pr) or {}).get("status")
            for r in d.get("rows", []) for pr in ("engine", "free")}
    ind = {f"{rev} {o}": v["status"] for rev, obs in d.get("induction", {}).items() for o, v in obs.items()}
    props = {f"{p['revision']} {p['property']}": [p["verdict"], p.get("reachability"), p.get("witness_config"),
                                                  p.get("unbounded")] for p in d.get("properties", [])}
    return {"rows": rows, "induction": ind, "properties": props, "exit": d.get("exit_code"),
            "baseline": (d.get("baseline") or {}).get("changes")}


def main(argv=None) -> int:
    ap = Parser(prog="bench_verify_phases", description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default=None, help="git ref of the before run (default: none, only this checkout)")
    ap.add_argument("--out", default="bench/results/verify_phases.md")
    args = ap.parse_args(argv)
    from kvproof.settings import settings
    here, tmp = Path.cwd(), Path(tempfile.mkdtemp(prefix="kvproof-bench-phases-"))
    env_home = str(settings().env_home)
    runs = []
    try:
        if args.before:
            wt = tmp / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(wt), args.before], check=True,
                           capture_output=True)
            env = dict(os.environ, PYTHONPATH=str(_tree_for(wt, tmp / "before-path")), KVPROOF_ENV_HOME=env_home)
            sha = subprocess.run(["git", "rev-parse", "--short", args.before], capture_output=True, text=True,
                                 check=True).stdout.strip()
            runs.append((f"before ({sha})", _run(wt, env, tmp / "out-before")))
        env = dict(os.environ, KVPROOF_ENV_HOME=env_home)
        env.pop("PYTHONPATH", None)
        runs.append(("this checkout", _run(here, env, tmp / "out-after")))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "before")], capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    cmd = "`.venv/bin/python bench/bench_verify_phases.py" + (f" --before {args.before}`" if args.before else "`")
    lines = ["# bench: where the proof run's time goes (`kvproof verify --no-cache`)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
             f"z3 {__import__('z3').get_version_string()}; default settings. Runs one after another; the 1-min "
             "load average at each start and end is read by the script (a shared machine: wall moves with the "
             "load, CPU seconds much less).", f"Command: {cmd}", "",
             "| run | process wall (s) | CPU, process + workers (s) | start-up (s) | printed wall | drift | solver | "
             "labels | corpus | baseline + report | workers: bounded / induction / labels (s) | load start / end "
             "| exit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for name, r in runs:
        d = r["data"]
        ph = d.get("phases", {})
        ws = d.get("worker_seconds")
        start = r["process"] - d.get("wall_seconds", 0.0)

        def f(k, ph=ph):
            return f"{ph[k]:.1f}" if k in ph else "-"
        solver = f("solver") if ph else f"{d.get('solver_seconds', 0.0):.1f}"
        lines.append(f"| {name} | {r['process']:.1f} | {r['cpu']:.1f} | {start:.1f} | {d.get('wall_seconds', 0.0):.1f} | {f('drift')} | {solver} | "
                     f"{f('labels')} | {f('corpus')} | {f('baseline')} | "
                     + (f"{ws['bounded']:.1f} / {ws['induction']:.1f} / {ws['label']:.1f}" if ws else "-")
                     + f" | {r['load']:.2f} / {r['load_end']:.2f} | {r['code']} |")
    if len(runs) == 2:
        a, b = verdicts(runs[0][1]["data"]), verdicts(runs[1][1]["data"])
        same = [k for k in a if a[k] == b[k]]
        diff = [k for k in a if a[k] != b[k]]
        lines += ["", f"Same verdicts before and after: {', '.join(same) or 'none'}"
                  + (f"; DIFFERENT: {', '.join(diff)}" if diff else "") + f" ({len(a['rows'])} row cells, "
                  f"{len(a['induction'])} induction obligations, {len(a['properties'])} properties compared)."]
    lines += ["", "Phases are the printed wall's parts (kvproof.verify.cli._run); a '-' is a phase the before "
              "code does not split out (its printed wall minus its solver phase holds drift, labels, corpus and "
              "baseline). Workers' seconds are wall seconds inside the worker per task kind, summed over "
              "both workers.", ""]
    for name, r in runs:
        if r["code"] not in (0,):
            sys.stderr.write(f"{name}: exit {r['code']}\n{r['tail']}\n")
    atomic_write(args.out, "\n".join(lines))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0 if all(r["code"] == 0 for _, r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
