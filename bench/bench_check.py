"""Bench: ``kvproof check --config`` on three releases, this tree against an earlier commit.

The command a deployer types (README: nemotron_h_8b, prefix caching, Mamba align), timed whole:
interpreter start, the workers' vLLM imports, the real derivation, every tier. The earlier commit
is installed (a wheel, no dependencies) into a folder of its own and put first on PYTHONPATH, so
both sides run under this venv's interpreter on the same releases; runs alternate (base, this
tree, base, ...) so load drifts hit both. Writes bench/results/check_config.md.

Usage: python bench/bench_check.py [--base REV] [--reps 3] [--vllm 0.27.0,0.32.0,0.33.0]
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvproof import envs
from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.fsio import atomic_write

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "check_config.md"
CONFIG = ("--config", "nemotron_h_8b", "--flags=--enable-prefix-caching --mamba-cache-mode align")
# Before: the last commit whose check started a bridge and a consumer worker per release and
# derived in one round trip, then ran the tiers in others.
BASE = "6fe7587"


def install(rev: str, into: Path) -> Path:
    """``rev`` of this repository as an installed package (no editable finder) under ``into``."""
    src = into / "src"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(src), rev], check=True,
                   capture_output=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--target", str(into / "site"), str(src)], check=True, capture_output=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(src)], capture_output=True)
    return into / "site"


def timed(releases: list[str], site: Path | None) -> tuple[float, int]:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "kvproof", "check", *CONFIG] + [a for r in releases for a in ("--vllm", r)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench_check: {' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return time.perf_counter() - t0, proc.returncode


def run(base: str, reps: int, releases: list[str], out: Path) -> Path:
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kvproof-bench-check-") as tmp:
        site = install(base, Path(tmp))
        times: dict[str, list[float]] = {"base": [], "head": []}
        codes: dict[str, set[int]] = {"base": set(), "head": set()}
        timed(releases, None)  # warm the page cache and vLLM's own caches for both sides
        for _ in range(reps):
            for side, where in (("base", site), ("head", None)):
                s, rc = timed(releases, where)
                times[side].append(s)
                codes[side].add(rc)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    med = {k: statistics.median(v) for k, v in times.items()}
    cmd = f"kvproof check {' '.join(CONFIG[:2])} \"{CONFIG[2]}\" " + " ".join(f"--vllm {r}" for r in releases)
    lines = [
        f"# bench: `check --config` on {len(releases)} releases, {base} against this tree",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"1-min load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.",
        f"Command: `.venv/bin/python bench/bench_check.py --base {base} --reps {reps} --vllm {','.join(releases)}`",
        "",
        f"Timed: `{cmd}` (whole command: imports, workers, derivation, every tier), {reps} runs a side, "
        "alternating, after one warm-up run.",
        "",
        "| tree | median s | runs s | exit |",
        "|---|---:|---|---|",
        f"| {base} (before: a bridge and a consumer worker per release, derive then run) | {med['base']:.1f} | "
        f"{', '.join(f'{t:.1f}' for t in times['base'])} | {sorted(codes['base'])} |",
        f"| {head or 'HEAD'} (one worker per release, one round trip) | {med['head']:.1f} | "
        f"{', '.join(f'{t:.1f}' for t in times['head'])} | {sorted(codes['head'])} |",
        "",
        f"Ratio (before / after): {med['base'] / med['head']:.2f}x.",
    ]
    if codes["base"] != codes["head"]:
        lines.append(f"\nThe exit codes differ ({sorted(codes['base'])} vs {sorted(codes['head'])}): the verdicts changed.")
    return atomic_write(out, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="bench_check.py")
    ap.add_argument("--base", default=BASE, help=f"the commit to compare with (default {BASE})")
    ap.add_argument("--reps", type=int, default=3)
    add_vllm(ap, many=False, default=",".join(envs.resolve(["ci"])[-3:]), metavar="RELEASES",
             help="comma-separated releases (default: the last three of the ci subset)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    print(run(args.base, args.reps, args.vllm.split(","), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("bench_check.py", main, None))
