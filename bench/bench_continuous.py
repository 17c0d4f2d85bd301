"""Continuous fuzzing throughput against the time-boxed mode -> bench/results/continuous.md.

    .venv/bin/python bench/bench_continuous.py [--vllm R] [--seconds 600] [--box 60] [--jobs 1]
                                               [--out bench/results/continuous.md]

Three campaigns of the contracts target, back to back, each in a fresh temporary
campaign folder, exactly as a user starts them (``kvproof fuzz``): a time-boxed
run of --box seconds, a ``--continuous`` run stopped by its --seconds, and a
second time-boxed run (the machine is shared: the two time-boxed runs bracket
the continuous one). Each rate is the campaign's own exec count
(``campaign.json``, summed over its processes) per wall second of the whole
command, vLLM imports, merges and the final report included. The ratio is the
continuous rate over the mean time-boxed rate; the goal is >= 0.5.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvproof import envs  # noqa: E402
from kvproof.cliutil import Parser, add_vllm, guarded  # noqa: E402
from kvproof.fsio import atomic_write  # noqa: E402

GOAL = 0.5


def campaign(release: str, extra: list[str], workdir: Path) -> dict:
    cmd = [sys.executable, "-m", "kvproof", "fuzz", "--vllm", release, "--workdir", str(workdir), *extra]
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    data = json.loads((workdir / "campaign.json").read_text())
    execs = sum(s["execs"] for s in data["sessions"])
    tail = [ln for ln in proc.stdout.splitlines() if ln.startswith(("No new class", "NEW", "Verdicts"))]
    return {"cmd": "kvproof fuzz --vllm " + release + " " + " ".join(extra), "rc": proc.returncode,
            "execs": execs, "wall": wall, "rate": execs / wall, "load": (load0, os.getloadavg()[0]),
            "report": tail}


def _main(argv: list[str] | None) -> int:
    ap = Parser(prog="bench_continuous.py", description=__doc__.split("\n\n")[0])
    add_vllm(ap, many=False, default=envs.DEFAULT_RELEASE,
             help=f"release (default: the newest CPU release of src/kvproof/facts/__init__.py, {envs.DEFAULT_RELEASE})")
    ap.add_argument("--seconds", type=int, default=600, help="the continuous run's length")
    ap.add_argument("--box", type=int, default=60, help="each time-boxed run's length")
    ap.add_argument("--jobs", type=int, default=1, help="continuous workers (the time-boxed mode is one process)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "continuous.md"))
    args = ap.parse_args(argv)
    envs.find(args.vllm)  # a release without an environment: one line, exit 2
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = []
    with tempfile.TemporaryDirectory(prefix="kvproof-bench-cont-") as tmp:
        plan = [("time-boxed", ["--seconds", str(args.box)]),
                ("continuous", ["--continuous", "--jobs", str(args.jobs), "--seconds", str(args.seconds)]),
                ("time-boxed", ["--seconds", str(args.box)])]
        for i, (mode, extra) in enumerate(plan):
            r = campaign(args.vllm, extra, Path(tmp) / f"c{i}")
            r["mode"] = mode
            runs.append(r)
            print(f"{mode}: {r['execs']:,} execs in {r['wall']:.0f} s = {r['rate']:,.0f}/s (rc {r['rc']})", flush=True)
    box = [r["rate"] for r in runs if r["mode"] == "time-boxed"]
    cont = next(r for r in runs if r["mode"] == "continuous")
    ratio = cont["rate"] / (sum(box) / len(box))
    lines = [
        "# Continuous fuzzing vs the time-boxed mode",
        "",
        f"Written by `.venv/bin/python bench/bench_continuous.py --vllm {args.vllm} --seconds {args.seconds} "
        f"--box {args.box} --jobs {args.jobs}` at {started}; {platform.machine()}, {os.cpu_count()} CPUs. "
        "Each rate: the campaign's execs (campaign.json) per wall second of the whole command "
        "(vLLM imports, merges and the report included). The machine is shared: the two time-boxed "
        "runs bracket the continuous one, and the 1-min load average is read before and after each.",
        "",
        "| run | command | execs | wall s | execs/s | load before / after | exit | report |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(f"| {i} {r['mode']} | `{r['cmd']}` | {r['execs']:,} | {r['wall']:.0f} | {r['rate']:,.0f} | "
                     f"{r['load'][0]:.2f} / {r['load'][1]:.2f} | {r['rc']} | {'; '.join(r['report']).replace('|', chr(92) + '|')} |")
    verdict = "meets" if ratio >= GOAL else "misses"
    lines += ["", f"Continuous / mean time-boxed execs/s: **{ratio:.2f}** ({verdict} the goal >= {GOAL})."]
    atomic_write(Path(args.out), "\n".join(lines) + "\n")
    print(f"ratio {ratio:.2f}; wrote {args.out}")
    return 0


def main(argv=None) -> int:
    return guarded("bench_continuous.py", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
