"""Seeded-mutant kill matrix -> bench/results/selftest.md (script-written, never hand-edited).

    .venv/bin/python bench/bench_selftest.py [--seconds 8] [--mutants a,b] [--full]
    .venv/bin/python bench/bench_selftest.py --consumers [--campaign-seconds 30]   # -> selftest_consumers.md

Runs ``kvproof selftest --json`` over the installed vLLM 0.32.0 and writes
the matrix with the machine load (os.getloadavg, cores) measured around it.
``--consumers``: only the behavioural consumer mutants (``kvproof selftest
--consumers``), written to ``bench/results/selftest_consumers.md`` with, per
row, the layer that caught it first and how fast, and the argument of each
row not killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.fsio import atomic_write

HERE = Path(__file__).resolve().parent


def _main(argv) -> int:
    ap = Parser(prog="bench_selftest.py")
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--mutants")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--batch", type=int, default=7)
    ap.add_argument("--probes", type=int, default=400)
    ap.add_argument("--consumers", action="store_true", help="the behavioural consumer mutants only")
    ap.add_argument("--campaign-seconds", type=int, default=30)
    add_vllm(ap, many=False, help="base release (default: kvproof selftest's)")
    ap.add_argument("--out", default=None, help="default results/selftest.md (selftest_consumers.md with --consumers)")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = str(HERE / "results" / ("selftest_consumers.md" if args.consumers else "selftest.md"))
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(tmp) / "selftest.json"
        cmd = [sys.executable, "-m", "kvproof", "selftest", "--seconds", str(args.seconds), "--json", str(js),
               "--batch", str(args.batch), "--probes", str(args.probes)]
        cmd += (["--mutants", args.mutants] if args.mutants else []) + (["--full"] if args.full else [])
        cmd += ["--campaign-seconds", str(args.campaign_seconds)] + (["--consumers"] if args.consumers else [])
        cmd += ["--vllm", args.vllm] if args.vllm else []
        t = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - t
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if not js.exists():
            return 2
        data = json.loads(js.read_text())
    load1 = os.getloadavg()
    if args.consumers:
        text = consumers_page(args, data, proc, wall, load0, load1)
        atomic_write(args.out, text)
        print(f"wrote {args.out}")
        return 0
    printed = proc.stdout[proc.stdout.index("\nmutant "):].strip() if "\nmutant " in proc.stdout else proc.stdout
    rows = data["rows"]
    killed = sum(r["status"] == "KILLED" for r in rows)
    lines = [
        "# Seeded-mutant self-test (kill matrix)",
        "",
        f"Written by `bench/bench_selftest.py` on {time.strftime('%Y-%m-%d %H:%M')}; do not edit by hand.",
        f"`kvproof selftest --seconds {args.seconds} --batch {args.batch} --probes {args.probes}"
        f"{' --full' if args.full else ''}` on vLLM {data['release']}: "
        f"{len(rows)} mutants, {killed} killed by a bug layer, wall {wall:.0f} s, exit {proc.returncode}.",
        f"Machine: {os.cpu_count()} cores, load average {load0[0]:.1f} before / {load1[0]:.1f} after "
        "(shared with other engineers: times are upper bounds).",
        "",
        "Layers (kvproof.selftest.layers): drift = resolver fingerprint unknown to the model (signal); "
        "replay = corpus/ at the function and manager tiers, newly FAIL against the base release's own verdict "
        "(bug); probe = the same judge on a fixed seeded set of the fuzzer decoder's layouts, in the same bridge "
        "call (bug); contracts = time-boxed atheris `kvproof fuzz` whose FAIL classes are re-run on the "
        "base through the bridge, pre-existing ones not counted (bug); consumer = kvproof.consumer request "
        "streams on corpus + layouts whose pair the mutant moved, a consumer FAIL the base lacks (bug); "
        "conformance = real != model:0.32 where the base agrees with the model (signal). Replay/probe/"
        "conformance cells show the wall time of the whole batch call (one worker per overlay, started in "
        "parallel); `-` = not run (a bug layer caught it already). KILLED = a bug layer caught it; SIGNAL = only "
        "signal layers; SURVIVED = none.",
        "",
        "```",
        printed,
        "```",
        "",
        "| mutant | class | overlay s | first catch |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['mutant']} | {r['class']} | {r['overlay_s']} | {r['status']}: "
                     f"{r['why'][:200].replace('|', '/')} |")
    atomic_write(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


def _first_catch(r: dict) -> tuple[str, str]:
    """(layer, seconds) of the bug layer that killed row ``r``, else ("-", "-")."""
    layer = r["why"].split(":", 1)[0] if r["status"] == "KILLED" else ""
    cell = r["cells"].get(layer)
    return (layer, f"{cell['seconds']:.0f}") if cell else ("-", "-")


def consumers_page(args, data: dict, proc, wall: float, load0, load1) -> str:
    rows = data["rows"]
    c = data["counts"]
    judged = c["killed"] + c["missed"]
    rate = f"{100 * c['killed'] / judged:.0f}%" if judged else "n/a"
    cmd = (f"bench/bench_selftest.py --consumers --campaign-seconds {args.campaign_seconds}"
           + (f" --vllm {args.vllm}" if args.vllm else ""))
    by_layer: dict[str, int] = {}
    for r in rows:
        if r["status"] == "KILLED":
            layer = _first_catch(r)[0]
            by_layer[layer] = by_layer.get(layer, 0) + 1
    lines = [
        "# Behavioural consumer mutants (kill matrix)",
        "",
        f"Written by `bench/bench_selftest.py` on {time.strftime('%Y-%m-%d %H:%M')}; do not edit by hand. "
        f"Regenerate: `.venv/bin/python {cmd}` (`make bench` runs it).",
        f"`kvproof selftest --consumers --campaign-seconds {args.campaign_seconds} --batch {args.batch}` on vLLM "
        f"{data['release']}: {len(rows)} mutants: {c['killed']} killed by a bug layer "
        f"({', '.join(f'{k} {v}' for k, v in sorted(by_layer.items())) or 'none'}), {c['missed']} not killed, "
        f"{c['equivalent']} argued equivalent, {c['skipped']} skipped (anchor not in this release); "
        f"kill rate of the non-equivalent {rate}. Wall {wall:.0f} s, exit {proc.returncode}.",
        f"Machine: {os.cpu_count()} cores, load average {load0[0]:.1f} before / {load1[0]:.1f} after "
        "(shared with other engineers: times are upper bounds).",
        "",
        "Each mutant is a small anchor/replacement edit of the installed vLLM source "
        "(`src/kvproof/selftest/mutants.py`, `BEHAVIOURAL`) that changes what a consumer of the block sizes does "
        "without raising at the edit. Layers: known = the consumer tier's oracles (`kvproof.consumer`) on the "
        "known inputs of `src/kvproof/selftest/known.py` (hand-written streams over full attention, sliding "
        "window, three spec groups, chunked local, Mamba align and fine-grained, OffloadingConnector and "
        "SimpleCPUOffloadConnector, EAGLE; plus the consumer fuzzer's streams for 3 seeds on each layout), run on "
        "the base and on the overlay: a FAIL the base lacks or a WARN where the base is OK, confirmed on a "
        "rerun of both (bug); campaign = a time-boxed `kvproof fuzz --target consumers` on the overlay for a "
        "mutant the known inputs missed, each new FAIL class re-run on the base (pre-existing there: not a "
        "catch) and on the overlay (bug); differential = some admission's local or external hit, or the "
        "BlockStored count, differs from the base's on a known input (signal only: a change, not a verdict); "
        "drift = resolver fingerprint unknown (signal). Seconds: the layer's own wall time for that mutant "
        "(known: its overlay's run of every known input plus its share of the batch's worker start-up; "
        "campaign: the campaign plus the reruns). `-` = not run.",
        "",
        "| mutant | class | file | edit | result | caught by | s | differential | why / argument |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        layer, secs = _first_catch(r)
        diff = r["cells"].get("differential", {})
        d = "-" if diff.get("caught") is None else ("moved" if diff["caught"] else "same")
        why = r["why"].split(": ", 1)[1] if r["status"] == "KILLED" else r["why"]
        lines.append(f"| {r['mutant']} | {r['class']} | {r['file'].rsplit('/', 1)[-1]} | "
                     f"{r['description'].replace('|', '/')} | {r['status']} | {layer} | {secs} | {d} | "
                     f"{why[:260].replace('|', '/')} |")
    printed = proc.stdout[proc.stdout.index("\nmutant "):].strip() if "\nmutant " in proc.stdout else proc.stdout
    lines += ["", "The run's own matrix (every layer's cell):", "", "```", printed, "```", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    return guarded("bench_selftest.py", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
