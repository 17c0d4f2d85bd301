"""Cost of one bridge call: import vLLM once, then per-layout microseconds.

Side by side on the same machine, per installed release:
  - import: worker start to first reply (vLLM import + fingerprint);
  - per layout, resolver only, in a batch of N (configs cached per setting);
  - per layout, resolver + real KVCacheManager;
  - naive: a fresh process per layout (what a script calling vLLM once per
    layout pays), measured on a few layouts.
Writes bench/results/bridge.md. Usage: python bench/bench_bridge.py [--n 2000] [--vllm 0.32.0 ...]
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import time
from pathlib import Path

from kvproof import envs
from kvproof.bridge.client import Worker
from kvproof.cliutil import Parser, add_vllm
from kvproof.fsio import atomic_write
from kvproof.inputs.layout import Layout
from kvproof.tiers import client

KINDS = ("full_attention", "sliding_window", "mla", "mamba", "hidden_state")


def random_layouts(n: int, seed: int = 0) -> list[Layout]:
    rng = random.Random(seed)
    sizes = [16, 32, 64, 128, 181, 256, 544, 1024]
    out = []
    for _ in range(n):
        groups = [{"kind": rng.choice(KINDS), "block_size": rng.choice(sizes)} for _ in range(rng.randint(1, 6))]
        out.append(Layout.from_dict({"groups": groups, "cache": {
            "enable_prefix_caching": rng.random() < 0.8, "mamba_cache_mode": rng.choice(["align", "align", "all"])}}))
    return out


def bench_release(release: str, n: int, naive: int) -> dict:
    load_before = os.getloadavg()[0]
    env = envs.find(release)
    layouts = random_layouts(n)
    t0 = time.perf_counter()
    with Worker(env) as w:
        start = time.perf_counter() - t0
        import_s = w.info.get("import_seconds", 0.0)
        client.outcomes(w, layouts[:50], manager=True)  # warm the config cache and code paths
        t = time.perf_counter()
        client.outcomes(w, layouts, manager=False)
        resolver_us = (time.perf_counter() - t) / n * 1e6
        t = time.perf_counter()
        client.outcomes(w, layouts, manager=True)
        manager_us = (time.perf_counter() - t) / n * 1e6
    naive_s = []
    for layout in layouts[:naive]:
        t = time.perf_counter()
        with Worker(env) as w:
            client.outcomes(w, [layout])
        naive_s.append(time.perf_counter() - t)
    return {"release": release, "start_s": start, "import_s": import_s,
            "resolver_us": resolver_us, "manager_us": manager_us, "naive_s": statistics.median(naive_s),
            "load": (load_before, os.getloadavg()[0])}


def main() -> None:
    ap = Parser(prog="bench_bridge.py")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--naive", type=int, default=3)
    add_vllm(ap, help="release (repeatable; default: every supported release installed)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bridge.md"))
    args = ap.parse_args()
    releases = args.vllm or [r for r in envs.SUPPORTED if any(e["name"].endswith(r) for e in envs.installed())]
    rows = [bench_release(r, args.n, args.naive) for r in releases]
    lines = [
        "# Bridge cost: import once, then per layout", "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs (shared: read the "
        f"ratios within a row). Batch of {args.n} random layouts (1-6 groups); times include JSON both ways; "
        f"1-min load average read by the script before / after each release.",
        f"Command: `.venv/bin/python bench/bench_bridge.py --n {args.n} --naive {args.naive}`", "",
        "| vLLM | load before / after | worker start (s) | import vllm (s) | per layout, resolver (µs) "
        "| per layout, resolver + KVCacheManager (µs) | naive: process per layout (s) "
        "| batch speed-up vs naive (resolver+manager) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['release']} | {r['load'][0]:.2f} / {r['load'][1]:.2f} | {r['start_s']:.1f} | {r['import_s']:.1f} | {r['resolver_us']:.0f} "
                     f"| {r['manager_us']:.0f} | {r['naive_s']:.1f} | {r['naive_s'] * 1e6 / r['manager_us']:.0f}x |")
    text = "\n".join(lines) + "\n"
    atomic_write(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
