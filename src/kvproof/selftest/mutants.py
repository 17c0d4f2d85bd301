"""The catalogue of seeded edits to vLLM 0.32.0's Python sources.

Each mutant is (file, anchor text, replacement, description, class): the
anchor must occur exactly once in the installed file (``apply`` checks), so a
release whose code moved says so instead of testing nothing. ``survivor`` is
this project's one-sentence reading of what a survival would mean
(equivalent, efficiency only, or a gap), printed when no layer catches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvproof.errors import UsageError
from kvproof.spec import facts

UTILS = "vllm/v1/core/kv_cache_utils.py"
COORD = "vllm/v1/core/kv_cache_coordinator.py"
POOL = "vllm/v1/core/block_pool.py"
CLASSES = ("operator", "dropped-condition", "fallback", "dcp", "validation-skipped", "validation-over-eager",
           "consumer")
# The release the anchors are written against: the default of the one release list (spec/facts.py);
# when the default moves, the anchor check (every anchor present once) says which need rewriting.
RELEASE = facts.DEFAULT_RELEASE


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # site-packages relative
    anchor: str
    replacement: str
    description: str
    klass: str
    survivor: str = "gap: a wrong result no layer noticed"

    def apply(self, text: str) -> str:
        n = text.count(self.anchor)
        if n != 1:
            raise UsageError(f"mutant {self.name}: anchor found {n} times in {self.file} (want exactly 1)")
        return text.replace(self.anchor, self.replacement)

    def source(self, site_packages: Path) -> bytes:
        return self.apply((Path(site_packages) / self.file).read_text()).encode()


_RET = "    return scheduler_block_size, hash_block_size\n"
_REQ = "    requested = cache_config.prefix_match_unit\n"
_PMU_CHECK = "    if any(bs % hash_block_size != 0 for bs in hashing_sizes):\n"
_MAMBA_FALLBACK = "    ):\n        return scheduler_block_size, scheduler_block_size\n\n    hashing_sizes"
_UNASSERTED = "unreachable from any layout while the resolver is right: the resolver's own checks keep it true"

CATALOGUE: tuple[Mutant, ...] = (
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

BY_NAME = {m.name: m for m in CATALOGUE}


def select(names: str | None) -> list[Mutant]:
    if not names:
        return list(CATALOGUE)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    bad = [n for n in wanted if n not in BY_NAME]
    if bad:
        raise UsageError(f"unknown mutant(s) {', '.join(bad)}; known: {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in wanted]
