"""Fuzzing throughput, coverage and time to first violation -> bench/results/fuzz.md.

    .venv/bin/python bench/bench_fuzz.py [--vllm R] [--bug-vllm R] [--runs 20000] [--rounds 2]
                                         [--seeds 3] [--cov-seconds 20] [--out bench/results/fuzz.md]

Everything in the report is measured by this script in one run; it reads the
machine's load average (``os.getloadavg``) itself before and after every
measurement and prints it beside the numbers. The machine is shared: read the
ratios measured side by side, not the absolute rates.

Part 1, throughput of the contracts target on --vllm, every process pinned to
one core (``taskset -c 0``), per round, back to back:

- campaign: the real harness (``kvproof.fuzz.harness.build("contracts")``,
  coverage-instrumented in place, ``Bridge(fast=True)``, the real manager only
  where a contract predicts a violation) under libFuzzer (``atheris.Fuzz``,
  ``-runs``), seed corpus + dictionary; every input it is handed is recorded
  (a list append) and the time runs from the first input to the last, so
  libFuzzer's own work (mutation, coverage feedback) is in it;
- resolver loop: a fresh process without atheris instrumentation or libFuzzer
  replays exactly those recorded inputs: decode with the pure-Python ``PyFDP``
  + ``Bridge(fast=True).evaluate(manager=False)`` + the oracle's ``judge``.
  This is the baseline of the ratio (the harness decodes with ``PyFDP`` too:
  atheris' bytes semantics, checked against atheris by the tests). Beside it:
  the harness's own ``TestOneInput`` uninstrumented without libFuzzer (what
  the harness adds per input).

Part 2, coverage (libFuzzer ``cov:``/``ft:``) on --vllm at the seed corpus and
after --cov-seconds, per instrumentation scope of the harness
(``KVPROOF_FUZZ_INSTRUMENT``).

Part 3, time to first violation on --bug-vllm: the real harness from an empty
corpus and from the seed corpus, libFuzzer ``-seed=1..N``, time measured inside
the harness from the first input (vLLM import excluded) to the first FAIL class,
whether the ledger knows it or not (its status is printed beside the contract).
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "src"))  # after PYTHONPATH: inside an env the import root (with kvproof.fuzz) wins

from kvproof.cliutil import Parser, add_vllm  # noqa: E402
from kvproof.fsio import atomic_write  # noqa: E402

SEEDS_DIR = ROOT / "fuzz" / "seeds"
DICT = ROOT / "fuzz" / "kvproof.dict"


def load() -> float:
    return os.getloadavg()[0]


# --- inside the vLLM environment ------------------------------------------------

def campaign_inner(runs: int, record: Path, scope: str) -> None:
    """The real instrumented contracts harness under libFuzzer for ``runs`` inputs."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ["KVPROOF_FUZZ_INSTRUMENT"] = scope
    import atheris
    from kvproof.fuzz.harness import build

    test_one = build("contracts")
    inputs: list[bytes] = []
    t0 = [0.0]
    skip = runs // 10  # warm-up (first configs, lazy imports): timed by neither side

    def one(data: bytes) -> None:
        inputs.append(data)
        if len(inputs) == skip + 1:
            t0[0] = time.perf_counter()
        test_one(data)
        if len(inputs) >= runs:
            seconds = time.perf_counter() - t0[0]
            record.write_text(json.dumps({"execs": len(inputs) - skip, "seconds": seconds, "skip": skip,
                                          "inputs": [d.hex() for d in inputs]}))
            os._exit(0)

    corpus = record.parent / "campaign-corpus"
    corpus.mkdir(exist_ok=True)
    # -runs above ours: the wrapper stops the process at exactly ``runs`` inputs.
    atheris.Setup([sys.argv[0], f"-runs={runs + 1000}", "-seed=1", "-max_len=256", f"-dict={DICT}",
                   "-print_final_stats=0", str(corpus), str(SEEDS_DIR)], one)
    atheris.Fuzz()


BASE = "resolver loop: PyFDP, evaluate(manager=False), judge"
HARNESS = "the harness's TestOneInput uninstrumented, no libFuzzer"


def harness_loop(inputs: list[bytes], skip: int, scratch: Path) -> float:
    """The campaign's own per-input function (escalation, stores, stats), without
    instrumentation or libFuzzer: the cost the harness adds beyond the resolver loop."""
    os.environ.update({"KVPROOF_FUZZ_INSTRUMENT": "0",
                       "KVPROOF_FUZZ_WORKDIR": str(scratch / "w"), "KVPROOF_FUZZ_CORPUS_OUT": str(scratch / "found")})
    from kvproof.fuzz.harness import build

    test_one = build("contracts")
    t = 0.0
    for i, d in enumerate(inputs):
        if i == skip:
            t = time.perf_counter()
        test_one(d)
    return (len(inputs) - skip) / (time.perf_counter() - t)


DECODE = "decode only, PyFDP"
LOOPS = (BASE, HARNESS, DECODE)


def pure_inner(record: Path, out: Path, which: str) -> None:
    """One uninstrumented loop over the campaign's recorded inputs (no libFuzzer), in
    a process of its own: loops sharing a process slow each other (memos, heap)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from kvproof.fuzz.decode import decode
    from kvproof.fuzz.harness import release_caps
    from kvproof.fuzz.oracle import judge
    from kvproof.fuzz.provider import PyFDP

    from kvproof.bridge.runtime import Bridge

    rec = json.loads(record.read_text())
    inputs = [bytes.fromhex(h) for h in rec["inputs"]]
    skip = rec["skip"]
    if which == HARNESS:
        out.write_text(json.dumps(harness_loop(inputs, skip, record.parent / "harness")))
        return
    warm = Bridge(fast=True)  # lazy vLLM imports of the first config builds, paid before any timing
    for d in inputs[:50]:
        try:
            warm.evaluate(decode(PyFDP(d), release_caps(warm.builder), "engine"))
        except Exception:
            pass
    bridge = Bridge(fast=True, memo_managers=False)  # fresh memos: the same cold start as the campaign
    caps = release_caps(bridge.builder)
    if which == DECODE:
        t = time.perf_counter()
        for d in inputs:
            decode(PyFDP(d), caps, "engine")
        out.write_text(json.dumps(len(inputs) / (time.perf_counter() - t)))
        return
    evaluate = bridge.evaluate
    t = 0.0
    for i, d in enumerate(inputs):
        if i == skip:  # the campaign's warm-up inputs are run, not timed, on both sides
            t = time.perf_counter()
        layout = decode(PyFDP(d), caps, "engine")
        try:
            o = evaluate(layout, manager=False)
        except Exception:
            continue
        judge(layout, o)
    out.write_text(json.dumps((len(inputs) - skip) / (time.perf_counter() - t)))


# --- on the host ------------------------------------------------------------------

def _env_run(env, args: list[str], extra: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    from kvproof.bridge.client import worker_env

    cmd = ["taskset", "-c", "0", str(env.python), str(Path(__file__).resolve())] + args
    return subprocess.run(cmd, capture_output=True, text=True, env=worker_env(extra), timeout=timeout)


def throughput(env, runs: int, rounds: int, scope: str) -> list[dict]:
    out = []
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            row: dict = {"round": r + 1, "load_before": load()}
            extra = {"KVPROOF_FUZZ_WORKDIR": str(t / "w"), "KVPROOF_FUZZ_CORPUS_OUT": str(t / "found")}
            p = _env_run(env, ["--campaign", str(runs), "--record", str(t / "rec.json"), "--scope", scope], extra)
            if not (t / "rec.json").exists():
                raise SystemExit(f"campaign failed (rc {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
            rec = json.loads((t / "rec.json").read_text())
            row["campaign"] = rec["execs"] / rec["seconds"]
            row["execs"] = rec["execs"]
            row["load_mid"] = load()
            row["pure"] = {}
            for which in LOOPS:
                p = _env_run(env, ["--pure", str(t / "rec.json"), "--pure-out", str(t / "pure.json"),
                                   "--loop", which])
                if p.returncode != 0:
                    raise SystemExit(f"{which} failed:\n{(p.stdout + p.stderr)[-3000:]}")
                row["pure"][which] = json.loads((t / "pure.json").read_text())
            row["load_after"] = load()
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def coverage_growth(env, seconds: int, scope: str) -> dict:
    """libFuzzer's cov: at the seed corpus and after ``seconds`` with one instrumentation scope."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "corpus").mkdir()
        extra = {"KVPROOF_FUZZ_WORKDIR": str(t / "w"), "KVPROOF_FUZZ_CORPUS_OUT": str(t / "out"),
                 "KVPROOF_FUZZ_INSTRUMENT": scope}
        from kvproof.bridge.client import worker_env

        before = load()
        cmd = ["taskset", "-c", "0", str(env.python), "-m", "kvproof.fuzz.harness", "contracts", "-seed=1",
               f"-max_total_time={seconds}", "-max_len=256", f"-artifact_prefix={t}/", f"-dict={DICT}",
               str(t / "corpus"), str(SEEDS_DIR)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(extra), timeout=seconds + 300)
        text = proc.stdout + proc.stderr
        inited = re.search(r"INITED cov: (\d+) ft: (\d+)", text)
        covs = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)", text)
        done = re.search(r"Done (\d+) runs in (\d+) second", text)
        stats = [json.loads(p.read_text()) for p in (t / "w" / "stats").glob("*.json")]
        inst = (stats[0].get("instrumented") if stats else {}) or {}
        row = {"scope": scope, "functions": sum(inst.values()), "per_module": inst,
               "inited_cov": int(inited.group(1)) if inited else None,
               "inited_ft": int(inited.group(2)) if inited else None,
               "final_cov": int(covs[-1][0]) if covs else None, "final_ft": int(covs[-1][1]) if covs else None,
               "corpus": int(covs[-1][2]) if covs else None,
               "execs": int(done.group(1)) if done else sum(s.get("execs", 0) for s in stats),
               "load_before": before, "load_after": load()}
        print(json.dumps({k: v for k, v in row.items() if k != "per_module"}), flush=True)
        return row


def campaign_first_violation(workdir: Path) -> dict:
    """What a contracts campaign left in ``workdir`` (its harness's ``stats/*.json``), read with
    the campaign runner's own reader (``fuzz.run.merged_classes``): its first FAIL class, of any
    ledger status (on --bug-vllm the bugs are known: the ledger has them fixed in a later release),
    with the seconds to it, its contract and ledger status, and the campaign's execs. A campaign's
    ``classes`` are a dict class id -> record (``fuzz.harness.Stats``); the first is the earliest
    ``first_s`` (ties in the order met). The stats' own ``first_crash_s`` times only classes the
    ledger lacks."""
    from kvproof.fuzz.run import merged_classes, read_stats

    s = read_stats(workdir)
    fails = [c for c in merged_classes(workdir).values() if c["verdict"] == "FAIL"]
    first = min(fails, key=lambda c: c["first_s"]) if fails else None  # min keeps the first of equals
    return {"first_crash_s": first["first_s"] if first else None, "execs": s["execs"] if s["processes"] else None,
            "contract": first["check"] if first else None, "status": first["status"] if first else None}


def first_violation(env, seed: int, with_seeds: bool, limit: int) -> dict:
    from kvproof.bridge.client import worker_env

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "corpus").mkdir()
        cmd = ["taskset", "-c", "0", str(env.python), "-m", "kvproof.fuzz.harness", "contracts", f"-seed={seed}",
               f"-max_total_time={limit}", "-max_len=256", f"-artifact_prefix={t}/", f"-dict={DICT}",
               str(t / "corpus")] + ([str(SEEDS_DIR)] if with_seeds else [])
        extra = {"KVPROOF_FUZZ_WORKDIR": str(t / "w"), "KVPROOF_FUZZ_CORPUS_OUT": str(t / "out")}
        before = load()
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(extra), timeout=limit + 300)
        wall = time.monotonic() - t0
        row = {"seed": seed, "with_seeds": with_seeds, **campaign_first_violation(t / "w"),
               "wall_s": round(wall, 1), "rc": proc.returncode, "load_before": before, "load_after": load()}
        print(json.dumps(row), flush=True)
        return row


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render(args, tp: list[dict], cov: list[dict], ttf: list[dict], when: str, wall: float,
           load_start: float, load_end: float) -> str:
    lines = ["# Fuzzing benchmarks", "",
             f"Written by `.venv/bin/python bench/bench_fuzz.py --vllm {args.vllm} --bug-vllm {args.bug_vllm} "
             f"--runs {args.runs} --rounds {args.rounds} --seeds {args.seeds} --cov-seconds {args.cov_seconds}` "
             f"at {when}; {platform.machine()}, {os.cpu_count()} CPUs, every vLLM process pinned to one core "
             f"(`taskset -c 0`); wall {wall:.0f} s; 1-min load average {load_start:.2f} at the start, "
             f"{load_end:.2f} at the end (read by the script; per-measurement loads in the tables).", "",
             f"## Contracts target on vLLM {args.vllm}: instrumented campaign vs resolver loop (execs/s, one core)", "",
             f"Per round: a real campaign (harness instrumentation scope `{args.scope}`, libFuzzer, "
             f"{args.runs} inputs from the seed corpus with `-seed=1`), then fresh processes (one per loop) replaying exactly its "
             "recorded inputs without libFuzzer or instrumentation; the first 10% of the inputs (first config builds, "
             "lazy imports) run untimed on both sides. Ratio = resolver loop (PyFDP) / campaign.", ""]
    names = list(tp[0]["pure"].keys()) if tp else []
    lines += ["| round | load before / mid / after | campaign | " + " | ".join(names)
              + " | ratio: resolver loop / campaign | of which: resolver loop / harness uninstrumented "
              "| of which: harness uninstrumented / campaign |",
              "|---:|---|---:|" + "---:|" * len(names) + "---:|---:|---:|"]
    ratios = []
    for r in tp:
        ratio = r["pure"][BASE] / r["campaign"]
        ratios.append(ratio)
        lines.append(f"| {r['round']} | {r['load_before']:.2f} / {r['load_mid']:.2f} / {r['load_after']:.2f} "
                     f"| {r['campaign']:,.0f} | " + " | ".join(f"{r['pure'][n]:,.0f}" for n in names)
                     + f" | {ratio:.2f}x | {r['pure'][BASE] / r['pure'][HARNESS]:.2f}x "
                     f"| {r['pure'][HARNESS] / r['campaign']:.2f}x |")
    if ratios:
        lines += ["", f"Median ratio over {len(ratios)} round(s): **{statistics.median(ratios):.2f}x** "
                  "(resolver loop execs/s per campaign execs/s; goal <= 2x). The two factors: what the "
                  "harness does per input beyond the resolver loop (the real manager where a contract "
                  "predicts a violation, a second judgement, stores, stats), and what coverage "
                  "instrumentation plus libFuzzer add to the harness."]
    if cov:
        lines += ["", f"## Coverage on vLLM {args.vllm} by instrumentation scope "
                  f"(contracts, seed corpus, {args.cov_seconds} s, `-seed=1`, one core)", "",
                  "| scope | functions instrumented | cov / ft at seed corpus (INITED) | cov / ft at the end "
                  "| corpus | execs | execs/s | load before / after |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in cov:
            lines.append(f"| `{r['scope']}` | {r['functions']} | {_f(r['inited_cov'], '{}')} / "
                         f"{_f(r['inited_ft'], '{}')} | {_f(r['final_cov'], '{}')} / {_f(r['final_ft'], '{}')} "
                         f"| {_f(r['corpus'], '{}')} | {r['execs']} | {r['execs'] / args.cov_seconds:,.0f} "
                         f"| {r['load_before']:.2f} / {r['load_after']:.2f} |")
        for r in cov:
            if r["per_module"]:
                lines.append(f"\nFunctions instrumented, scope `{r['scope']}`: "
                             + ", ".join(f"`{k}` {v}" for k, v in r["per_module"].items()) + ".")
    if ttf:
        lines += ["", f"## Time to first violation on vLLM {args.bug_vllm}", "",
                  f"Real contracts harness (default instrumentation), libFuzzer `-seed=N`, at most "
                  f"{args.ttf_limit} s each; time from the first input (vLLM import excluded).", "",
                  "| seed | corpus | first violation (s) | execs in the run | contract (ledger status) "
                  "| wall incl. import (s) "
                  "| load before / after |", "|---:|---|---:|---:|---|---:|---|"]
        for r in ttf:
            status = f" ({r['status']})" if r.get("status") else ""
            lines.append(f"| {r['seed']} | {'seeds' if r['with_seeds'] else 'empty'} | "
                         f"{_f(r['first_crash_s'], '{:.2f}') if r['first_crash_s'] is not None else 'none'} "
                         f"| {r['execs']} | {r['contract']}{status} | {r['wall_s']} "
                         f"| {r['load_before']:.2f} / {r['load_after']:.2f} |")
        for ws in (False, True):
            xs = [r["first_crash_s"] for r in ttf if r["with_seeds"] == ws and r["first_crash_s"] is not None]
            if xs:
                lines.append(f"\nMedian ({'seed corpus' if ws else 'empty corpus'}): {statistics.median(xs):.2f} s "
                             f"over {len(xs)} of {sum(1 for r in ttf if r['with_seeds'] == ws)} seeds.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = Parser(prog="bench_fuzz.py")
    # defaults from the one release list (src/kvproof/facts/__init__.py), read after parsing: the in-env modes import no envs
    add_vllm(p, many=False, help="release for throughput and coverage (default: the newest CPU release)")
    p.add_argument("--bug-vllm", help="release with the seed bug, for time to find (default: the seed pair's first)")
    p.add_argument("--runs", type=int, default=20000, help="inputs per throughput campaign")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--scope", default="1", help="harness instrumentation scope for the throughput campaign")
    p.add_argument("--cov-seconds", type=int, default=20)
    p.add_argument("--cov-scopes", default="1,0", help="KVPROOF_FUZZ_INSTRUMENT values (1 = all covered modules, 0 = none)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--ttf-limit", type=int, default=60)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz.md"))
    # inside the vLLM environment (started by this script)
    p.add_argument("--campaign", type=int, help=argparse_suppress())
    p.add_argument("--record", help=argparse_suppress())
    p.add_argument("--pure", help=argparse_suppress())
    p.add_argument("--pure-out", help=argparse_suppress())
    p.add_argument("--loop", choices=LOOPS, help=argparse_suppress())
    args = p.parse_args(argv)
    if args.campaign:
        campaign_inner(args.campaign, Path(args.record), args.scope)
        return 1  # not reached: the wrapper exits the process
    if args.pure:
        pure_inner(Path(args.pure), Path(args.pure_out), args.loop)
        return 0
    from kvproof import envs
    from kvproof import facts

    args.vllm = args.vllm or envs.DEFAULT_RELEASE
    args.bug_vllm = args.bug_vllm or facts.SEED_PAIR[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = load()
    t0 = time.monotonic()
    env = envs.find(args.vllm)
    tp = throughput(env, args.runs, args.rounds, args.scope)
    cov = [coverage_growth(env, args.cov_seconds, s) for s in args.cov_scopes.split(",") if s] \
        if args.cov_seconds > 0 else []
    ttf: list[dict] = []
    if args.seeds > 0:
        bug_env = envs.find(args.bug_vllm)
        for with_seeds in (False, True):
            ttf += [first_violation(bug_env, s, with_seeds, args.ttf_limit) for s in range(1, args.seeds + 1)]
    text = render(args, tp, cov, ttf, when, time.monotonic() - t0, load_start, load())
    atomic_write(args.out, text)
    print(text)
    return 0


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
