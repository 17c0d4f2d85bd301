"""``kvproof replay FILE... [--tier function|manager|consumer|engine|all] [--vllm V ...] [--json]``.

Exit codes: 0 every replay agrees with the recorded expectations (or none are
recorded), 1 a replay contradicts an expectation, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Sequence

from kvproof.inputs import files as inputs
from kvproof.cliutil import Parser, add_tier, add_vllm, guarded
from kvproof.errors import UsageError
from kvproof.replay import core

PROG = "kvproof replay"


def parser(prog: str = PROG) -> Parser:
    ap = Parser(prog=prog, description="Replay counterexamples through the real resolver, the real "
                                        "KVCacheManager and real engine boots of tiny hybrid models.")
    ap.add_argument("files", nargs="+", metavar="FILE", help="layout JSON files or folders of them (corpus/)")
    add_tier(ap, core.REPLAY_TIERS, default=core.REPLAY_TIERS,
             help="consumer: the real scheduler driven by the file's meta.stream (else a default "
                  "shared-prefix stream)")
    add_vllm(ap, help="release to replay on (repeatable; default: every managed release installed)")
    ap.add_argument("--no-synth", action="store_true",
                    help="engine tier: only recipes stored in the file or cached; never search")
    ap.add_argument("--record", action="store_true",
                    help="write the observed verdicts (and the engine recipe) into each file's meta as expectations")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    return ap


def releases_of(args: argparse.Namespace) -> list[str]:
    releases = args.vllm or core.default_releases()
    if not releases:
        raise UsageError("no managed vLLM environment is installed (make envs / kvproof env create RELEASE)")
    return sorted(dict.fromkeys(releases), key=core.version_key)


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    named = inputs.load_layouts(args.files)
    echo = (lambda s: print(s, file=sys.stderr)) if args.json else print
    rows = core.replay(named, releases_of(args), args.tier, echo=echo, synthesise=not args.no_synth)
    if args.record:  # the rows read their expectations from the files as recorded now
        recorded = {name: core.record(name, lay, rows) for name, lay in named}
        rows = [replace(r, layout=recorded.get(r.name, r.layout)) for r in rows]
    bad = [r for r in rows if core.contradicts(r)]
    if args.json:
        print(json.dumps({"results": [core.replay_dict(r) for r in rows], "contradictions": len(bad)}, indent=2))
    else:
        print(core.format_table(rows))
        if bad:
            print(f"\n{len(bad)} replay(s) contradict the recorded expectation")
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Usage and input errors: one line ``kvproof replay: ...`` on stderr, exit 2."""
    return guarded(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
