"""The registry of tiers: each ``Tier`` of the evidence ladder above the model, its one member.

Callers name tiers; only the registry knows which member runs one. The model tier (Z3) is
``kvproof.spec``'s and has no member here.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    return tuple(m.tier for m in runners() if m.ask is not None)


def through(tier: Tier) -> tuple[Tier, ...]:
    """The worker tiers a row of ``tier`` is run at: those sharing its reply part, up to it (a
    manager row: the function and manager stages of one bridge call). Empty outside the worker."""
    part = runner(tier).part
    return tuple(m.tier for m in runners() if m.ask is not None and m.part == part and m.tier <= tier)


def asks(tiers: Iterable[Tier]) -> list[str]:
    """The worker's names of the worker tiers among ``tiers`` (a batch request's tier list)."""
    return [m.ask for m in runners(t for t in tiers if t in _RUNNERS) if m.ask is not None]


def readers(tiers: Iterable[Tier]) -> list[TierRunner]:
    """One member per reply part among the worker tiers of ``tiers`` (tiers sharing a part share its
    row), in ladder order: the members that turn a batch reply into rows."""
    out: dict[str, TierRunner] = {}
    for m in runners(t for t in tiers if t in _RUNNERS):
        if m.ask is not None:
            out.setdefault(m.part, m)
    return list(out.values())
