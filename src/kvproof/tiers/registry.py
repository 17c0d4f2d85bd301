"""The registry of tiers: each ``Tier`` of the evidence ladder above the model, its one member.

Callers name tiers; only the registry knows which member runs one. The model tier (Z3) is
``kvproof.spec``'s and has no member here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvproof.tiers.base import TierRunner
from kvproof.tiers.bridge import FunctionTier, ManagerTier
from kvproof.tiers.consumer import ConsumerTier
from kvproof.tiers.engine import EngineTier
from kvproof.verdicts import Tier

_RUNNERS: dict[Tier, TierRunner] = {}


def register(member: TierRunner) -> TierRunner:
    """Add ``member`` for its tier; a tier has one member (a second is a mistake, not an override)."""
    if member.tier in _RUNNERS:
        raise ValueError(f"the {member.tier} tier already has a member: {type(_RUNNERS[member.tier]).__name__}")
    _RUNNERS[member.tier] = member
    return member


def unregister(tier: Tier) -> None:
    """Drop ``tier``'s member (a test's throwaway tier)."""
    _RUNNERS.pop(tier, None)


for _member in (FunctionTier(), ManagerTier(), ConsumerTier(), EngineTier()):
    register(_member)


def runner(tier: Tier) -> TierRunner:
    try:
        return _RUNNERS[tier]
    except KeyError:
        raise KeyError(f"no member runs the {tier} tier") from None


def runners(tiers: Iterable[Tier] | None = None) -> list[TierRunner]:
    """The members of ``tiers`` (default: all), in ladder order."""
    chosen = _RUNNERS if tiers is None else set(tiers)
    return [_RUNNERS[t] for t in sorted(chosen)]


def worker_tiers() -> tuple[Tier, ...]:
    """The tiers a release's worker runs (one batch call answers them all), in ladder order."""
    return tuple(m.tier for m in runners() if m.serve is not None)


def _marked(attr: str) -> Tier:
    (member,) = (m for m in runners() if getattr(m, attr))
    return member.tier


def default() -> Tier:
    """The tier a layout is checked at unless a command is told (``findings add/key``; bisect's
    matrix and fix's corpus check run ``through`` it): the manager tier."""
    return _marked("default")


def streamed() -> Tier:
    """The tier that runs a layout's request stream (a hit regression compares its results): the consumer tier."""
    return _marked("streams")


def top(tier: Tier) -> Tier:
    """The highest worker tier sharing ``tier``'s reply part (a function finding is measured with the
    manager stage of the same bridge call); a tier outside the worker: the ``default`` one."""
    part = runner(tier).part
    if part is None:
        return default()
    return max(m.tier for m in runners() if m.serve is not None and m.part == part)


def through(tier: Tier) -> tuple[Tier, ...]:
    """The worker tiers a row of ``tier`` is run at: those sharing its reply part, up to it (a
    manager row: the function and manager stages of one bridge call). Empty outside the worker."""
    part = runner(tier).part
    return tuple(m.tier for m in runners() if m.serve is not None and m.part == part and m.tier <= tier)


def skips(tiers: Iterable[Tier]) -> dict[Tier, str]:
    """The tiers among ``tiers`` a command may skip (``--no-<tier>``), with the flag's help."""
    return {m.tier: m.skip for m in runners(t for t in tiers if t in _RUNNERS) if m.skip}


def refused(tiers: Iterable[Tier]) -> dict[Tier, str]:
    """The tiers a command running only ``tiers`` refuses, with the line saying where they run."""
    return {m.tier: m.elsewhere for m in runners() if m.tier not in set(tiers) and m.elsewhere}


def asks(tiers: Iterable[Tier]) -> dict[str, dict[str, Any]]:
    """A batch request's asks for the worker tiers among ``tiers``: reply part -> the serving
    function and options of the highest member asked for it (the manager tier's Outcome holds the
    function tier's)."""
    out: dict[str, dict[str, Any]] = {}
    for m in runners(t for t in tiers if t in _RUNNERS):
        if m.serve is not None:
            out[m.part] = {"serve": m.serve, "with": dict(m.serve_with)}
    return out


def readers(tiers: Iterable[Tier]) -> list[TierRunner]:
    """One member per reply part among the worker tiers of ``tiers`` (tiers sharing a part share its
    row), in ladder order: the members that turn a batch reply into rows."""
    out: dict[str, TierRunner] = {}
    for m in runners(t for t in tiers if t in _RUNNERS):
        if m.serve is not None:
            out.setdefault(m.part, m)
    return list(out.values())
