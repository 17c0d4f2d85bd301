"""The row: one (layout, release, tier) verdict, the record every tier's result is judged into.

It sits below the tier members (they build rows) and the runners that call them (``checking``,
``replay``); ``kvproof.checking.Row`` is this class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvproof import contracts
from kvproof.judge import Judgement
from kvproof.layout import Layout
from kvproof.outcome import Outcome
from kvproof.verdicts import Tier, Verdict

if TYPE_CHECKING:
    from kvproof.consumer.result import ConsumerResult


@dataclass(frozen=True)
class Row:
    """One (layout, release, tier) verdict: the bridge's ``outcome`` (function and manager
    tiers) or the consumer tier's ``consumer`` result, with the one judge's ``judgement``.

    ``kvproof replay`` makes its rows of this type too: the runner's rows with the ``release``
    and the tier each answers for (``asked``: a manager row whose resolver raised is still the
    manager tier's row, though its judgement names the function tier), a function row judged
    without the manager stage, and engine rows (real boots) carrying ``engine``, the replay
    layer's record of the boot. A row with nothing to judge (no engine reproducer) has no
    ``judgement`` and says why in ``skip``: its ``verdict`` is None, never an expectation."""

    name: str
    layout: Layout
    env: str
    outcome: Outcome | None
    judgement: Judgement | None  # None: nothing ran (``skip`` says why)
    consumer: ConsumerResult | None = None
    release: str = ""  # the vLLM release (replay's rows; the runner knows its env's name)
    asked: Tier | None = None  # the tier this row answers for, when not the judgement's own
    engine: Any = None  # engine tier: the boot and its recipe's source (kvproof.tiers.engine.EngineRun)
    skip: str = ""  # why there is no judgement

    @property
    def verdict(self) -> Verdict | None:
        return None if self.judgement is None else self.judgement.verdict

    @property
    def tier(self) -> Tier:
        if self.asked is not None:
            return self.asked
        assert self.judgement is not None, "a row without a judgement names its tier (asked)"
        return self.judgement.tier

    @property
    def _source(self) -> Any:
        return self.outcome if self.outcome is not None else self.consumer

    @property
    def scheduler_block_size(self) -> int | None:
        return getattr(self._source, "scheduler_block_size", None)

    @property
    def hash_block_size(self) -> int | None:
        return getattr(self._source, "hash_block_size", None)

    @property
    def vllm_version(self) -> str:
        return getattr(self._source, "vllm_version", "") or ""

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
            return self.skip
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
