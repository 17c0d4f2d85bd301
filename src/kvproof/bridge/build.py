"""Layout -> real vLLM objects. Imports vLLM: runs only inside an environment.

``Builder`` is created once per process (after ``import vllm``) and turns
Layouts into real ``KVCacheSpec`` / ``KVCacheGroupSpec`` / ``KVCacheConfig``
objects and a real ``VllmConfig``, caching configs by the settings that
matter so that many layouts cost microseconds each. It adapts to the release
by introspection (which spec fields and classes exist), never by version
string, and raises ``NotExpressible`` for what the release cannot say.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch  # noqa: F401  (vLLM needs it first; dtypes below)
from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ParallelConfig, VllmConfig
from vllm.v1 import kv_cache_interface as kvi
from vllm.v1.core import kv_cache_utils

from kvproof.settings import use_release_cache_root

use_release_cache_root()  # every in-environment process builds its configs here

from kvproof import facts
from kvproof.errors import EnvironmentFailure, NotExpressible
from kvproof.inputs.layout import Group, Layout
from kvproof.spec import fingerprint

_HEADS, _HEAD_SIZE = 2, 64


def resolver_fingerprint() -> str:
    """The installed resolver's source fingerprint (drift alarm); one definition in kvproof.spec."""
    return fingerprint.of_module(kv_cache_utils)


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


class Builder:
    """Builds real vLLM objects for Layouts; one per worker process."""

    def __init__(self) -> None:
        self._configs: dict[tuple, Any] = {}
        self._spec_cache: dict[tuple, Any] = {}
        self.circular = getattr(kvi, "CircularBufferSpec", None)
        self.mla_cls = kvi.MLAAttentionSpec
        self.hidden_cls = getattr(kvi, "HiddenStateCacheSpec", None)
        self.mamba_fields = _fields(kvi.MambaSpec)
        self.attn_fields = _fields(kvi.FullAttentionSpec)
        self.cache_fields = _fields(CacheConfig)

    # --- specs -------------------------------------------------------------
    def _attention_kwargs(self, g: Group) -> dict[str, Any]:
        kw: dict[str, Any] = {"block_size": g.block_size, "num_kv_heads": _HEADS,
                              "head_size": _HEAD_SIZE, "dtype": torch.float16}
        if g.dcp_sharded is not None:
            if "dcp_sharded" not in self.attn_fields:
                if g.dcp_sharded is not True:  # attention is always sharded before the field existed
                    raise NotExpressible("dcp_sharded=false on an attention group (no dcp_sharded field)")
            else:
                kw["dcp_sharded"] = g.dcp_sharded
        if g.tokens_per_state is not None:  # AttentionSpec.tokens_per_state (0.29+); MLA compression
            if "tokens_per_state" not in self.attn_fields:
                raise NotExpressible(f"tokens_per_state on a {g.kind} group (no AttentionSpec.tokens_per_state)")
            kw["tokens_per_state"] = g.tokens_per_state
        return kw

    def spec(self, g: Group, mamba_mode: str) -> Any:
        key = (g, mamba_mode)
        spec = self._spec_cache.get(key)
        if spec is None:
            spec = self._spec_cache[key] = self._make_spec(g, mamba_mode)
        return spec

    def _make_spec(self, g: Group, mamba_mode: str) -> Any:
        non_cacheable = g.prefix_cacheable is False
        if g.kind == "mamba":
            if non_cacheable:
                raise NotExpressible("prefix_cacheable=false on a mamba group")
            kw: dict[str, Any] = {"block_size": g.block_size, "shapes": ((4, 16),), "dtypes": (torch.float32,)}
            if "mamba_cache_mode" in self.mamba_fields:
                kw["mamba_cache_mode"] = mamba_mode
            if g.tokens_per_state is not None:
                if "tokens_per_state" not in self.mamba_fields:
                    raise NotExpressible("tokens_per_state (no MambaSpec.tokens_per_state field)")
                kw["tokens_per_state"] = g.tokens_per_state
            if g.dcp_sharded:
                if "dcp_sharded" not in self.mamba_fields:
                    raise NotExpressible("dcp_sharded=true on a mamba group (no dcp_sharded field)")
                kw["dcp_sharded"] = True
            return kvi.MambaSpec(**kw)
        kw = self._attention_kwargs(g)
        if non_cacheable:
            # prefix_cacheable is a class property (False for ring buffers), not a field.
            if self.circular is None or g.kind not in ("full_attention", "sliding_window"):
                raise NotExpressible(f"prefix_cacheable=false on a {g.kind} group")
            return self.circular(**kw)
        if g.kind == "full_attention":
            return kvi.FullAttentionSpec(**kw)
        if g.kind == "sliding_window":
            return kvi.SlidingWindowSpec(sliding_window=g.sliding_window or 4 * g.block_size, **kw)
        if g.kind == "chunked_local":
            return kvi.ChunkedLocalAttentionSpec(attention_chunk_size=g.attention_chunk_size or 4 * g.block_size, **kw)
        kw.update(num_kv_heads=1, head_size=576)
        if g.kind == "mla":
            return self.mla_cls(**kw)
        if self.hidden_cls is None:
            raise NotExpressible("hidden_state groups (no HiddenStateCacheSpec)")
        return self.hidden_cls(**kw)

    def kv_cache_config(self, layout: Layout, num_blocks: int = 8) -> Any:
        # The manager tier only constructs (BlockPool checks num_blocks > 0 and makes one
        # object per block): a small pool keeps that off the fuzzer's path.
        mode = layout.cache.mamba_cache_mode
        groups = [kvi.KVCacheGroupSpec([f"layers.{i}"], self.spec(g, mode))
                  for i, g in enumerate(layout.groups)]
        return kvi.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)

    # --- configs -------------------------------------------------------------
    def vllm_config(self, layout: Layout) -> Any:
        c = layout.cache
        key = (c, layout.kv_connector, layout.dcp)
        cfg = self._configs.get(key)
        if cfg is None:
            try:
                cfg = self._make_vllm_config(layout)
            except NotExpressible:
                raise
            except Exception as err:  # the release's own config validation said no
                why = facts.environment_refusal(str(err))
                if why is not None:  # ... or this machine cannot run it: not a fact about vLLM
                    raise EnvironmentFailure(f"{type(err).__name__}: {err} ({why})") from err
                lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
                detail = " ".join(lines[1:3]) if len(lines) > 1 else (lines[0] if lines else type(err).__name__)
                raise NotExpressible(f"its config rejects it: {detail}") from None
            self._configs[key] = cfg
        return cfg

    def _make_vllm_config(self, layout: Layout) -> Any:
        c = layout.cache
        if c.prefix_match_unit is not None and "prefix_match_unit" not in self.cache_fields:
            raise NotExpressible("prefix_match_unit (no CacheConfig.prefix_match_unit)")
        cache = CacheConfig(block_size=c.block_size, enable_prefix_caching=c.enable_prefix_caching,
                            prefix_match_unit=c.prefix_match_unit, mamba_cache_mode=c.mamba_cache_mode)
        # vLLM requires tp % dcp == 0; the smallest legal deployment is tp == dcp.
        parallel = ParallelConfig(tensor_parallel_size=layout.dcp, decode_context_parallel_size=layout.dcp)
        kv_transfer = (KVTransferConfig(kv_connector=layout.kv_connector, kv_role="kv_both")
                       if layout.kv_connector else None)
        return VllmConfig(cache_config=cache, parallel_config=parallel, kv_transfer_config=kv_transfer,
                          device_config=DeviceConfig(device="cpu"))

    def group_block_sizes(self, kv_cache_config: Any, dcp: int) -> list[int]:
        """Effective block sizes exactly as this release's resolver sees them."""
        resolve = getattr(kv_cache_utils, "resolve_dcp_kv_block_size", None)
        specs = [g.kv_cache_spec for g in kv_cache_config.kv_cache_groups]
        if resolve is not None:
            return [resolve(s, dcp) for s in specs]
        return [s.block_size * dcp if isinstance(s, kvi.AttentionSpec) else s.block_size for s in specs]
