"""``kvproof selftest [--vllm 0.32.0] [--seconds S] [--mutants a,b] [--full] [--batch N] [--json PATH]``.

One overlay per seeded mutant (``kvproof.overlay.make``: hard-link copy of
the release environment with the mutated file laid over it, in a scratch
home ``<cache>/selftest-envs`` so ``kvproof verify``'s drift check of the
managed environments never sees them), then the layers of
``kvproof.selftest.layers``:

1. drift alarm (no import);
2. one bridge call per overlay, overlays in batches of ``--batch`` (one
   worker each, started in parallel), every corpus and probe layout in that
   call: replay (corpus/ newly FAIL), probe (seeded decoder layouts newly
   FAIL), conformance (real != model where the base agrees with the model);
   the base release's worker is started once and kept for the whole run;
3. for mutants no bug layer has caught yet: atheris contract fuzz
   (every new FAIL class; one that FAILs the same way on the base is
   pre-existing, not a catch), then the consumer tier on the corpus and the
   probe layouts whose (scheduler, hash) the mutant changed.

``--full`` runs steps 3 for every mutant (and an atheris conformance run).
Prints the kill matrix; exit 0 when every mutant not marked equivalent or
efficiency-only was caught by a bug layer, 1 otherwise.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from typing import Sequence

from kvproof import envs, inputs, overlay
from kvproof.cliutil import Parser, guarded
from kvproof.fsio import atomic_write
from kvproof.selftest import layers as L
from kvproof.selftest.mutants import RELEASE, Mutant, select
from kvproof.settings import settings

PROG = "kvproof selftest"
COLUMNS = ("drift", "replay", "probe", "contracts", "consumer", "conformance")


def parse(argv: Sequence[str] | None):
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm", default=RELEASE, help=f"base release (anchors are written for {RELEASE})")
    p.add_argument("--seconds", type=int, default=8, help="seconds per atheris run (default 8)")
    p.add_argument("--mutants", help="comma list of mutant names (default: all)")
    p.add_argument("--corpus", default=None, help="replay folder (default $KVPROOF_CORPUS, i.e. corpus/)")
    p.add_argument("--probes", type=int, default=400, help="seeded decoder layouts per bridge call (default 400)")
    p.add_argument("--batch", type=int, default=4, help="overlays whose workers start together (default 4)")
    p.add_argument("--full", action="store_true", help="run every layer even after a bug layer caught it")
    p.add_argument("--no-consumer", action="store_true", help="skip the consumer tier")
    p.add_argument("--keep", action="store_true", help="keep the mutant overlays")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return p.parse_args(argv)


def verdict_of(m: Mutant, cells: dict[str, L.Catch]) -> tuple[str, str]:
    bug = [c for c in cells.values() if c.layer in L.BUG_LAYERS and c.caught]
    sig = [c for c in cells.values() if c.layer in L.SIGNAL_LAYERS and c.caught]
    if bug:
        first = min(bug, key=lambda c: COLUMNS.index(c.layer))
        return "KILLED", f"{first.layer}: {first.detail}"
    if sig:
        return "SIGNAL", f"only {', '.join(c.layer for c in sig)} noticed; {m.survivor}"
    return "SURVIVED", m.survivor


def matrix(rows: list[dict]) -> str:
    w = max(len(r["mutant"]) for r in rows)
    out = [f"{'mutant':<{w}}  {'class':<21}  " + "  ".join(f"{c:<11}" for c in COLUMNS) + "  result"]
    for r in rows:
        cells = []
        for c in COLUMNS:
            d = r["cells"].get(c, {})
            cells.append("-" if d.get("caught") is None else
                         (f"CAUGHT {d['seconds']:.0f}s" if d["caught"] else f"missed {d['seconds']:.0f}s"))
        out.append(f"{r['mutant']:<{w}}  {r['class']:<21}  " + "  ".join(f"{c:<11}" for c in cells) + f"  {r['status']}")
    out.append("")
    for r in rows:
        out.append(f"{r['mutant']}: {r['status']}: {r['why']}")
    return "\n".join(out)


def _killed(cells: dict[str, L.Catch]) -> bool:
    return any(c.caught for c in cells.values() if c.layer in L.BUG_LAYERS)


def _main(argv: Sequence[str] | None) -> int:
    from kvproof.bridge.client import Worker
    from kvproof.verify.drift import Model, fuzzed_layouts

    args = parse(argv)
    mutants = select(args.mutants)
    base = envs.find(args.vllm)
    where = settings()
    home = where.cache_home / "selftest-envs"
    scratch = where.out / "selftest"
    shutil.rmtree(scratch, ignore_errors=True)
    t_all = time.monotonic()
    corpus = inputs.load_layouts([args.corpus or str(where.corpus)])
    probes = fuzzed_layouts(args.probes, seed=1)
    named = list(corpus) + [(f"probe:{n}", lay) for n, lay in probes]
    layouts = [lay for _, lay in named]
    names = [n for n, _ in named]
    print(f"{PROG}: {len(mutants)} mutant(s) over vLLM {args.vllm}, {len(corpus)} corpus + {len(probes)} probe "
          f"layouts, {args.seconds} s per atheris run, batches of {args.batch}", flush=True)
    t = time.monotonic()
    base_worker = Worker(base)
    base_worker.spawn()  # imports vLLM while the model evaluates the probes
    revision = spec_revision(args.vllm)
    model = Model(revision)
    expected = [model(lay) for lay in layouts]
    base_worker.handshake()
    base_j = L.judge_outcomes(layouts, base_worker.run(layouts, manager=True))
    gaps = sum(1 for b, m in zip(base_j, expected) if b.expressible and b.pair != m)
    print(f"{PROG}: base verdicts and model:{revision} in {time.monotonic() - t:.0f} s ({gaps} layouts where the "
          f"base itself disagrees with the model: ignored by conformance)", flush=True)
    sp = overlay.site_packages(base.root)
    cells_of: dict[str, dict[str, L.Catch]] = {}
    made_of: dict[str, overlay.Made] = {}
    got_of: dict[str, list[L.Judged]] = {}
    try:
        for k in range(0, len(mutants), max(1, args.batch)):
            batch = mutants[k:k + max(1, args.batch)]
            for m in batch:
                made_of[m.name] = overlay.make(f"mut-{m.name}".replace("_", "-"), args.vllm, {m.file: m.source(sp)},
                                               {"mutant": m.name, "file": m.file}, where=home, force=True)
                cells_of[m.name] = {"drift": L.drift(made_of[m.name].env, args.vllm)}
            judged, dt = L.run_batch([made_of[m.name].env for m in batch], layouts)
            for m, got in zip(batch, judged):
                got_of[m.name] = got
                cells_of[m.name].update(L.layout_layers(names, len(corpus), base_j, got, expected, dt))
                print(f"  {m.name}: " + ", ".join(f"{c.layer} {'CAUGHT' if c.caught else 'missed'}"
                                                  for c in cells_of[m.name].values()) + f" ({dt:.0f} s batch)",
                      flush=True)
        for m in mutants:
            cells = cells_of[m.name]
            env = made_of[m.name].env
            cells["contracts"] = (L.Catch("contracts", None) if _killed(cells) and not args.full else
                                  L.contracts(env, args.seconds, scratch / m.name / "contracts", base_worker))
            if args.full:
                cells["conformance_fuzz"] = L.conformance_fuzz(env, args.seconds, scratch / m.name / "conformance")
            if cells["contracts"].caught is not None:
                print(f"  {m.name}: contracts {'CAUGHT' if cells['contracts'].caught else 'missed'} "
                      f"({cells['contracts'].seconds:.0f} s) {cells['contracts'].detail[:120]}", flush=True)
        consumer_step(args, mutants, cells_of, made_of, got_of, named, len(corpus), base_j, base)
    finally:
        base_worker.close()
        if not args.keep:
            for name, made in made_of.items():
                overlay.remove(made.env.name, where=home)
    out_rows = []
    for m in mutants:
        cells = cells_of[m.name]
        cells.pop("conformance_fuzz", None) if not args.full else None
        status, why = verdict_of(m, cells)
        out_rows.append({"mutant": m.name, "class": m.klass, "description": m.description,
                         "overlay_s": round(made_of[m.name].seconds, 2), "status": status, "why": why,
                         "cells": {c: {"caught": x.caught, "seconds": round(x.seconds, 1), "detail": x.detail}
                                   for c, x in cells.items()}})
    wall = time.monotonic() - t_all
    print()
    print(matrix(out_rows))
    print(f"\n{PROG}: wall {wall:.0f} s")
    if args.json:
        atomic_write(args.json, json.dumps({"release": args.vllm, "seconds": args.seconds, "full": args.full,
                                            "wall_s": round(wall, 1), "probes": len(probes), "corpus": len(corpus),
                                            "rows": out_rows}, indent=1))
    missed = [r for r in out_rows if r["status"] != "KILLED" and not r["why"].split("; ", 1)[-1].startswith(
        ("equivalent", "efficiency"))]
    return 1 if missed else 0


def spec_revision(release: str) -> str:
    from kvproof.spec import revision_for
    return revision_for(release)


def consumer_step(args, mutants, cells_of, made_of, got_of, named, n_corpus, base_j, base) -> None:
    """The consumer tier for mutants no bug layer caught: corpus + up to 8 probes whose pair moved."""
    todo = [m for m in mutants if args.full or not _killed(cells_of[m.name])]
    for m in mutants:
        cells_of[m.name]["consumer"] = L.Catch("consumer", None, 0, "skipped")
    if args.no_consumer or not todo:
        return
    sets: dict[str, list] = {}
    for m in todo:
        got = got_of[m.name]
        moved = [named[i] for i in range(n_corpus, len(named))
                 if got[i].expressible and base_j[i].expressible and got[i].pair != base_j[i].pair][:8]
        sets[m.name] = list(named[:n_corpus]) + moved
    union = {lay.content_hash(): lay for s in sets.values() for _, lay in s}
    t = time.monotonic()
    try:
        bv = L.consumer_verdicts(list(union.values()), base)
    except Exception as err:  # another engineer's tier: report, do not hide
        print(f"{PROG}: consumer tier not used: {type(err).__name__}: {str(err)[:150]}", flush=True)
        for m in todo:
            cells_of[m.name]["consumer"] = L.Catch("consumer", None, 0, f"unavailable: {type(err).__name__}")
        return
    base_cons = dict(zip(union.keys(), bv))
    print(f"{PROG}: consumer tier on the base: {len(union)} layouts in {time.monotonic() - t:.0f} s", flush=True)
    for m in todo:
        c = L.consumer(sets[m.name], made_of[m.name].env, base_cons)
        cells_of[m.name]["consumer"] = c
        print(f"  {m.name}: consumer {c.cell()} {c.detail[:120]}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
