"""The contract catalogue: what vLLM's consumers assume of the resolver.

Each contract has an id, a one-line statement, the exact vLLM
``file:Class.function`` that enforces it (checked against the installed 0.32
source by tests/integration/test_contract_agreement.py), a premise (when the
consumer runs at all) and the evidence tier whose real code enforces it.
``check`` evaluates them over a (Layout, Outcome) pair in pure Python: a
*prediction*. Verdicts are not made here: ``kvproof.judging.judge`` turns predictions
and what real vLLM did into one ``Judgement``. The Z3 model (spec/) encodes
the same ids.
"""

from __future__ import annotations

import re

from collections.abc import Callable
from dataclasses import dataclass

from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof import facts, frames
from kvproof.revisions import revision_or_newest
from kvproof.verdicts import Tier

SAFETY = "safety"
EFFICIENCY = "efficiency"
SUPPORT = "support"  # the manager refuses a configuration it does not support (a failure when real code raises)


@dataclass(frozen=True)
class Contract:
    id: str
    kind: str  # SAFETY or SUPPORT (a failure once real code raises) or EFFICIENCY (a warning)
    statement: str
    protects: str  # vllm/<file>.py:<Class.function> whose assertion this is (installed 0.32 paths)
    premise: str  # when the consumer runs
    tier: Tier = Tier.MANAGER  # the evidence tier whose real code enforces it

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
    return [g.block_size * layout.dcp if g.sharded else g.block_size for g in layout.groups]


def prefix_cacheable(layout: Layout) -> list[bool]:
    """Which groups take part in prefix-cache hashing (spec default: all)."""
    return [True if g.prefix_cacheable is None else g.prefix_cacheable for g in layout.groups]


CATALOGUE: tuple[Contract, ...] = (
    Contract("coordinator.scheduler_multiple_of_hash", SAFETY,
             "scheduler_block_size % hash_block_size == 0",
             "vllm/v1/core/kv_cache_coordinator.py:KVCacheCoordinator.__init__",
             "always (every coordinator)", Tier.MANAGER),
    Contract("coordinator.scheduler_multiple_of_group", SAFETY,
             "scheduler_block_size % block_size == 0 for every group",
             "vllm/v1/core/kv_cache_coordinator.py:KVCacheCoordinator.__init__",
             "always (every coordinator)", Tier.MANAGER),
    Contract("hybrid.group_multiple_of_hash", SAFETY,
             "every group manager's block_size % hash_block_size == 0",
             "vllm/v1/core/kv_cache_coordinator.py:HybridKVCacheCoordinator.__init__",
             "prefix caching on and more than one group", Tier.MANAGER),
    Contract("hybrid.two_distinct_specs", SUPPORT,
             "the groups can be split for lookup: two distinct specs up to 0.28, a prefix-cacheable group "
             "from 0.29 (facts.HYBRID_NEEDS)",
             "vllm/v1/core/kv_cache_coordinator.py:HybridKVCacheCoordinator.verify_and_split_kv_cache_groups",
             "prefix caching on and more than one group", Tier.MANAGER),
    Contract("hybrid.dcp_full_attention_or_mamba", SUPPORT,
             "with dcp > 1 every group is full attention (MLA, hidden-state) or Mamba up to 0.28, full "
             "attention or not dcp-sharded from 0.31 (facts.HYBRID_DCP_ACCEPTS)",
             "vllm/v1/core/kv_cache_coordinator.py:HybridKVCacheCoordinator.__init__",
             "prefix caching on, more than one group, dcp > 1", Tier.MANAGER),
    Contract("unitary.hash_equals_block_size", SAFETY,
             "hash_block_size == the unitary coordinator's block_size",
             "vllm/v1/core/kv_cache_coordinator.py:UnitaryKVCacheCoordinator.__init__",
             "prefix caching on and exactly one group", Tier.MANAGER),
    Contract("block_pool.target_multiple_of_hash", SAFETY,
             "every prefix-cacheable group's block_size (as its manager sees it) % hash_block_size == 0",
             "vllm/v1/core/kv_cache_utils.py:BlockHashListWithBlockSize.__init__",
             "block hashing active (prefix caching or a KV connector)", Tier.CONSUMER),
    Contract("connector.block_multiple_of_hash", SAFETY,
             "scheduler and every prefix-cacheable group's block_size % hash_block_size == 0",
             "vllm/v1/simple_kv_offload/manager.py:SimpleCPUOffloadScheduler.__init__",
             "a KV connector is configured", Tier.CONSUMER),
    Contract("manager.constructs", SAFETY,
             "the real KVCacheManager builds from the resolver's output",
             "vllm/v1/core/kv_cache_manager.py:KVCacheManager.__init__",
             "whenever the resolver returned (an observation: the judge names it when no other contract "
             "predicted the manager's exception)", Tier.MANAGER),
    Contract("resolver.accepts_the_configuration", SAFETY,
             "the resolver returns for every configuration it has no documented reason to refuse (a "
             "prefix_match_unit that does not divide a group, or one other than a single group's block "
             "size, or one misaligned with a prefix-cacheable spec's tokens_per_state; with no prefix-cacheable group "
             "the resolver hashes over every group)",
             "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
             "always (availability)", Tier.FUNCTION),
    Contract("resolver.rejects_bad_prefix_match_unit", SAFETY,
             "a prefix_match_unit that does not divide the prefix-cacheable groups is a ValueError",
             "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
             "prefix_match_unit set, several groups, and the resolver hashes with it (no fallback)", Tier.FUNCTION),
    Contract("efficiency.hash_block_size_1", EFFICIENCY,
             "hash_block_size > 1 (1 hashes every token)",
             "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
             "block hashing active", Tier.FUNCTION),
    Contract("efficiency.consumer_prefix_reuse", EFFICIENCY,
             "a request stream recomputes at most 5 points more of the shared-prefix tokens it could reuse "
             "than hits at the release's finest granularity (its hash block size) would "
             "(measured by the consumer tier, never predicted)",
             "vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks",
             "prefix caching on and a stream with shared prefixes", Tier.CONSUMER),
    Contract("efficiency.scheduler_within_max_model_len", EFFICIENCY,
             "scheduler_block_size <= max_model_len",
             "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes",
             "several groups", Tier.FUNCTION),
)

BY_ID = {c.id: c for c in CATALOGUE}


def _c(cid: str) -> Contract:
    return BY_ID[cid]


def _groups_not_multiple(sizes: list[int], h: int, only: list[bool] | None = None) -> str:
    bad = [s for i, s in enumerate(sizes) if (only is None or only[i]) and s % h]
    return f"block_sizes={sizes}, hash_block_size={h}" if bad else ""


def manager_block_sizes(layout: Layout, out: Outcome) -> list[int]:
    """Each group's block size as its real single-type manager sees it: the
    release's own view (dcp applied to dcp-sharded specs, Mamba state not)
    when the bridge recorded it, else the spec default."""
    return list(out.group_block_sizes) or effective_block_sizes(layout)


def unitary_block_size(layout: Layout, out: Outcome) -> int:
    """The block size the unitary coordinator (one group) hashes and aligns at.
    Up to 0.29 it scales every spec kind by dcp, Mamba included; the bridge
    records the real value whenever the manager was built."""
    return int(out.extra.get("unitary_block_size", manager_block_sizes(layout, out)[0]))


def _revision(out: Outcome) -> str:
    """The modelled revision of the release that produced ``out``; past the table the newest
    revision's rules, named with a drift alarm (kvproof.revisions.revision_or_newest)."""
    return revision_or_newest(out.vllm_version)


def dcp_refused(layout: Layout, revision: str) -> list[str]:
    """Kinds HybridKVCacheCoordinator refuses with dcp > 1 (facts.HYBRID_DCP_ACCEPTS)."""
    rule = facts.HYBRID_DCP_ACCEPTS[revision]
    bad = set()
    for g in layout.groups:
        # a ring-buffer (prefix_cacheable=false) group is a CircularBufferSpec, not a FullAttentionSpec
        full = g.kind in facts.FULL_ATTENTION_SPEC_KINDS and g.prefix_cacheable is not False
        ok = full or (g.kind == "mamba" if rule == "full_or_mamba" else not g.sharded)
        if not ok:
            bad.add(g.kind)
    return sorted(bad)


def distinct_specs(layout: Layout) -> int:
    """How many distinct KV cache specs the groups carry (equal specs share one
    lookup group in ``verify_and_split_kv_cache_groups``)."""
    return len(set(layout.groups))


def _check_resolved(layout: Layout, out: Outcome) -> list[Violation]:
    s, h = out.scheduler_block_size, out.hash_block_size
    assert s is not None and h is not None
    sizes = manager_block_sizes(layout, out)
    raw = [g.block_size for g in layout.groups]
    cacheable = prefix_cacheable(layout)
    caching = layout.cache.enable_prefix_caching
    v: list[Violation] = []
    if s % h:
        v.append(Violation(_c("coordinator.scheduler_multiple_of_hash"), f"scheduler_block_size={s}, hash_block_size={h}"))
    if any(s % b for b in raw):  # the base coordinator checks the specs' own block sizes
        v.append(Violation(_c("coordinator.scheduler_multiple_of_group"), f"scheduler_block_size={s}, block_sizes={raw}"))
    hybrid = caching and len(sizes) > 1
    if hybrid:
        rev = _revision(out)
        # The real assertion ranges over every group manager up to 0.28, over the
        # prefix-cacheable ones from 0.29 (facts.HYBRID_DIVISIBILITY_OVER).
        only = cacheable if facts.HYBRID_DIVISIBILITY_OVER[rev] == "prefix_cacheable" else None
        detail = _groups_not_multiple(sizes, h, only)
        if detail:
            v.append(Violation(_c("hybrid.group_multiple_of_hash"), detail))
        if layout.dcp > 1:
            bad = dcp_refused(layout, rev)
            if bad:
                v.append(Violation(_c("hybrid.dcp_full_attention_or_mamba"), f"dcp={layout.dcp} with {', '.join(bad)}"))
        if facts.HYBRID_NEEDS[rev] == "two_specs" and distinct_specs(layout) < 2:
            v.append(Violation(_c("hybrid.two_distinct_specs"), f"{len(sizes)} groups, one spec"))
        if facts.HYBRID_NEEDS[rev] == "one_cacheable" and not any(cacheable):
            v.append(Violation(_c("hybrid.two_distinct_specs"), f"{len(sizes)} groups, none prefix-cacheable"))
    if caching and len(sizes) == 1:
        unit = unitary_block_size(layout, out)
        if h != unit:
            v.append(Violation(_c("unitary.hash_equals_block_size"), f"block_size={unit}, hash_block_size={h}"))
    if layout.hashing_active:
        # One group with caching on: the target is the block size the group's single-type manager
        # resolves hashes at (BlockHashListWithBlockSize in find_longest_cache_hit / cache_blocks).
        # For attention that is the unitary coordinator's dcp-scaled size; a MambaManager undoes dcp
        # scaling and works at its spec's own block size (single_type_kv_cache_manager.py, 0.27/0.28:
        # 1295/1310 assert "DCP not support mamba now." at the first get_computed_blocks), so one
        # Mamba group is compared at that size. The scaled size stays the unitary contract's.
        one = caching and len(sizes) == 1
        targets = ([sizes[0] if layout.groups[0].kind == "mamba" else unitary_block_size(layout, out)]
                   if one else sizes)
        detail = _groups_not_multiple(targets, h, cacheable if len(targets) == len(cacheable) else None)
        if detail:
            v.append(Violation(_c("block_pool.target_multiple_of_hash"), detail))
    if layout.kv_connector is not None:
        detail = _groups_not_multiple(sizes + [s], h, cacheable + [True])
        if detail:
            v.append(Violation(_c("connector.block_multiple_of_hash"), detail))
    pmu = layout.cache.prefix_match_unit
    used = pmu is not None and len(sizes) > 1 and layout.hashing_active and h == pmu
    hashed = [b for b, c in zip(sizes, cacheable) if c] or sizes  # 0.29+: all groups when none is cacheable
    if used and any(b % pmu for b in hashed):
        v.append(Violation(_c("resolver.rejects_bad_prefix_match_unit"),
                           f"prefix_match_unit={pmu} accepted for block_sizes={sizes}"))
    return v


@dataclass(frozen=True)
class Refusal:
    """An assertion with which vLLM refuses, by design, a configuration it does not support
    (not a block-size bug): the judge's UNSUPPORTED, shown with its message, never a failure."""
    message: str  # a substring of the assertion's message
    where: str  # the vLLM code that asserts
    # The releases (major.minor) whose code makes it, read back from every installed release by
    # tests/integration/test_facts.py: first, last (None: still in the newest managed release).
    since: str
    until: str | None = None
    # By design only for these layouts (None: always). Elsewhere the same assertion is a failure.
    applies: Callable[[Layout], bool] | None = None
    # The contract whose violation the assertion is, and the connector that asserts: lets the
    # proof run's witness search tell a refusal by design from a reachable failure by the layout alone.
    contract: str | None = None
    connector: str | None = None
    exc_type: str = "AssertionError"  # a few refusals raise ValueError with the reason

    def in_release(self, release: str | None) -> bool:
        """Whether ``release``'s code makes this refusal (an unnamed or unparsed one: assumed to, as
        before ranges were kept; a source overlay may carry no release number)."""
        if not release or not re.match(r"\d+\.\d+", release):
            return True
        return facts.release_in_range(release, self.since, self.until)

    def _by_design_for(self, layout: Layout | None) -> bool:
        return self.applies is None or (layout is not None and self.applies(layout))

    def matches(self, layout: Layout | None, err: StageError | None, release: str | None = None) -> bool:
        if err is None or err.type != self.exc_type or self.message not in err.message:
            return False
        return self.in_release(release) and self._by_design_for(layout)

    def covers(self, layout: Layout, contract_id: str, revision: str | None = None) -> bool:
        """A layout violating ``contract_id`` meets this refusal, by design, before anything else
        (under ``revision``: in one of its releases)."""
        releases = facts.REVISION_FACTS[revision].releases if revision else (None,)
        return (self.contract is not None and contract_id.split("[")[0] == self.contract
                and (self.connector is None or layout.kv_connector == self.connector)
                and any(self.in_release(r) for r in releases) and self._by_design_for(layout))


def _prefix_caching_off(layout: Layout) -> bool:
    return not layout.cache.enable_prefix_caching


# No earlier engine validation refuses these configurations (vllm/config/ has no such check up
# to 0.33), so the refusal is the assertion itself.
_COORDINATOR = "v1/core/kv_cache_coordinator.py:__init__"
_SINGLE_TYPE = "v1/core/single_type_kv_cache_manager.py"
UNSUPPORTED_BY_DESIGN: tuple[Refusal, ...] = (
    Refusal("DCP with hybrid KV cache layouts only supports", _COORDINATOR, "0.27"),
    Refusal("PCP not support hybrid attn", _COORDINATOR, "0.27", "0.30"),
    Refusal("requires at least two attention groups", _COORDINATOR, "0.27", "0.28"),
    Refusal("requires at least one cacheable group", _COORDINATOR, "0.29"),
    # KVCacheCoordinator.__init__: multi-module MTP's prefill lookahead must fit in the tail the
    # EAGLE drop excludes, one scheduler block; the coordinator refuses a smaller block with the
    # reason (a ValueError naming both numbers), found by the consumer differential.
    Refusal("Multi-module MTP with prefix caching requires scheduler_block_size", _COORDINATOR, "0.28",
            exc_type="ValueError"),
    # ChunkedLocalAttentionManager.find_longest_cache_hit: reached only with the hybrid KV cache
    # manager on for a chunked-local model, which vllm/config/vllm.py turns off unless
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (and always with EAGLE).
    Refusal("not compatible with chunked local attention", _SINGLE_TYPE, "0.27"),
    # Same function under an EAGLE-family drafter: the engine turns the hybrid manager off for
    # chunked local attention with EAGLE, and no model is chunked-local alone (Llama 4 has global
    # layers), so only a direct caller reaches it; the message names the limitation.
    Refusal("not supported for eagle + chunked local attention", _SINGLE_TYPE, "0.27"),
    # Same function, the two asserts before it: chunked-local prefix lookups refuse context
    # parallelism; no engine validation refuses the configuration earlier.
    Refusal("DCP not support chunked local attn now", _SINGLE_TYPE, "0.27"),
    Refusal("PCP not support chunked local attn now", _SINGLE_TYPE, "0.27"),
    # SlidingWindowManager.find_longest_cache_hit: the same documented limitation for
    # sliding-window groups under context parallelism, found by the consumer campaign.
    Refusal("DCP not support sliding window attn now", _SINGLE_TYPE, "0.27"),
    Refusal("PCP not support sliding window attn now", _SINGLE_TYPE, "0.27"),
    # build_offloading_config: OffloadingConnector on a hybrid model whose Mamba groups are not in
    # "align" mode hashes at the LCM (the resolver's fallback) and asserts, naming the remedy. By
    # design while prefix caching is off (the remedy applies; found by the consumer campaign on
    # 0.32.0, mamba_cache_mode=none). With prefix caching on, the same assertion is a failure: the
    # 0.27 seed layout reaches it with tokens_per_hash=98464.
    Refusal("need --enable-prefix-caching to align block sizes",
            "distributed/kv_transfer/kv_connector/v1/offloading/config.py:build_offloading_config", "0.27",
            applies=_prefix_caching_off, contract="connector.block_multiple_of_hash",
            connector=facts.OFFLOADING_CONNECTOR),
)


# A refusal recognised by how vLLM refuses, not by a hand list: a ValueError or NotImplementedError
# raised while a KV connector, a KV cache manager or the coordinator is built or validates its
# configuration (a constructor, or a check/validate/verify helper it calls), in the code that
# builds them (REFUSING_CODE), whose message says the configuration is not supported, e.g.
# MooncakeStoreConnector.__init__ (0.27): "MooncakeStoreConnector does not support: PCP/DCP > 1
# ... with hybrid attention". The hand list above stays for bare asserts vLLM documents elsewhere.
REFUSING_TYPES = ("ValueError", "NotImplementedError")
REFUSING_CODE = ("vllm/distributed/kv_transfer/", "vllm/v1/core/", "vllm/v1/simple_kv_offload/",
                 "vllm/v1/kv_offload/")
_NOT_SUPPORTED = re.compile(r"\b(does not support|do not support|doesn't support|not supported|is unsupported)\b",
                            re.IGNORECASE)
# the builders: constructors and their set-up helpers (_init_lmcache_engine), the connector
# factory (create_connector: "Connector X does not support HMA but HMA is enabled"), validators
_REFUSING_FUNCTIONS = ("__init__", "_init_", "create_connector", "check", "validate", "verify")


def refuses_by_message(err: StageError | None) -> bool:
    """``err`` is a constructor's "not supported" refusal (see :data:`REFUSING_CODE`)."""
    if err is None or err.type not in REFUSING_TYPES or not _NOT_SUPPORTED.search(err.message or ""):
        return False
    frame = err.frame or ""
    function = frames.function_of(frame)
    return frames.path_of(frame).startswith(REFUSING_CODE) and any(f in function for f in _REFUSING_FUNCTIONS)


def refused_by_design(layout: Layout | None, err: StageError | None, release: str | None = None) -> bool:
    """``err`` is a refusal of ``layout`` that vLLM ``release`` makes by design (:data:`UNSUPPORTED_BY_DESIGN`
    within its release range, or a constructor's "not supported" message: :func:`refuses_by_message`)."""
    return any(r.matches(layout, err, release) for r in UNSUPPORTED_BY_DESIGN) or refuses_by_message(err)


def violation_by_design(layout: Layout, contract_id: str, revision: str | None = None) -> Refusal | None:
    """The refusal by design a layout violating ``contract_id`` meets, if any (no vLLM run needed)."""
    return next((r for r in UNSUPPORTED_BY_DESIGN if r.covers(layout, contract_id, revision)), None)


def check(layout: Layout, out: Outcome) -> list[Violation]:
    """The contracts' predictions for a resolved Outcome: every SAFETY/SUPPORT
    contract ``out`` violates (empty: the contracts hold). Pure: it never looks
    at what the manager did; an Outcome the resolver rejected or that is not
    expressible predicts nothing (``kvproof.judging.judge`` handles those)."""
    if not out.expressible or not out.resolved:
        return []
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
