"""Fast path for the harness: prebuilt configs and a memo of manager verdicts.

``kvproof.bridge.worker.evaluate`` caches one ``VllmConfig`` per
(Cache, connector, dcp). Fuzzer inputs vary ``cache.block_size`` and
``prefix_match_unit`` almost every time, so that cache misses and each miss
builds a real ``VllmConfig`` (~1-2 ms): the "naive" harness of the issue.

``install(worker)`` keeps the bridge's code path and swaps two things on the
worker's objects (nothing copied, nothing in src/ changed):

- ``BUILDER.vllm_config``: one real ``VllmConfig`` per (dcp, connector), built
  once by the bridge's own ``_make_vllm_config``; per input only the four
  ``CacheConfig`` fields the resolver reads are assigned in place
  (``block_size``, ``enable_prefix_caching``, ``prefix_match_unit``,
  ``mamba_cache_mode``). tests/integration/test_fuzz_harness.py checks that
  outcomes are identical to the bridge's own configs on random layouts.
- ``worker.build_manager``: memoised by everything ``KVCacheManager`` is built
  from (the group specs, scheduler and hash block sizes, prefix caching, dcp,
  max_model_len); a repeat returns the first construction's facts (coordinator class, unitary block size) or
  re-raises a fresh copy of its exception. Fuzzers re-run near-identical
  inputs constantly; a new key still runs the real manager.
"""

from __future__ import annotations

import traceback
from collections import OrderedDict
from typing import Any

MEMO_SIZE = 1 << 16


class PrebuiltConfigs:
    def __init__(self, builder: Any) -> None:
        self.builder = builder
        self.base: dict[tuple, Any] = {}
        self.misses = 0

    def __call__(self, layout: Any) -> Any:
        key = (layout.dcp, layout.kv_connector)
        cfg = self.base.get(key)
        if cfg is None:
            self.misses += 1
            cfg = self.base[key] = self.builder._make_vllm_config(layout)
        if layout.cache.prefix_match_unit is not None and "prefix_match_unit" not in self.builder.cache_fields:
            self.builder._make_vllm_config(layout)  # raises the bridge's NotExpressible
        cc = cfg.cache_config
        c = layout.cache
        cc.block_size = c.block_size
        cc.enable_prefix_caching = c.enable_prefix_caching
        cc.prefix_match_unit = c.prefix_match_unit
        cc.mamba_cache_mode = c.mamba_cache_mode
        return cfg


class ManagerMemo:
    def __init__(self, build: Any, size: int = MEMO_SIZE) -> None:
        self.build = build
        self.size = size
        self.memo: OrderedDict[tuple, Any] = OrderedDict()
        self.hits = self.misses = 0

    def __call__(self, layout: Any, kv_cfg: Any, scheduler: int, hash_size: int) -> Any:
        # kv_cfg is a function of (groups, Mamba mode) through the bridge's Builder,
        # and the Layout's own frozen groups hash cheaper than vLLM's spec objects.
        key = (layout.groups, layout.cache.mamba_cache_mode, scheduler, hash_size,
               layout.cache.enable_prefix_caching, layout.dcp, layout.max_model_len)
        hit = self.memo.get(key)
        if hit is not None:
            self.hits += 1
            if isinstance(hit, BaseException):
                raise type(hit)(*hit.args).with_traceback(hit.__traceback__)
            return hit
        self.misses += 1
        try:
            # The bridge's build_manager returns plain facts, not the manager:
            # nothing heavy stays alive in the memo for the garbage collector to walk.
            result: Any = self.build(layout, kv_cfg, scheduler, hash_size)
        except Exception as err:
            traceback.clear_frames(err.__traceback__)  # keep file:line, drop the half-built manager
            result = err
        self.memo[key] = result
        if len(self.memo) > self.size:
            self.memo.popitem(last=False)
        if isinstance(result, BaseException):
            raise result
        return result


def uninstall(worker: Any) -> None:
    """Back to the bridge's own code path."""
    if "vllm_config" in vars(worker.BUILDER):
        del worker.BUILDER.vllm_config
    original = getattr(worker, "_kvproof_build_manager", None)
    if original is not None:
        worker.build_manager = original


def install(worker: Any, memo_manager: bool = True) -> dict[str, Any]:
    """Switch ``worker`` (the imported bridge module) to the fast path; returns the parts."""
    uninstall(worker)
    if not hasattr(worker, "_kvproof_build_manager"):
        worker._kvproof_build_manager = worker.build_manager
    parts: dict[str, Any] = {"configs": PrebuiltConfigs(worker.BUILDER)}
    worker.BUILDER.vllm_config = parts["configs"]
    if memo_manager:
        parts["manager"] = ManagerMemo(worker.build_manager)
        worker.build_manager = parts["manager"]
    return parts
