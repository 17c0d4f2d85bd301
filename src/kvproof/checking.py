"""Run Layouts through real vLLM releases and judge them: the engine of `check`.

Layouts in, one worker per release, Outcomes judged by ``kvproof.judge``
(the one judge), rows out. Used by the CLI, the tests and the benches alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from kvproof import contracts
from kvproof.bridge.client import start_all
from kvproof.envs import Env
from kvproof.judge import Judgement, judge as judge_outcome
from kvproof.layout import Layout
from kvproof.outcome import Outcome
from kvproof.verdicts import Tier, Verdict


@dataclass(frozen=True)
class Row:
    """One (layout, release) verdict."""

    name: str
    layout: Layout
    env: str
    outcome: Outcome
    judgement: Judgement

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict

    @property
    def tier(self) -> Tier:
        return self.judgement.tier

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
        o = self.outcome
        if not o.expressible:
            return o.not_expressible
        return self.judgement.line()

    def to_dict(self) -> dict:
        def vs(items):
            return [{"contract": v.contract.id, "detail": v.detail, "protects": v.contract.protects}
                    for v in items]
        j = self.judgement
        return {
            "name": self.name, "env": self.env, "vllm": self.outcome.vllm_version,
            "layout": self.layout.to_dict(), "layout_hash": self.layout.content_hash(),
            "verdict": str(j.verdict), "tier": str(j.tier),
            "scheduler_block_size": self.outcome.scheduler_block_size,
            "hash_block_size": self.outcome.hash_block_size,
            "violations": vs(j.explained), "latent": vs(j.latent),
            "warnings": [{"contract": w.contract.id, "detail": w.detail} for w in j.warnings],
            "by_design": j.by_design, "note": j.note,
            "outcome": self.outcome.to_dict(),
        }


def judge(name: str, layout: Layout, env_name: str, outcome: Outcome) -> Row:
    return Row(name, layout, env_name, outcome, judge_outcome(layout, outcome))


def exit_code(rows: Sequence[Row]) -> int:
    """``kvproof check``'s exit code: 1 any FAIL, else 3 any ERROR, else 0
    (OK, WARN, REJECTED, NOT_EXPRESSIBLE and LATENT are not failures)."""
    verdicts = {r.verdict for r in rows}
    if Verdict.FAIL in verdicts:
        return 1
    if Verdict.ERROR in verdicts:
        return 3
    return 0


def run(named: Sequence[tuple[str, Layout]], envs: Sequence[Env], manager: bool = True) -> tuple[list[Row], dict]:
    """Every layout through every environment; returns rows and per-env worker info."""
    rows: list[Row] = []
    info: dict[str, dict] = {}
    workers = start_all(envs)
    try:
        for worker in workers:
            info[worker.env.name] = worker.info
            outcomes = worker.run([layout for _, layout in named], manager=manager)
            rows.extend(judge(n, lay, worker.env.name, o) for (n, lay), o in zip(named, outcomes))
    finally:
        for worker in workers:
            worker.close()
    return rows, info


def dumps(rows: Sequence[Row], info: dict) -> str:
    return json.dumps({"environments": info, "results": [r.to_dict() for r in rows]}, indent=2)
