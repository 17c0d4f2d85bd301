"""Run Layouts through real vLLM releases and judge them: the engine of `check`.

Layouts in, live workers per release, every tier asked for run by one tier runner
(:func:`run_tiers`), results judged by ``kvproof.judging.judge`` (the one judge), rows out.
Used by the CLI, the tests and the benches alike.

The one derive step on the client side lives here too (:func:`derive_all`:
Configs through a bridge worker's real derivation, :mod:`kvproof.bridge.derive`),
so ``check --config``, ``derive``, ``explain`` and the derivation tables share it.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from kvproof.bridge.client import Worker, start_all
from kvproof.inputs.config import Config
from kvproof.derivation import (Derived, DeriveError, _revision, config_key, enumerate_configs, host_cpu,
                                model_configs, table_dir, table_entry)
from kvproof.envs import Env
from kvproof.inputs.layout import Layout
from kvproof.tiers import client, registry
from kvproof.tiers.batch import batch, config_key as input_config_key, layout_key
from kvproof.tiers.row import Row  # the runner's row type, named checking.Row by its callers
from kvproof.verdicts import Tier, Verdict

# What `kvproof check` runs unless told otherwise: the tiers a release's worker runs (the engine
# tier boots a model per layout: `kvproof replay FILE --tier engine`). The function and manager
# tiers share one bridge call and one row (its tier: the highest that ran); the consumer tier has
# a row of its own.
CHECK_TIERS = registry.worker_tiers()
# Releases whose workers (one per release, every tier in it) start and import vLLM together: the
# README's three releases at once; more releases go three at a time.
PARALLEL_RELEASES = 3


def _windows(envs: Sequence[Env]) -> list[Sequence[Env]]:
    return [envs[i:i + PARALLEL_RELEASES] for i in range(0, len(envs), PARALLEL_RELEASES)]


def exit_code(rows: Sequence[Row]) -> int:
    """``kvproof check``'s exit code: 1 any FAIL, else 3 any ERROR, else 0
    (OK, UNCHECKED, WARN, REJECTED, NOT_EXPRESSIBLE, UNSUPPORTED and LATENT are not failures)."""
    verdicts = {r.verdict for r in rows}
    if Verdict.FAIL in verdicts:
        return 1
    if Verdict.ERROR in verdicts:
        return 3
    return 0


@dataclass
class Workers:
    """The live workers of one run, one per env name (``kvproof.running.worker``: derivation and every
    tier in one process). Workers passed in (``live``) are used, not closed; the rest are started
    together (their vLLM imports overlap) and closed by :meth:`close`."""

    by_env: dict[str, Worker] = field(default_factory=dict)
    own: list[Worker] = field(default_factory=list)

    @classmethod
    def start(cls, envs: Sequence[Env], live: dict[str, Worker] | None = None) -> Workers:
        pool = cls()
        pool.by_env.update({env.name: live[env.name] for env in envs if live and env.name in live})
        pool.own = start_all([env for env in envs if env.name not in pool.by_env])  # closes all on a failure
        pool.by_env.update({w.env.name: w for w in pool.own})
        return pool

    def info(self, env_name: str) -> dict:
        w = self.by_env.get(env_name)
        return dict(w.info) if w is not None else {}

    def close(self) -> None:
        for w in self.own:
            w.close()
        self.own.clear()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_tiers(named: Sequence[tuple[str, Layout]], tiers: Iterable[Tier], env_name: str,
              worker: Worker) -> list[Row]:
    """The one tier runner: named Layouts at ``tiers`` on one release, in one round trip to its
    live worker (the consumer tier under each layout's own stream or the default shared-prefix
    one). Rows per layout in tier order (``Answers.rows``), layouts in input order."""
    if not named:
        return []
    answers = batch(worker, [], [lay for _, lay in named], tiers)
    return answers.rows([(n, lay, layout_key(lay)) for n, lay in named], env_name)


def run(named: Sequence[tuple[str, Layout]], envs: Sequence[Env], tiers: Iterable[Tier] = CHECK_TIERS,
        workers: dict[str, Worker] | None = None) -> tuple[list[Row], dict]:
    """Every layout through every environment at ``tiers``; returns rows and per-env worker info.
    ``workers`` maps an env name to a live worker to reuse."""
    tiers = set(tiers)
    rows: list[Row] = []
    info: dict[str, dict] = {}
    for window in _windows(envs):
        # the window's workers answer side by side (one process each); rows stay in release order
        with Workers.start(window, live=workers) as pool, ThreadPoolExecutor(len(window)) as calls:
            answers = calls.map(lambda env: run_tiers(named, tiers, env.name, pool.by_env[env.name]), window)
            for env, got in zip(window, answers):
                info[env.name] = pool.info(env.name)
                rows.extend(got)
    return rows, info


# --- the derive step -------------------------------------------------------------

CHUNK = 100  # configs per worker call (keeps each call well inside the worker timeout)
# a reference model at real depth takes seconds (up to ~25 s at load 7): 100 of them outran the
# worker's 600 s on a loaded machine, so a model table sends them a few at a time
MODEL_CHUNK = 10


def derive_many(release: str, configs: Sequence[Config], worker: Any = None) -> list[tuple[Config, Layout | DeriveError]]:
    """Derive each config through one bridge worker for ``release``."""
    return [(d.config, d.result) for d in derive_all(release, configs, worker)]


def derive_all(release: str, configs: Sequence[Config], worker: Any = None, chunk: int = CHUNK) -> list[Derived]:
    """Like :func:`derive_many`, keeping the resolver's result and timings; ``chunk`` configs per call."""
    from kvproof import envs
    own = worker is None
    w = worker or start_all([envs.find(release)])[0]
    try:
        out: list[Derived] = []
        for i in range(0, len(configs), chunk):
            out.extend(client.derive(w, configs[i:i + chunk]))
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


# A refusal that says the machine ran out of memory, not that vLLM refused the model: kept by
# --retry-refused, because deriving it again costs minutes and answers the same on this machine.
MEMORY_CAP = "can't allocate memory"


def retry_worthy(entry: dict) -> bool:
    """A table row to derive again under ``retry_refused``: vLLM refused the Config, and not for
    this machine's memory (a refusal may lift when a stand-in or reference config changes)."""
    error = entry.get("error")
    return bool(error) and MEMORY_CAP not in str(error.get("message", ""))


def write_model_table(release: str, folder: Path | None = None, keep: bool = False,
                      retry_refused: bool = False) -> Path:
    """Derive every reference model under its flag sets on ``release``; write
    ``<folder>/models/<release>.json`` (with each derivation's seconds and peak RSS). ``keep``:
    keep the rows the table already has, when it was derived on this CPU (derivation.host_cpu),
    and derive only the Configs it lacks; rows for Configs no longer listed are dropped.
    ``retry_refused`` (with ``keep``): derive the refused rows again too (see retry_worthy)."""
    from kvproof.fsio import atomic_write
    path = (folder or table_dir()) / "models" / f"{release}.json"
    configs = model_configs()
    old: dict[str, dict] = {}
    if keep and path.exists():
        table = json.loads(path.read_text())
        if table.get("cpu") == host_cpu():
            old = {config_key(Config.from_dict(e["config"])): e for e in table["entries"]
                   if not (retry_refused and retry_worthy(e))}
    keys = [config_key(c) for c in configs]
    fresh = iter(derive_all(release, [c for c, k in zip(configs, keys) if k not in old], chunk=MODEL_CHUNK))
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
    def environment_error(self) -> str | None:
        """The machine's limit that stopped the derivation (an ERROR, exit 3), or None."""
        e = self.derived.error
        return f"{e.line()} ({e.environment})" if e is not None and e.environment else None

    @property
    def not_derivable(self) -> str | None:
        """The release's own refusal of the configuration before any layout, or None."""
        d = self.derived
        if d.layout is not None or self.environment_error:
            return None
        return d.error.line() if d.error else "no layout"


def check_configs(named: Sequence[tuple[str, Config]], envs: Sequence[Env], tiers: Iterable[Tier] = CHECK_TIERS,
                  workers: dict[str, Worker] | None = None) -> list[ConfigCheck]:
    """Each Config through each release in one round trip to the release's worker: real
    derivation, then the derived Layouts at ``tiers``, judged as a Layout given by hand would be.
    ``workers`` maps an env name to a live worker to reuse; the others start together."""
    tiers = set(tiers)
    configs = [c for _, c in named]
    out: list[ConfigCheck] = []
    for window in _windows(envs):
        with Workers.start(window, live=workers) as pool:
            for env in window:
                answers = batch(pool.by_env[env.name], configs, [], tiers)
                for n, c in named:  # each config's answers by its key, never by their place in the reply
                    d = answers.derivation(c)
                    key = input_config_key(c)  # a derived layout's answers are filed under its config's key
                    rows = () if d.layout is None else tuple(answers.rows([(n, d.layout, key)], env.name))
                    out.append(ConfigCheck(n, env.name, d, rows))
    return out


def config_exit_code(checks: Sequence[ConfigCheck]) -> int:
    """1 any FAIL, else 3 any ERROR (a derivation this machine could not run included), else 0
    (a configuration the release refuses is its answer)."""
    code = exit_code([r for c in checks for r in c.rows])
    return 3 if code == 0 and any(c.environment_error for c in checks) else code
