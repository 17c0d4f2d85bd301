"""Real vLLM behind Layouts, in this process. Imports vLLM: runs only inside an environment.

``Bridge`` is the one in-process interface: the worker serves it over a pipe,
the fuzz harnesses and benches call it directly. ``Bridge(fast=True)`` is the
fuzzer's fast path, a supported mode rather than a patch:

- one real ``VllmConfig`` per (dcp, connector), built and validated by the
  Builder once; per input only the four ``CacheConfig`` fields the resolver
  reads are assigned (block size, prefix caching, prefix_match_unit, Mamba
  mode). tests/integration/test_fuzz_harness.py checks the Outcomes equal
  the plain path's on random layouts;
- ``KVCacheConfig`` memoised by (groups, Mamba mode), managers by everything a
  ``KVCacheManager`` is built from (a repeat returns the first build's facts
  or re-raises a fresh copy of its exception; a new key runs the real one);
- no content hash per input (``Outcome.layout_hash`` is "" unless asked).
"""

from __future__ import annotations

import traceback
from collections import OrderedDict
from typing import Any

import vllm
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager

from kvproof.bridge.build import Builder, resolver_fingerprint
from kvproof.errors import NotExpressible
from kvproof.layout import Layout
from kvproof.outcome import Outcome, StageError

MEMO_SIZE = 1 << 16


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


class _LRU(OrderedDict):
    def put(self, key: Any, value: Any, size: int) -> None:
        self[key] = value
        if len(self) > size:
            self.popitem(last=False)


class Bridge:
    """Layouts in, Outcomes of the real resolver and KVCacheManager out."""

    def __init__(self, fast: bool = False, memo_managers: bool | None = None) -> None:
        self.builder = Builder()
        self.version = vllm.__version__
        self.fingerprint = resolver_fingerprint()
        self.fast = fast
        self.memo_managers = fast if memo_managers is None else memo_managers
        self._base_configs: dict[tuple, Any] = {}
        self._kv_configs: _LRU = _LRU()
        self._managers: _LRU = _LRU()
        self.manager_hits = self.manager_misses = 0

    # --- configs -------------------------------------------------------------
    def kv_cache_config(self, layout: Layout) -> Any:
        if not self.fast:
            return self.builder.kv_cache_config(layout)
        key = (layout.groups, layout.cache.mamba_cache_mode)
        cfg = self._kv_configs.get(key)
        if cfg is None:
            cfg = self.builder.kv_cache_config(layout)
            self._kv_configs.put(key, cfg, MEMO_SIZE)
        return cfg

    def vllm_config(self, layout: Layout) -> Any:
        if not self.fast:
            return self.builder.vllm_config(layout)
        key = (layout.dcp, layout.kv_connector)
        cfg = self._base_configs.get(key)
        if cfg is None:
            cfg = self._base_configs[key] = self.builder.vllm_config(layout)
        c = layout.cache
        if c.prefix_match_unit is not None and "prefix_match_unit" not in self.builder.cache_fields:
            raise NotExpressible("prefix_match_unit (no CacheConfig.prefix_match_unit)")
        cc = cfg.cache_config
        cc.block_size = c.block_size
        cc.enable_prefix_caching = c.enable_prefix_caching
        cc.prefix_match_unit = c.prefix_match_unit
        cc.mamba_cache_mode = c.mamba_cache_mode
        return cfg

    # --- the manager stage ---------------------------------------------------
    def manager(self, layout: Layout, kv_cfg: Any, scheduler: int, hash_size: int) -> dict[str, Any]:
        if not self.memo_managers:
            return build_manager(layout, kv_cfg, scheduler, hash_size)
        key = (layout.groups, layout.cache.mamba_cache_mode, scheduler, hash_size,
               layout.cache.enable_prefix_caching, layout.dcp, layout.max_model_len)
        hit = self._managers.get(key)
        if hit is not None:
            self.manager_hits += 1
            if isinstance(hit, BaseException):
                raise type(hit)(*hit.args).with_traceback(hit.__traceback__)
            return hit
        self.manager_misses += 1
        try:
            result: Any = build_manager(layout, kv_cfg, scheduler, hash_size)
        except Exception as err:
            traceback.clear_frames(err.__traceback__)  # keep file:line, drop the half-built manager
            self._managers.put(key, err, MEMO_SIZE)
            raise
        self._managers.put(key, result, MEMO_SIZE)
        return result

    # --- one Layout ----------------------------------------------------------
    def evaluate(self, layout: Layout, manager: bool = True, content_hash: bool | None = None) -> Outcome:
        with_hash = not self.fast if content_hash is None else content_hash
        base = {"layout_hash": layout.content_hash() if with_hash else "", "vllm_version": self.version,
                "fingerprint": self.fingerprint}
        try:
            kv_cfg = self.kv_cache_config(layout)
            vcfg = self.vllm_config(layout)
        except NotExpressible as err:
            return Outcome(**base, expressible=False, not_expressible=f"not expressible in vLLM {self.version}: {err}")
        sizes = self.builder.group_block_sizes(kv_cfg, layout.dcp)
        try:
            scheduler, hash_size = kv_cache_utils.resolve_kv_cache_block_sizes(kv_cfg, vcfg)
        except Exception as err:  # the real resolver's own rejection, recorded verbatim
            return Outcome(**base, resolver_error=stage_error(err), group_block_sizes=sizes)
        out: dict[str, Any] = dict(base, scheduler_block_size=scheduler, hash_block_size=hash_size,
                                   group_block_sizes=sizes)
        if manager:
            out["manager_attempted"] = True
            try:
                out.update(self.manager(layout, kv_cfg, scheduler, hash_size))
            except Exception as err:
                out["manager_error"] = stage_error(err)
        return Outcome(**out)

    def info(self) -> dict[str, Any]:
        return {"vllm": self.version, "fingerprint": self.fingerprint, "file": kv_cache_utils.__file__}

