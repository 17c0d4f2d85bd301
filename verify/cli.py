"""``python -m kvproof.verify`` (``make verify``): the proof run.

properties x revisions x N = 1..max-groups. Per (revision, property) a chain
walks N upwards; per N the ``engine`` premise is asked first (a witness
there is one for ``free`` too), then ``free``. A witness found at N is
replayed padded at N+1 before Z3 is asked again. Every query runs in a
killable worker process with a hard deadline.

Exit codes: 0 every safety property PROVED; 1 a counterexample was found;
3 no counterexample but something UNKNOWN (or the model is stale for an
installed vLLM); 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from kvproof.spec import model as M
from kvproof.spec import revisions as R
from kvproof.spec.properties import PROPERTIES
from kvproof.spec.query import COUNTEREXAMPLE, PROVED, UNKNOWN, WARNING, minimise_corpus, pad
from kvproof import corpus as corpus_io
from kvproof.verify import report
from kvproof.verify.drift import check_envs
from kvproof.verify.runner import Pool

EXIT_PROVED, EXIT_CEX, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3


def default_corpus() -> Path:
    checkout = Path(__file__).resolve().parents[1]
    return checkout / "corpus" if (checkout / "src" / "kvproof").exists() else Path.cwd() / "corpus"


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit code 2 through main's return, not SystemExit
        raise _Usage(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m kvproof.verify", description=__doc__.split("\n\n")[0])
    p.add_argument("--max-groups", type=int, default=8, help="largest group count N (default 8)")
    p.add_argument("--min-groups", type=int, default=1, help="smallest group count N (default 1)")
    p.add_argument("--revisions", default=",".join(R.DEFAULT_REVISIONS),
                   help=f"comma list of revisions (default {','.join(R.DEFAULT_REVISIONS)})")
    p.add_argument("--properties", default="", help="comma list of substrings selecting properties")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per query (default 20)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="worker processes")
    p.add_argument("--out", default="out/verify", help="report folder (default out/verify)")
    p.add_argument("--corpus", default=None, help="corpus folder (default <checkout>/corpus)")
    p.add_argument("--no-corpus", action="store_true", help="do not write counterexamples")
    p.add_argument("--max-block", type=int, default=M.MAX_BLOCK,
                   help=f"largest raw block size in the domain (default {M.MAX_BLOCK}; 0 = unbounded)")
    p.add_argument("--dcp", default=",".join(map(str, M.DCP_VALUES)), help="dcp values (comma list)")
    p.add_argument("--no-drift", action="store_true", help="skip the drift check of installed vLLMs")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    return p


def _parse(argv) -> argparse.Namespace:
    args = parser().parse_args(argv)
    revs = [r.strip() for r in args.revisions.split(",") if r.strip()]
    bad = [r for r in revs if r not in R.REVISIONS]
    if bad or not revs:
        raise _Usage(f"unknown revision(s) {', '.join(bad) or '(none)'}; modelled: {', '.join(R.REVISIONS)}")
    args.revision_list = revs
    if not 1 <= args.min_groups <= args.max_groups <= 64:
        raise _Usage("need 1 <= --min-groups <= --max-groups <= 64")
    if args.timeout <= 0:
        raise _Usage("--timeout must be positive")
    if args.max_block < 0:
        raise _Usage("--max-block must be >= 0")
    try:
        args.dcp_values = tuple(int(d) for d in args.dcp.split(","))
    except ValueError:
        raise _Usage(f"--dcp {args.dcp!r}: want a comma list of integers") from None
    if not args.dcp_values or args.dcp_values[0] != 1 or any(d < 1 for d in args.dcp_values):
        raise _Usage("--dcp must start with 1 and hold positive integers")
    sel = [s.strip() for s in args.properties.split(",") if s.strip()]
    args.property_list = [p for p in PROPERTIES if not sel or any(s in p.key for s in sel)]
    if not args.property_list:
        raise _Usage(f"--properties {args.properties!r} selects nothing")
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

    def start_chain(c, after=None):
        rev, p = c
        ns = [n for n in ns_for(p) if after is None or n > after]
        if not ns:
            return []
        state[c]["n"] = ns[0]
        return [submit(rev, p, ns[0], "engine")]

    def on_result(tid, result):
        rev, p, n, premise = tasks.pop(tid)
        c = (rev, p)
        row = rows.setdefault((rev, p.key, n), {"revision": rev, "property": p.key, "contract": p.contract,
                                                "scenario": p.scenario, "kind": p.kind, "n": n})
        row[premise] = result
        progress.tick(f"{rev} {p.key} N={n} {premise}: {result['status']} {result.get('detail', '')[:60]}")
        if result["status"] in (COUNTEREXAMPLE, WARNING) and result.get("layout"):
            state[c]["seed"][premise] = result["layout"]  # the latest witness pads best to N+1
        if premise == "engine":
            if result["status"] in (COUNTEREXAMPLE, WARNING):
                # an engine witness is a free one too (free drops a premise)
                row["free"] = dict(result, how="engine witness")
                progress.tick(f"{rev} {p.key} N={n} free: {result['status']} (engine witness)")
                state[c]["seed"]["free"] = result["layout"]
                return start_chain(c, after=n)
            return [submit(rev, p, n, "free")]
        return start_chain(c, after=n)

    first = []
    for c in chains:
        first += start_chain(c)
    pool = Pool(args.jobs)
    t0 = time.monotonic()
    try:
        pool.run(first, on_result)
    finally:
        pool.close()
        progress.end()
    wall = time.monotonic() - t0
    return {"rows": [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1], k[2]))], "wall_seconds": wall,
            "killed": pool.killed}


def write_corpus(result: dict, folder: Path, args) -> list[dict]:
    """Minimise the first witness of each (revision, property, premise) and write it."""
    written = []
    firsts: dict[tuple, dict] = {}
    for row in result["rows"]:
        if row["kind"] != "safety":
            continue
        for premise in ("engine", "free"):
            r = row.get(premise)
            if not r or r["status"] != COUNTEREXAMPLE or not r.get("layout"):
                continue
            if premise == "free" and row.get("engine", {}).get("status") == COUNTEREXAMPLE:
                continue  # the engine one is the stronger statement
            key = (row["revision"], row["property"], premise)
            if key not in firsts or row["n"] < firsts[key]["n"]:
                firsts[key] = {"n": row["n"], "layout": r["layout"]}
    for (rev, key, premise), w in sorted(firsts.items()):
        lay = minimise_corpus(w["layout"], rev, key, premise, args.max_block, args.dcp_values, seconds=10)
        contract = key.split("[")[0]
        lay = lay.with_meta(revision=rev, contract=contract, premise=premise, found_by="z3",
                            property=key, scenario=key.split("[")[1].rstrip("]"))
        path, new = corpus_io.publish(lay, folder)
        written.append({"revision": rev, "property": key, "premise": premise, "path": str(path), "new": new,
                        "summary": lay.summary()})
    return written


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse(argv)
    except _Usage as err:
        sys.stderr.write(f"kvproof verify: {err}\n")
        return EXIT_USAGE
    drift = [] if args.no_drift else check_envs()
    for d in drift:
        sys.stderr.write(f"kvproof verify: {d['message']}\n")
    result = run(args)
    result["drift"] = drift
    result["settings"] = {"revisions": args.revision_list, "max_groups": args.max_groups,
                          "min_groups": args.min_groups, "timeout": args.timeout, "max_block": args.max_block,
                          "dcp_values": list(args.dcp_values), "jobs": args.jobs,
                          "properties": [p.key for p in args.property_list]}
    if not args.no_corpus:
        folder = Path(args.corpus) if args.corpus else default_corpus()
        result["corpus"] = write_corpus(result, folder, args)
    else:
        result["corpus"] = []
    code = exit_code(result)
    result["exit_code"] = code
    out = Path(args.out)
    paths = report.write_all(result, out)
    sys.stdout.write(report.terminal(result))
    sys.stdout.write(f"\nreports: {', '.join(str(p) for p in paths)}\n")
    sys.stdout.write(f"exit {code} ({EXIT_NAMES[code]})\n")
    return code


EXIT_NAMES = {EXIT_PROVED: "all proved", EXIT_CEX: "counterexample found", EXIT_UNKNOWN: "unknown",
              EXIT_USAGE: "usage error"}


def exit_code(result: dict) -> int:
    statuses = [(row["kind"], row.get(p, {}).get("status")) for row in result["rows"] for p in ("engine", "free")]
    if any(k == "safety" and s == COUNTEREXAMPLE for k, s in statuses):
        return EXIT_CEX
    if any(s == UNKNOWN for _, s in statuses) or any(d.get("stale") for d in result.get("drift", [])):
        return EXIT_UNKNOWN
    return EXIT_PROVED


__all__ = ["main", "run", "exit_code", "PROVED"]


if __name__ == "__main__":
    raise SystemExit(main())
