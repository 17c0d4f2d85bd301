"""``kvproof consumer LAYOUT.json [--stream STREAM.json] --vllm R [--json]``: one layout through the
consumer tier (the release's worker, then the tier's judge); a command, above the tiers it drives.

Exit codes: 0 no FAIL/ERROR (OK, WARN, REJECTED, NOT_EXPRESSIBLE), 1 FAIL or
ERROR at the consumer tier, 2 usage or input error (one line on stderr).
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

from kvproof.cliutil import Parser, add_vllm, guarded

PROG = "kvproof consumer"


def _body(argv: Sequence[str] | None) -> int:
    from kvproof import envs
    from kvproof.consumer.stream import Stream, stream_for
    from kvproof.inputs.files import read_text
    from kvproof.inputs.layout import Layout
    from kvproof.tiers import client, registry
    from kvproof.verdicts import Verdict

    p = Parser(prog=PROG, description="Drive the real scheduler, prefix cache, KV events and connector.")
    p.add_argument("layout", help="Layout JSON file")
    p.add_argument("--stream", help="request stream JSON file (default: the Layout's meta.stream, else a "
                                    "shared-prefix stream)")
    add_vllm(p, many=False, required=True, help="release, e.g. 0.28.0")
    p.add_argument("--json", action="store_true", help="print the ConsumerResult as JSON")
    args = p.parse_args(argv)
    layout = Layout.from_json(read_text(args.layout), where=args.layout)
    # a consumer finding carries its stream (Layout.stream); else the default one
    stream = Stream.from_json(read_text(args.stream), where=args.stream) if args.stream else stream_for(layout)
    env = envs.find(args.vllm)
    consumer = registry.streamed()  # the consumer tier: its one client call, then its member's judge
    [result] = client.on(env, [layout.with_stream(stream)], (consumer,))
    j = registry.runner(consumer).judge(layout, result)
    verdict, tier, reason = j.verdict, j.tier, j.line() or j.note
    if args.json:
        print(json.dumps(dict(result.to_dict(), verdict=str(verdict), tier=str(tier), reason=reason), indent=1))
    else:
        print(f"{verdict} [{tier}] vLLM {result.vllm_version} {layout.summary()}: {reason}")
        print(f"  scheduler={result.scheduler_block_size} hash={result.hash_block_size} "
              f"alignment={result.alignment} connector={result.connector_class or '-'} steps={result.steps} "
              f"{result.seconds * 1000:.1f} ms")
    return 1 if verdict in (Verdict.FAIL, Verdict.ERROR) else 0


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(PROG, _body, argv)


if __name__ == "__main__":
    sys.exit(main())
