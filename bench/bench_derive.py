"""Bench the derivation of the reference models at real dimensions (spec/models/).

    .venv/bin/python bench/bench_derive.py [--vllm R] [--out bench/results/derive.md]
    .venv/bin/python bench/bench_derive.py --vllm 0.33.0 --out bench/results/derive_0.33.0.md

One worker of the release derives every reference model with default flags (a multimodal-only
family's text decoder alone: kvproof.derivation.reference_flags) through the
release's own code (kvproof.bridge.derive: every layer on the meta device, KV memory sized
automatically). Per model: the layout, the line vLLM logs, seconds after import, the
worker's peak RSS, and the stand-in where the CPU derivation is not the release's CPU build as
it stands: a GPU-only layer's spec built for another backend, torchvision's import placeholder
(kvproof.bridge.derive: the environments have none), a GPU kernel turned off by the release's
own switch. Each model is derived once before the timed pass (lazy imports, model-class
registration), so the seconds are a warm worker's. Then the speculative table: every reference
model under its speculative flag sets (kvproof.derivation.speculative_flag_sets: an MTP draft at
k = 1 for every model, where the release maps the model to its MTP module or refuses it; MTP at
k = 1, 2, 3 for the models with MTP layers; EAGLE-3 with a reference draft), derived once, with the
module count the release read (``mtp_modules``, from the draft's num_nextn_predict_layers). On a
release with its own ``vllm/models/`` package (0.33+), a last table: per family, the
architectures it registers (kvproof.facts.models, read from the release's source) and the reference
models that build them.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

from kvproof import envs
from kvproof.facts import models as registry
from kvproof.bridge.client import Worker
from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.inputs.config import Config, models_dir, reference_models
from kvproof.derivation import reference_flags, speculative_flag_sets
from kvproof.fsio import atomic_write
from kvproof.tiers import client

OUT = "bench/results/derive.md"


def _main(argv) -> int:
    ap = Parser(prog="bench_derive.py")
    add_vllm(ap, many=False, default=envs.DEFAULT_RELEASE,
             help=f"release (default: the newest CPU release of src/kvproof/facts/__init__.py, {envs.DEFAULT_RELEASE})")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    load, t0 = os.getloadavg()[0], time.monotonic()
    configs = [Config(model=m, flags=reference_flags(m, ())) for m in reference_models()]
    spec_configs = [Config(model=m, flags=f) for m in reference_models() for f in speculative_flag_sets(m)]
    with Worker(envs.find(args.vllm)) as w:
        client.derive(w, configs)  # warm: imports and model classes
        results = client.derive(w, configs)
        spec_results = client.derive(w, spec_configs)  # once: the classes are warm
    ok = [r for r in results if r.error is None]
    lines = [f"# bench: reference models derived at real dimensions on vLLM {args.vllm}", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"1-min load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
             f"wall {time.monotonic() - t0:.0f} s (worker start, a warm pass, the timed pass).",
             f"Command: `.venv/bin/python bench/bench_derive.py --vllm {args.vllm}"
             f"{'' if args.out == OUT else ' --out ' + args.out}`", "",
             f"{len(ok)} of {len(results)} derive; seconds per model after import (warm worker), "
             f"slowest {max((r.seconds for r in ok), default=0):.2f} s.", "",
             "| model | layout | vLLM's line | s | peak RSS MB | stand-in |",
             "|---|---|---|---:|---:|---|"]
    for r in results:
        if r.error is None:
            lines.append(f"| {r.config.describe()} | `{r.layout.summary()}` | `{r.log_line()}` | {r.seconds:.2f} | "
                         f"{r.peak_rss_mb or 0:.0f} | {r.stand_in or ''} |")
        else:
            cause = " ".join(r.error.line().split())[:300].replace("|", "/")  # one table row
            lines.append(f"| {r.config.describe()} | NOT_DERIVABLE: {cause} | | {r.seconds:.2f} | "
                         f"{r.peak_rss_mb or 0:.0f} | |")
    lines += speculative_lines(spec_results)
    lines += family_lines(envs.site_packages(envs.find(args.vllm).root) / "vllm", results)
    atomic_write(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def speculative_lines(results) -> list[str]:
    """The speculative table: per model and flag set, the drafter's layout and the MTP modules the
    release read, or the release's refusal."""
    ok = [r for r in results if r.error is None]
    lines = ["", f"## Speculative flag sets: {len(ok)} of {len(results)} derive", "",
             f"Models that derive a draft: {', '.join(sorted({r.config.model for r in ok})) or 'none'}.", "",
             "| model | speculative config | layout | MTP modules read | s |", "|---|---|---|---:|---:|"]
    for r in results:
        spec = r.config.flags[r.config.flags.index("--speculative-config") + 1]
        prefix = " (prefix caching on)" if "--enable-prefix-caching" in r.config.flags else ""
        if r.error is None:
            sp = r.layout.speculative
            modules = sp.mtp_modules if sp is not None and sp.method == "mtp" else ""
            lines.append(f"| {r.config.model} | `{spec}`{prefix} | `{r.layout.summary()}` | {modules} | {r.seconds:.2f} |")
        else:
            cause = " ".join(r.error.line().split())[:240].replace("|", "/")
            lines.append(f"| {r.config.model} | `{spec}`{prefix} | NOT_DERIVABLE: {cause} | | {r.seconds:.2f} |")
    return lines


def family_lines(vllm, results) -> list[str]:
    """The vllm/models/ families table: which derive through a reference model, and why not."""
    fams = registry.families(vllm)
    if not fams:
        return []
    archs = {m: set(json.loads((models_dir() / f"{m}.json").read_text()).get("architectures", []))
             for m in reference_models()}
    rows, derived = [], 0
    for fam, registered in fams.items():
        mine = [r for r in results if archs.get(r.config.model, set()) & set(registered)]
        ok = [r for r in mine if r.error is None]
        derived += bool(ok)
        if ok:
            verdict = "derives: " + ", ".join(f"{r.config.describe()} `{r.layout.summary()}`" for r in ok)
        elif mine:
            verdict = "NOT_DERIVABLE: " + "; ".join(
                f"{r.config.describe()}: " + " ".join(r.error.line().split())[:200].replace("|", "/") for r in mine)
        else:
            verdict = "no reference config (spec/models/) builds one of its architectures"
        rows.append(f"| {fam} | {', '.join(registered)} | {verdict} |")
    return ["", f"## vllm/models/ families: {derived} of {len(fams)} derive", "",
            "| family | architectures it registers | through the reference models |", "|---|---|---|", *rows]


def main(argv=None) -> int:
    return guarded("bench_derive.py", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
