"""The run's oracles, wired to the real scheduler the harness built. In a vLLM env.

What the oracles judge against is read off the built objects, never guessed:
the hit alignment and EAGLE drop the coordinator promises, the hash lookahead,
each group's block size and spec class, the chunk sizes of chunked local
attention, and vLLM's own block-hash primitive for the independent hash index.
The spies then report every lookup, allocation, KV event and connector call.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core import kv_cache_utils

from kvproof.bridge.build import Builder
from kvproof.consumer import spies
from kvproof.consumer.observations import Recorder
from kvproof.consumer.oracle import RunContext
from kvproof.consumer.oracles import Oracles
from kvproof.consumer.removal_oracle import RemovalOracle
from kvproof.consumer.result import RunState
from kvproof.consumer.shadow import Shadow, group_rule
from kvproof.consumer.truth import HashIndex
from kvproof.inputs.layout import Layout
from kvproof import facts


def wire(st: RunState, layout: Layout, scheduler: Any, hash_fn: Any, builder: Builder) -> Oracles:
    """The run's oracles, wired to the scheduler's manager, event publisher and connector."""
    mgr = scheduler.kv_cache_manager
    st.res.alignment = alignment(mgr.coordinator, st.res.scheduler_block_size)
    st.res.eagle_drop = eagle_drop(mgr.coordinator)
    st.res.hash_lookahead = int(getattr(scheduler, "num_hash_lookahead_tokens", 0) or 0)
    st.res.lookahead_slots = int(getattr(scheduler, "num_lookahead_tokens", 0) or 0)
    index = HashIndex(st.res.hash_block_size, hash_block(hash_fn), lookahead=st.res.hash_lookahead)
    kcc = scheduler.kv_cache_config
    ctx = RunContext(st.res, index, builder.group_block_sizes(kcc, layout.dcp), local_chunks(kcc),
                     mamba=layout.has_mamba, specs=[type(g.kv_cache_spec).__name__ for g in kcc.kv_cache_groups],
                     coordinator=type(mgr.coordinator).__name__)
    if scheduler.connector is not None:
        st.res.connector_class = type(scheduler.connector).__name__
    # the oracles that need a vLLM object: what each block holds, and the pool's announced entries
    extra = [Shadow(ctx, st.rec, mgr.coordinator, [group_rule(g.kv_cache_spec) for g in kcc.kv_cache_groups],
                    connector=scheduler.connector is not None)]
    removal = removals(mgr.block_pool, ctx, st.rec)
    if removal is not None:
        extra.append(removal)
    oracles = Oracles.of(ctx, st.rec, extra)
    spies.spy_lookups(mgr, oracles)
    spies.spy_coordinator(mgr.coordinator, oracles)
    spies.spy_allocations(mgr, oracles)
    spies.spy_events(scheduler.kv_event_publisher, oracles)
    if scheduler.connector is not None:
        spies.spy_connector(scheduler.connector, scheduler, oracles)
    spies.spy_reuse(mgr.block_pool, oracles)
    return oracles


def removals(pool: Any, ctx: RunContext, rec: Recorder) -> RemovalOracle | None:
    """The BlockRemoved oracle on the pool's medium; None where the pool's cache is not the
    ``BlockHashToBlockMap`` of packed (hash, group) keys read here (0.27-0.33 all are)."""
    cache = getattr(getattr(pool, "cached_block_hash_to_block", None), "_cache", None)
    if not isinstance(cache, dict) or not getattr(pool, "enable_kv_cache_events", False):
        return None
    medium = getattr(pool, "medium", None) or "GPU"

    known: dict = {}  # packed key -> (group, hash as events carry it): vLLM's conversion, once per key
    where: dict = {}  # (group, hash) -> the packed key it came from

    def absent(entries: set) -> set:
        """Of ``entries``, those the pool's cache no longer holds: each looked up by the key it came
        from; the cache is walked (a new key converted once) only when one is not found there."""
        m = pool.cached_block_hash_to_block._cache  # reset_prefix_cache replaces the map
        left = {e for e in entries if where.get(e) not in m}
        if not left:
            return left
        held = set()
        for k in m:
            e = known.get(k)
            if e is None:
                e = known[k] = (kv_cache_utils.get_group_id(k),
                                kv_cache_utils.maybe_convert_block_hash(kv_cache_utils.get_block_hash(k)))
            where[e] = k
            held.add(e)
        return left - held

    def queued() -> list:
        return list(getattr(pool, "kv_event_queue", None) or ())
    return RemovalOracle(ctx, rec, medium, absent, queued)


def hash_block(hash_fn: Any) -> Any:
    """(parent, block tokens, lookahead tokens) -> the block's hash, with vLLM's own primitive:
    no lookahead, the legacy hash; L lookahead tokens (0.33 ``get_request_block_hasher`` with
    ``num_hash_lookahead_tokens``), extra keys ``(None, *next L tokens)`` for a request without
    multimodal inputs, LoRA or cache salt (``generate_lookahead_block_hash_extra_keys``)."""
    def hash_one(parent: Any, toks: Any, ahead: Any = ()) -> Any:
        if not ahead:
            return kv_cache_utils.hash_block_tokens(hash_fn, parent, toks)
        return kv_cache_utils.hash_block_tokens(hash_fn, parent, toks, (None, *ahead))
    return hash_one


def eagle_drop(coord: Any) -> bool:
    """Whether the coordinator's managers drop the unit past a hit for EAGLE: its
    ``drop_eagle_group_ids`` (0.33: empty when lookahead hashing replaces the drop), else its
    ``eagle_group_ids`` (0.27-0.32: every group when use_eagle and none is flagged)."""
    for name in facts.EAGLE_DROP_ATTRS:
        ids = getattr(coord, name, None)
        if ids is not None:
            return bool(ids)
    return bool(getattr(coord, "use_eagle", False))


def alignment(coord: Any, scheduler_bs: int) -> int:
    """The hit alignment the release's coordinator promises (read from it, never guessed)."""
    for name in facts.HIT_ALIGNMENT_ATTRS:
        val = getattr(coord, name, None)
        if isinstance(val, int) and val > 0:
            return val
    single = getattr(coord, "block_size", None)  # UnitaryKVCacheCoordinator aligns to its block size
    if isinstance(single, int) and single > 0 and len(getattr(coord, "single_type_managers", ())) == 1:
        return single
    return scheduler_bs


def local_chunks(kv_cache_config: Any) -> list[int]:
    """Attention chunk sizes when EVERY group is chunked local attention, else []."""
    chunks = [getattr(g.kv_cache_spec, "attention_chunk_size", None) for g in kv_cache_config.kv_cache_groups]
    ok = chunks and all(type(g.kv_cache_spec).__name__ == "ChunkedLocalAttentionSpec" and isinstance(c, int)
                        and c > 0 for g, c in zip(kv_cache_config.kv_cache_groups, chunks))
    return chunks if ok else []
