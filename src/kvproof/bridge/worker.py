"""The bridge worker: runs INSIDE a vLLM environment, imports vLLM once.

Protocol: one JSON object per line on stdin, one reply per line on stdout.
  {"op": "info"}                              -> {"vllm": ..., "fingerprint": ...}
  {"op": "run", "layouts": [...], "tiers": [...]} -> {"outcomes": [...]}
vLLM's own logging goes to stderr, so stdout carries only replies.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

_T0 = time.perf_counter()
_real_stdout = sys.stdout
sys.stdout = sys.stderr  # keep vLLM's prints off the protocol channel
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import vllm  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402

from kvproof.bridge.build import Builder, resolver_fingerprint  # noqa: E402
from kvproof.errors import NotExpressible  # noqa: E402
from kvproof.layout import Layout  # noqa: E402
from kvproof.outcome import Outcome, StageError  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - _T0
FINGERPRINT = resolver_fingerprint()
BUILDER = Builder()


def stage_error(err: BaseException) -> StageError:
    frames = traceback.extract_tb(err.__traceback__)
    last = frames[-1] if frames else None
    frame = f"{last.filename.split('site-packages/')[-1]}:{last.lineno} in {last.name}" if last else ""
    return StageError(type(err).__name__, str(err), frame)


def build_manager(layout: Layout, kv_cfg: Any, scheduler: int, hash_size: int) -> dict[str, Any]:
    """Build the real KVCacheManager (coordinator + block pool) from the resolver's
    output; returns what the Outcome records of it (the manager itself is dropped)."""
    mgr = KVCacheManager(kv_cfg, layout.max_model_len, scheduler, hash_size,
                         enable_caching=layout.cache.enable_prefix_caching, dcp_world_size=layout.dcp)
    facts: dict[str, Any] = {"coordinator": type(mgr.coordinator).__name__}
    if len(layout.groups) == 1 and hasattr(mgr.coordinator, "block_size"):
        facts["extra"] = {"unitary_block_size": mgr.coordinator.block_size}
    return facts


def evaluate(layout: Layout, manager: bool = True) -> Outcome:
    base = {"layout_hash": layout.content_hash(), "vllm_version": vllm.__version__, "fingerprint": FINGERPRINT}
    try:
        kv_cfg = BUILDER.kv_cache_config(layout)
        vcfg = BUILDER.vllm_config(layout)
    except NotExpressible as err:
        return Outcome(**base, expressible=False, not_expressible=f"not expressible in vLLM {vllm.__version__}: {err}")
    sizes = BUILDER.group_block_sizes(kv_cfg, layout.dcp)
    try:
        scheduler, hash_size = kv_cache_utils.resolve_kv_cache_block_sizes(kv_cfg, vcfg)
    except Exception as err:  # the real resolver's own rejection, recorded verbatim
        return Outcome(**base, resolver_error=stage_error(err), group_block_sizes=sizes)
    out: dict[str, Any] = dict(base, scheduler_block_size=scheduler, hash_block_size=hash_size,
                               group_block_sizes=sizes)
    if manager:
        out["manager_attempted"] = True
        try:
            out.update(build_manager(layout, kv_cfg, scheduler, hash_size))
        except Exception as err:
            out["manager_error"] = stage_error(err)
    return Outcome(**out)


def handle(request: dict) -> dict:
    op = request.get("op")
    if op == "info":
        return {"vllm": vllm.__version__, "fingerprint": FINGERPRINT, "import_seconds": IMPORT_SECONDS,
                "python": sys.executable, "file": kv_cache_utils.__file__}
    if op == "run":
        manager = request.get("manager", True)
        t0 = time.perf_counter()
        outcomes = [evaluate(Layout.from_dict(d), manager).to_dict() for d in request["layouts"]]
        return {"outcomes": outcomes, "seconds": time.perf_counter() - t0}
    return {"error": f"unknown op {op!r}"}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = handle(json.loads(line))
        except Exception as err:  # a bridge bug, not a vLLM verdict: report, keep serving
            reply = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        _real_stdout.write(json.dumps(reply) + "\n")
        _real_stdout.flush()


if __name__ == "__main__":
    main()
