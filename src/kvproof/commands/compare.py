"""The release differential: the same layouts and request streams on two or more releases, hit by hit.

    kvproof compare --from 0.32.0 --to 0.33.0 [FILES...] [--generated N] [--spec-share F]
    kvproof compare --vllm 0.27.0 --vllm 0.28.0 --vllm 0.32.0 --generated 40
    kvproof compare --models --vllm all     (hits per release, reference models with drafts)

Each input (a Layout, a ledger entry or fuzz finding with its stream, or a
generated one: reference layouts under seeded streams, a share of them with
speculative decoding) runs at the consumer tier on every release, one worker
call per release. Requests are matched by their index in the stream and their
admission order (a resend is its own admission). A request whose prefix hit
(local + external) on a release is more than ``--margin`` tokens below the
release before is a regression, named by its first bad release: one class per
(first bad release, drafter family), whatever the numbers, or per (first bad release,
``scheduler-block``) when the newer release built another scheduler block. The ledger's
regression classes are known: reported, never failing the run. Runs that do not
complete on both sides (not expressible, an exception, a harness error) are
counted, never compared. A FAIL class both releases show whose observations over the
same inputs more than double (by at least JUMP_MIN) is a jump: a new fault may hide in a
known class. An input the judge passes on a release and FAILs on the next is newly failing,
named by its FAIL's class on the newer release. Exit 1 when a regression class or a newly
failing class the ledger does not know, or a jump, was found; 0 when none, 2 on bad input. No vLLM import here.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any, Sequence

from kvproof import envs
from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.consumer.stream import stream_for
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream, random_input
from kvproof.errors import LayoutError, UsageError
from kvproof.fsio import atomic_write
from kvproof.inputs.files import load_files, parse_json
from kvproof.tiers.client import consumed_on
from kvproof.differential import Found, Report, diff, ledgered, regression_classes
from kvproof.inputs.layout import Layout
from kvproof import facts

# Layouts the generated differential corpus covers: each consumer path the speculative work
# touches (one full-attention group, sliding window beside full attention, a Mamba hybrid in
# align mode, MLA, a Qwen3-Next-like hybrid at real block sizes).
REFERENCE_LAYOUTS = (
    {"groups": [{"kind": "full_attention", "block_size": 16}], "cache": {"block_size": 16}},
    {"groups": [{"kind": "full_attention", "block_size": 16},
                {"kind": "sliding_window", "block_size": 16, "sliding_window": 128}], "cache": {"block_size": 16}},
    {"groups": [{"kind": "mamba", "block_size": 64}, {"kind": "full_attention", "block_size": 64}],
     "cache": {"block_size": 64, "mamba_cache_mode": "align"}},
    {"groups": [{"kind": "mla", "block_size": 64}], "cache": {"block_size": 64}},
    {"groups": [{"kind": "mamba", "block_size": 544}] * 3 + [{"kind": "full_attention", "block_size": 544}],
     "cache": {"block_size": 544, "mamba_cache_mode": "align"}},
)


def generated(n: int, spec_share: float, seed: int = 0, method: str | None = None,
              connectors: Sequence[str | None] = (None,)) -> list[tuple[Layout, Stream]]:
    """``n`` inputs: the reference layouts in turn, each under a seeded stream (drafts of
    ``method`` only, when given: ``mtp`` draws one module, two or one per draft token) and the
    ``connectors`` in turn (None: no connector). One connector keeps every seed's inputs as before."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = dict(REFERENCE_LAYOUTS[i % len(REFERENCE_LAYOUTS)])
        base["cache"] = dict(base["cache"], enable_prefix_caching=True)
        # the connector turns with the inputs, out of step with the layouts (5 of them)
        turn = i // len(REFERENCE_LAYOUTS)
        connector = connectors[turn % len(connectors)]
        if connector:
            base["kv_connector"] = connector
        lay = Layout.from_dict(base)
        big = lay.largest_block
        lay, st = random_input(rng, lay, max(64, min(3 * big, 2048)), spec_share, method)
        if connector == "SimpleCPUOffloadConnector" and (turn // len(connectors)) % 2:
            st = replace(st, offload="lazy")  # its two modes in turn, no draw: a seed's streams stay
        out.append((lay, st))
    return out


def load_inputs(paths: Sequence[str]) -> list[tuple[Layout, Stream]]:
    """Layout files (default stream), ledger entries and fuzz findings (their stream), folders of them."""
    def one(text: str, where: str) -> tuple[Layout, Stream]:
        data = parse_json(text, where)
        if not isinstance(data, dict):
            raise LayoutError(f"{where}: not a JSON object")
        lay = Layout.from_dict(data.get("layout", data))
        raw = data.get("stream")  # a ledger entry's; a Layout file's own is its Layout.stream
        return lay, (Stream.from_dict(raw) if raw else stream_for(lay))
    return [item for _, item in load_files(paths, one)]


def _parse(argv: Sequence[str] | None) -> Any:
    ap = Parser(prog="kvproof compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", metavar="FILE", help="layout / ledger / finding JSON files or folders")
    ap.add_argument("--from", dest="old", metavar="RELEASE")
    ap.add_argument("--to", dest="new", metavar="RELEASE")
    add_vllm(ap, default=[], help="releases to chain (oldest first; a subset name like 'ci' works)")
    ap.add_argument("--generated", type=int, default=0, metavar="N", help="N generated inputs (reference layouts)")
    ap.add_argument("--spec-share", type=float, default=0.5, help="share of generated inputs that speculate (the Layout drafts)")
    ap.add_argument("--spec-method", choices=facts.SPEC_METHODS, help="generated inputs that speculate draft with this method only")
    ap.add_argument("--connector", action="append", default=[], metavar="NAME",
                    help="generated inputs turn through these connectors and none (repeatable; 'each': "
                         "every connector the consumer tier drives)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--margin", type=int, default=0, metavar="TOKENS", help="tokens a request may lose")
    ap.add_argument("--models", action="store_true",
                    help="the reference models under their speculative flag sets, derived by each release, "
                         "one stream per configuration: print the hits per release, then the differential")
    ap.add_argument("--derive", action="store_true",
                    help="--models: derive every configuration now, not from the checked-in model tables")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", metavar="FILE", help="also write the JSON report there")
    args = ap.parse_args(argv)
    from kvproof.envs import overlay
    # a release, a subset name, or an overlay's NAME (a PR laid over a release: it sorts last)
    rels = [r for x in ([args.old] if args.old else []) + args.vllm + ([args.new] if args.new else [])
            for r in ([x] if overlay.find(x) is not None else envs.resolve([x]))]
    if len(dict.fromkeys(rels)) < (1 if args.models else 2):
        raise UsageError("kvproof compare: name two releases (--from A --to B, or --vllm twice)")
    if args.derive and not args.models:
        raise UsageError("kvproof compare: --derive goes with --models")
    if args.models and (args.inputs or args.generated):
        raise UsageError("kvproof compare: --models derives its own inputs (no FILEs, no --generated)")
    if not args.models and not args.inputs and args.generated <= 0:
        raise UsageError("kvproof compare: give input FILEs, --generated N or --models")
    if not 0.0 <= args.spec_share <= 1.0 or args.margin < 0:
        raise UsageError("kvproof compare: --spec-share must be in [0, 1] and --margin >= 0")
    args.releases = sorted(dict.fromkeys(rels), key=facts.release_key)
    names = [c for x in args.connector for c in (facts.CONSUMER_CONNECTORS if x == "each" else [x])]
    unknown = [c for c in names if c not in facts.connectors()]
    if unknown:
        raise UsageError(f"kvproof compare: --connector {unknown[0]!r} is no registered connector "
                         f"(e.g. {', '.join(facts.CONSUMER_CONNECTORS)}, or 'each')")
    args.connectors = [None, *dict.fromkeys(names)]
    return args


def new_classes(rep: Report, ledger: Any) -> list[str]:
    """The report's regression classes, and the classes of its newly failing inputs, the ledger does not know."""
    from kvproof.judging.classkey import ClassKey
    keys = list(rep.classes()) + [k for k in dict.fromkeys(rep.newly_failing_classes) if k not in rep.classes()]
    return [k for k in keys if ClassKey.parse(k) not in ledger]


def print_report(rep: Report, ledger: Any = None) -> None:
    print(f"release differential {' -> '.join(rep.releases)}: {rep.inputs} inputs, "
          f"{rep.requests_compared} request admissions compared"
          + (f"; not compared: {', '.join(f'{v} {k}' for k, v in rep.not_compared.items())}" if rep.not_compared else ""))
    from kvproof.judging.classkey import ClassKey
    keys = rep.newly_failing_classes or [""] * len(rep.newly_failing)
    for (rel, prev, h, what), key in zip(rep.newly_failing, keys):
        entry = ledger.get(ClassKey.parse(key)) if ledger is not None and key else None
        known = f"known {ledgered(entry, rel)}" if entry else "NEW"
        print(f"  NEWLY FAILING {known} on {rel} (passed on {prev}): input {h}: {what}" + (f"; class {key}" if key and not entry else ""))
    for rel, prev, key, before, after in rep.jumps:
        print(f"  CLASS JUMPS on {rel} (vs {prev}): {key}: {before} -> {after} observations over the same inputs")
    for rel, (n, tokens) in rep.gains.items():
        print(f"  hit more on {rel}: {n} admissions, +{tokens} tokens")
    # the per-class summary bench/bench_differential.py tables (an input named by its layout hash here)
    classes = regression_classes([Found(r, r.input_hash) for r in rep.regressions], ledger)
    if not classes:
        print("  no regression: no request hit less on a newer release")
    for c in classes:
        worst = c.worst.regression
        known = f" known {c.ledger}" if c.known else " NEW"
        print(f"  REGRESSION{known} {c.key}: first bad release {worst.release} (after {worst.previous}), {c.admissions} "
              f"admissions; worst: input {worst.input_hash} request {worst.request} hit {worst.before} -> "
              f"{worst.after} of {worst.truth} reusable ({worst.spec or 'no drafts'})"
              + (f"; the release built another layout: scheduler block {worst.blocks[0]} -> {worst.blocks[1]}"
                 if worst.blocks[0] != worst.blocks[1] else ""))


def _models(args: Any) -> tuple[list[tuple[Layout, Stream]], dict[str, list[ConsumerResult]]]:
    """The reference-model matrix (:mod:`kvproof.differential.hitmatrix`), printed, as differential inputs:
    a configuration a release refused is a run that is not compared."""
    from kvproof.differential import hitmatrix
    configs, cells, streams = hitmatrix.build(args.releases, fresh=args.derive)
    if not args.json:
        hitmatrix.print_matrix(configs, cells)
    keep = [i for i, st in enumerate(streams) if st is not None]
    newest = {i: next(cells[r][i].layout for r in reversed(args.releases) if cells[r][i].layout) for i in keep}
    items = [(newest[i], streams[i]) for i in keep]
    refused = ConsumerResult("", "", not_expressible="the release refused the configuration")
    runs = {r: [cells[r][i].result or refused for i in keep] for r in args.releases}
    return items, runs


def _body(argv: Sequence[str] | None) -> int:
    args = _parse(argv)
    if args.models:
        items, runs = _models(args)
    else:
        items = load_inputs(args.inputs) + generated(args.generated, args.spec_share, args.seed, args.spec_method,
                                                           args.connectors)
        layouts = [lay.with_stream(st) for lay, st in items]
        # one release at a time: one worker each, started and closed in turn
        runs = {rel: consumed_on([envs.find(rel)], layouts)[0] for rel in args.releases}
    rep = diff(items, runs, args.margin)
    from kvproof.findings.ledger import Ledger
    ledger = Ledger.load()
    new = new_classes(rep, ledger)
    if args.out:
        atomic_write(args.out, json.dumps(rep.to_dict(), indent=1, sort_keys=True) + "\n")
    if args.json:
        print(json.dumps(rep.to_dict(), indent=1, sort_keys=True))
    else:
        print_report(rep, ledger)
    return 1 if new or rep.jumps else 0


def main(argv: Sequence[str] | None = None) -> int:
    return guarded("kvproof compare", _body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
