"""Ordered verdicts shared by every layer (check, verify, fuzz, replay, explain).

Ordering is severity: ``max()`` over a run's rows is the run's verdict.
"""

from __future__ import annotations

import enum


class Verdict(enum.IntEnum):
    """What real vLLM (or a contract, for LATENT) said about one Layout or Config."""

    OK = 0
    # kvproof does not model this (a speculative method, a connector's absent package): not a
    # fact about vLLM; the verdict says what would lift it. Never a pass of a vLLM check.
    UNCHECKED = 1
    WARN = 2  # efficiency hazard, measured or predicted
    NOT_EXPRESSIBLE = 3  # the release has no such setting
    REJECTED = 4  # the release's own validation refused a user error, clearly
    UNSUPPORTED = 5  # vLLM refuses the configuration by design (contracts.UNSUPPORTED_BY_DESIGN)
    LATENT = 6  # a contract says unsafe; nothing real has shown it yet
    ERROR = 7  # the run failed for a reason unrelated to block sizes, or kvproof's own harness broke
    FAIL = 8  # real vLLM raised, asserted or misbehaved (at a named tier) on an input it means to accept

    def __str__(self) -> str:
        return self.name


class Tier(enum.IntEnum):
    """The evidence ladder: the strongest tier that observed a finding."""

    MODEL = 0
    FUNCTION = 1
    MANAGER = 2
    CONSUMER = 3
    ENGINE = 4

    def __str__(self) -> str:
        return self.name.lower()


class ProofStatus(enum.IntEnum):
    """One proof query's answer. UNKNOWN is never a proof."""

    PROVED = 0
    WARNING = 1  # an efficiency property has a witness
    COUNTEREXAMPLE = 2
    UNKNOWN = 3

    def __str__(self) -> str:
        return self.name


class Reachability(enum.IntEnum):
    """How a counterexample relates to what users can configure (best first)."""

    REACHABLE = 0  # a witness Config whose real derivation yields it
    FREE = 1  # inside the derivation premise, but no Config within the bounds derives it
    UNREACHABLE = 2  # the derivation premise excludes it (the fact that does is named)

    def __str__(self) -> str:
        return self.name.lower()


def parse(enum_cls, text: str):
    """``Verdict`` from ``"FAIL"``, ``Reachability`` from ``"reachable"``: the JSON edge."""
    try:
        return enum_cls[text.upper()]
    except KeyError:
        raise ValueError(f"{text!r} is not a {enum_cls.__name__} "
                         f"({', '.join(m.name for m in enum_cls)})") from None
