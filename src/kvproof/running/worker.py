"""The one worker of a release: every tier inside its vLLM environment, served over a pipe.

Derive (``kvproof.bridge.derive``) and every part a tier asks for, answered by the serving function
its member names (``kvproof.bridge.runtime.outcomes``, ``kvproof.consumer.worker.answers``), in one process. It sits above both
folders: the bridge and the consumer tier import nothing of it (it is started by name,
``python -m kvproof.running.worker``, by ``kvproof.bridge.client.Worker``).

Protocol: one JSON object per line on stdin, one reply per line on stdout.
  {"op": "info"}                                   -> {"vllm": ..., "fingerprint": ...}
  {"op": "environ"}                                -> {"environ": {...}} (the process's variables)
  {"op": "batch", "configs": [{"key", "config"}], "layouts": [{"key", "layout"}],
   "asks": {part: {"serve": "kvproof.mod:fn", "with": {...}}}}
      -> {"derived": {key: ...}, part: {key: ...}, ...}: the configs derived, then the given
         layouts and the derived ones answered by each part's serving function, in one round trip;
         every answer under its input's key (a derived layout's under its config's). The one
         door for every tier (kvproof.bridge.client.Worker.batch): no reply is matched by position.
One process per release serves every tier: no second vLLM import for the consumer tier.
Importing this module has no side effects; ``main`` parks stdout on stderr
before vLLM is imported, so vLLM's prints never reach the protocol channel, and
exits with its client (``exit_with_parent``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from typing import Any, TextIO


def handle(bridge: Any, request: dict, import_seconds: float = 0.0) -> dict:
    op = request.get("op")
    if op == "info":
        return dict(bridge.info(), import_seconds=import_seconds, python=sys.executable)
    if op == "environ":  # what vLLM's import left in the environment (a forked worker must match)
        return {"environ": dict(os.environ)}
    if op == "batch":
        return batch(bridge, request)
    return {"error": f"unknown op {op!r}"}


def batch(bridge: Any, request: dict) -> dict:
    """Derive ``configs``; answer each of ``asks`` (reply part -> ``{"serve": "kvproof.x:f",
    "with": {...}}``, built by the tier registry, ``kvproof.tiers.registry.asks``) with its serving
    function over ``layouts`` and each derived layout. Each input comes as ``{"key": ..., "config"|
    "layout": ...}``; every answer is filed under its input's key (a derived layout's under its
    config's), so the client never matches by position. The worker names no tier: which code
    answers a part is the registry's to say."""
    from kvproof.inputs.layout import Layout
    derived: dict[str, dict] = {}
    if request.get("configs"):
        from kvproof.bridge.derive import derive
        derived = {it["key"]: derive(it["config"]) for it in request["configs"]}
    layouts = [(it["key"], Layout.from_dict(it["layout"])) for it in request.get("layouts", [])]
    layouts += [(k, Layout.from_dict(d["layout"])) for k, d in derived.items() if d.get("layout")]
    parts = {part: served(ask["serve"])(bridge, layouts, **ask.get("with", {})) if layouts else {}
             for part, ask in (request.get("asks") or {}).items()}
    return dict(parts, derived=derived)


def served(name: str) -> Any:
    """The serving function ``module:function`` (kvproof's own modules only)."""
    module, _, attr = name.partition(":")
    if not module.startswith("kvproof.") or not attr:
        raise ValueError(f"not a kvproof serving function: {name!r}")
    import importlib
    return getattr(importlib.import_module(module), attr)


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


def exit_when(gone, name: str, interval: float = 1.0) -> threading.Thread:
    """Exit (code 3) once ``gone()`` says the client is gone. The worker reads stdin's EOF only
    between requests, so a client killed by a signal would leave it deriving a whole batch
    (minutes, a core each) for nobody."""
    def watch() -> None:
        while not gone():
            time.sleep(interval)
        os._exit(3)

    thread = threading.Thread(target=watch, name=name, daemon=True)
    thread.start()
    return thread


def exit_with_parent(interval: float = 1.0) -> threading.Thread:
    """Exit when the client that started this worker dies: a reparented worker (its parent pid
    changed) exits."""
    parent = os.getppid()
    return exit_when(lambda: os.getppid() != parent, "exit-with-parent", interval)


def start() -> tuple[TextIO, Any, float]:
    """What a worker does before serving (kvproof.running.zygote does the same, once): stdout parked on
    stderr so vLLM's prints never reach the protocol channel, then vLLM's import and the Bridge.
    Returns the protocol channel, the Bridge and the import's seconds."""
    protocol = sys.stdout
    sys.stdout = sys.stderr
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    t0 = time.perf_counter()
    from kvproof.bridge.runtime import Bridge

    bridge = Bridge()
    return protocol, bridge, time.perf_counter() - t0


def main() -> None:
    exit_with_parent()
    protocol, bridge, import_seconds = start()
    serve(bridge, sys.stdin, protocol, import_seconds)


if __name__ == "__main__":
    main()
