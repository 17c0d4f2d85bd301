"""Bench the witness search: ledger classes searched one by one, then together (one derivation each).

    .venv/bin/python bench/bench_witness.py --vllm 0.34.0 ID ID ... [--model M ...] [--out bench/results/witness.md]

One by one is what ``kvproof findings witness ID`` did per class before the search was shared:
a worker per class, every (model, flags) of the class derived, its candidates run. Together is
``findings witness --all``: one worker per release, each distinct (model, flags) derived once
(kvproof.findings.witness_search.search_many). Both passes give their witnesses, which must agree.
Nothing is written to the ledger.
"""

from __future__ import annotations

import os
import platform
import sys
import time

from kvproof.running import checking
from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.fsio import atomic_write
from kvproof.findings.ledger import Ledger
from kvproof.findings.witness_search import search_many

OUT = "bench/results/witness.md"


def _timed(jobs, models) -> tuple[float, int, list]:
    """Seconds, Configs derived, and the searches of ``search_many(jobs)``."""
    derived: list[int] = []
    real = checking.derive_all

    def counting(release, configs, *a, **kw):
        derived.append(len(configs))
        return real(release, configs, *a, **kw)
    checking.derive_all = counting
    try:
        t0 = time.monotonic()
        out = search_many(jobs, models)
        return time.monotonic() - t0, sum(derived), out
    finally:
        checking.derive_all = real


def _main(argv) -> int:
    ap = Parser(prog="bench_witness.py")
    ap.add_argument("ids", nargs="+", help="ledger ids (a regression class: its own pair, whatever --vllm says)")
    add_vllm(ap, many=False, required=True, help="the release the other classes are searched on")
    ap.add_argument("--model", action="append", help="only this reference model (repeatable)")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    from kvproof.findings.witness import regression_release
    led = Ledger.load()
    jobs = [(e, regression_release(e) or args.vllm) for e in (led.find(i) for i in args.ids)]
    load = os.getloadavg()[0]
    passes = [_timed([j], args.model) for j in jobs]
    alone_s, alone_n = sum(p[0] for p in passes), sum(p[1] for p in passes)
    shared_s, shared_n, shared = _timed(jobs, args.model)
    alone = [p[2][0] for p in passes]

    def found(s):
        return [(w.config.model, w.config.flags) for w in s.witnesses]
    agree = all(found(a) == found(b) for a, b in zip(alone, shared))
    cmd = " ".join(["bench/bench_witness.py", "--vllm", args.vllm, *args.ids]
                   + [x for m in args.model or () for x in ("--model", m)])
    lines = [f"# bench: witness search, one class at a time vs shared derivations (vLLM {args.vllm})", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"1-min load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end (a shared machine: "
             f"compare the two passes, not runs of other days).",
             f"Command: `nice -n 10 .venv/bin/python {cmd}`", "",
             "| pass | wall s | Configs derived | worker starts |", "|---|---:|---:|---:|",
             f"| one by one ({len(jobs)} searches) | {alone_s:.0f} | {alone_n} | "
             f"{sum(1 + bool(s.before) for s in alone)} |",
             f"| shared (one search_many) | {shared_s:.0f} | {shared_n} | "
             f"{len({s.release for s in shared}) + len({s.before for s in shared if s.before})} |", "",
             f"Witnesses agree: {'yes' if agree else 'NO'}.", "",
             "| class | release | flag sets | shaped | result |", "|---|---|---:|---:|---|"]
    for s in shared:
        rec = s.record()
        where = f"{s.before} -> {s.release}" if s.before else s.release
        lines.append(f"| {s.entry.id} | {where} | {len(rec['flag_sets'])} | {len(rec['shaped'])} | "
                     f"{rec['result'][:120].replace('|', '/')} |")
    atomic_write(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if agree else 1


def main(argv=None) -> int:
    return guarded("bench_witness.py", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
