"""The function and manager tiers: the worker's run op (``kvproof.bridge.runtime``).

One call answers both: the real resolver, then the real ``KVCacheManager`` built from its output.
They share the reply's Outcome and one runner row, judged by ``kvproof.judging.judge`` (its tier: the
highest stage that ran); replay splits that row into a function row (the Outcome without the
manager stage, judged so) and the manager row (the runner's own).
"""

from __future__ import annotations

from typing import Any

from kvproof.judging.judge import Judgement, judge
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof.result import Result
from kvproof.tiers import classify
from kvproof.tiers.base import TierRunner
from kvproof.tiers.row import ReplayRow, Row
from kvproof.verdicts import Tier


class _Bridge(TierRunner):
    """What the function and manager tiers share: the reply's Outcome and the runner's one row."""

    part = "outcomes"
    serve = "kvproof.bridge.runtime:outcomes"
    what = "outcome"

    def result(self, raw: dict[str, Any]) -> Result:
        return self.record(Outcome.from_dict(raw))

    def record(self, own: Outcome) -> Result:
        return Result(self.tier, own, own.vllm_version, own.scheduler_block_size, own.hash_block_size)

    def row(self, name: str, layout: Layout, env_name: str, result: Result) -> Row:
        # the runner's one row for both tiers: judged at the highest stage that ran
        return Row(name, layout, env_name, result, judge(layout, result.payload))

    def carries(self, row: Row) -> bool:
        return row.outcome is not None

    def expected(self, layout: Layout, release: str) -> bool:
        return True  # every file, every managed release


class FunctionTier(_Bridge):
    """The real ``resolve_kv_cache_block_sizes``, judged by the contracts without the manager."""

    tier = Tier.FUNCTION
    serve_with = {"manager": False}

    def judge(self, layout: Layout, result: Outcome) -> Judgement:
        return judge(layout, classify.function_outcome(result), Tier.FUNCTION)

    def probe_ok(self, row: Row) -> bool:
        return row.outcome is not None and row.outcome.resolved

    def replay_row(self, row: Row, release: str) -> ReplayRow:
        # the Outcome without its manager stage, judged so
        return ReplayRow.of(row, release, Tier.FUNCTION, result=self.record(classify.function_outcome(row.outcome)),
                            judgement=self.judge(row.layout, row.outcome))

    def detail(self, row: ReplayRow) -> str:
        o = row.outcome
        cls = classify.failure_class(row.layout, o)
        line = (f"scheduler={o.scheduler_block_size} hash={o.hash_block_size}"
                if o.resolved else (o.resolver_error.line() if o.resolver_error else o.not_expressible))
        return line + (" " + str(cls) if cls.ids else "")

    def data(self, row: ReplayRow) -> dict[str, Any]:
        o = row.outcome
        return {"scheduler_block_size": o.scheduler_block_size, "hash_block_size": o.hash_block_size,
                "class": classify.failure_class(row.layout, o).to_dict(), "vllm": o.vllm_version}


class ManagerTier(_Bridge):
    """The real ``KVCacheManager`` and coordinator built from the resolver's output."""

    tier = Tier.MANAGER
    serve_with = {"manager": True}
    default = True
    skip = "skip the KVCacheManager tier"

    def judge(self, layout: Layout, result: Outcome) -> Judgement:
        return judge(layout, result)

    def replay_row(self, row: Row, release: str) -> ReplayRow:
        return ReplayRow.of(row, release, Tier.MANAGER, result=self.record(row.outcome))

    def detail(self, row: ReplayRow) -> str:
        o = row.outcome
        if o.manager_error is not None:
            return f"{o.manager_error.line()} [{o.manager_error.frame}]"
        return row.message() or (f"{o.coordinator} built" if o.coordinator else "")

    def data(self, row: ReplayRow) -> dict[str, Any]:
        o = row.outcome
        return {"coordinator": o.coordinator, "manager_error": o.manager_error.line() if o.manager_error else None,
                "vllm": o.vllm_version}
