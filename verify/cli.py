"""``python -m kvproof.verify`` (``make verify``): the proof run, a CI gate.

properties x revisions x N = 1..max-groups. Per (revision, property) a chain
walks N upwards; per N the ``engine`` premise is asked first (a witness
there is one for ``free`` too), then ``free``. A witness found at N is
replayed padded at N+1 before Z3 is asked again. Every query runs in a
killable worker process with a hard deadline. Each witness is labelled
reachable / free / unreachable (kvproof.verify.reachability; on a worker as
soon as its chain ends, the parent only for what a worker did not label) and the run is
compared with the checked-in baseline of accepted findings
(kvproof.verify.baseline).

Exit codes: 0 the run matches the baseline; 1 a new finding or any change
against it (each named); 3 something UNKNOWN (never PROVED) or the model is
stale for an installed vLLM; 2 usage error. With --no-baseline: 0 every
safety property PROVED, 1 a safety counterexample, 3 UNKNOWN or stale.

Nothing in the checkout changes: reports and minimised counterexamples go
to <out>/verify (default ./out/verify); only --record publishes
counterexamples into the corpus, only --update-baseline rewrites the baseline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvproof.spec import model as M
from kvproof import revisions as R
from kvproof.spec.properties import PROPERTIES
from kvproof.spec.query import pad
from kvproof.verify import baseline as B
from kvproof.verify import reachability, report
from kvproof.verify.drift import check_envs
from kvproof.verify.report import CEX, PROVED, UNKNOWN, WITNESS, status
from kvproof.verify.runner import Pool, run_corpus

from kvproof import corpus as corpus_io
from kvproof.cliutil import Parser, guarded
from kvproof.errors import UsageError
from kvproof.inputs.layout import Layout
from kvproof.settings import settings
from kvproof.verdicts import ProofStatus

EXIT_OK, EXIT_CHANGED, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3
EXIT_PROVED, EXIT_CEX = EXIT_OK, EXIT_CHANGED  # the --no-baseline names
PROG = "kvproof verify"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--max-groups", type=int, default=8, help="largest group count N (default 8)")
    p.add_argument("--min-groups", type=int, default=1, help="smallest group count N (default 1)")
    p.add_argument("--revisions", default=",".join(R.DEFAULT_REVISIONS),
                   help=f"comma list of revisions (default {','.join(R.DEFAULT_REVISIONS)})")
    p.add_argument("--properties", default="", help="comma list of substrings selecting properties")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per query (default 20)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="worker processes")
    p.add_argument("--out", default=None, help="report folder (default $KVPROOF_OUT/verify, i.e. out/verify)")
    p.add_argument("--record", action="store_true",
                   help="also publish minimised counterexamples into the corpus (default: only <out>/counterexamples)")
    p.add_argument("--corpus", default=None, help="corpus folder for --record (default $KVPROOF_CORPUS, i.e. corpus/)")
    p.add_argument("--no-corpus", action="store_true", help="write no counterexample files at all")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--baseline", default=None,
                   help="baseline of accepted findings (default: verify/baseline.json of the kvproof package)")
    g.add_argument("--no-baseline", action="store_true",
                   help="no baseline: exit 1 on any safety counterexample (the old gate)")
    p.add_argument("--update-baseline", action="store_true",
                   help="rewrite the baseline with this run's findings (merged per revision, property and N)")
    p.add_argument("--max-block", type=int, default=M.MAX_BLOCK,
                   help=f"largest raw block size in the domain (default {M.MAX_BLOCK}; 0 = unbounded)")
    p.add_argument("--dcp", default=",".join(map(str, M.DCP_VALUES)), help="dcp values (comma list)")
    p.add_argument("--no-drift", action="store_true", help="skip the drift check of installed vLLMs")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the result cache (<cache_home>/verify/results.json, "
                        "kvproof.verify.cache: a result is reused only while its task, z3 and every source "
                        "it was computed from are unchanged; UNKNOWN is never stored)")
    p.add_argument("--no-induction", action="store_true",
                   help="skip the proof for every N by induction over the groups (kvproof.spec.induction), "
                        "which by default prints 'PROVED for all N (induction)' beside the bounded rows")
    p.add_argument("--verbose", "-v", action="store_true", help="print the full per-property table too")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    return p


def _parse(argv) -> argparse.Namespace:
    args = parser().parse_args(argv)
    revs = [r.strip() for r in args.revisions.split(",") if r.strip()]
    bad = [r for r in revs if r not in R.REVISIONS]
    if bad or not revs:
        raise UsageError(f"unknown revision(s) {', '.join(bad) or '(none)'}; modelled: {', '.join(R.REVISIONS)}")
    args.revision_list = revs
    if not 1 <= args.min_groups <= args.max_groups <= 64:
        raise UsageError("need 1 <= --min-groups <= --max-groups <= 64")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.jobs < 1:
        raise UsageError("--jobs must be >= 1")
    if args.max_block < 0:
        raise UsageError("--max-block must be >= 0")
    try:
        args.dcp_values = tuple(int(d) for d in args.dcp.split(","))
    except ValueError:
        raise UsageError(f"--dcp {args.dcp!r}: want a comma list of integers") from None
    if not args.dcp_values or args.dcp_values[0] != 1 or any(d < 1 for d in args.dcp_values):
        raise UsageError("--dcp must start with 1 and hold positive integers")
    sel = [s.strip() for s in args.properties.split(",") if s.strip()]
    args.property_list = [p for p in PROPERTIES if not sel or any(s in p.key for s in sel)]
    if not args.property_list:
        raise UsageError(f"--properties {args.properties!r} selects nothing")
    if args.update_baseline and args.no_baseline:
        raise UsageError("--update-baseline and --no-baseline contradict each other")
    if args.record and args.no_corpus:
        raise UsageError("--record and --no-corpus contradict each other")
    cfg = settings()
    args.out_path = Path(args.out) if args.out else cfg.out / "verify"
    args.corpus_path = Path(args.corpus) if args.corpus else cfg.corpus
    args.baseline_path = Path(args.baseline) if args.baseline else B.default_path()
    args.baseline_data = None
    if not args.no_baseline and not (args.update_baseline and not args.baseline_path.exists()):
        args.baseline_data = B.load(args.baseline_path)  # a bad baseline is a usage error, before the run
    return args


class Progress:
    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done, self.quiet = total, 0, quiet
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0

    def tick(self, line: str) -> None:
        self.done += 1
        if self.quiet:
            return
        msg = f"[{self.done}/~{self.total} {time.monotonic() - self.t0:5.1f}s] {line}"
        if self.tty:
            sys.stderr.write("\r\033[K" + msg[:150])
            sys.stderr.flush()
        elif time.monotonic() - self.last > 2 or "COUNTEREXAMPLE" in line or "UNKNOWN" in line:
            sys.stderr.write(msg + "\n")
            self.last = time.monotonic()

    def end(self) -> None:
        if self.tty and not self.quiet:
            sys.stderr.write("\r\033[K")


def run(args: argparse.Namespace) -> dict:
    """Run the whole matrix; returns the report dict."""
    chains = [(rev, p) for rev in args.revision_list for p in args.property_list]
    rows: dict[tuple, dict] = {}
    state = {c: {"n": None, "seed": {"engine": None, "free": None}} for c in chains}
    tasks: dict[int, tuple] = {}
    next_id = [0]

    def ns_for(p):
        return [n for n in range(args.min_groups, args.max_groups + 1) if p.applies(n)]

    total = sum(2 * len(ns_for(p)) for _, p in chains)
    progress = Progress(total, args.quiet)

    def spec(rev, p, n, premise):
        seed = state[(rev, p)]["seed"][premise]
        return {"revision": rev, "property": p.key, "n": n, "premise": premise, "timeout": args.timeout,
                "max_block": args.max_block, "dcp_values": list(args.dcp_values),
                "seed": pad(seed, n) if seed else None}

    def submit(rev, p, n, premise):
        tid = next_id[0]
        next_id[0] += 1
        tasks[tid] = (rev, p, n, premise)
        return (tid, spec(rev, p, n, premise))

    # --- the inductive proof (every N): per revision one task per base/step obligation, first in
    # the queue; per (revision, property) the transfer and the conclusions once its bounded chain
    # is done, for the premises the bounded search found no witness in (else it does not apply)
    induction: dict[str, dict] = {rev: {} for rev in args.revision_list}
    itasks: dict[int, str] = {}

    def isubmit(rev, oids, timeout):
        tid = next_id[0]
        next_id[0] += 1
        itasks[tid] = rev
        return (tid, {"revision": rev, "obligations": oids, "timeout": timeout, "max_block": args.max_block,
                      "dcp_values": list(args.dcp_values), "minimise": True})

    ltasks: dict[int, tuple] = {}
    labels_done: dict[tuple, tuple] = {}
    # the workers' seconds per kind of task (a phase breakdown of the solver phase; cached: 0)
    spent = {"bounded": 0.0, "induction": 0.0, "label": 0.0, "corpus": 0.0}

    def count(kind, result):
        if not result.get("cached"):
            spent[kind] += float(result.get("seconds") or 0.0)

    def lsubmit(rev, p):
        """The chain's finding labelled in a worker while others solve (``label`` takes it from there)."""
        entry = report.summarise({"rows": [r for (rv, key, _), r in rows.items() if rv == rev and key == p.key]})
        task = label_task(entry[0], args) if entry else None
        if task is None:
            return []
        tid = next_id[0]
        next_id[0] += 1
        ltasks[tid] = (rev, p.key, task)
        return [(tid, {"label": task, "timeout": args.timeout})]

    ctasks: dict[int, tuple] = {}
    corpus_done: dict[tuple, tuple] = {}

    def csubmit(rev, p):
        """The chain's first witnesses minimised in a worker that holds the revision's encodings
        (``write_corpus`` publishes them; the parent would build the encodings again, cold)."""
        if args.no_corpus:
            return []
        out = []
        mine = [r for (rv, key, _), r in rows.items() if rv == rev and key == p.key]
        for (_, key, premise), w in sorted(first_witnesses(mine).items()):
            tid = next_id[0]
            next_id[0] += 1
            task = corpus_task(rev, key, premise, w["layout"], args)
            ctasks[tid] = ((rev, key, premise), task)
            out.append((tid, {"corpus": task, "timeout": args.timeout}))
        return out

    def chain_done(c):
        return csubmit(*c) + _chain_done(c)

    def _chain_done(c):
        rev, p = c
        if args.no_induction:
            return lsubmit(rev, p)
        premises = [pr for pr in ("engine", "free")
                    if not any(status((r.get(pr) or {}).get("status")) in WITNESS
                               for (rv, key, _), r in rows.items() if rv == rev and key == p.key)]
        if not premises:
            return lsubmit(rev, p)
        oids = [f"transfer:{p.key}"] + [f"conclusion:{p.key}:{pr}" for pr in premises]
        return [isubmit(rev, oids, args.timeout / len(oids))] + lsubmit(rev, p)

    def start_chain(c, after=None):
        rev, p = c
        ns = [n for n in ns_for(p) if after is None or n > after]
        if not ns:
            return chain_done(c) if after is not None else []
        state[c]["n"] = ns[0]
        return [submit(rev, p, ns[0], "engine")]

    def on_result(tid, result):
        if tid in ctasks:
            where, task = ctasks.pop(tid)
            count("corpus", result)
            if result.get("status") == "MINIMISED":  # else (killed, failed) the parent minimises it
                corpus_done[where] = (task, result["layout"])
            return []
        if tid in ltasks:
            rev, key, task = ltasks.pop(tid)
            count("label", result)
            if result.get("status") == "LABELLED":  # else (killed, failed) the parent labels it
                labels_done[(rev, key)] = (task, result)
            progress.tick(f"{rev} {key} label: {result.get('label', result.get('detail', ''))}")
            return []
        if tid in itasks:
            rev = itasks.pop(tid)
            count("induction", result)
            obligations = result.get("obligations") or []
            if not obligations:  # the worker was killed or died: every obligation it held is UNKNOWN
                obligations = [{"id": "(task)", "status": UNKNOWN, "seconds": result.get("seconds", 0.0),
                                "detail": result.get("detail", "")}]
            for o in obligations:
                induction[rev][o["id"]] = dict(o, status=status(o["status"]))
            progress.tick(f"{rev} induction: {', '.join(o['id'] + ' ' + str(o['status']) for o in obligations)}"[:140])
            return []
        rev, p, n, premise = tasks.pop(tid)
        count("bounded", result)
        result = dict(result, status=status(result["status"]))  # strings or ProofStatus from run_query
        c = (rev, p)
        row = rows.setdefault((rev, p.key, n), {"revision": rev, "property": p.key, "contract": p.contract,
                                                "scenario": p.scenario, "kind": p.kind, "n": n})
        row[premise] = result
        progress.tick(f"{rev} {p.key} N={n} {premise}: {result['status']} {result.get('detail', '')[:60]}")
        if result["status"] in WITNESS and result.get("layout"):
            state[c]["seed"][premise] = result["layout"]  # the latest witness pads best to N+1
        if premise == "engine":
            if result["status"] in WITNESS:
                # an engine witness is a free one too (free drops a premise)
                row["free"] = dict(result, how="engine witness")
                progress.tick(f"{rev} {p.key} N={n} free: {result['status']} (engine witness)")
                state[c]["seed"]["free"] = result["layout"]
                return start_chain(c, after=n)
            return [submit(rev, p, n, "free")]
        return start_chain(c, after=n)

    first = []
    if not args.no_induction:
        from kvproof.spec.induction import INVARIANTS
        for rev in args.revision_list:
            first += [isubmit(rev, [f"{phase}:{i.id}"], args.timeout) for phase in ("base", "step")
                      for i in INVARIANTS]
    for c in chains:
        first += start_chain(c)
    pool = Pool(args.jobs, cache=getattr(args, "cache", None))
    t0 = time.monotonic()
    try:
        pool.run(first, on_result)
    finally:
        pool.close()
        progress.end()
    wall = time.monotonic() - t0
    args.labels_done = labels_done
    args.corpus_done = corpus_done
    return {"rows": [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1], k[2]))], "wall_seconds": wall,
            "solver_seconds": wall, "killed": pool.killed, "workers_started": pool.started,
            "induction": {} if args.no_induction else induction, "worker_seconds": spent}


def label_task(p: dict, args) -> dict | None:
    """The labelling task of one summarised (revision, property) entry; None without a witness."""
    w = p["witness"]
    if p["verdict"] not in WITNESS or not w or not w.get("layout"):
        return None
    return {"revision": p["revision"], "property": p["property"], "layout": w["layout"],
            "premise": w["premise"], "engine_status": str(w["engine_status"]) if w["engine_status"] is not None
            else None, "max_block": args.max_block, "dcp_values": list(args.dcp_values)}


def label(result: dict, args) -> list[dict]:
    """Per (revision, property) entries with reachability, reason and witness config (for witnesses)."""
    props = report.summarise(result)
    cache = getattr(args, "cache", None)
    done = getattr(args, "labels_done", {})
    for p in props:
        p["reachability"], p["reason"], p["witness_config"] = None, "", None
        task = label_task(p, args)
        if task is None:
            continue
        w = p["witness"]
        pre = done.get((p["revision"], p["property"]))
        hit = pre[1] if pre is not None and pre[0] == task else None  # labelled in a worker during the run
        if hit is None and cache is not None:
            hit = cache.get("label", task)
        try:
            if hit is not None:
                lab, reason, cfg = reachability.Reachability[hit["label"]], hit["reason"], hit["witness"]
            else:
                lab, reason, cfg = reachability.label(p["revision"], p["property"], w["layout"],
                                                      premise=w["premise"], engine_status=w["engine_status"],
                                                      max_block=args.max_block, dcp_values=args.dcp_values)
                if cache is not None:
                    from kvproof.verify.cache import label_sources, loaded_sources
                    cache.put("label", task, {"status": "LABELLED", "label": lab.name, "reason": reason,
                                              "witness": cfg}, loaded_sources() + label_sources())
        except Exception as err:  # noqa: BLE001 -- a labelling bug must not hide the finding; unlabelled is FREE (not accepted)
            lab, reason, cfg = reachability.Reachability.FREE, f"labelling failed: {type(err).__name__}: {err}", None
        p["reachability"], p["reason"] = lab, reason
        p["witness_config"] = cfg["config"] if cfg else None
        p["witness_release"] = cfg["release"] if cfg else None
        p["witness_derived_layout"] = cfg["layout"] if cfg else None
        p["witness_layout"] = w["layout"]
    return props


def first_witnesses(rows) -> dict[tuple, dict]:
    """(revision, property, premise) -> the smallest-N safety counterexample's ``n`` and ``layout``
    (a free one only where the same row has no engine one: that is the stronger statement)."""
    firsts: dict[tuple, dict] = {}
    for row in rows:
        if row["kind"] != "safety":
            continue
        for premise in ("engine", "free"):
            r = row.get(premise)
            if not r or status(r["status"]) != CEX or not r.get("layout"):
                continue
            if premise == "free" and status(row.get("engine", {}).get("status")) == CEX:
                continue
            key = (row["revision"], row["property"], premise)
            if key not in firsts or row["n"] < firsts[key]["n"]:
                firsts[key] = {"n": row["n"], "layout": r["layout"]}
    return firsts


def corpus_task(rev: str, key: str, premise: str, layout: dict, args) -> dict:
    """One first witness's minimisation (``minimise_corpus``'s arguments), for a worker or the parent."""
    return {"revision": rev, "property": key, "premise": premise, "layout": layout, "max_block": args.max_block,
            "dcp_values": list(args.dcp_values), "seconds": CORPUS_SECONDS}


CORPUS_SECONDS = 10  # each first witness's minimisation, at most


def write_corpus(result: dict, folders: list[Path], args) -> list[dict]:
    """Minimise the first witness of each (revision, property, premise) and publish it into ``folders``.
    A minimisation a worker made for the same task (``args.corpus_done``) is taken as it is."""
    written = []
    firsts = first_witnesses(result["rows"])
    done = getattr(args, "corpus_done", {})
    labels = {(p["revision"], p["property"]): p for p in result.get("properties", [])}
    for (rev, key, premise), w in sorted(firsts.items()):
        task = corpus_task(rev, key, premise, w["layout"], args)
        got = done.get((rev, key, premise))
        lay = Layout.from_dict(got[1] if got is not None and got[0] == task else run_corpus(task)["layout"])
        contract = key.split("[")[0]
        meta = {"revision": rev, "contract": contract, "premise": premise, "found_by": "z3", "property": key,
                "scenario": key.split("[")[1].rstrip("]")}
        entry = labels.get((rev, key)) or {}
        if entry.get("reachability") is not None and (entry.get("witness") or {}).get("premise") == premise:
            meta["reachability"] = str(entry["reachability"])
        lay = lay.with_meta(**meta)
        for folder in folders:
            path, new = corpus_io.publish(lay, folder)
            written.append({"revision": rev, "property": key, "premise": premise, "path": str(path), "new": new,
                            "summary": lay.summary()})
    return written


def _run(args) -> int:
    t_start = time.monotonic()
    args.cache = None
    if not args.no_cache:
        from kvproof.verify.cache import Cache
        args.cache = Cache()
    phases: dict[str, float] = {}
    t = time.monotonic()
    # the drift check reads the installed releases while the workers solve (the parent only waits
    # on them): its phase is the wait for it after the solver phase, usually none
    with ThreadPoolExecutor(max_workers=1) as ex:
        drifting = None if args.no_drift else ex.submit(check_envs)
        result = run(args)
        phases["solver"], t = time.monotonic() - t, time.monotonic()
        drift = [] if drifting is None else drifting.result()
    phases["drift"], t = time.monotonic() - t, time.monotonic()
    for d in drift:
        sys.stderr.write(f"{PROG}: {d['message']}\n")
    result["drift"] = drift
    result["settings"] = {"revisions": args.revision_list, "max_groups": args.max_groups,
                          "min_groups": args.min_groups, "timeout": args.timeout, "max_block": args.max_block,
                          "dcp_values": list(args.dcp_values), "jobs": args.jobs,
                          "properties": [p.key for p in args.property_list]}
    result["settings"]["induction"] = not args.no_induction
    result["properties"] = label(result, args)
    phases["labels"], t = time.monotonic() - t, time.monotonic()
    if args.cache is not None:
        args.cache.save()
        result["cache"] = {"hits": args.cache.hits, "misses": args.cache.misses, "stored": args.cache.stored,
                           "path": str(args.cache.path)}
    if not args.no_induction:
        report.add_unbounded(result)
    if args.no_corpus:
        result["corpus"] = []
    else:
        folders = [args.out_path / "counterexamples"] + ([args.corpus_path] if args.record else [])
        result["corpus"] = write_corpus(result, folders, args)
    phases["corpus"], t = time.monotonic() - t, time.monotonic()
    if not args.no_baseline:
        cmp = B.compare(args.baseline_data, result["properties"], result["settings"])
        cmp["path"] = str(args.baseline_path)
        if args.update_baseline:
            B.write(args.baseline_path, B.updated(args.baseline_data, result["properties"], result["settings"]))
            cmp["updated"], cmp["created"] = True, args.baseline_data is None
        result["baseline"] = cmp
    code = exit_code(result)
    result["exit_code"] = code
    phases["baseline"] = time.monotonic() - t
    # the phases of the wall (seconds; start-up before _run is outside it, see bench/bench_verify.py)
    result["phases"] = {k: round(v, 3) for k, v in phases.items()}
    result["wall_seconds"] = time.monotonic() - t_start  # the whole proof run: drift, solver, labels, baseline
    paths = report.write_all(result, args.out_path)
    sys.stdout.write(report.terminal(result, verbose=args.verbose))
    if not args.verbose:
        sys.stdout.write(f"\nfull table: --verbose, or {paths[2]}\n")
    sys.stdout.write(f"reports: {', '.join(str(p) for p in paths)}\n")
    sys.stdout.write(f"exit {code} ({exit_name(result, code)})\n")
    return code


def main(argv: list[str] | None = None) -> int:
    return guarded(PROG, lambda a: _run(_parse(a)), argv)


def exit_name(result: dict, code: int) -> str:
    if code == EXIT_USAGE:
        return "usage error"
    if code == EXIT_UNKNOWN:
        return "UNKNOWN or stale model"
    if "baseline" not in result:
        return "all safety properties proved" if code == EXIT_OK else "safety counterexample found"
    if code == EXIT_OK:
        return "baseline rewritten" if result["baseline"].get("updated") else "matches the baseline"
    return f"{len(result['baseline']['changes'])} change(s) against the baseline"


def _statuses(result: dict):
    for row in result["rows"]:
        for p in ("engine", "free"):
            yield row["kind"], status(row.get(p, {}).get("status"))


def exit_code(result: dict) -> int:
    """0 / 1 / 3 (see the module doc). A definite change (1) outranks UNKNOWN (3)."""
    b = result.get("baseline")
    unknown = (any(s == UNKNOWN for _, s in _statuses(result))
               or any(d.get("stale") for d in result.get("drift", []))
               or bool((b or {}).get("unknown")))
    if b is None:
        if any(k == "safety" and s == CEX for k, s in _statuses(result)):
            return EXIT_CHANGED
    elif b["changes"] and not b.get("updated"):
        return EXIT_CHANGED
    return EXIT_UNKNOWN if unknown else EXIT_OK


__all__ = ["PROVED", "ProofStatus", "exit_code", "main", "run"]


if __name__ == "__main__":
    raise SystemExit(main())
