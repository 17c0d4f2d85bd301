"""``kvproof selftest [--vllm 0.32.0] [--consumers] [--seconds S] [--campaign-seconds S] [--mutants a,b] [--full] [--batch N] [--json PATH]``.

One overlay per seeded mutant (``kvproof.envs.overlay.make``: hard-link copy of
the release environment with the mutated file laid over it, in a scratch
home ``<cache>/selftest-envs`` so ``kvproof verify``'s drift check of the
managed environments never sees them). A mutant whose anchor is not in the
release's file is skipped for that release (its code differs there), so the
same catalogue runs on every managed release it applies to. Then the layers
of ``kvproof.selftest.layers``:

1. drift alarm (no import);
2. resolver mutants: one bridge call per overlay, overlays in batches of
   ``--batch`` (one worker each, started in parallel), every corpus and
   probe layout in that call: replay (corpus/ newly FAIL), probe (seeded
   decoder layouts newly FAIL), conformance (real != model where the base
   agrees with the model); the base release's worker is started once;
3. for resolver mutants no bug layer has caught yet: atheris contract fuzz
   (every new FAIL class; one that FAILs the same way on the base is
   pre-existing, not a catch), then the consumer tier on the corpus and the
   probe layouts whose (scheduler, hash) the mutant changed;
4. behavioural mutants (and resolver mutants still alive): ``known``, the
   consumer tier's oracles on the known inputs (``kvproof.selftest.known``),
   each run on the base and on the overlay (a FAIL the base lacks, or a WARN
   where the base is OK, confirmed on a rerun), with the ``differential``
   signal (some admission's hit or the event count differs from the base's);
5. behavioural mutants still alive: ``campaign``, a time-boxed consumer
   campaign (``kvproof fuzz --target consumers``) on the overlay, each new
   FAIL class re-run on the base (pre-existing there: not a catch) and on
   the overlay (it must come back).

``--consumers`` runs only the behavioural catalogue; ``--full`` runs every
layer for every mutant (and an atheris conformance run). Prints the kill
matrix; exit 0 when every mutant not argued equivalent or efficiency-only
was caught by a bug layer, 1 otherwise.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from kvproof import envs
from kvproof.inputs import files as inputs
from kvproof.envs import overlay
from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.fsio import atomic_write
from kvproof.locks import file_lock
from kvproof.selftest import behaviour as B
from kvproof.selftest import layers as L
from kvproof.selftest.mutants import RELEASE, Mutant, select
from kvproof.settings import settings

PROG = "kvproof selftest"
COLUMNS = ("drift", "replay", "probe", "contracts", "consumer", "known", "campaign", "conformance", "differential")


def parse(argv: Sequence[str] | None):
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_vllm(p, many=False, default=RELEASE, help=f"base release (anchors are written for {RELEASE})")
    p.add_argument("--consumers", action="store_true",
                   help="only the behavioural consumer mutants (hit search, coordinator, block pool, KV events, "
                        "connectors, EAGLE)")
    p.add_argument("--seconds", type=int, default=8, help="seconds per atheris contracts run (default 8)")
    p.add_argument("--campaign-seconds", type=int, default=30,
                   help="seconds per consumer campaign of a mutant the known inputs missed (default 30)")
    p.add_argument("--mutants", help="comma list of mutant names (default: all, or all behavioural)")
    p.add_argument("--corpus", default=None, help="replay folder (default $KVPROOF_CORPUS, i.e. corpus/)")
    p.add_argument("--probes", type=int, default=400, help="seeded decoder layouts per bridge call (default 400)")
    p.add_argument("--batch", type=int, default=4, help="overlays whose workers start together (default 4)")
    p.add_argument("--full", action="store_true", help="run every layer even after a bug layer caught it")
    p.add_argument("--no-consumer", action="store_true", help="skip the consumer tier (consumer, known, campaign)")
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


def _cell(d: dict) -> str:
    if not d or d.get("caught") is None:
        return "-"
    return f"CAUGHT {d['seconds']:.0f}s" if d["caught"] else f"missed {d['seconds']:.0f}s"


def matrix(rows: list[dict]) -> str:
    cols = [c for c in COLUMNS if any(r["cells"].get(c, {}).get("caught") is not None for r in rows)] or ["drift"]
    w = max(len(r["mutant"]) for r in rows)
    out = [f"{'mutant':<{w}}  {'class':<21}  " + "  ".join(f"{c:<12}" for c in cols) + "  result"]
    for r in rows:
        cells = [_cell(r["cells"].get(c, {})) for c in cols]
        out.append(f"{r['mutant']:<{w}}  {r['class']:<21}  " + "  ".join(f"{c:<12}" for c in cells) + f"  {r['status']}")
    out.append("")
    for r in rows:
        out.append(f"{r['mutant']}: {r['status']}: {r['why']}")
    return "\n".join(out)


def _killed(cells: dict[str, L.Catch]) -> bool:
    return any(c.caught for c in cells.values() if c.layer in L.BUG_LAYERS)


def counts(rows: list[dict]) -> dict[str, int]:
    """killed / survived (not argued equivalent) / equivalent / skipped, and the kill rate's terms."""
    c = {"killed": 0, "missed": 0, "equivalent": 0, "skipped": 0}
    for r in rows:
        if r["status"] == "SKIPPED":
            c["skipped"] += 1
        elif r["status"] == "KILLED":
            c["killed"] += 1
        elif r.get("equivalent"):
            c["equivalent"] += 1
        else:
            c["missed"] += 1
    return c


def run_mutants(args, mutants, resolver, cells_of, made_of, base, where, home, scratch, sp) -> None:
    """Build each mutant's overlay, run the layers, remove the overlays (unless ``--keep``)."""
    try:
        for m in mutants:
            made_of[m.name] = overlay.make(f"mut-{m.name}".replace("_", "-"), args.vllm, {m.file: m.source(sp)},
                                           {"mutant": m.name, "file": m.file}, where=home, force=True)
            cells_of[m.name] = {"drift": L.drift(made_of[m.name].env, args.vllm)}
        if resolver:
            resolver_steps(args, resolver, cells_of, made_of, base, where, scratch)
        if not args.no_consumer:
            behaviour_steps(args, mutants, cells_of, made_of, base, scratch)
    finally:
        if not args.keep:
            for made in made_of.values():
                overlay.remove(made.env.name, where=home)


def _main(argv: Sequence[str] | None) -> int:
    args = parse(argv)
    mutants = select(args.mutants, args.consumers)
    base = envs.find(args.vllm)
    where = settings()
    home = where.cache_home / "selftest-envs"
    scratch = where.out / "selftest"
    shutil.rmtree(scratch, ignore_errors=True)
    t_all = time.monotonic()
    sp = overlay.site_packages(base.root)
    skipped = [m for m in mutants if not m.applies_to(sp)]
    mutants = [m for m in mutants if m not in skipped]
    if skipped:
        print(f"{PROG}: {len(skipped)} mutant(s) skipped on vLLM {args.vllm} (anchor not in its code): "
              + ", ".join(m.name for m in skipped), flush=True)
    resolver = [m for m in mutants if args.full or not m.behavioural]
    print(f"{PROG}: {len(mutants)} mutant(s) over vLLM {args.vllm} ({len(mutants) - len(resolver)} judged by the "
          f"consumer tier first), {args.seconds} s per atheris run, {args.campaign_seconds} s per consumer campaign, "
          f"batches of {args.batch}", flush=True)
    cells_of: dict[str, dict[str, L.Catch]] = {}
    made_of: dict[str, overlay.Made] = {}
    # the mutants' overlays share one home per machine: a second self-test (another checkout) waits
    # instead of replacing or removing the overlays this one is running
    with file_lock(home / ".selftest.lock", f"{PROG}: waiting for another kvproof selftest ({home})"):
        run_mutants(args, mutants, resolver, cells_of, made_of, base, where, home, scratch, sp)
    out_rows = []
    for m in mutants:
        cells = cells_of[m.name]
        cells.pop("conformance_fuzz", None) if not args.full else None
        status, why = verdict_of(m, cells)
        out_rows.append({"mutant": m.name, "class": m.klass, "file": m.file, "description": m.description,
                         "behavioural": m.behavioural, "equivalent": m.equivalent,
                         "overlay_s": round(made_of[m.name].seconds, 2), "status": status, "why": why,
                         "cells": {c: {"caught": x.caught, "seconds": round(x.seconds, 1), "detail": x.detail}
                                   for c, x in cells.items()}})
    for m in skipped:
        out_rows.append({"mutant": m.name, "class": m.klass, "file": m.file, "description": m.description,
                         "behavioural": m.behavioural, "equivalent": m.equivalent, "overlay_s": 0.0,
                         "status": "SKIPPED", "why": f"anchor not in vLLM {args.vllm}'s {m.file}", "cells": {}})
    wall = time.monotonic() - t_all
    print()
    print(matrix(out_rows))
    c = counts(out_rows)
    print(f"\n{PROG}: {c['killed']} killed, {c['missed']} not killed, {c['equivalent']} argued equivalent, "
          f"{c['skipped']} skipped; wall {wall:.0f} s")
    if args.json:
        atomic_write(args.json, json.dumps({"release": args.vllm, "seconds": args.seconds,
                                            "campaign_seconds": args.campaign_seconds, "full": args.full,
                                            "consumers": args.consumers, "wall_s": round(wall, 1),
                                            "counts": c, "rows": out_rows}, indent=1))
    missed = [r for r in out_rows if r["status"] not in ("KILLED", "SKIPPED") and not r["why"].split("; ", 1)[-1]
              .startswith(("equivalent", "efficiency"))]
    return 1 if missed else 0


def resolver_steps(args, mutants, cells_of, made_of, base, where, scratch) -> None:
    """Steps 2-3: the bridge batch (replay, probe, conformance), contract fuzz, the consumer tier."""
    from kvproof.bridge.client import Worker
    from kvproof.tiers import client
    from kvproof.verify.drift import Model, fuzzed_layouts

    corpus = inputs.load_layouts([args.corpus or str(where.corpus)])
    probes = fuzzed_layouts(args.probes, seed=1)
    named = list(corpus) + [(f"probe:{n}", lay) for n, lay in probes]
    layouts = [lay for _, lay in named]
    names = [n for n, _ in named]
    print(f"{PROG}: {len(mutants)} mutant(s) through the bridge: {len(corpus)} corpus + {len(probes)} probe layouts",
          flush=True)
    t = time.monotonic()
    base_worker = Worker(base)
    base_worker.spawn()  # imports vLLM while the model evaluates the probes
    got_of: dict[str, list[L.Judged]] = {}
    try:
        revision = spec_revision(args.vllm)
        model = Model(revision)
        expected = [model(lay) for lay in layouts]
        base_worker.handshake()
        base_j = L.judge_outcomes(layouts, client.outcomes(base_worker, layouts))
        gaps = sum(1 for b, m in zip(base_j, expected) if b.expressible and b.pair != m)
        print(f"{PROG}: base verdicts and model:{revision} in {time.monotonic() - t:.0f} s ({gaps} layouts where the "
              f"base itself disagrees with the model: ignored by conformance)", flush=True)
        for k in range(0, len(mutants), max(1, args.batch)):
            batch = mutants[k:k + max(1, args.batch)]
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


def behaviour_steps(args, mutants, cells_of, made_of, base, scratch) -> None:
    """Steps 4-5: the known consumer inputs on base and overlays (batches of workers started
    together), then a consumer campaign for each behavioural mutant still alive."""
    from kvproof.selftest import known

    todo = [m for m in mutants if args.full or not _killed(cells_of[m.name])]
    if not todo:
        return
    items = known.inputs()
    t = time.monotonic()
    [base_w] = B.start_consumers([base])
    try:
        try:
            base_known = B.run_consumers(base_w, items)
        except Exception as err:  # the consumer tier is another engineer's: report, do not hide
            print(f"{PROG}: consumer tier not used: {type(err).__name__}: {str(err)[:150]}", flush=True)
            for m in todo:
                cells_of[m.name]["known"] = L.Catch("known", None, 0, f"unavailable: {type(err).__name__}")
            return
        fails = [f"{n}: {b.line}" for (n, _, _), b in zip(items, base_known) if b.failed]
        print(f"{PROG}: {len(items)} known consumer inputs on the base in {time.monotonic() - t:.0f} s "
              f"({len(fails)} FAIL there: {'; '.join(fails)[:200] or 'none'})", flush=True)
        for k in range(0, len(todo), max(1, args.batch)):
            batch = todo[k:k + max(1, args.batch)]
            t = time.monotonic()
            workers = B.start_consumers([made_of[m.name].env for m in batch])
            try:
                start = (time.monotonic() - t) / len(batch)  # the batch's worker start-up, shared
                # the overlays' runs in parallel (each worker is its own process)
                with ThreadPoolExecutor(len(workers)) as pool:
                    runs = list(pool.map(lambda w: _timed(B.run_consumers, w, items), workers))
                for m, w, (got, secs) in zip(batch, workers, runs):
                    def confirm(idx, w=w):
                        sub = [items[i] for i in idx]
                        return B.run_consumers(base_w, sub), B.run_consumers(w, sub)
                    cells_of[m.name].update(B.known(items, base_known, got, start + secs, confirm))
                    c = cells_of[m.name]["known"]
                    print(f"  {m.name}: known {c.cell()} {c.detail[:140]}", flush=True)
            finally:
                for w in workers:
                    w.close()
        live = [m for m in todo if (m.behavioural or args.full) and (args.full or not _killed(cells_of[m.name]))]
        for m in live:
            [w] = B.start_consumers([made_of[m.name].env])
            try:
                c = B.campaign(made_of[m.name].env, args.campaign_seconds, scratch / m.name / "campaign", base_w, w)
            finally:
                w.close()
            cells_of[m.name]["campaign"] = c
            print(f"  {m.name}: campaign {c.cell()} {c.detail[:140]}", flush=True)
    finally:
        base_w.close()


def _timed(fn, *args):
    t = time.monotonic()
    return fn(*args), time.monotonic() - t


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
