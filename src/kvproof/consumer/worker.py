"""Consumer worker: runs INSIDE a vLLM env. One JSON request per stdin line, one reply per stdout line.

  {"op": "info"}                                     -> {"vllm": ...}
  {"op": "run", "items": [{"layout": {...}, "stream": {...}}]} -> {"results": [...]}
"""

from __future__ import annotations

import json
import os
import sys
import traceback

_real_stdout = sys.stdout
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from kvproof.consumer.harness import Harness  # noqa: E402  (first: it sets the release's VLLM_CACHE_ROOT)
import vllm  # noqa: E402,I100
from kvproof.consumer.result import ConsumerResult  # noqa: E402
from kvproof.consumer.stream import Stream  # noqa: E402
from kvproof.layout import Layout  # noqa: E402

_HARNESS: Harness | None = None


def harness() -> Harness:
    global _HARNESS
    if _HARNESS is None:
        _HARNESS = Harness()
    return _HARNESS


def run_one(layout: Layout, stream: Stream) -> ConsumerResult:
    return harness().run(layout, stream)


def handle(req: dict) -> dict:
    if req.get("op") == "info":
        return {"vllm": vllm.__version__}
    if req.get("op") == "run":
        out = [run_one(Layout.from_dict(it["layout"]), Stream.from_dict(it["stream"])).to_dict()
               for it in req["items"]]
        return {"results": out}
    return {"error": f"unknown op {req.get('op')!r}"}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = handle(json.loads(line))
        except Exception as err:
            reply = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        _real_stdout.write(json.dumps(reply) + "\n")
        _real_stdout.flush()


if __name__ == "__main__":
    main()
