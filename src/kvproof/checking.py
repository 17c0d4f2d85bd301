"""Run Layouts through real vLLM releases and judge them: the engine of `check`.

Layouts in, one worker per release, Outcomes judged by the contracts, rows
out. Used by the CLI, the tests and the benches alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kvproof import contracts
from kvproof.bridge.client import start_all
from kvproof.envs import Env
from kvproof.errors import CorpusError, LayoutError
from kvproof.layout import Layout
from kvproof.outcome import Outcome


@dataclass(frozen=True)
class Row:
    """One (layout, release) verdict."""

    name: str
    layout: Layout
    env: str
    outcome: Outcome
    verdict: str
    violations: tuple[contracts.Violation, ...]
    warnings: tuple[contracts.Violation, ...]

    def message(self) -> str:
        o = self.outcome
        if not o.expressible:
            return o.not_expressible
        if self.violations:
            first = self.violations[0]
            vllm_msg = (o.manager_error or o.resolver_error)
            return f"{first.contract.id}: " + (vllm_msg.line() if vllm_msg else first.detail)
        if o.resolver_error is not None:
            return o.resolver_error.line()
        if o.manager_error is not None:
            return f"unsupported configuration: {o.manager_error.line()}"
        if self.warnings:
            return "; ".join(w.line() for w in self.warnings)
        return ""

    def to_dict(self) -> dict:
        return {
            "name": self.name, "env": self.env, "vllm": self.outcome.vllm_version,
            "layout": self.layout.to_dict(), "layout_hash": self.layout.content_hash(),
            "verdict": self.verdict, "scheduler_block_size": self.outcome.scheduler_block_size,
            "hash_block_size": self.outcome.hash_block_size,
            "violations": [{"contract": v.contract.id, "detail": v.detail, "protects": v.contract.protects}
                           for v in self.violations],
            "warnings": [{"contract": w.contract.id, "detail": w.detail} for w in self.warnings],
            "outcome": self.outcome.to_dict(),
        }


def judge(name: str, layout: Layout, env_name: str, outcome: Outcome) -> Row:
    verdict, violations, warnings = contracts.verdict(layout, outcome)
    return Row(name, layout, env_name, outcome, verdict, tuple(violations), tuple(warnings))


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


def load_layouts(paths: Sequence[str]) -> list[tuple[str, Layout]]:
    """Layout files (or folders of them) -> (name, Layout); one-line errors."""
    out: list[tuple[str, Layout]] = []
    for p in map(Path, paths):
        files = sorted(p.glob("*.json")) if p.is_dir() else [p]
        if p.is_dir() and not files:
            raise LayoutError(f"{p}: folder holds no *.json layouts")
        for f in files:
            try:
                text = f.read_text()
            except OSError as err:
                raise CorpusError(f"{f}: cannot read ({err.strerror})") from None
            out.append((str(f), Layout.from_json(text, where=str(f))))
    return out


def dumps(rows: Sequence[Row], info: dict) -> str:
    return json.dumps({"environments": info, "results": [r.to_dict() for r in rows]}, indent=2)
