"""The rows: one (layout, release, tier) verdict, the record every tier's result is judged into.

It sits below the tier members (they build rows) and the runners that call them (``checking``,
``replay``); ``kvproof.running.checking.Row`` is :class:`Row`, and replay's rows are :class:`ReplayRow`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kvproof.judging import contracts
from kvproof.consumer.result import ConsumerResult
from kvproof.judging.judge import Judgement
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof.result import Result
from kvproof.verdicts import Tier, Verdict


@dataclass(frozen=True)
class Row:
    """One (layout, release, tier) verdict: a tier's ``result`` (``kvproof.result.Result``) with
    the one judge's ``judgement`` of it. A result that ran nothing (``result.skip``: no engine
    reproducer) has no ``judgement``: its ``verdict`` is None, never an expectation."""

    name: str
    layout: Layout
    env: str
    result: Result
    judgement: Judgement | None  # None: nothing ran (``result.skip`` says why)

    @property
    def verdict(self) -> Verdict | None:
        return None if self.judgement is None else self.judgement.verdict

    @property
    def tier(self) -> Tier:
        assert self.judgement is not None, "a row without a judgement names its tier (ReplayRow.asked)"
        return self.judgement.tier

    # read-only names for the payload: health, selftest, findings' witness search and many tests
    # read ``row.outcome`` / ``row.consumer``; None where the row's result is another tier's
    @property
    def outcome(self) -> Outcome | None:
        p = self.result.payload
        return p if isinstance(p, Outcome) else None

    @property
    def consumer(self) -> ConsumerResult | None:
        p = self.result.payload
        return p if isinstance(p, ConsumerResult) else None

    @property
    def skip(self) -> str:
        return self.result.skip

    @property
    def scheduler_block_size(self) -> int | None:
        return self.result.scheduler_block_size

    @property
    def hash_block_size(self) -> int | None:
        return self.result.hash_block_size

    @property
    def vllm_version(self) -> str:
        return self.result.vllm_version

    @property
    def violations(self) -> tuple[contracts.Violation, ...]:
        """Contracts that predicted what real vLLM raised (FAIL rows)."""
        return self.judgement.explained

    @property
    def latent(self) -> tuple[contracts.Violation, ...]:
        return self.judgement.latent

    @property
    def warnings(self) -> tuple[contracts.Violation, ...]:
        return self.judgement.warnings

    def message(self) -> str:
        if self.judgement is None:
            return self.result.skip
        o = self.outcome
        if o is not None and not o.expressible:
            return o.not_expressible
        return self.judgement.line()

    def to_dict(self) -> dict:
        def vs(items):
            return [{"contract": v.contract.id, "detail": v.detail, "protects": v.contract.protects}
                    for v in items]
        j = self.judgement
        return {
            "name": self.name, "env": self.env, "vllm": self.vllm_version,
            "layout": self.layout.to_dict(), "layout_hash": self.layout.content_hash(),
            "verdict": str(j.verdict), "tier": str(j.tier),
            "scheduler_block_size": self.scheduler_block_size,
            "hash_block_size": self.hash_block_size,
            "violations": vs(j.explained), "latent": vs(j.latent),
            "warnings": [{"contract": w.contract.id, "detail": w.detail} for w in j.warnings],
            "by_design": j.by_design, "note": j.note, "message": self.message(),
            "outcome": None if self.outcome is None else self.outcome.to_dict(),
            "consumer": None if self.consumer is None else self.consumer.to_dict(),
        }


@dataclass(frozen=True)
class ReplayRow(Row):
    """A row of ``kvproof replay``: the release it ran on and the tier it answers for (``asked``:
    a manager row whose resolver raised is still the manager tier's row, though its judgement
    names the function tier; an engine row, the tier that observed what the boot showed)."""

    release: str = ""
    asked: Tier | None = None

    @classmethod
    def of(cls, row: Row, release: str, asked: Tier, **changes: Any) -> ReplayRow:
        """``row`` on ``release`` answering for ``asked``, with ``changes`` to its fields."""
        own = {f.name: getattr(row, f.name) for f in fields(Row)}
        return cls(**{**own, **changes}, release=release, asked=asked)

    @property
    def tier(self) -> Tier:
        return self.asked if self.asked is not None else super().tier
