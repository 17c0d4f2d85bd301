"""A worker's start with and without the per-release zygote (KVPROOF_WORKER_ZYGOTE), side by side.

Per release, on the same machine, one after the other:
  - plain: a new worker process (vLLM's import) to its first reply;
  - zygote, cold: no zygote of this key runs; the first worker starts one (the same import) and forks;
  - zygote, warm: the next worker forks from it;
and a whole command, ``kvproof check --vllm R`` of the README's seed layout (every tier), in a new process
each time, with the zygote off and warm (what a test or a script calling kvproof pays).
Writes bench/results/zygote.md. Usage: python bench/bench_zygote.py [--vllm 0.32.0 ...] [--repeat 3]
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvproof import envs, facts
from kvproof.bridge import zygotes
from kvproof.bridge.client import Worker, worker_env
from kvproof.cliutil import Parser, add_vllm
from kvproof.fsio import atomic_write

# the README's first example: the seed bug's layout
SEED = ["--groups", "mamba:544x4,hidden_state:181", "--cache-block-size", "181", "--prefix-caching",
        "--mamba-cache-mode", "align"]


def _kill_zygote(env) -> None:
    pidfile = zygotes.home() / f"{zygotes.key(env.python, worker_env())}.pid"
    try:
        os.kill(int(pidfile.read_text()), 9)
    except (OSError, ValueError):
        pass
    time.sleep(0.5)


def _start(env) -> float:
    t0 = time.perf_counter()
    with Worker(env):
        return time.perf_counter() - t0


def _command(release: str, zygote: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvproof", "check", "--vllm", release, *SEED], capture_output=True,
                   env={**os.environ, "KVPROOF_WORKER_ZYGOTE": zygote, "KVPROOF_WORKER_POOL": "0"}, check=False)
    return time.perf_counter() - t0


def bench_release(release: str, repeat: int) -> dict:
    env = envs.find(release)
    os.environ["KVPROOF_WORKER_POOL"] = "0"
    os.environ["KVPROOF_WORKER_ZYGOTE"] = "0"
    plain = statistics.median(_start(env) for _ in range(repeat))
    os.environ["KVPROOF_WORKER_ZYGOTE"] = "1"
    _kill_zygote(env)
    cold = _start(env)
    warm = statistics.median(_start(env) for _ in range(repeat))
    cmd_plain = statistics.median(_command(release, "0") for _ in range(repeat))
    _command(release, "1")  # the command's own key (its variables) warms its zygote
    cmd_warm = statistics.median(_command(release, "1") for _ in range(repeat))
    return {"release": release, "plain": plain, "cold": cold, "warm": warm, "cmd_plain": cmd_plain,
            "cmd_warm": cmd_warm}


def main(argv=None) -> int:
    p = Parser(prog="bench_zygote.py", description=__doc__.splitlines()[0])
    add_vllm(p, help="a release (repeatable; default: the newest CPU release and the newest release)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default="bench/results/zygote.md")
    args = p.parse_args(argv)
    releases = envs.resolve(args.vllm or [facts.CPU_RELEASES[-1], facts.MANAGED_RELEASES[-1]])
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    rows = [bench_release(r, args.repeat) for r in releases]
    lines = ["# Worker start: the per-release zygote against a new process", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"1-min load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
             f"wall {time.perf_counter() - t0:.0f} s. Median of {args.repeat} (cold: one).",
             f"Command: `.venv/bin/python bench/bench_zygote.py --vllm {' '.join(releases)} --repeat {args.repeat}`", "",
             "| release | worker start, plain s | zygote cold s | zygote warm s | plain / warm | "
             "`kvproof check` plain s | `kvproof check` warm s | plain / warm |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['release']} | {r['plain']:.2f} | {r['cold']:.2f} | {r['warm']:.3f} | "
                     f"{r['plain'] / r['warm']:.0f}x | {r['cmd_plain']:.2f} | {r['cmd_warm']:.2f} | "
                     f"{r['cmd_plain'] / r['cmd_warm']:.1f}x |")
    lines += ["", "Cold includes the zygote's own import: the first worker of a key costs what a plain one does. "
              "A command still pays its own interpreter and kvproof's imports."]
    out = atomic_write(Path(args.out), "\n".join(lines) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
