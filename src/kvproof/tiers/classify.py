"""Failure classes and engine verdicts, in pure Python (no vLLM).

A *failure class* is what a maintainer would call "the same bug": the verdict
the contracts give (FAIL or WARN) plus the contract ids the catalogue reports
for it, e.g. ``FAIL{block_pool.target_multiple_of_hash, hybrid.group_multiple_of_hash}``.
The same function serves a counterexample Layout (judged on the real resolver
of a release) and a live engine layout (read back from a real boot), so the
synthesiser can compare the two. A class is a *prediction*; what the engine
tier observed is ``engine_verdict`` (a ``Verdict`` at ``Tier.ENGINE``):

- FAIL only when real vLLM raised or asserted in a block-size consumer (at
  boot or while serving) or the resolver itself raised something other than a
  clear ``ValueError``;
- LATENT when the engine booted (and served) but the contracts flag its live
  layout: the contract ids are reported, nothing real has failed yet;
- ERROR when the boot failed for a reason unrelated to block sizes (a CPU
  kernel, a model the release cannot run, a timeout): the cause is printed;
- REJECTED when the resolver refused the configuration with a ValueError.

``engine_verdict`` turns a boot into an engine-tier Outcome (a consumer
assertion as ``manager_error``, an unrelated failure as ``run_error``, a
served output that differs from prefix caching off as the observation
``oracle:prefix_caching_output`` in ``manager_error``) and asks the one judge,
``kvproof.judging.judge.judge(..., Tier.ENGINE)``; a boot that died before a KV layout
was captured is an Outcome with only ``run_error`` (ERROR). ``failure_class``
is the judge's contract rows of the resolution, relabelled: every verdict
here comes from the judge, this module only words the detail.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kvproof.judging import contracts
from kvproof.judging.judge import Judgement, judge
from kvproof.inputs.layout import DEFAULT_MAX_MODEL_LEN, Cache, Group, Layout
from kvproof.outcome import Outcome, StageError
from kvproof.judging.oracle_ids import OracleId
from kvproof.tiers.families import BootResult
from kvproof import facts
from kvproof.verdicts import Tier, Verdict
from kvproof.verdicts import parse as _parse

# Frames whose AssertionError is a block-size consumer refusing the layout.
_CONSUMER_FILES = ("kv_cache_coordinator.py", "block_pool.py", "kv_cache_utils.py", "kv_cache_manager.py",
                   "single_type_kv_cache_manager.py", "scheduler.py", "kv_connector", "offloading")


def as_verdict(value: "Verdict | str") -> Verdict:
    """A ``Verdict`` from an enum member or its name (contracts and JSON still speak strings)."""
    return value if isinstance(value, Verdict) else _parse(Verdict, str(value))


def as_tier(value: "Tier | str") -> Tier:
    return value if isinstance(value, Tier) else _parse(Tier, str(value))


@dataclass(frozen=True)
class FailureClass:
    verdict: Verdict
    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", as_verdict(self.verdict))
        object.__setattr__(self, "ids", tuple(self.ids))

    def __str__(self) -> str:
        return f"{self.verdict.name}{{{', '.join(self.ids)}}}" if self.ids else self.verdict.name

    def covers(self, target: "FailureClass") -> bool:
        """Does this (live) class reproduce ``target``? Same verdict, at least its contracts."""
        return self.verdict == target.verdict and set(target.ids) <= set(self.ids)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.name, "contracts": list(self.ids)}


def failure_class(layout: Layout, outcome: Outcome) -> FailureClass:
    """What the contracts predict for ``layout`` given ``outcome`` (not what real vLLM did):
    FAIL{violated ids}, REJECTED, WARN{hazard ids}, OK or NOT_EXPRESSIBLE.

    The judge's rows of the resolution alone (what the manager or the run did
    removed): its LATENT contracts are the predicted FAIL class; a resolver
    exception, or a manager refusal by design, is REJECTED."""
    j = judge(layout, replace(outcome, manager_error=None, run_error=None))
    if j.verdict is Verdict.NOT_EXPRESSIBLE:
        return FailureClass(Verdict.NOT_EXPRESSIBLE, ())
    if j.latent:
        return FailureClass(Verdict.FAIL, tuple(sorted({v.contract.id for v in j.latent})))
    if j.observed is not None or contracts.refused_by_design(layout, outcome.manager_error, outcome.vllm_version):
        return FailureClass(Verdict.REJECTED, ())
    return FailureClass(Verdict.WARN if j.warnings else Verdict.OK, tuple(sorted({w.contract.id for w in j.warnings})))


def function_outcome(outcome: Outcome) -> Outcome:
    """The function tier's view: the resolver's result without the manager stage."""
    return replace(outcome, manager_attempted=False, manager_error=None, coordinator="")


# --- live engine layouts ------------------------------------------------------

def live_layout(boot: BootResult) -> Layout | None:
    """The Layout the engine really built (None if the boot died before KV init)."""
    if not boot.groups or boot.cache_block_size is None:
        return None
    groups = []
    for g in boot.groups:
        kind = g["kind"]
        if kind not in facts.KINDS:
            kind = "full_attention"  # an attention spec kvproof does not model separately
        groups.append(Group(
            kind=kind, block_size=int(g["block_size"]),
            prefix_cacheable=None if g.get("prefix_cacheable", True) else False,
            sliding_window=g.get("sliding_window") if kind == "sliding_window" else None,
            attention_chunk_size=g.get("attention_chunk_size") if kind == "chunked_local" else None))
    mode = boot.mamba_cache_mode if boot.mamba_cache_mode in facts.ALL_MAMBA_MODES else "none"
    return Layout(groups=tuple(groups),
                  cache=Cache(block_size=int(boot.cache_block_size),
                              enable_prefix_caching=bool(boot.enable_prefix_caching), mamba_cache_mode=mode),
                  kv_connector=boot.kv_connector, dcp=1, max_model_len=int(boot.max_model_len or DEFAULT_MAX_MODEL_LEN))


def is_consumer_assertion(boot: BootResult) -> bool:
    return boot.error_type == "AssertionError" and (
        any(f in boot.error_frame for f in _CONSUMER_FILES) or "block_size" in boot.error_message)


def is_serving_assertion(boot: BootResult) -> bool:
    """A block-size consumer asserted while the booted engine served requests."""
    return boot.stage == "generate" and boot.error_type == "AssertionError" and \
        any(f in boot.error_frame for f in _CONSUMER_FILES)


def _error(boot: BootResult) -> StageError:
    return StageError(boot.error_type, boot.error_message, boot.error_frame, boot.error_condition,
                      boot.error_caller)


def live_outcome(boot: BootResult, layout: Layout, with_run_error: bool = False) -> Outcome:
    """The boot as an engine-tier Outcome: a consumer assertion (startup or serving) is the
    manager error, a resolver exception the resolver error; with ``with_run_error`` any other
    failure is ``run_error`` (unrelated to block sizes)."""
    manager_error = resolver_error = run_error = None
    resolved = boot.scheduler_block_size is not None
    if not boot.ok:
        if resolved and (is_serving_assertion(boot) or (boot.stage != "generate" and is_consumer_assertion(boot))):
            manager_error = _error(boot)
        elif not resolved and boot.groups and boot.error_type and boot.stage == "engine":
            resolver_error = _error(boot)
        elif with_run_error:
            run_error = _error(boot)
    return Outcome(layout_hash=layout.content_hash(), vllm_version=boot.release, source="engine",
                   scheduler_block_size=boot.scheduler_block_size, hash_block_size=boot.hash_block_size,
                   resolver_error=resolver_error, manager_attempted=resolved, manager_error=manager_error,
                   coordinator=boot.coordinator, run_error=run_error)


@dataclass(frozen=True)
class EngineVerdict:
    verdict: Verdict  # OK / WARN / LATENT / REJECTED / ERROR / FAIL, observed at ``tier``
    cls: FailureClass | None  # what the contracts predict for the live layout (None: died before KV init)
    detail: str
    layout: Layout | None
    tier: Tier = Tier.ENGINE
    contracts: tuple[str, ...] = field(default=())  # contract ids behind a FAIL, LATENT or WARN
    judgement: Judgement | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.name, "tier": str(self.tier), "contracts": list(self.contracts),
                "class": self.cls.to_dict() if self.cls else None, "detail": self.detail}


def _error_cause(boot: BootResult) -> str:
    msg = f"{boot.error_type}: {boot.error_message}".strip(": ")
    where = f" [{boot.error_frame}]" if boot.error_frame else ""
    cpu = f" (cpu {boot.cpu})" if boot.cpu else ""
    return f"{msg}{where}{cpu}"


def _ids(*groups: tuple) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.contract.id for g in groups for v in g))


def serve_line(sv: dict) -> str:
    """One line for the prefix-caching comparison of ``BootResult.serve``."""
    cached = sv.get("cached_tokens") or []
    hit = ", ".join("?" if c is None else str(c) for c in cached)
    head = (f"{sv.get('prompts')} requests sharing a {sv.get('prefix_len')}-token prefix, cached tokens "
            f"[{hit}] with prefix caching on")
    if sv.get("match"):
        return head + ": outputs match prefix caching off token for token"
    return head + f": outputs DIFFER from prefix caching off for requests {sv.get('mismatch')}"


def engine_verdict(boot: BootResult) -> EngineVerdict:
    """Judge one boot by what real vLLM did; the contracts only turn a clean boot into LATENT or WARN."""
    layout = live_layout(boot)
    if layout is None:  # died before the resolver saw a layout: nothing about block sizes
        why = (f"{boot.stage}: {_error_cause(boot)}" if not boot.ok else "booted but no KV layout was captured")
        # Nothing resolved, so the judge never reads the (absent) layout: rule 2, ERROR.
        j = judge(None, Outcome(layout_hash="", vllm_version=boot.release, source="engine",
                                run_error=StageError(boot.error_type or "NoKVLayout", why, boot.error_frame)),
                  Tier.ENGINE)
        return EngineVerdict(j.verdict, None, f"unrelated to block sizes: {why}", None, j.tier, (), j)
    cls = failure_class(layout, live_outcome(boot, layout))
    j = judge(layout, live_outcome(boot, layout, with_run_error=True), Tier.ENGINE)
    cause = _error_cause(boot)
    what = "booted and generated" if boot.token_ids else "booted (generation not run)"
    sv = boot.serve or {}
    if sv:
        what += "; " + serve_line(sv)
        if not sv.get("match", True) and boot.ok:
            # Served with prefix caching on, the output differs from the same engine without it:
            # a wrong prefix hit (or a connector pairing a hash with the wrong tokens) observed,
            # judged as a block-size consumer misbehaving while serving (rule 4).
            ids = _ids(j.latent) or cls.ids
            seen = StageError(OracleId.PREFIX_CACHING_OUTPUT.check, serve_line(sv))
            j = judge(layout, replace(live_outcome(boot, layout), manager_error=seen), Tier.ENGINE)
            return EngineVerdict(j.verdict, cls, f"serving: {serve_line(sv)}", layout, j.tier, ids, j)
    if j.verdict == Verdict.FAIL:
        where = "serving" if boot.stage in ("generate", "serve") else ("resolver" if j.observed is not None and
                                                            boot.scheduler_block_size is None else "startup")
        note = f" ({j.note})" if j.note else ""
        ids = _ids(j.explained, j.latent) or cls.ids
        return EngineVerdict(Verdict.FAIL, cls, f"{where}: {cause}{note}", layout, j.tier, ids, j)
    if j.verdict == Verdict.REJECTED:
        return EngineVerdict(Verdict.REJECTED, cls, f"resolver: {cause}", layout, j.tier, (), j)
    if j.verdict == Verdict.UNSUPPORTED:  # vLLM refuses the configuration by design
        return EngineVerdict(Verdict.UNSUPPORTED, cls, f"startup: {cause} ({j.note})", layout, j.tier,
                             _ids(j.explained), j)
    if j.verdict == Verdict.ERROR:
        stage = "booted, generation failed" if boot.stage == "generate" else boot.stage
        return EngineVerdict(Verdict.ERROR, cls, f"unrelated to block sizes: {stage}: {cause}", layout, j.tier,
                             _ids(j.latent), j)
    if j.verdict == Verdict.LATENT:
        # A prediction, not an observation: real vLLM accepted and served this layout.
        ids = _ids(j.latent)
        return EngineVerdict(Verdict.LATENT, cls, f"{what}, but the contracts flag the live layout: "
                                                  + ", ".join(ids), layout, j.tier, ids, j)
    if j.verdict == Verdict.WARN:
        ids = _ids(j.warnings)
        return EngineVerdict(Verdict.WARN, cls, f"{what}; warnings: " + ", ".join(ids), layout, j.tier, ids, j)
    return EngineVerdict(j.verdict, cls, what, layout, j.tier, (), j)
