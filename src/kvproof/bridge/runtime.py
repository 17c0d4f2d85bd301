"""Real vLLM behind Layouts, in this process. Imports vLLM: runs only inside an environment.

``Bridge`` is the one in-process interface: the worker serves it over a pipe,
the fuzz harnesses and benches call it directly. ``Bridge(fast=True)`` is the
fuzzer's fast path, a supported mode rather than a patch:

- one real ``VllmConfig`` per (dcp, connector), built and validated by the
  Builder once; per input only the four ``CacheConfig`` fields the resolver
  reads are assigned (block size, prefix caching, prefix_match_unit, Mamba
  mode). tests/integration/test_fuzz_harness.py checks the Outcomes equal
  the plain path's on random layouts;
- ``KVCacheConfig`` (and the groups' effective block sizes per dcp) memoised
  by (groups, Mamba mode); managers by everything a ``KVCacheManager`` is
  built from (a repeat returns the first build's facts or the ``StageError``
  of what it raised; a new key runs the real one). The manager memo exists on
  the fast path only;
- ``stage_error`` walks the traceback itself (``kvproof.frames``: no linecache, no stat per frame);
- no content hash per input (``Outcome.layout_hash`` is "" unless asked).
"""

from __future__ import annotations

import dataclasses
import itertools
import traceback
from collections import OrderedDict
from typing import Any

import vllm
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_manager import KVCacheManager

from kvproof import frames
from kvproof.bridge.build import Builder, resolver_fingerprint
from kvproof.errors import EnvironmentFailure, NotExpressible
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError, bare_assert

MEMO_SIZE = 1 << 16


def needs() -> list:
    """The vLLM APIs the bridge calls, as it calls them (checked at start-up: kvproof.bridge.compat)."""
    from kvproof.bridge.compat import Need
    here = "kvproof/bridge/runtime.py"
    return [Need(f"{here}:Bridge.evaluate", kv_cache_utils.resolve_kv_cache_block_sizes,
                 positional=("kv_cache_config", "vllm_config")),
            Need(f"{here}:build_manager", KVCacheManager.__init__,
                 positional=("kv_cache_config", "max_model_len", "scheduler_block_size", "hash_block_size"),
                 accepts_all=("enable_caching", "dcp_world_size"))]


def stage_error(err: BaseException) -> StageError:
    """The exception verbatim with its raising (innermost) frame, ``file:line in function`` (``kvproof.frames``)."""
    last = frames.innermost(err)
    frame = "" if last is None else frames.where(last)
    cond, caller = bare_assert(err, vllm_only=False)  # ("", "") unless a bare assert
    return StageError(type(err).__name__, str(err), frame, cond, caller)


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
        self._tokens = itertools.count()
        self._has_pmu = "prefix_match_unit" in self.builder.cache_fields
        from kvproof.bridge.compat import first_problem
        self.incompatible = first_problem(needs())  # a changed vLLM API: every Outcome is ERROR, never FAIL

    # --- configs -------------------------------------------------------------
    def _kv_entry(self, layout: Layout) -> list:
        """Fast path: [KVCacheConfig, token, {dcp: group block sizes}] per (groups, Mamba mode).

        The token (an int, unique per entry) keys the manager memo, so a layout's
        groups are hashed once per input, not once per memo.
        """
        key = (layout.groups, layout.cache.mamba_cache_mode)
        entry = self._kv_configs.get(key)
        if entry is None:
            entry = [self.builder.kv_cache_config(layout), next(self._tokens), {}]
            self._kv_configs.put(key, entry, MEMO_SIZE)
        return entry

    def kv_cache_config(self, layout: Layout) -> Any:
        if not self.fast:
            return self.builder.kv_cache_config(layout)
        return self._kv_entry(layout)[0]

    def vllm_config(self, layout: Layout) -> Any:
        if not self.fast:
            return self.builder.vllm_config(layout)
        key = (layout.dcp, layout.kv_connector)
        cfg = self._base_configs.get(key)
        if cfg is None:
            cfg = self._base_configs[key] = self.builder.vllm_config(layout)
        c = layout.cache
        if c.prefix_match_unit is not None and not self._has_pmu:
            raise NotExpressible("prefix_match_unit (no CacheConfig.prefix_match_unit)")
        cc = cfg.cache_config
        cc.block_size = c.block_size
        cc.enable_prefix_caching = c.enable_prefix_caching
        cc.prefix_match_unit = c.prefix_match_unit
        cc.mamba_cache_mode = c.mamba_cache_mode
        return cfg

    # --- the manager stage ---------------------------------------------------
    def _manager_stage(self, layout: Layout, kv_cfg: Any, scheduler: int, hash_size: int,
                       token: int | None) -> dict[str, Any] | StageError:
        """Facts, or the StageError of what the real manager raised. The memo keeps
        the StageError itself: a repeat costs a dict lookup, no exception."""
        if token is None or not self.memo_managers:
            try:
                return build_manager(layout, kv_cfg, scheduler, hash_size)
            except Exception as err:
                return stage_error(err)
        c = layout.cache
        key = (token, scheduler, hash_size, c.enable_prefix_caching, layout.dcp, layout.max_model_len)
        hit = self._managers.get(key)
        if hit is not None:
            self.manager_hits += 1
            return hit
        self.manager_misses += 1
        try:
            result: dict[str, Any] | StageError = build_manager(layout, kv_cfg, scheduler, hash_size)
        except Exception as err:
            result = stage_error(err)
            traceback.clear_frames(err.__traceback__)  # drop the half-built manager
        self._managers.put(key, result, MEMO_SIZE)
        return result

    # --- one Layout ----------------------------------------------------------
    def evaluate(self, layout: Layout, manager: bool = True, content_hash: bool | None = None) -> Outcome:
        with_hash = not self.fast if content_hash is None else content_hash
        base = {"layout_hash": layout.content_hash() if with_hash else "", "vllm_version": self.version,
                "fingerprint": self.fingerprint}
        if self.incompatible:
            return Outcome(**base, run_error=StageError("HarnessError", self.incompatible, "kvproof/bridge/runtime.py"))
        token = None
        try:
            if self.fast:
                entry = self._kv_entry(layout)
                kv_cfg, token, by_dcp = entry
            else:
                kv_cfg = self.builder.kv_cache_config(layout)
            vcfg = self.vllm_config(layout)
        except NotExpressible as err:
            return Outcome(**base, expressible=False, not_expressible=f"not expressible in vLLM {self.version}: {err}")
        except EnvironmentFailure as err:  # the machine's limit: ERROR with its cause, never a verdict
            cause = stage_error(err.__cause__ or err)
            return Outcome(**base, run_error=StageError("EnvironmentError", str(err), cause.frame))
        if token is None:
            sizes = self.builder.group_block_sizes(kv_cfg, layout.dcp)
        else:
            sizes = by_dcp.get(layout.dcp)
            if sizes is None:
                sizes = by_dcp[layout.dcp] = self.builder.group_block_sizes(kv_cfg, layout.dcp)
            sizes = list(sizes)  # each Outcome owns its list
        try:
            scheduler, hash_size = kv_cache_utils.resolve_kv_cache_block_sizes(kv_cfg, vcfg)
        except Exception as err:  # the real resolver's own rejection, recorded verbatim
            return Outcome(**base, resolver_error=stage_error(err), group_block_sizes=sizes)
        out = Outcome(**base, scheduler_block_size=scheduler, hash_block_size=hash_size, group_block_sizes=sizes)
        return self._with_manager(layout, out, kv_cfg, token) if manager else out

    def with_manager(self, layout: Layout, out: Outcome) -> Outcome:
        """``out``, a resolved Outcome of ``layout`` from ``evaluate(manager=False)``,
        with the manager stage run: the fuzzer's escalation, without a second resolver call."""
        if not out.resolved or out.manager_attempted:
            return out
        if self.fast:
            kv_cfg, token, _ = self._kv_entry(layout)
        else:
            kv_cfg, token = self.builder.kv_cache_config(layout), None
        return self._with_manager(layout, out, kv_cfg, token)

    def _with_manager(self, layout: Layout, out: Outcome, kv_cfg: Any, token: int | None) -> Outcome:
        got = self._manager_stage(layout, kv_cfg, out.scheduler_block_size, out.hash_block_size, token)
        if isinstance(got, StageError):
            return dataclasses.replace(out, manager_attempted=True, manager_error=got)
        return dataclasses.replace(out, manager_attempted=True, **got)

    def info(self) -> dict[str, Any]:
        return {"vllm": self.version, "fingerprint": self.fingerprint, "file": kv_cache_utils.__file__,
                "incompatible": self.incompatible}



def outcomes(bridge: Bridge, layouts: list[tuple[str, Layout]], manager: bool = True) -> dict[str, dict]:
    """The outcomes part of a batch (the function and manager tiers' serving function): each keyed
    layout through the real resolver, and the real manager when ``manager``."""
    return {k: bridge.evaluate(lay, manager).to_dict() for k, lay in layouts}
