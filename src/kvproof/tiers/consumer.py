"""The consumer tier: the real scheduler, block pool, prefix cache, KV events and scheduler-side
connector driven by a request stream (``kvproof.consumer``), judged by ``judge_consumer``."""

from __future__ import annotations

from typing import Any

from kvproof.consumer.result import ConsumerResult
from kvproof.judging.judge import Judgement, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.result import Result
from kvproof.tiers.base import TierRunner
from kvproof.tiers.row import ReplayRow, Row
from kvproof.verdicts import Tier


class ConsumerTier(TierRunner):
    """Each layout under its own stream, else the default shared-prefix one; a row of its own."""

    tier = Tier.CONSUMER
    serve = "kvproof.consumer.worker:answers"
    part = "consumer"
    streams = True
    what = "consumer result"
    skip = "skip the consumer tier (--tier function,manager)"

    def result(self, raw: dict[str, Any]) -> Result:
        return self.record(ConsumerResult.from_dict(raw))

    def record(self, own: ConsumerResult) -> Result:
        return Result(self.tier, own, own.vllm_version, own.scheduler_block_size, own.hash_block_size)

    def judge(self, layout: Layout, result: ConsumerResult) -> Judgement:
        return judge_consumer(result, layout)

    def row(self, name: str, layout: Layout, env_name: str, result: Result) -> Row:
        return Row(name, layout, env_name, result, self.judge(layout, result.payload))

    def carries(self, row: Row) -> bool:
        return row.consumer is not None

    def replay_row(self, row: Row, release: str) -> ReplayRow:
        return ReplayRow.of(row, release, Tier.CONSUMER)

    def detail(self, row: ReplayRow) -> str:
        j = row.judgement
        line = j.line() or j.note
        if j.note and j.line() and j.note not in line:
            line += f" ({j.note})"
        return line

    def data(self, row: ReplayRow) -> dict[str, Any]:
        res = row.consumer
        return {"scheduler_block_size": res.scheduler_block_size, "hash_block_size": res.hash_block_size,
                "alignment": res.alignment, "connector": res.connector_class, "steps": res.steps,
                "observations": [ob.to_dict() for ob in res.observations[:5]], "hits": res.hits,
                "vllm": res.vllm_version}
