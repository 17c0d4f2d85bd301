"""The catalogue of vLLM consumer functions kvproof models, by area.

One line per function: its qualified name in the module and what kvproof's
consumer tier models of it (release tags say where a name first appears
among the managed releases). ``Class.*`` stands for every def of a class:
the scheduler-side connector managers are modelled as a whole. Each entry
lists candidate paths, first first: a file that moved keeps its key.
Stdlib only (kvproof.spec.consumer_fingerprint reads the sources).
"""

from __future__ import annotations

from dataclasses import dataclass

_V1 = "vllm/distributed/kv_transfer/kv_connector/v1/"


@dataclass(frozen=True)
class Consumer:
    area: str
    paths: tuple[str, ...]  # candidate files; the key uses the first
    name: str  # qualified name in the module; "Class.*": every def of the class
    note: str  # what kvproof models of it

    @property
    def key(self) -> str:
        return f"{self.paths[0]}:{self.name}"

    def covers(self, key: str) -> bool:
        path, _, name = key.partition(":")
        if path != self.paths[0]:
            return False
        if not self.name.endswith(".*"):
            return name == self.name
        cls = self.name[:-1]  # "Class."
        return name == self.name or (name.startswith(cls) and "." not in name[len(cls):])


def _table(area: str, paths: str | tuple[str, ...], text: str) -> tuple[Consumer, ...]:
    """``name | note`` lines -> Consumers."""
    paths = (paths,) if isinstance(paths, str) else paths
    rows = (line.split("|", 1) for line in text.strip().splitlines())
    return tuple(Consumer(area, paths, n.strip(), note.strip()) for n, note in rows)


def _lookahead(rel: str, cls: str) -> Consumer:
    return Consumer("connectors", (_V1 + rel,), f"{cls}.supports_lookahead_block_hashes",
                    "whether hashes look ahead under this connector (0.34; before: never with a connector)")


CONSUMERS: tuple[Consumer, ...] = (
    *_table("coordinator", "vllm/v1/core/kv_cache_coordinator.py", """
replay_boundaries | positions a resend or extension can resume at, so which blocks are cached (0.32)
_validate_prefix_cache_retention_interval | prefix_cache_retention_interval: 0 in 0.29 made by-design hit regressions
get_kv_cache_coordinator | which coordinator a layout gets (no-prefix-cache, unitary, hybrid)
KVCacheCoordinator.__init__ | startup asserts: scheduler % hash, scheduler % group size; multi-module MTP refusal
KVCacheCoordinator.find_longest_cache_hit | the hit the hit oracle compares with the ideal
KVCacheCoordinator.get_num_cacheable_tokens | how many tokens get cached (0.32)
KVCacheCoordinator.cache_blocks | caching full blocks per group
KVCacheCoordinator.emit_cached_block_events | BlockStored events (event oracle; 0.30)
KVCacheCoordinator.remove_skipped_blocks | freeing blocks outside a window (removal oracle)
KVCacheCoordinator.get_num_common_prefix_blocks | common-prefix blocks across running requests (to 0.31)
KVCacheCoordinator.free | freeing a request's blocks
KVCacheCoordinatorNoPrefixCache.__init__ | caching off: no per-group divisibility assert
KVCacheCoordinatorNoPrefixCache.find_longest_cache_hit | caching off: no local hit
UnitaryKVCacheCoordinator.__init__ | one group: hash == block size assert
UnitaryKVCacheCoordinator.find_longest_cache_hit | one group's hit, EAGLE drop
HybridKVCacheCoordinator.__init__ | per-group block size % hash assert; drop_eagle_group_ids
HybridKVCacheCoordinator._cache_hit_alignment_tokens | where a hybrid hit may end
HybridKVCacheCoordinator.verify_and_split_kv_cache_groups | groups by spec (attention groups, EAGLE groups)
HybridKVCacheCoordinator._align_cacheable | cacheable tokens aligned to every group (0.28)
HybridKVCacheCoordinator.get_num_cacheable_tokens | cacheable tokens of a hybrid layout (0.32)
HybridKVCacheCoordinator.cache_blocks | hybrid caching of full blocks (to 0.31)
HybridKVCacheCoordinator.find_longest_cache_hit | the fixed point over groups (one pass for simple hybrids)
HybridKVCacheCoordinator.find_longest_cache_hit_per_group | one group's step of the fixed point
"""),
    *_table("managers", "vllm/v1/core/single_type_kv_cache_manager.py", """
get_manager_for_kv_cache_spec | which manager a group's spec gets
SingleTypeKVCacheManager.__init__ | block size, EAGLE flag, retention per group
SingleTypeKVCacheManager.cache_blocks | caching full blocks at the group's size
SingleTypeKVCacheManager.find_longest_cache_hit | the per-group hit contract
SingleTypeKVCacheManager.remove_skipped_blocks | freeing skipped blocks (removal oracle)
SingleTypeKVCacheManager.get_num_skipped_tokens | tokens outside the attention window
SingleTypeKVCacheManager.add_local_computed_blocks | taking a local hit's blocks
SingleTypeKVCacheManager.allocate_external_computed_blocks | taking a connector hit's blocks
SingleTypeKVCacheManager.reachable_block_mask | blocks a later request can still hit
SingleTypeKVCacheManager.get_num_common_prefix_blocks | common-prefix blocks (to 0.31)
FullAttentionManager.find_longest_cache_hit | full-attention hit, EAGLE drop (drop_eagle_block)
FullAttentionManager.cache_blocks | full-attention caching, partial tail
FullAttentionManager._cache_partial_tail_block | partial-tail caching
SlidingWindowManager.__init__ | window size per group
SlidingWindowManager._contiguous_blocks_for_hit | one more contiguous block for a window hit
SlidingWindowManager.find_longest_cache_hit | sliding-window hit
SlidingWindowManager.get_num_skipped_tokens | tokens left of the window
SlidingWindowManager.reachable_block_mask | window blocks still hittable
ChunkedLocalAttentionManager.find_longest_cache_hit | chunked-local hit
ChunkedLocalAttentionManager.get_num_skipped_tokens | tokens before the chunk
MambaManager.__init__ | Mamba state blocks, cache mode
MambaManager.find_longest_cache_hit | Mamba hit at state checkpoints
MambaManager.remove_skipped_blocks | freeing old Mamba states
MambaManager.cache_blocks | Mamba state caching (align mode)
MambaManager._cache_partial_tail_block | Mamba partial-tail state
MambaManager.get_num_skipped_tokens | Mamba skipped tokens
"""),
    *_table("block pool", "vllm/v1/core/block_pool.py", """
BlockHashToBlockMap.get_one_block | lookup of a cached block by hash
BlockHashToBlockMap.insert | what the prefix cache holds (the wiring reads its _cache)
BlockPool.__init__ | hash block size, events flag, medium
BlockPool.get_cached_block | a hit per group at hash granularity
BlockPool.cache_full_blocks | hashes at the group's size; BlockStored events
BlockPool.cache_partial_block | partial-block caching
BlockPool._build_block_stored_event | BlockStored: hashes and block size (event oracle)
BlockPool.emit_cached_block_events | when events are queued
BlockPool.generate_event_extra_keys | extra keys in events (0.34)
BlockPool.get_lookahead_token_ids | lookahead tokens of a stored block (0.34)
BlockPool.touch | hit blocks leave the free queue
BlockPool.free_blocks | freed blocks keep their hash
BlockPool.get_new_blocks | reuse evicts a cached block (spy_reuse)
BlockPool._maybe_evict_cached_block | eviction; BlockRemoved
BlockPool.evict_blocks | explicit eviction
BlockPool.reset_prefix_cache | prefix-cache reset
BlockPool.take_events | the event queue the oracles read
"""),
    *_table("kv cache manager", "vllm/v1/core/kv_cache_manager.py", """
KVCacheManager.__init__ | hash block size, coordinator choice
KVCacheManager.prefix_cache_lookup_enabled | when a lookup happens
KVCacheManager.get_computed_blocks | the local hit and its prompt_len - 1 cap (spy_lookups)
KVCacheManager.get_computed_blocks_for_connector | the local hit with a connector
KVCacheManager.get_num_cached_tokens | cached-token count (0.34)
KVCacheManager.estimate_cached_tokens | estimated hit
KVCacheManager.allocate_slots | allocation with lookahead slots (spy_allocations)
KVCacheManager.cache_blocks | caching after a step
KVCacheManager.truncate_computed_blocks | cutting a hit back
KVCacheManager.remove_skipped_blocks | window removal
KVCacheManager.free | freeing a request
KVCacheManager.get_num_common_prefix_blocks | common-prefix blocks (to 0.33)
KVCacheManager.take_events | KV events to the publisher
"""),
    *_table("block hashing", "vllm/v1/core/kv_cache_utils.py", """
init_none_hash | the root hash
hash_block_tokens | one block's hash (the wiring recomputes it)
generate_block_hash_extra_keys | extra keys in a hash
generate_lookahead_block_hash_extra_keys | the L lookahead tokens in a hash (0.33)
get_request_block_hasher | Request.block_hashes at hash granularity, lookahead
frontend_block_hashes | hashes computed in the frontend (0.34)
BlockHashListWithBlockSize.__init__ | hashes viewed at a group's size (scale factor assert)
BlockHashListWithBlockSize.__getitem__ | combining hashes to a bigger block
BlockHashListWithBlockSize._get_value_at | combining hashes to a bigger block
resolve_block_hashes | hashes per group size (connectors)
resolve_cache_hit_alignment_tokens | where hits land (0.32)
partial_hash_hits_enabled | partial hits on/off (0.32)
eagle_proof_margin | the EAGLE drop's size: one unit fine-grained, else one block (0.32)
"""),
    *_table("block hashing", "vllm/v1/kv_cache_interface.py", """
get_mamba_prefill_checkpoint_position | where a Mamba state is kept under lookahead hashing (0.30)
"""),
    *_table("request", "vllm/v1/request.py", """
Request.__init__ | block_hasher, hashes at creation
Request.update_block_hashes | hashes as tokens arrive (lookahead holds the last L back)
Request.truncate_block_hashes | hashes dropped on rollback (0.34)
Request.append_output_token_ids | output tokens extend hashes
Request.num_tokens_with_spec | draft tokens in the token count
Request.get_skip_reading_prefix_cache | no hit with prompt logprobs (to 0.33)
Request.skip_reading_external_kv | no connector hit (0.34)
Request.get_max_cache_hit_length | the hit cap (0.34; was prompt_len - 1 in get_computed_blocks)
Request.get_prefix_cache_hit_limit | the hit cap with prompt logprobs (0.34)
"""),
    *_table("scheduler", "vllm/v1/core/sched/scheduler.py", """
Scheduler.__init__ | block sizes, connector, lookahead
Scheduler.add_request | admission
Scheduler.schedule | local hit then connector hit (get_num_new_matched_tokens), partial tail
Scheduler._get_local_prefix_cache_hit | the local hit the connector is asked after (0.28)
Scheduler._reserve_prefill_lookahead | prefill lookahead slots (0.28)
Scheduler._mamba_block_aligned_split | Mamba-aligned prefill chunks
Scheduler._preempt_request | preemption: blocks freed, hit again on resume
Scheduler.update_from_output | accepted/rejected drafts roll num_computed_tokens back
Scheduler.update_draft_token_ids | drafts on requests
Scheduler._update_waiting_for_remote_kv | connector loads finishing
Scheduler._update_from_kv_xfer_finished | transfer completion
Scheduler._connector_finished | request_finished to the connector
Scheduler.finish_requests | finishing requests
Scheduler._free_request | freeing a finished request
Scheduler._free_blocks | freeing blocks after the connector
"""),
    *_table("connectors", "vllm/v1/simple_kv_offload/manager.py", """
SimpleCPUOffloadScheduler.* | SimpleCPUOffloadConnector's scheduler side: hash-size asserts, claims, stores
"""),
    *_table("connectors", (_V1 + "offloading/scheduler.py", _V1 + "offloading_connector.py"), """
SchedulerOffloadConfig.from_spec | offloading block size per group
OffloadingConnectorScheduler.* | OffloadingConnector's scheduler side: lookups, claims, store jobs
"""),
    *_table("connectors", _V1 + "offloading_connector.py", """
OffloadingConnector.get_num_new_matched_tokens | the claim the scheduler takes
OffloadingConnector._max_loadable_tokens | the claim's cap (0.30)
OffloadingConnector.update_state_after_alloc | after a claim
OffloadingConnector.request_finished | stores on finish
"""),
    *_table("connectors", _V1 + "simple_cpu_offload_connector.py", """
SimpleCPUOffloadConnector.get_num_new_matched_tokens | the claim the scheduler takes
SimpleCPUOffloadConnector.request_finished | stores on finish
"""),
    *_table("connectors", _V1 + "example_connector.py", """
ExampleConnector.get_num_new_matched_tokens | the claim (a file per prompt)
ExampleConnector.update_state_after_alloc | after a claim
ExampleConnector.build_connector_meta | loads and saves
ExampleConnector._found_match_for_request | a hit on disk
align_to_block_size | claims aligned to the block size
"""),
    *_table("connectors", _V1 + "example_hidden_states_connector.py", """
ExampleHiddenStatesConnector._find_cache_kv_group_id | the hidden-state group
ExampleHiddenStatesConnector._get_cache_block_size | its block size
ExampleHiddenStatesConnector.get_num_new_matched_tokens | no claim
ExampleHiddenStatesConnector.update_state_after_alloc | after allocation
ExampleHiddenStatesConnector.build_connector_meta | saves
ExampleHiddenStatesConnector.request_finished | on finish
"""),
    _lookahead("base.py", "KVConnectorBase_V1"),
    _lookahead("simple_cpu_offload_connector.py", "SimpleCPUOffloadConnector"),
    _lookahead("offloading_connector.py", "OffloadingConnector"),
    _lookahead("multi_connector.py", "MultiConnector"),
    _lookahead("nixl/connector.py", "NixlBaseConnector"),
    _lookahead("mooncake/mooncake_connector.py", "MooncakeConnector"),
    _lookahead("mooncake/store/connector.py", "MooncakeStoreConnector"),
    *_table("speculative", "vllm/config/vllm.py", """
VllmConfig.num_hash_lookahead_tokens | L: 0 without caching or with a connector, 1 EAGLE, k multi-module MTP (0.33)
VllmConfig._resolve_num_hash_lookahead_tokens | L's rule (0.34: a connector may opt in)
VllmConfig.num_lookahead_tokens | lookahead slots (0.28)
VllmConfig.num_prefill_lookahead_tokens | prefill lookahead (0.31)
VllmConfig.use_v2_model_runner | the model runner: DSpark on V2 only (facts.V2_RUNNER_SPEC_METHODS; 0.34 removed V1)
"""),
    *_table("speculative", "vllm/config/speculative.py", """
SpeculativeConfig.use_eagle | EAGLE-family drafter
SpeculativeConfig.needs_eagle_block_drop | the EAGLE block drop (0.33)
SpeculativeConfig.use_eagle_block_drop | the EAGLE block drop (0.30)
SpeculativeConfig.use_multi_module_mtp | k modules hash k tokens ahead
SpeculativeConfig.num_mtp_modules | MTP module count (0.34)
SpeculativeConfig.max_num_new_slots_for_drafting | lookahead slots for drafts
SpeculativeConfig.uses_draft_kv_cache | drafter KV groups (0.30)
SpeculativeConfig.use_dflash | DFlash: k + 1 lookahead slots (facts.SPEC_LOOKAHEAD_EXTRA)
SpeculativeConfig.use_dspark | DSpark: k lookahead slots from the anchor (facts.SPEC_LOOKAHEAD_EXTRA)
"""),
    *_table("speculative", "vllm/v1/worker/gpu/spec_decode/speculator_config.py", """
SpeculatorConfig.num_lookahead_tokens | lookahead slots per method (0.34)
"""),
    *_table("speculative", "vllm/v1/worker/gpu/spec_decode/dspark/config.py", """
DSparkSpeculatorConfig.num_lookahead_tokens | DSpark's lookahead slots: k from the anchor, else DFlash's (0.34)
"""),
    *_table("speculative", "vllm/v1/worker/gpu/spec_decode/dflash/config.py", """
DFlashSpeculatorConfig.num_lookahead_tokens | DFlash's lookahead slots: k + 1 (0.34)
"""),
)


def consumer_of(key: str) -> Consumer | None:
    """The catalogue entry a key came from (a wildcard's members included)."""
    return next((c for c in CONSUMERS if c.covers(key)), None)
