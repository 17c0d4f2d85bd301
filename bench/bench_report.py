"""Bench ``kvproof findings report ID`` end to end (issue 45 item 5): wall and CPU seconds.

    .venv/bin/python bench/bench_report.py [--id 9a8b69482973] [--before REV] [--runs cold,warm]
                                           [--vllm R ...] [--fix-on R ...] [--no-fix] [--keep DIR] [--out bench/results/report.md]

Each run is the command as a user types it (``python -m kvproof findings report ID --out TMP``),
in its own process; CPU is the user+sys seconds of that process and everything it waited for
(the reproducers, the pytests, the workers, vLLM's registry subprocesses), which the machine's
load changes far less than the wall time. ``cold``: the entry's cached fix overlays
(kvproof.findings.fixenv) are removed first (vLLM's registry cache of the overlay's name stays);
``warm``: the cache as the run before left it.
``--before REV``: the same command on the code of commit REV (``git archive`` into a temporary
folder, run with its own ledger and corpus), and whether each run's evidence.json (the python
paths left out) is the same as REV's. The load average is read at every run's start and end.
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

from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.fsio import atomic_write
from revtree import short, tree_of  # bench/ is the script's folder: sys.path[0]

OUT = "bench/results/report.md"
ROOT = Path(__file__).resolve().parents[1]
def _evidence(folder: Path) -> dict | None:
    try:
        ev = json.loads((folder / "evidence.json").read_text())
    except (OSError, ValueError):
        return None
    for r in ev.get("runs", []):
        r.pop("python", None)  # a path: where the environment lies, not what it answered
    return ev


def _run(label: str, entry: str, cwd: Path, pythonpath: str | None, extra: list[str], keep: Path | None) -> dict:
    out = Path(tempfile.mkdtemp(prefix="kvproof-bench-report-"))
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath  # ahead of the venv's editable install of this checkout
    load0, before, t0 = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kvproof", "findings", "report", entry, "--out", str(out), *extra],
                          cwd=cwd, env=env, capture_output=True, text=True)
    wall, after = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ev = _evidence(out / entry)
    if keep is not None:
        shutil.copytree(out, keep / label, dirs_exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    last = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or [""])[-1]
    return {"label": label, "rc": proc.returncode, "wall": wall, "cpu": cpu, "load": (load0, os.getloadavg()[0]),
            "evidence": ev, "last": last}


def _cold(entry: str) -> int:
    from kvproof.findings import fixenv

    gone = [p for p in fixenv.home().glob(f"fix-{entry[:8]}-*") if p.is_dir()]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return len(gone)


def _main(argv) -> int:
    ap = Parser(prog="bench_report.py")
    ap.add_argument("--id", default="9a8b69482973", help="the ledger entry (default: 9a8b69482973, with a fix)")
    ap.add_argument("--before", metavar="REV", help="also run commit REV's code, first")
    ap.add_argument("--runs", default="cold,warm", help="of this checkout: cold, warm, in this order")
    add_vllm(ap, help="passed to the report (default: every installed release)")
    ap.add_argument("--fix-on", action="append", metavar="RELEASE", help="passed to the report (repeatable)")
    ap.add_argument("--no-fix", action="store_true", help="passed to the report")
    ap.add_argument("--keep", help="copy each run's report folder under DIR/<run>/")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if set(runs) - {"cold", "warm"}:
        ap.error(f"--runs {args.runs}: cold and/or warm")
    extra = ([a for r in (args.vllm or []) for a in ("--vllm", r)] + [a for r in (args.fix_on or []) for a in ("--fix-on", r)]
             + (["--no-fix"] if args.no_fix else []))
    keep = Path(args.keep) if args.keep else None
    rows = []
    if args.before:
        with tempfile.TemporaryDirectory(prefix="kvproof-bench-rev-") as tmp:
            cwd, path = tree_of(args.before, Path(tmp))
            rows.append(_run(f"before ({short(args.before)})", args.id, cwd, path, extra, keep))
    for kind in runs:
        if kind == "cold":
            _cold(args.id)
        rows.append(_run(f"now, {kind} overlay cache", args.id, ROOT, None, extra, keep))
    head = short("HEAD")
    ref = rows[0]["evidence"] if args.before else None
    cmd = " ".join(["bench/bench_report.py", "--id", args.id] + (["--before", args.before] if args.before else [])
                   + ["--runs", args.runs] + extra + ([] if args.out == OUT else ["--out", args.out]))
    lines = [f"# bench: `kvproof findings report {args.id}` end to end", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"checkout at {head} (with its working tree as it was). CPU: user+sys seconds of the report's "
             "process and every process it waited for; the wall time follows the load (other users' work).",
             f"Command: `.venv/bin/python {cmd}`", "",
             "| run | exit | wall s | CPU s | load at start / end | evidence.json as before | last line |",
             "|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        same = "-" if ref is None or r is rows[0] else ("same" if r["evidence"] == ref else "DIFFERENT")
        lines.append(f"| {r['label']} | {r['rc']} | {r['wall']:.0f} | {r['cpu']:.0f} | {r['load'][0]:.1f} / "
                     f"{r['load'][1]:.1f} | {same} | {r['last'].replace('|', '/')[:160]} |")
    atomic_write(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["rc"] in (0, 1) for r in rows) else 3


def main(argv=None) -> int:
    return guarded("bench_report.py", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
