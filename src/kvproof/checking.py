"""Run Layouts through real vLLM releases and judge them: the engine of `check`.

Layouts in, one worker per release, Outcomes judged by ``kvproof.judge``
(the one judge), rows out. Used by the CLI, the tests and the benches alike.

The one derive step on the client side lives here too (:func:`derive_all`:
Configs through a bridge worker's real derivation, :mod:`kvproof.bridge.derive`),
so ``check --config``, ``derive``, ``explain`` and the derivation tables share it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from kvproof import contracts
from kvproof.bridge.client import Worker, start_all
from kvproof.config import Config
from kvproof.derivation import (Derived, DeriveError, _revision, config_key, enumerate_configs, host_cpu,
                                model_configs, table_dir, table_entry)
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

    def known(self) -> Any:
        """The ledger entry of this row's class, for a row that observed something, or None."""
        from kvproof.findings.key import class_key
        if self.verdict < Verdict.UNSUPPORTED or self.judgement.observed is None:
            return None
        return ledger().get(class_key(self.judgement, self.layout))

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
            "known": None if (k := self.known()) is None else {
                "id": k.id, "status": str(k.status), "title": k.title, "upstream": k.upstream,
                "fixed_in": k.fixed_in, "workaround": k.workaround},
        }


@functools.lru_cache(maxsize=1)
def ledger() -> Any:
    """The ledger (``KVPROOF_LEDGER`` or the checked-in one), read once per process."""
    from kvproof.findings.ledger import Ledger
    return Ledger.load()


def judge(name: str, layout: Layout, env_name: str, outcome: Outcome) -> Row:
    return Row(name, layout, env_name, outcome, judge_outcome(layout, outcome))


def exit_code(rows: Sequence[Row]) -> int:
    """``kvproof check``'s exit code: 1 any FAIL, else 3 any ERROR, else 0
    (OK, WARN, REJECTED, NOT_EXPRESSIBLE, UNSUPPORTED and LATENT are not failures)."""
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


# --- the derive step -------------------------------------------------------------

CHUNK = 100  # configs per worker call (keeps each call well inside the worker timeout)


def derive_many(release: str, configs: Sequence[Config], worker: Any = None) -> list[tuple[Config, Layout | DeriveError]]:
    """Derive each config through one bridge worker for ``release``."""
    return [(d.config, d.result) for d in derive_all(release, configs, worker)]


def derive_all(release: str, configs: Sequence[Config], worker: Any = None) -> list[Derived]:
    """Like :func:`derive_many`, keeping the resolver's result and timings."""
    from kvproof import envs
    own = worker is None
    w = worker or Worker(envs.find(release))
    try:
        if own:
            w.start()
        out: list[Derived] = []
        for i in range(0, len(configs), CHUNK):
            out.extend(w.derive(configs[i:i + CHUNK]))
        return out
    finally:
        if own:
            w.close()


def write_table(release: str, folder: Path | None = None, budget: int | None = None) -> Path:
    """Derive every Config of the knob space on ``release`` and write ``<folder>/<release>.json``."""
    from kvproof.fsio import atomic_write
    derived = derive_all(release, list(enumerate_configs(release, budget)))
    text = json.dumps({"release": release, "revision": _revision(release),
                       "entries": [table_entry(d) for d in derived]}, indent=1, sort_keys=True)
    return atomic_write((folder or table_dir()) / f"{release}.json", text + "\n")


def write_model_table(release: str, folder: Path | None = None, keep: bool = False) -> Path:
    """Derive every reference model under its flag sets on ``release``; write
    ``<folder>/models/<release>.json`` (with each derivation's seconds and peak RSS). ``keep``:
    keep the rows the table already has, when it was derived on this CPU (derivation.host_cpu),
    and derive only the Configs it lacks; rows for Configs no longer listed are dropped."""
    from kvproof.fsio import atomic_write
    path = (folder or table_dir()) / "models" / f"{release}.json"
    configs = model_configs()
    old: dict[str, dict] = {}
    if keep and path.exists():
        table = json.loads(path.read_text())
        if table.get("cpu") == host_cpu():
            old = {config_key(Config.from_dict(e["config"])): e for e in table["entries"]}
    keys = [config_key(c) for c in configs]
    fresh = iter(derive_all(release, [c for c, k in zip(configs, keys) if k not in old]))
    # group_layers: each group's layer count, where a draft's layers show when they join a target's
    # group of the same spec (qwen3_next + MTP: full attention 12 -> 13 layers, same block sizes).
    entries = []
    for k in keys:
        if k in old:
            entries.append(old[k])
            continue
        d = next(fresh)
        entries.append(dict(table_entry(d), seconds=d.seconds, peak_rss_mb=d.peak_rss_mb, log_line=d.log_line(),
                            stand_in_backend=d.stand_in, group_layers=[g.get("layers") for g in d.raw.get("groups") or []]))
    text = json.dumps({"release": release, "revision": _revision(release), "cpu": host_cpu(), "entries": entries},
                      indent=1, sort_keys=True)
    return atomic_write(path, text + "\n")


# --- check --config: derive, then judge every tier with the one judge --------------

@dataclass(frozen=True)
class ConfigCheck:
    """One Config on one release: its derivation and the rows of every tier that ran."""

    name: str
    env: str
    derived: Derived
    rows: tuple[Row, ...]

    @property
    def not_derivable(self) -> str | None:
        """The release's own refusal of the configuration before any layout, or None."""
        d = self.derived
        return None if d.layout is not None else (d.error.line() if d.error else "no layout")


def check_configs(named: Sequence[tuple[str, Config]], envs: Sequence[Env], manager: bool = True,
                  consumer: bool = True, workers: dict[str, Worker] | None = None) -> list[ConfigCheck]:
    """Each Config through each release: real derivation, then the function and manager tiers
    (one bridge worker; ``workers`` maps an env name to a live one to reuse) and the consumer tier
    (the consumer worker, default shared-prefix stream), every Outcome judged by :mod:`kvproof.judge`."""
    import contextlib
    from kvproof.consumer.client import ConsumerWorker, default_stream
    from kvproof.judge import consumer_outcome, judge_consumer
    out: list[ConfigCheck] = []
    for env in envs:
        live = (workers or {}).get(env.name)
        with contextlib.nullcontext(live) if live is not None else Worker(env) as w:
            derived = derive_all(env.name, [c for _, c in named], w)
            layouts = [(n, d.layout) for (n, _), d in zip(named, derived) if d.layout is not None]
            outcomes = w.run([lay for _, lay in layouts], manager=manager) if layouts else []
        rows: dict[str, list[Row]] = {}
        for (n, lay), o in zip(layouts, outcomes):
            rows.setdefault(n, []).append(judge(n, lay, env.name, o))
        if consumer and layouts:
            with ConsumerWorker(env) as cw:
                results = cw.run([(lay, default_stream(lay)) for _, lay in layouts])
            for (n, lay), r in zip(layouts, results):
                rows[n].append(Row(n, lay, env.name, consumer_outcome(r, lay), judge_consumer(r, lay)))
        out.extend(ConfigCheck(n, env.name, d, tuple(rows.get(n, ()))) for (n, _), d in zip(named, derived))
    return out


def config_exit_code(checks: Sequence[ConfigCheck]) -> int:
    """1 any FAIL, else 3 any ERROR, else 0 (a configuration the release refuses is its answer)."""
    return exit_code([r for c in checks for r in c.rows])
