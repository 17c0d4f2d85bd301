"""The catalogue of seeded edits to vLLM 0.32.0's Python sources.

Each mutant is (file, anchor text, replacement, description, class): the
anchor must occur at most once in the installed file (``apply`` checks): twice
is the catalogue's error; absent (``AnchorAbsent``) means the release's code
differs there, and ``kvproof selftest`` skips the mutant for that release
instead of testing nothing. ``survivor`` is this project's one-sentence
reading of what a survival would mean (equivalent, efficiency only, or a
gap), printed when no layer catches it.

Two families: ``RESOLVER`` edits ``kv_cache_utils.py``'s block-size resolver
(and three coordinator/block-pool assertions); ``BEHAVIOURAL`` edits what the
resolver's consumers do without raising: the managers' hit search, the hybrid
coordinator's fixed point and replay boundaries, the block pool's caching and
eviction, KV event payloads, the connectors' hash/token pairing and the
speculative paths (EAGLE drop). ``kvproof selftest --consumers`` runs the
second family (``BEHAVIOURAL_CLASSES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvproof.errors import UsageError
from kvproof import facts

UTILS = "vllm/v1/core/kv_cache_utils.py"
COORD = "vllm/v1/core/kv_cache_coordinator.py"
POOL = "vllm/v1/core/block_pool.py"
MANAGERS = "vllm/v1/core/single_type_kv_cache_manager.py"
SIMPLE = "vllm/v1/simple_kv_offload/manager.py"
OFFLOAD = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
RESOLVER_CLASSES = ("operator", "dropped-condition", "fallback", "dcp", "validation-skipped",
                    "validation-over-eager", "consumer")
BEHAVIOURAL_CLASSES = ("hit-search", "coordinator", "block-pool", "kv-event", "connector", "speculative")
CLASSES = RESOLVER_CLASSES + BEHAVIOURAL_CLASSES
# The release the anchors are written against: the default of the one release list (src/kvproof/facts/__init__.py);
# when the default moves, the anchor check (every anchor present once) says which need rewriting.
RELEASE = facts.DEFAULT_RELEASE


class AnchorAbsent(UsageError):
    """The mutant's anchor is not in this release's file: the mutant is skipped there."""


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # site-packages relative
    anchor: str
    replacement: str
    description: str
    klass: str
    survivor: str = "gap: a wrong result no layer noticed"
    since: str = ""  # the release whose code the anchor is written against, when not RELEASE (absent before)

    @property
    def behavioural(self) -> bool:
        """A consumer's behaviour edited (not the resolver): judged by the consumer tier first."""
        return self.klass in BEHAVIOURAL_CLASSES

    @property
    def equivalent(self) -> bool:
        """Argued equivalent (the argument is ``survivor``): not counted against the kill rate."""
        return self.survivor.startswith("equivalent")

    def apply(self, text: str) -> str:
        n = text.count(self.anchor)
        if n == 0:
            raise AnchorAbsent(f"mutant {self.name}: anchor not in {self.file} (this release's code differs)")
        if n != 1:
            raise UsageError(f"mutant {self.name}: anchor found {n} times in {self.file} (want exactly 1)")
        return text.replace(self.anchor, self.replacement)

    def applies_to(self, site_packages: Path) -> bool:
        """Whether the anchor is in this installed release (False: skipped there; twice raises)."""
        path = Path(site_packages) / self.file
        if not path.is_file():
            return False
        try:
            self.apply(path.read_text())
        except AnchorAbsent:
            return False
        return True

    def source(self, site_packages: Path) -> bytes:
        return self.apply((Path(site_packages) / self.file).read_text()).encode()


_RET = "    return scheduler_block_size, hash_block_size\n"
_REQ = "    requested = cache_config.prefix_match_unit\n"
_PMU_CHECK = "    if any(bs % hash_block_size != 0 for bs in hashing_sizes):\n"
_MAMBA_FALLBACK = "    ):\n        return scheduler_block_size, scheduler_block_size\n\n    hashing_sizes"
_UNASSERTED = "unreachable from any layout while the resolver is right: the resolver's own checks keep it true"

RESOLVER: tuple[Mutant, ...] = (
    Mutant("lcm_to_gcd", UTILS, "    scheduler_block_size = math.lcm(*group_block_sizes)\n",
           "    scheduler_block_size = math.gcd(*group_block_sizes)\n",
           "scheduler block = GCD instead of LCM of the group sizes", "operator"),
    Mutant("gcd_to_lcm", UTILS, "else math.gcd(*hashing_sizes)", "else math.lcm(*hashing_sizes)",
           "hash block = LCM instead of GCD of the prefix-cacheable sizes", "operator"),
    Mutant("pmu_check_inverted", UTILS, _PMU_CHECK,
           "    if any(bs % hash_block_size == 0 for bs in hashing_sizes):\n",
           "prefix_match_unit divisibility check inverted (% == 0 raises)", "operator"),
    Mutant("alignment_modulo_swapped", UTILS,
           "    if any(cache_hit_alignment % alignment for alignment in prefix_alignments):\n",
           "    if any(alignment % cache_hit_alignment for alignment in prefix_alignments):\n",
           "tokens_per_state alignment check with the % operands swapped", "operator",
           "efficiency or over-eager only where a tokens_per_state > 1 spec exists, which the layouts rarely build"),
    Mutant("align_check_dropped", UTILS,
           '        isinstance(spec, MambaSpec) and spec.mamba_cache_mode != "align"\n',
           "        isinstance(spec, MambaSpec)\n",
           "Mamba fallback without the align-mode condition (the <= 0.27 bug's shape)", "dropped-condition"),
    Mutant("prefix_cacheable_filter_dropped", UTILS,
           "        if group.kv_cache_spec.prefix_cacheable\n    ] or group_block_sizes",
           "        if True\n    ] or group_block_sizes",
           "GCD over every group, not only the prefix-cacheable ones", "dropped-condition",
           "efficiency only: a GCD over more groups still divides every prefix-cacheable group, just finer"),
    Mutant("hash_is_scheduler", UTILS, _RET, "    return scheduler_block_size, scheduler_block_size\n",
           "hash block = scheduler block always (several groups)", "fallback"),
    Mutant("hash_is_one", UTILS, _RET, "    return scheduler_block_size, 1\n",
           "hash block = 1 always (several groups)", "fallback",
           "efficiency only: 1 divides every block size; every token is hashed"),
    Mutant("inactive_hash_one", UTILS,
           "    if not (cache_config.enable_prefix_caching or connector_enabled):\n"
           "        return scheduler_block_size, scheduler_block_size\n",
           "    if not (cache_config.enable_prefix_caching or connector_enabled):\n"
           "        return scheduler_block_size, 1\n",
           "hash block = 1 when block hashing is inactive", "fallback",
           "equivalent for safety: nothing consumes hashes with prefix caching and connectors off"),
    Mutant("mamba_fallback_hash_one", UTILS, _MAMBA_FALLBACK,
           "    ):\n        return scheduler_block_size, 1\n\n    hashing_sizes",
           "non-align Mamba fallback returns hash 1 instead of the scheduler block", "fallback",
           "efficiency only: hash 1 divides every group; non-align Mamba managers do not check it"),
    Mutant("dcp_scaling_removed", UTILS,
           "    return spec.block_size * (dcp_world_size if spec.dcp_sharded else 1)\n",
           "    return spec.block_size\n", "attention groups no longer scaled by dcp", "dcp",
           "reached only with dcp > 1 and dcp-sharded groups; the manager tier sees scaled specs built apart"),
    Mutant("dcp_sharded_ignored", UTILS, "(dcp_world_size if spec.dcp_sharded else 1)", "dcp_world_size",
           "every group scaled by dcp, sharded or not (Mamba included)", "dcp",
           "reached only with dcp > 1; sizes stay multiples of each other"),
    Mutant("single_group_dcp_removed", UTILS, "        bs = cache_config.block_size * dcp\n",
           "        bs = cache_config.block_size\n", "single group: dcp no longer scales the block", "dcp",
           "reached only with one dcp-sharded group and dcp > 1"),
    Mutant("pmu_valueerror_removed", UTILS, _PMU_CHECK, "    if False:\n",
           "validation skipped: a prefix_match_unit that does not divide the groups is accepted", "validation-skipped"),
    Mutant("single_pmu_rejection_removed", UTILS,
           "            cache_config.prefix_match_unit not in (None, bs)\n", "            False\n",
           "validation skipped: single group silently ignores prefix_match_unit", "validation-skipped",
           "gap: the setting is ignored, no divisibility is broken, only the model says the release rejects it"),
    Mutant("raise_every_pmu", UTILS, _REQ,
           _REQ + "    if requested is not None:\n"
                  "        raise ValueError(f\"Invalid prefix_match_unit={requested}; not supported.\")\n",
           "over-eager: ValueError for every prefix_match_unit (valid ones too)", "validation-over-eager",
           "caught when a layout with a dividing prefix_match_unit reaches it (the judge: availability FAIL, "
           "resolver.accepts_the_configuration); a matrix run before that rule called it a gap"),
    Mutant("raise_default_config", UTILS, _REQ,
           _REQ + "    if requested is None:\n"
                  "        raise ValueError(\"Invalid prefix_match_unit=None; set one for hybrid models.\")\n",
           "over-eager: ValueError for a default configuration (no prefix_match_unit, several groups)",
           "validation-over-eager"),
    Mutant("partial_hits_always", UTILS,
           "        for spec in iter_layer_specs(group.kv_cache_spec)\n    ):\n        return False\n"
           "    if manager_classes is None:\n",
           "        for spec in iter_layer_specs(group.kv_cache_spec)\n    ):\n        pass\n"
           "    if manager_classes is None:\n",
           "partial hash hits enabled without an align-mode Mamba group", "dropped-condition",
           "consumer-level: changes where hits land, not the (scheduler, hash) pair"),
    Mutant("coordinator_divisibility_assert_removed", COORD,
           "        assert scheduler_block_size % hash_block_size == 0 and all(\n",
           "        assert True or all(\n", "consumer: KVCacheCoordinator's scheduler % hash assertion removed",
           "consumer", f"equivalent: {_UNASSERTED}"),
    Mutant("hybrid_assert_removed", COORD,
           "        assert all(\n            block_size % hash_block_size == 0 for block_size in cacheable_block_sizes\n",
           "        assert True or all(\n            block_size % hash_block_size == 0 for block_size in "
           "cacheable_block_sizes\n",
           "consumer: HybridKVCacheCoordinator's per-group divisibility assertion removed", "consumer",
           f"equivalent: {_UNASSERTED}"),
    Mutant("block_pool_scale_assert_removed", POOL, "        assert block_size % self.hash_block_size == 0\n",
           "", "consumer: BlockPool's block_size % hash assertion removed", "consumer", f"equivalent: {_UNASSERTED}"),
)

# --- behavioural edits: what the consumers do, never raising at the edit itself -----------------
_SHADOW = ("gap: the hit's length stays within the true common prefix; only a shadow of what each block holds "
           "(issue 24 item 0) sees the block placement")
BEHAVIOURAL_MUTANTS: tuple[Mutant, ...] = (
    # the managers' hit search (single_type_kv_cache_manager.py)
    Mutant("fa_hit_past_max_length", MANAGERS,
           "itertools.islice(full_block_hashes, max_length // block_size)",
           "itertools.islice(full_block_hashes, max_length // block_size + 1)",
           "FullAttentionManager scans one full block past max_length (the last token's block can hit)",
           "hit-search"),
    Mutant("fa_fine_tail_one_unit_long", MANAGERS,
           "                hit_length = (fine_idx + 1) * alignment_tokens\n",
           "                hit_length = (fine_idx + 2) * alignment_tokens\n",
           "FullAttentionManager's fine-grained phase 2 counts one hash unit past the cached tail", "hit-search"),
    Mutant("fa_miss_skipped", MANAGERS,
           "            if not cached_block:\n                break\n",
           "            if not cached_block:\n                continue\n",
           "FullAttentionManager's phase 1 steps over a missing block instead of stopping (later blocks shift "
           "left)", "hit-search",
           "gap: the shadow judges each hit block's position, but no known input or campaign reached a hole in "
           "a full-attention chain: the free queue holds each chain tail first (frees and touches keep that "
           "order), so a missing block is followed by missing ones; BlockPool.evict_blocks (a connector's failed "
           "load, which the fake worker never reports) punches one"),
    Mutant("swa_window_one_block_short", MANAGERS,
           "        blocks = cdiv(window_size - 1, block_size)\n",
           "        blocks = cdiv(window_size - 1, block_size) - 1\n",
           "SlidingWindowManager accepts a hit whose window is one block short (and caches one block fewer "
           "per boundary)", "hit-search", _SHADOW.replace("the block placement", "a window that is not whole")),
    Mutant("chunked_window_start_one_block_late", MANAGERS,
           "        local_attention_start_block_idx = (\n            local_attention_start_idx // "
           "kv_cache_spec.block_size\n        )\n",
           "        local_attention_start_block_idx = (\n            local_attention_start_idx // "
           "kv_cache_spec.block_size + 1\n        )\n",
           "ChunkedLocalAttentionManager counts the first in-chunk block as out of the window (a null block)",
           "hit-search"),
    Mutant("mamba_state_one_block_late", MANAGERS,
           "                hit_length = (i + 1) * block_size\n                break  # we just need the last match",
           "                hit_length = (i + 2) * block_size\n                break  # we just need the last match",
           "MambaManager reports its state one block past the cached one", "hit-search"),
    Mutant("mamba_fine_state_one_unit_late", MANAGERS,
           "                num_tokens = (fine_idx + 1) * hash_block_size\n",
           "                num_tokens = (fine_idx + 2) * hash_block_size\n",
           "MambaManager's fine-grained search reports its state one hash unit past the cached one", "hit-search"),
    Mutant("mamba_first_state_not_last", MANAGERS,
           "        for i in range(max_num_blocks - 1, -1, -1):\n            if cached_block := "
           "block_pool.get_cached_block(\n                block_hashes[i], kv_cache_group_ids\n            ):\n"
           "                # When enable Mamba",
           "        for i in range(max_num_blocks):\n            if cached_block := "
           "block_pool.get_cached_block(\n                block_hashes[i], kv_cache_group_ids\n            ):\n"
           "                # When enable Mamba",
           "MambaManager searches left to right: the earliest cached state, not the latest", "hit-search",
           "efficiency only: a shorter hit, every token recomputed correctly"),
    # the hybrid coordinator's fixed point and replay boundaries (kv_cache_coordinator.py)
    Mutant("coord_single_pass", COORD,
           "            hit_length = curr_hit_length\n            if is_simple_hybrid:\n                break\n",
           "            hit_length = curr_hit_length\n            if True:\n                break\n",
           "HybridKVCacheCoordinator stops after one pass: a group that shrank the hit is not re-checked by the "
           "groups before it", "coordinator"),
    Mutant("coord_full_attention_untruncated", COORD,
           "                    del blks[num_blocks:]\n",
           "                    pass\n",
           "HybridKVCacheCoordinator leaves full-attention groups' blocks past the reconciled hit", "coordinator"),
    Mutant("replay_boundary_off_by_one", COORD,
           "    if not use_eagle:\n        return (num_prompt_tokens - 1,)\n",
           "    if not use_eagle:\n        return (num_prompt_tokens,)\n",
           "replay_boundaries keeps the state at the whole prompt, not at the resend's num_tokens - 1",
           "coordinator"),
    # the speculative paths: EAGLE's drop
    Mutant("fa_eagle_drop_removed", MANAGERS,
           "        if drop_eagle_block and hit_length > 0:\n",
           "        if False and drop_eagle_block and hit_length > 0:\n",
           "FullAttentionManager no longer gives back a unit for the EAGLE drafter", "speculative"),
    Mutant("swa_eagle_pop_removed", MANAGERS,
           "        if drop_eagle_block and computed_blocks[0]:\n",
           "        if False and drop_eagle_block and computed_blocks[0]:\n",
           "SlidingWindowManager no longer pops the EAGLE block", "speculative"),
    Mutant("unitary_eagle_drop_off", COORD,
           "            drop_eagle_block=0 in self.eagle_group_ids,\n",
           "            drop_eagle_block=False,\n",
           "UnitaryKVCacheCoordinator never asks its manager for the EAGLE drop", "speculative"),
    Mutant("lookahead_hash_too_early", UTILS,
           "        num_tokens = request.num_tokens - num_hash_lookahead_tokens\n",
           "        num_tokens = request.num_tokens\n",
           "the block hasher emits a block's hash before its EAGLE lookahead tokens exist (0.33's hash lookahead)",
           "speculative", since="0.33.0"),
    Mutant("coord_eagle_margin_removed", COORD,
           "                    _max_length = min(\n                        curr_hit_length + eagle_margin,\n",
           "                    _max_length = min(\n                        curr_hit_length + 0,\n",
           "HybridKVCacheCoordinator looks EAGLE groups up without the one-unit margin they drop back from",
           "speculative", "efficiency only: each EAGLE hit one unit shorter, nothing wrong is reused"),
    # the block pool's caching and eviction (block_pool.py)
    Mutant("pool_touch_keeps_free", POOL,
           "            if block.ref_cnt == 0 and not block.is_null:\n                self.free_block_queue.remove(block)\n",
           "            if False:\n                self.free_block_queue.remove(block)\n",
           "BlockPool.touch leaves a hit block in the free queue (it can be handed out while in use)", "block-pool"),
    Mutant("pool_evict_keeps_hash", POOL,
           "            for block in ret:\n                self._maybe_evict_cached_block(block)\n",
           "            for block in ret:\n                pass\n",
           "BlockPool.get_new_blocks reuses a cached block without evicting its hash (stale prefix-cache entry)",
           "block-pool", _SHADOW.replace("the block placement", "a hit on a block that now holds other tokens")),
    # KV event payloads (block_pool.py)
    Mutant("event_tokens_shifted", POOL,
           "            token_ids=request.all_token_ids[start_token_idx:end_token_idx],\n",
           "            token_ids=request.all_token_ids[start_token_idx + 1:end_token_idx + 1],\n",
           "BlockStored carries the token ids one position late", "kv-event"),
    Mutant("event_parent_is_own_hash", POOL,
           "                parent_block_hash = maybe_convert_block_hash(\n"
           "                    block_hashes[num_cached_blocks - 1]\n                )\n",
           "                parent_block_hash = maybe_convert_block_hash(\n"
           "                    block_hashes[num_cached_blocks]\n                )\n",
           "BlockStored's parent is the first new block's own hash", "kv-event"),
    Mutant("partial_event_parent_self", POOL,
           "            request.block_hashes[num_hash_blocks - 2] if num_hash_blocks > 1 else None\n",
           "            request.block_hashes[num_hash_blocks - 1] if num_hash_blocks > 1 else None\n",
           "a partial-tail BlockStored names the tail's own hash as its parent", "kv-event"),
    Mutant("event_removed_dropped", POOL,
           "        if not self.enable_kv_cache_events:\n            return\n        for block_hash in block_hashes:\n",
           "        if True:\n            return\n        for block_hash in block_hashes:\n",
           "no BlockRemoved event on eviction (a KV-aware router keeps routing to evicted blocks)", "kv-event"),
    # the connectors' hash/token pairing
    Mutant("offloading_claims_extra_chunk", OFFLOAD,
           "                        tokens_per_chunk * (start_chunk_idx + num_hit_chunks),\n",
           "                        tokens_per_chunk * (start_chunk_idx + num_hit_chunks + 1),\n",
           "OffloadingConnector claims one chunk past its confirmed hits", "connector"),
    Mutant("simple_store_event_parent", SIMPLE,
           "else maybe_convert_block_hash(resolved_hashes[i - 1])",
           "else maybe_convert_block_hash(resolved_hashes[i])",
           "SimpleCPUOffloadConnector's stored-block metadata pairs each block with its own hash as parent",
           "connector"),
    Mutant("simple_lookup_skips_a_block", SIMPLE,
           "        num_skipped_hashes = num_computed_tokens // self.hash_block_size\n",
           "        num_skipped_hashes = num_computed_tokens // self.hash_block_size + 1\n",
           "SimpleCPUOffloadConnector looks the CPU cache up one block past the local hit (loads the next "
           "block's KV at this position)", "connector",
           _SHADOW.replace("the block placement", "a load of the wrong block's KV")),
)

BEHAVIOURAL: tuple[Mutant, ...] = BEHAVIOURAL_MUTANTS

CATALOGUE: tuple[Mutant, ...] = RESOLVER + BEHAVIOURAL
BY_NAME = {m.name: m for m in CATALOGUE}


def select(names: str | None, consumers: bool = False) -> list[Mutant]:
    """``names`` (comma list), else the whole catalogue, or only ``BEHAVIOURAL`` with ``consumers``."""
    if not names:
        return list(BEHAVIOURAL if consumers else CATALOGUE)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    bad = [n for n in wanted if n not in BY_NAME]
    if bad:
        raise UsageError(f"unknown mutant(s) {', '.join(bad)}; known: {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in wanted]
