"""The field formula for prefix hits under MTP on a hybrid, against what real vLLM does -> bench/results/spec_field_formula.md.

    .venv/bin/python bench/bench_spec.py [--vllm 0.27.0 --vllm 0.28.0 ...] [--blocks 64,544]
                                         [--out bench/results/spec_field_formula.md]

Users measured ``cached = max(0, (floor(N/B) - 1) * B)`` tokens on a repeated
N-token prompt under MTP on Mamba hybrids (club-3090 PR #1262, vLLM PR #52244),
against a hit at fine granularity without speculation. For each release, block
size B and prompt length N around multiples of B, the consumer tier runs a
3-Mamba + 1-attention align-mode layout (the attention group is the drafter's,
``eagle``) with and without ``--speculative-config mtp k=2``, and with
``prefix_match_unit=16`` (the fine-grained hits the reports compare with): a
request of N tokens, then the same prompt again. The table gives the second
request's hit beside the formula. Real vLLM runs in each release's
environment (one worker call per release).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvproof import envs  # noqa: E402
from kvproof.cliutil import Parser, add_vllm, guarded  # noqa: E402
from kvproof.consumer.stream import Req, Stream  # noqa: E402
from kvproof.fsio import atomic_write  # noqa: E402
from kvproof.inputs.layout import Layout  # noqa: E402
from kvproof.tiers.client import consumed_on  # noqa: E402


def field_formula(n: int, b: int) -> int:
    return max(0, (n // b - 1) * b)


def layout(b: int, mtp: bool, pmu: int | None) -> Layout:
    d = {"groups": [{"kind": "mamba", "block_size": b, "count": 3},
                    {"kind": "full_attention", "block_size": b, "eagle": True if mtp else None}],
         "cache": {"block_size": b, "enable_prefix_caching": True, "mamba_cache_mode": "align",
                   "prefix_match_unit": pmu}}
    if mtp:
        d["speculative"] = {"method": "mtp", "num_speculative_tokens": 2}
    return Layout.from_dict(d)


def lengths(b: int) -> list[int]:
    return sorted({b - 1, b, b + 1, 2 * b - 1, 2 * b, 2 * b + 5, 3 * b + b // 2, 4 * b + 1})


def stream(n: int) -> Stream:
    # r0 computes the N-token prompt (2 outputs); r1, the same prompt, arrives after r0 finished
    return Stream((n,), (Req(0, n, 0, 0, 2), Req(0, n, 0, 8 + n // 256, 2)), max_num_batched_tokens=max(512, n + 8))


def _main(argv: list[str] | None) -> int:
    ap = Parser(prog="bench_spec.py", description=__doc__.split("\n\n")[0])
    add_vllm(ap, default=[], help="release (repeatable; a subset name works; default: ci)")
    ap.add_argument("--blocks", default="64,544")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spec_field_formula.md"))
    args = ap.parse_args(argv)
    # default: the ci subset of the one release list (the releases users reported the formula on,
    # 0.27/0.28, the newest CPU release and the newest)
    releases = envs.resolve(args.vllm or ["ci"])
    found = [envs.find(r) for r in releases]  # a release without an environment: one line, exit 2
    blocks = [int(x) for x in args.blocks.split(",")]
    variants = [("no drafts", False, None), ("mtp k=2", True, None), ("no drafts, pmu=16", False, 16),
                ("mtp k=2, pmu=16", True, 16)]
    items, keys = [], []
    for b in blocks:
        for n in lengths(b):
            for name, mtp, pmu in variants:
                items.append((layout(b, mtp, pmu), stream(n)))
                keys.append((b, n, name))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0, t0 = os.getloadavg()[0], time.monotonic()
    table: dict[str, dict] = {}
    for release, env in zip(releases, found):
        [results] = consumed_on([env], [lay.with_stream(st) for lay, st in items])
        for key, res in zip(keys, results):
            if res.not_expressible or res.harness_error or res.setup_error or len(res.hits) < 2:
                cell = "n/a: " + (res.not_expressible or res.harness_error or res.setup_error or "no second hit")[:60]
            elif any(o.oracle == "exception" for o in res.observations):
                cell = "raised: " + next(o.detail for o in res.observations if o.oracle == "exception")[:60]
            else:
                cell = str(res.hits[1]["hit"] + res.hits[1]["external"])
            table.setdefault(release, {})[key] = cell
    wall = time.monotonic() - t0
    lines = [f"# Prefix hits under MTP on an align-mode hybrid against the field formula",
             "", f"Written by `bench/bench_spec.py --blocks {args.blocks}` on {started}, {platform.machine()}, "
             f"{os.cpu_count()} CPUs, load {load0:.1f} -> {os.getloadavg()[0]:.1f}, wall {wall:.0f} s.",
             "", "Layout: `mamba:Bx3,full_attention[eagle]:B cache=B mamba=align`, prefix caching on; a request "
             "of N prompt tokens, then the same prompt again: the second request's hit in tokens. "
             "formula = max(0, (floor(N/B) - 1) * B).", ""]
    for b in blocks:
        head = "| release | N | formula | " + " | ".join(v[0] for v in variants) + " |"
        lines += [f"## B = {b}", "", head, "|" + "---|" * (3 + len(variants))]
        for rel in table:
            for n in lengths(b):
                row = [table[rel][(b, n, v[0])] for v in variants]
                lines.append(f"| {rel} | {n} | {field_formula(n, b)} | " + " | ".join(row) + " |")
        lines.append("")
    atomic_write(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    return guarded("bench_spec.py", _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
