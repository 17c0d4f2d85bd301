"""The configs the engine core would build for a consumer run. In a vLLM env.

From a Layout and a Stream: the ``KVCacheConfig`` (with ``kv_cache_tensors``
sized from the specs' page sizes, so connectors that size their own pools from
it can), and a ``VllmConfig`` with a model config, KV cache events on
(``KVEventsConfig``, null publisher), the connector the Layout names and the
run's speculative decoding (the Layout's, ``kvproof.consumer.drafters``). Everything
adapts to the release by introspection.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from vllm.config import (CacheConfig, DeviceConfig, KVEventsConfig, KVTransferConfig, ModelConfig,
                         ParallelConfig, SchedulerConfig, VllmConfig)
from vllm.v1 import kv_cache_interface as kvi

from kvproof.bridge.build import Builder
from kvproof.consumer import drafters
from kvproof.consumer.drafts import Drafts, effective_drafts
from kvproof.bridge.compat import kwargs_for
from kvproof.consumer.stream import Stream
from kvproof.errors import NotExpressible
from kvproof.inputs.layout import Layout
from kvproof import facts

MAX_MODEL_LEN_CEILING = 1 << 20
# 0.29+: a KVCacheTensor names its ``layers`` and describes (a region of) the one backing allocation,
# sized as the whole; <= 0.28 it names the layers it is ``shared_by``, sized as its own share
ONE_ALLOCATION = "layers" in kvi.KVCacheTensor.__dataclass_fields__


def kv_cache_tensors(groups: list, pages: list[int], num_blocks: int) -> list:
    """The tensors the engine's ``get_kv_cache_config_from_groups`` lays out for groups of one layer
    each (a page of ``pages[i]`` bytes), in the release's own shape. The offload connectors size
    their pools from them (``SimpleCPUOffloadScheduler._derive_cpu_config``, ``build_offloading_config``):
    a pool is ``cpu_bytes_to_use`` over the GPU cache's bytes, read as ``kv_cache_tensors[0].size``.

    0.29+ (``KVCacheTensor.layers``): one backing allocation the groups alias from byte 0 (a block id
    is one group's at a time); each group's tensor is sized as the whole of it, the largest group's
    bytes per block x ``num_blocks``. <= 0.28 (``shared_by``), the general case: one tensor per
    layer index, shared by that layer of every group, ``page x num_blocks``, no block stride (the
    connector then sums the tensors). Real models have one page size across groups (vLLM pads them
    equal); a layout's pages may differ, and the largest is the allocation's block."""
    block = max(pages)
    layer_names = [g.layer_names[0] for g in groups]
    if not ONE_ALLOCATION:
        return [kvi.KVCacheTensor(size=block * num_blocks, shared_by=layer_names)]
    return [kvi.KVCacheTensor(**kwargs_for(kvi.KVCacheTensor, size=block * num_blocks, layers=[name],
                                           layer_stride=page * num_blocks, block_stride=page, offset=0))
            for name, page in zip(layer_names, pages)]


def kv_cache_bytes(kv_cfg: Any) -> int:
    """The GPU KV cache's bytes: the one allocation 0.29+ tensors each describe, else their sum."""
    tensors = kv_cfg.kv_cache_tensors
    return tensors[0].size if tensors and ONE_ALLOCATION else sum(t.size for t in tensors)


class EngineConfigs:
    """One per process: caches the model config (its first build imports and inspects)."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self._model_configs: dict[str, Any] = {}
        self._retention: dict | None = None
        # One folder, removed when this object goes or the process exits (a test run used to
        # leave two folders in /tmp per harness, hundreds per make test).
        self._tmp = tempfile.TemporaryDirectory(prefix="kvproof-consumer-")
        self.model_dir = os.path.join(self._tmp.name, "models")
        self.storage = os.path.join(self._tmp.name, "storage")
        os.makedirs(self.model_dir)
        os.makedirs(self.storage)

    def model_config(self, max_model_len: int, target: str = "llama") -> Any:
        """The target model's config (``drafters.target_hf_config``); the KV cache specs come from the
        Layout, not from this model."""
        if target not in self._model_configs:
            path = os.path.join(self.model_dir, f"target-{target}")
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(drafters.target_hf_config(target), f)
            self._model_configs[target] = ModelConfig(model=path, skip_tokenizer_init=True, dtype="float16",
                                                      max_model_len=MAX_MODEL_LEN_CEILING, seed=0)
        mc = self._model_configs[target]
        mc.max_model_len = max_model_len
        return mc

    def kv_cache_config(self, layout: Layout, num_blocks: int) -> Any:
        mode = layout.cache.mamba_cache_mode
        groups, pages = [], []
        for i, g in enumerate(layout.groups):
            spec = self.builder.spec(g, mode)
            groups.append(kvi.KVCacheGroupSpec([f"model.layers.{i}.attn"], spec, **kwargs_for(
                kvi.KVCacheGroupSpec, is_eagle_group=bool(g.eagle))))
            pages.append(spec.page_size_bytes)
        return kvi.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=kv_cache_tensors(groups, pages, num_blocks),
                                 kv_cache_groups=groups, **kwargs_for(kvi.KVCacheConfig, **self.retention()))

    def retention(self) -> dict:
        """The retention interval the engine puts in KVCacheConfig: its CacheConfig's (the release's
        default; {} before 0.29). Left out, KVCacheConfig says None (dense) and the coordinator
        never reads replay boundaries, while the offloading connector reads CacheConfig's 0."""
        if self._retention is None:
            c = CacheConfig()
            self._retention = {facts.RETENTION_FIELD: getattr(c, facts.RETENTION_FIELD)} \
                if hasattr(c, facts.RETENTION_FIELD) else {}
        return self._retention

    def vllm_config(self, layout: Layout, stream: Stream, num_blocks: int, gpu_bytes: int | None = None) -> Any:
        c = layout.cache
        if c.prefix_match_unit is not None and "prefix_match_unit" not in self.builder.cache_fields:
            raise NotExpressible("prefix_match_unit (no CacheConfig.prefix_match_unit)")
        cache = CacheConfig(**kwargs_for(CacheConfig, block_size=c.block_size,
                                         enable_prefix_caching=c.enable_prefix_caching,
                                         prefix_match_unit=c.prefix_match_unit, mamba_cache_mode=c.mamba_cache_mode))
        mml = min(layout.max_model_len, MAX_MODEL_LEN_CEILING)
        sched = SchedulerConfig(**kwargs_for(
            SchedulerConfig, max_model_len=mml, is_encoder_decoder=False, max_num_seqs=stream.max_num_seqs,
            max_num_batched_tokens=max(stream.max_num_batched_tokens, 1), enable_chunked_prefill=True,
            long_prefill_token_threshold=0))
        parallel = ParallelConfig(tensor_parallel_size=layout.dcp, decode_context_parallel_size=layout.dcp)
        drafts = effective_drafts(layout, stream)
        model_config = self.model_config(mml, drafters.target_for(drafts))
        speculative = self.speculative_config(layout, drafts, model_config, parallel)
        kv_transfer = None
        if layout.kv_connector:
            hidden = layout.kv_connector == facts.HIDDEN_STATES_CONNECTOR
            kv_transfer = KVTransferConfig(kv_connector=layout.kv_connector,
                                           kv_role="kv_producer" if hidden else "kv_both",
                                           kv_connector_extra_config=self.connector_extra(gpu_bytes, stream))
        events = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
        extra = {"speculative_config": speculative} if speculative is not None else {}
        cfg = VllmConfig(model_config=model_config, cache_config=cache, scheduler_config=sched,
                         parallel_config=parallel, kv_transfer_config=kv_transfer, kv_events_config=events,
                         device_config=DeviceConfig(device="cpu"), **extra)
        cfg.cache_config.num_gpu_blocks = num_blocks
        # what the engine core does after KV init; the Layout says the block size it ended at
        cfg.cache_config.block_size = c.block_size
        cfg.cache_config.enable_prefix_caching = c.enable_prefix_caching
        return cfg

    def speculative_config(self, layout: Layout, drafts: Drafts | None, model_config: Any, parallel: Any) -> Any:
        """The run's speculative decoding (the Layout's method under the stream's acceptance,
        ``drafts.effective_drafts``), or hidden-state extraction for its connector."""
        hidden = layout.kv_connector == facts.HIDDEN_STATES_CONNECTOR
        if hidden:
            # What the engine builds for hidden-state extraction: the speculative method
            # extract_hidden_states (the connector asserts it) and the connector as producer.
            n = sum(g.kind == "hidden_state" for g in layout.groups)
            if n != 1:
                raise NotExpressible(
                    f"{layout.kv_connector} with {n} hidden-state groups: the engine's extract_hidden_states "
                    f"path adds exactly one HiddenStateCacheSpec group (the connector refuses any other "
                    f"count: 'Could not uniquely identify the extract-hidden-states group')")
            if drafts is not None:
                raise NotExpressible("extract_hidden_states is the speculative method of this connector: "
                                     f"{drafts.method} drafts cannot run beside it")
            return drafters.hidden_states(model_config, parallel)
        return None if drafts is None else drafters.build(drafts, model_config, parallel, self.model_dir)

    def connector_extra(self, gpu_bytes: int | None, stream: Stream | None = None) -> dict:
        """The connectors' extra config: an offload pool twice the GPU cache, at most
        ``CONSUMER_CONNECTOR_EXTRA``'s. The offload managers build one object per CPU block when
        they start; 64 MiB of 256-byte pages was 1.1 s per scheduler, and a pool larger than what
        the stream can fill exercises nothing more."""
        extra = dict(facts.CONSUMER_CONNECTOR_EXTRA, shared_storage_path=self.storage)
        if gpu_bytes:
            extra["cpu_bytes_to_use"] = min(extra["cpu_bytes_to_use"], 2 * gpu_bytes)
        if stream is not None and stream.offload == "lazy":  # SimpleCPUOffloadConnector's lazy mode
            extra["lazy_offload"] = True
        return extra

    @staticmethod
    def hash_fn(vcfg: Any) -> Any:
        from vllm.utils.hashing import get_hash_fn_by_name
        return get_hash_fn_by_name(vcfg.cache_config.prefix_caching_hash_algo)
