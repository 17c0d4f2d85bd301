"""The bridge worker: serves ``kvproof.bridge.runtime.Bridge`` over a pipe, inside a vLLM environment.

Protocol: one JSON object per line on stdin, one reply per line on stdout.
  {"op": "info"}                                   -> {"vllm": ..., "fingerprint": ...}
  {"op": "run", "layouts": [...], "manager": true} -> {"outcomes": [...]}
  {"op": "derive", "configs": [...]}               -> {"results": [...]} (kvproof.bridge.derive)
Importing this module has no side effects; ``main`` parks stdout on stderr
before vLLM is imported, so vLLM's prints never reach the protocol channel.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, TextIO


def handle(bridge: Any, request: dict, import_seconds: float = 0.0) -> dict:
    from kvproof.layout import Layout

    op = request.get("op")
    if op == "info":
        return dict(bridge.info(), import_seconds=import_seconds, python=sys.executable)
    if op == "run":
        manager = request.get("manager", True)
        t0 = time.perf_counter()
        outcomes = [bridge.evaluate(Layout.from_dict(d), manager).to_dict() for d in request["layouts"]]
        return {"outcomes": outcomes, "seconds": time.perf_counter() - t0}
    if op == "derive":  # Config dicts -> what real vLLM derives (imported on first use)
        from kvproof.bridge.derive import derive
        t0 = time.perf_counter()
        results = [derive(d) for d in request["configs"]]
        return {"results": results, "seconds": time.perf_counter() - t0}
    return {"error": f"unknown op {op!r}"}


def serve(bridge: Any, lines: TextIO, out: TextIO, import_seconds: float) -> None:
    for line in lines:
        if not line.strip():
            continue
        try:
            reply = handle(bridge, json.loads(line), import_seconds)
        except Exception as err:  # a bridge bug, not a vLLM verdict: report, keep serving
            reply = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main() -> None:
    protocol = sys.stdout
    sys.stdout = sys.stderr  # keep vLLM's prints off the protocol channel
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    t0 = time.perf_counter()
    from kvproof.bridge.runtime import Bridge

    bridge = Bridge()
    serve(bridge, sys.stdin, protocol, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
