"""The contract catalogue: what vLLM's consumers assume of the resolver.

Each contract has an id, a one-line statement, the vLLM file and function it
protects, and a premise (when the consumer runs at all). ``check`` evaluates
all of them over a (Layout, Outcome) pair in pure Python; the Z3 model
(spec/) encodes the same ids and the fuzzer reports violations by id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kvproof.layout import Layout
from kvproof.outcome import Outcome

SAFETY = "safety"
EFFICIENCY = "efficiency"


@dataclass(frozen=True)
class Contract:
    id: str
    kind: str  # SAFETY (a failure) or EFFICIENCY (a warning)
    statement: str
    protects: str  # vLLM file:function whose assertion this is
    premise: str  # when the consumer runs

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True)
class Violation:
    contract: Contract
    detail: str

    def line(self) -> str:
        return f"{self.contract.id}: {self.detail}"


def effective_block_sizes(layout: Layout) -> list[int]:
    """Group block sizes as the resolver sees them (dcp applied), when the
    Outcome does not carry the release's own view.

    Every AttentionSpec (hidden-state caches included: HiddenStateCacheSpec
    is an MLA spec) is scaled by dcp, Mamba state is not; from vLLM 0.31 an
    explicit ``dcp_sharded`` decides.
    """
    def sharded(g) -> bool:
        return g.dcp_sharded if g.dcp_sharded is not None else g.kind != "mamba"
    return [g.block_size * layout.dcp if sharded(g) else g.block_size for g in layout.groups]


def prefix_cacheable(layout: Layout) -> list[bool]:
    """Which groups take part in prefix-cache hashing (spec default: all)."""
    return [True if g.prefix_cacheable is None else g.prefix_cacheable for g in layout.groups]


CATALOGUE: tuple[Contract, ...] = (
    Contract("coordinator.scheduler_multiple_of_hash", SAFETY,
             "scheduler_block_size % hash_block_size == 0",
             "vllm/v1/core/kv_cache_coordinator.py:KVCacheCoordinator.__init__",
             "always (every coordinator)"),
    Contract("coordinator.scheduler_multiple_of_group", SAFETY,
             "scheduler_block_size % block_size == 0 for every group",
             "vllm/v1/core/kv_cache_coordinator.py:KVCacheCoordinator.__init__",
             "always (every coordinator)"),
    Contract("hybrid.group_multiple_of_hash", SAFETY,
             "every prefix-cacheable group's block_size % hash_block_size == 0",
             "vllm/v1/core/kv_cache_coordinator.py:HybridKVCacheCoordinator.__init__",
             "prefix caching on and more than one group"),
    Contract("unitary.hash_equals_block_size", SAFETY,
             "hash_block_size == the group's block_size",
             "vllm/v1/core/kv_cache_coordinator.py:UnitaryKVCacheCoordinator.__init__",
             "prefix caching on and exactly one group"),
    Contract("block_pool.target_multiple_of_hash", SAFETY,
             "every prefix-cacheable group's block_size % hash_block_size == 0 (BlockHashListWithBlockSize)",
             "vllm/v1/core/block_pool.py:BlockPool / kv_cache_utils.py:BlockHashListWithBlockSize",
             "block hashing active (prefix caching or a KV connector)"),
    Contract("connector.block_multiple_of_hash", SAFETY,
             "scheduler and every prefix-cacheable group's block_size % hash_block_size == 0",
             "vllm/distributed/kv_transfer (offloading, simple_kv_offload, LMCache)",
             "a KV connector is configured"),
    Contract("manager.constructs", SAFETY,
             "the real KVCacheManager builds from the resolver's output",
             "vllm/v1/core/kv_cache_manager.py:KVCacheManager.__init__",
             "whenever the resolver returned"),
    Contract("resolver.rejects_bad_prefix_match_unit", SAFETY,
             "a prefix_match_unit that does not divide the prefix-cacheable groups is a ValueError",
             "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
             "prefix_match_unit set, several groups, and the resolver hashes with it (no fallback)"),
    Contract("efficiency.hash_block_size_1", EFFICIENCY,
             "hash_block_size > 1 (1 hashes every token)",
             "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
             "block hashing active"),
    Contract("efficiency.scheduler_within_max_model_len", EFFICIENCY,
             "scheduler_block_size <= max_model_len",
             "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
             "several groups"),
)

BY_ID = {c.id: c for c in CATALOGUE}


def _c(cid: str) -> Contract:
    return BY_ID[cid]


def _groups_not_multiple(layout: Layout, sizes: list[int], h: int, only: list[bool] | None = None) -> str:
    bad = [s for i, s in enumerate(sizes) if (only is None or only[i]) and s % h]
    return f"block_sizes={sizes}, hash_block_size={h}" if bad else ""


def _check_resolved(layout: Layout, out: Outcome) -> list[Violation]:
    s, h = out.scheduler_block_size, out.hash_block_size
    assert s is not None and h is not None
    # The release's own view (dcp applied) when the bridge or model supplied it.
    sizes = list(out.group_block_sizes) or effective_block_sizes(layout)
    raw = [g.block_size for g in layout.groups]
    v: list[Violation] = []
    if s % h:
        v.append(Violation(_c("coordinator.scheduler_multiple_of_hash"), f"scheduler_block_size={s}, hash_block_size={h}"))
    if any(s % b for b in raw):  # the base coordinator checks the specs' own block sizes
        v.append(Violation(_c("coordinator.scheduler_multiple_of_group"), f"scheduler_block_size={s}, block_sizes={raw}"))
    caching = layout.cache.enable_prefix_caching
    if caching and len(sizes) > 1:
        detail = _groups_not_multiple(layout, sizes, h, prefix_cacheable(layout))
        if detail:
            v.append(Violation(_c("hybrid.group_multiple_of_hash"), detail))
    # The unitary coordinator compares with its own block size, which up to
    # 0.29 is scaled by dcp for every spec kind (the release reports it).
    unit = out.extra.get("unitary_block_size", sizes[0])
    if caching and len(sizes) == 1 and h != unit:
        v.append(Violation(_c("unitary.hash_equals_block_size"), f"block_size={unit}, hash_block_size={h}"))
    cacheable = prefix_cacheable(layout)
    if layout.hashing_active:
        detail = _groups_not_multiple(layout, sizes, h, cacheable)
        if detail:
            v.append(Violation(_c("block_pool.target_multiple_of_hash"), detail))
    if layout.kv_connector is not None:
        detail = _groups_not_multiple(layout, sizes + [s], h, cacheable + [True])
        if detail:
            v.append(Violation(_c("connector.block_multiple_of_hash"), detail))
    if out.manager_error is not None and not unsupported_by_design(out):
        v.append(Violation(_c("manager.constructs"), out.manager_error.line()))
    pmu = layout.cache.prefix_match_unit
    used = pmu is not None and len(sizes) > 1 and layout.hashing_active and h == pmu
    if used and any(b % pmu for b, c in zip(sizes, cacheable) if c):
        v.append(Violation(_c("resolver.rejects_bad_prefix_match_unit"),
                           f"prefix_match_unit={pmu} accepted for block_sizes={sizes}"))
    return v


def _check_rejected(layout: Layout, out: Outcome) -> list[Violation]:
    err = out.resolver_error
    assert err is not None
    if err.type == "ValueError":
        return []  # the resolver's documented rejection of a user setting
    return [Violation(_c("resolver.rejects_bad_prefix_match_unit") if layout.cache.prefix_match_unit
                      else _c("manager.constructs"), f"resolver raised {err.line()}")]


# Manager assertions that reject a configuration vLLM does not support at all
# (not a block-size bug): the engine would refuse it the same way.
UNSUPPORTED_BY_DESIGN = (
    "DCP with hybrid KV cache layouts only supports",
    "PCP not support hybrid attn",
    "requires at least two attention groups",
    "requires at least one cacheable group",
)


def unsupported_by_design(out: Outcome) -> bool:
    err = out.manager_error
    return err is not None and err.type == "AssertionError" and any(p in err.message for p in UNSUPPORTED_BY_DESIGN)


def check(layout: Layout, out: Outcome) -> list[Violation]:
    """All safety violations of ``out`` (an empty list means the contracts hold)."""
    if not out.expressible:
        return []
    if out.resolver_error is not None:
        return _check_rejected(layout, out)
    return _check_resolved(layout, out)


def warnings(layout: Layout, out: Outcome) -> list[Violation]:
    """Efficiency hazards: not failures, but a maintainer wants to see them."""
    if not out.resolved or not out.expressible:
        return []
    w: list[Violation] = []
    s, h = out.scheduler_block_size, out.hash_block_size
    if h == 1 and layout.hashing_active:
        w.append(Violation(_c("efficiency.hash_block_size_1"), "every token is hashed (hash_block_size=1)"))
    if s is not None and len(layout.groups) > 1 and s > layout.max_model_len:
        w.append(Violation(_c("efficiency.scheduler_within_max_model_len"),
                           f"scheduler_block_size={s} > max_model_len={layout.max_model_len}"))
    return w


# Verdicts, in order of severity.
OK, WARN, REJECTED, NOT_EXPRESSIBLE, FAIL = "OK", "WARN", "REJECTED", "NOT_EXPRESSIBLE", "FAIL"


def verdict(layout: Layout, out: Outcome) -> tuple[str, list[Violation], list[Violation]]:
    """(verdict, violations, warnings) for one Outcome."""
    if not out.expressible:
        return NOT_EXPRESSIBLE, [], []
    v = check(layout, out)
    if v:
        return FAIL, v, []
    if out.resolver_error is not None or unsupported_by_design(out):
        return REJECTED, [], []
    w = warnings(layout, out)
    return (WARN if w else OK), [], w


Checker = Callable[[Layout, Outcome], list[Violation]]
