"""Failure classes and engine verdicts, in pure Python (no vLLM).

A *failure class* is what a maintainer would call "the same bug": the verdict
(FAIL or WARN) plus the contract ids the contracts catalogue reports for it,
e.g. ``FAIL{block_pool.target_multiple_of_hash, hybrid.group_multiple_of_hash}``.
The same function serves a counterexample Layout (judged on the real resolver
of a release) and a live engine layout (read back from a real boot), so the
synthesiser can compare the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvproof import contracts
from kvproof.layout import Cache, Group, Layout
from kvproof.outcome import Outcome, StageError
from kvproof.replay.families import BootResult

ERROR = "ERROR"  # the engine failed for a reason that says nothing about block sizes
# Frames whose AssertionError is a block-size consumer refusing the layout.
_CONSUMER_FILES = ("kv_cache_coordinator.py", "block_pool.py", "kv_cache_utils.py", "kv_cache_manager.py",
                   "single_type_kv_cache_manager.py", "scheduler.py", "kv_connector", "offloading")


@dataclass(frozen=True)
class FailureClass:
    verdict: str
    ids: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.verdict}{{{', '.join(self.ids)}}}" if self.ids else self.verdict

    def covers(self, target: "FailureClass") -> bool:
        """Does this (live) class reproduce ``target``? Same verdict, at least its contracts."""
        return self.verdict == target.verdict and set(target.ids) <= set(self.ids)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "contracts": list(self.ids)}


def failure_class(layout: Layout, outcome: Outcome) -> FailureClass:
    verdict, violations, warnings = contracts.verdict(layout, outcome)
    found = violations if verdict == contracts.FAIL else warnings
    return FailureClass(verdict, tuple(sorted({v.contract.id for v in found})))


def function_outcome(outcome: Outcome) -> Outcome:
    """The function tier's view: the resolver's result without the manager stage."""
    from dataclasses import replace
    return replace(outcome, manager_attempted=False, manager_error=None, coordinator="")


# --- live engine layouts ------------------------------------------------------

def live_layout(boot: BootResult) -> Layout | None:
    """The Layout the engine really built (None if the boot died before KV init)."""
    if not boot.groups or boot.cache_block_size is None:
        return None
    groups = []
    for g in boot.groups:
        kind = g["kind"]
        if kind not in ("full_attention", "sliding_window", "chunked_local", "mla", "mamba", "hidden_state"):
            kind = "full_attention"  # an attention spec kvproof does not model separately
        groups.append(Group(
            kind=kind, block_size=int(g["block_size"]),
            prefix_cacheable=None if g.get("prefix_cacheable", True) else False,
            sliding_window=g.get("sliding_window") if kind == "sliding_window" else None,
            attention_chunk_size=g.get("attention_chunk_size") if kind == "chunked_local" else None))
    mode = boot.mamba_cache_mode if boot.mamba_cache_mode in ("align", "all", "none") else "none"
    return Layout(groups=tuple(groups),
                  cache=Cache(block_size=int(boot.cache_block_size),
                              enable_prefix_caching=bool(boot.enable_prefix_caching), mamba_cache_mode=mode),
                  kv_connector=boot.kv_connector, dcp=1, max_model_len=int(boot.max_model_len or 131072))


def is_consumer_assertion(boot: BootResult) -> bool:
    return boot.error_type == "AssertionError" and (
        any(f in boot.error_frame for f in _CONSUMER_FILES) or "block_size" in boot.error_message)


def live_outcome(boot: BootResult, layout: Layout) -> Outcome:
    manager_error = None
    resolved = boot.scheduler_block_size is not None
    if not boot.ok and resolved and is_consumer_assertion(boot):
        manager_error = StageError(boot.error_type, boot.error_message, boot.error_frame)
    resolver_error = None
    if not resolved and boot.groups and boot.error_type:
        resolver_error = StageError(boot.error_type, boot.error_message, boot.error_frame)
    return Outcome(layout_hash=layout.content_hash(), vllm_version=boot.release, source="engine",
                   scheduler_block_size=boot.scheduler_block_size, hash_block_size=boot.hash_block_size,
                   resolver_error=resolver_error, manager_attempted=resolved, manager_error=manager_error,
                   coordinator=boot.coordinator)


@dataclass(frozen=True)
class EngineVerdict:
    verdict: str  # OK / WARN / FAIL / REJECTED / ERROR
    cls: FailureClass | None  # the live layout's failure class (None: died before KV init)
    detail: str
    layout: Layout | None


def engine_verdict(boot: BootResult) -> EngineVerdict:
    """Judge one boot: what the engine did, and what the contracts say of its live layout."""
    layout = live_layout(boot)
    cls = None
    if layout is not None:
        out = live_outcome(boot, layout)
        cls = failure_class(layout, out)
    if not boot.ok:
        msg = f"{boot.error_type}: {boot.error_message}".strip()
        if boot.stage in ("timeout", "crash"):
            return EngineVerdict(ERROR, cls, f"{boot.stage}: {boot.error_message}", layout)
        if boot.stage == "generate":
            return EngineVerdict(ERROR, cls, f"booted, generation failed: {msg} [{boot.error_frame}]", layout)
        if layout is not None and is_consumer_assertion(boot) and boot.scheduler_block_size is not None:
            return EngineVerdict(contracts.FAIL, cls, f"startup: {msg} [{boot.error_frame}]", layout)
        if layout is not None and boot.scheduler_block_size is None:
            v = contracts.REJECTED if boot.error_type == "ValueError" else contracts.FAIL
            return EngineVerdict(v, cls, f"resolver: {msg} [{boot.error_frame}]", layout)
        return EngineVerdict(ERROR, cls, f"{msg} [{boot.error_frame}]", layout)
    assert cls is not None or layout is None
    if cls is None:
        return EngineVerdict(ERROR, None, "booted but no KV layout was captured", None)
    if cls.verdict == contracts.FAIL:
        return EngineVerdict(contracts.FAIL, cls, "booted, but the live layout violates " + ", ".join(cls.ids), layout)
    what = "booted and generated" if boot.token_ids else "booted (generation not run)"
    if cls.verdict == contracts.WARN:
        return EngineVerdict(contracts.WARN, cls, f"{what}; warnings: " + ", ".join(cls.ids), layout)
    return EngineVerdict(cls.verdict, cls, what, layout)
