"""What an oracle records: an ``Observation``, and the ``Recorder`` that caps them per oracle. No vLLM import.

Only a registered id (``kvproof.judging.oracle_ids``) is recorded: another raises
``UnknownOracle`` at once, not a run whose observation the judge ignores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvproof.judging.oracle_ids import oracle_id

MAX_OBS_PER_ORACLE = 20


@dataclass
class Observation:
    oracle: str
    step: int
    detail: str
    # "rule|producer", number-free: the rule that broke and who produced the wrong thing (the
    # block pool or connector that published an event and its medium, the connector and its
    # method, the coordinator). A finding's class carries the producer (src/kvproof/judging/classkey.py), so a
    # second fault of one oracle is not counted under a known first one. For an ``exception``
    # from a bare assert: ``assert <condition> <- <caller frame>``, read from the raising
    # source line (kvproof.consumer.failures.raised).
    cause: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {"oracle": self.oracle, "step": self.step, "detail": self.detail}
        if self.cause:
            d["cause"] = self.cause
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Observation":
        return cls(str(d["oracle"]), int(d["step"]), str(d["detail"]), str(d.get("cause", "")))


@dataclass
class Recorder:
    """Collects observations, capped per oracle so a broken run stays readable."""

    observations: list[Observation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    step: int = 0

    def add(self, oracle: str, detail: str, step: int | None = None, cause: str = "") -> None:
        oracle = oracle_id(oracle).value  # stored as the plain value: results are JSON
        n = self.counts.get(oracle, 0)
        self.counts[oracle] = n + 1
        if n < MAX_OBS_PER_ORACLE:
            self.observations.append(Observation(oracle, self.step if step is None else step, detail, cause))
