"""The engine tier: a real ``vllm.LLM`` boot of a tiny model whose live layout has the layout's
failure class (``boots``, ``boot``), judged by ``classify.engine_verdict``.

The recipe comes from the corpus file (meta kvproof.engine.recipe), the reproducer cache, or the
synthesiser (``synth``), aimed at the class the function tier predicts; so the tier ``needs`` the
function rows first, unless every layout stores its recipe. A layout without a recipe gets rows
without a judgement (SKIP) saying why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvproof import envs, facts
from kvproof.envs import Env
from kvproof.errors import EnvError
from kvproof.facts import release_key
from kvproof.fsio import atomic_write
from kvproof.judging.judge import Judgement
from kvproof.inputs.layout import Layout
from kvproof.result import Result
from kvproof.tiers import boots, classify, synth
from kvproof.tiers.base import TierRunner
from kvproof.tiers.families import BootResult, Recipe
from kvproof.tiers.row import ReplayRow
from kvproof.verdicts import Tier, Verdict


@dataclass(frozen=True)
class EngineRun:
    """The engine tier's own record (its ``Result``'s payload): where its recipe came from (stored
    in the file, cached, synthesised, or why there is none) and, when there was one, the recipe and
    its boot."""

    source: dict[str, Any]
    recipe: Recipe | None = None
    boot: BootResult | None = None


def _raw_recipe(layout: Layout) -> dict[str, Any] | None:
    """The engine recipe a corpus file stores (what an engine replay boots: the ``engine.ci``
    files by default, every such file with KVPROOF_ENGINE_ALL=1)."""
    return ((layout.meta or {}).get("engine") or {}).get("recipe") or None


def stored_recipe(layout: Layout) -> Recipe | None:
    raw = _raw_recipe(layout)
    return Recipe.from_dict(raw) if raw else None


def _reproducer_file() -> Path:
    return synth.synth_home() / "reproducers.json"


def _load_reproducers() -> dict[str, Any]:
    try:
        return json.loads(_reproducer_file().read_text())
    except (OSError, ValueError):
        return {}


def _save_reproducer(key: str, rep: synth.Reproducer) -> None:
    data = _load_reproducers()
    data[key] = rep.to_dict()
    atomic_write(_reproducer_file(), json.dumps(data, indent=1, sort_keys=True))


def target_class(layout: Layout, function_rows: Sequence[ReplayRow]) -> tuple[str, classify.FailureClass] | None:
    """The failure class to reproduce and the release it shows on (first predicted FAIL, else WARN)."""
    key = layout.content_hash()
    rows = sorted((r for r in function_rows if r.tier == Tier.FUNCTION and r.layout.content_hash() == key),
                  key=lambda r: release_key(r.release))
    classes = [(r.release, classify.failure_class(r.layout, r.outcome)) for r in rows]
    for wanted in (Verdict.FAIL, Verdict.WARN):  # the contracts' prediction (a function row itself is LATENT)
        for release, cls in classes:
            if cls.verdict == wanted:
                return release, cls
    return None


def find_recipe(layout: Layout, function_rows: Sequence[ReplayRow], echo: Callable[[str], None] | None = None,
                synthesise: bool = True) -> tuple[Recipe | None, dict[str, Any]]:
    """The engine recipe for ``layout``: stored in the file, cached, or synthesised now."""
    stored = stored_recipe(layout)
    if stored is not None:
        return stored, {"source": "corpus file (meta kvproof.engine.recipe)"}
    tc = target_class(layout, function_rows)
    if tc is None:
        return None, {"source": "none", "reason": "the counterexample passes the function tier on every release "
                                                  "replayed: no failure class to reproduce"}
    release, cls = tc
    key = f"{layout.content_hash()}@{release}"
    cached = _load_reproducers().get(key)
    if cached is not None:
        rep_recipe = Recipe.from_dict(cached["recipe"]) if cached.get("recipe") else None
        return rep_recipe, {"source": "synthesiser (cached)", **cached}
    if not synthesise:
        return None, {"source": "none", "reason": "no stored recipe and synthesis disabled"}
    try:
        env = envs.find(release)
    except EnvError as err:
        return None, {"source": "none", "reason": str(err)}
    if echo:
        echo(f"kvproof: synthesising an engine reproducer of {cls} on vLLM {release}")
    rep = synth.synthesise(layout, env, cls, echo=echo)
    if rep.found:  # a miss is not cached here: new families or knobs may find one (probes stay cached)
        _save_reproducer(key, rep)
    return rep.recipe, {"source": "synthesiser", **rep.to_dict()}


def boot_detail(b: BootResult, ev: classify.EngineVerdict) -> str:
    bits = [ev.detail if ev.verdict != Verdict.FAIL else f"observed at the {ev.tier} tier: {ev.detail}"]
    if b.groups:
        bits.append(f"live {b.layout_summary()} scheduler={b.scheduler_block_size} hash={b.hash_block_size}")
    bits.append(f"boot {b.boot_seconds}s rss {b.peak_rss_mb}MB")
    if b.token_ids:
        bits.append(f"tokens {b.token_ids[0]}")
    bits.extend(b.notes)
    return "; ".join(bits)


def _run(row: ReplayRow) -> EngineRun | None:
    p = row.result.payload
    return p if isinstance(p, EngineRun) else None


def _verdict(row: ReplayRow) -> classify.EngineVerdict | None:
    run = _run(row)
    return None if run is None or run.boot is None else classify.engine_verdict(run.boot)


class EngineTier(TierRunner):
    """Real boots, one process each after one import of vLLM per release (``boots.boot_each``)."""

    tier = Tier.ENGINE
    elsewhere = "the engine tier boots a model per layout; run it with `kvproof replay FILE --tier engine`"

    def expected(self, layout: Layout, release: str) -> bool:
        # a file with a recipe, on the releases with their own CPU wheel (a python-only release
        # cannot boot an engine: its boots are ERROR, which is never recorded)
        return _raw_recipe(layout) is not None and release in facts.CPU_RELEASES

    def judge(self, layout: Layout, result: BootResult) -> Judgement:
        """A boot, judged by what real vLLM did (``classify.engine_verdict``: its live layout)."""
        return classify.engine_verdict(result).judgement

    def record(self, own: EngineRun) -> Result:
        """The run with the boot's live pair; without a boot, why nothing ran (never judged)."""
        b = own.boot
        if b is None:
            return Result(self.tier, own, skip="no engine reproducer: " + own.source.get("reason", ""))
        return Result(self.tier, own, b.release, b.scheduler_block_size, b.hash_block_size)

    def needs(self, named: Sequence[tuple[str, Layout]]) -> tuple[Tier, ...]:
        return () if all(stored_recipe(lay) for _, lay in named) else (Tier.FUNCTION,)

    def outside_rows(self, named: Sequence[tuple[str, Layout]], env_map: dict[str, Env], prior: Sequence[ReplayRow],
                     echo: Callable[[str], None] | None = None, synthesise: bool = True,
                     timeout: float = boots.DEFAULT_TIMEOUT) -> list[ReplayRow]:
        found = [(name, lay, *find_recipe(lay, prior, echo, synthesise)) for name, lay in named]
        recipes = [recipe for _, _, recipe, _ in found if recipe is not None]
        booted: dict[str, Iterator[BootResult]] = {}
        for release, env in env_map.items():
            if echo:
                for recipe in recipes:
                    echo(f"kvproof: booting {recipe.family} on vLLM {release}")
            booted[release] = iter(boots.boot_each(env, recipes, timeout=timeout) if recipes else [])
        rows: list[ReplayRow] = []
        for name, lay, recipe, how in found:
            for release, env in env_map.items():
                if recipe is None:
                    rows.append(ReplayRow(name, lay, env.name, self.record(EngineRun(how)), None, release, Tier.ENGINE))
                    continue
                b = next(booted[release])
                ev = classify.engine_verdict(b)
                rows.append(ReplayRow(name, lay, env.name, self.record(EngineRun(how, recipe, b)), ev.judgement,
                                      release, ev.tier))
        return rows

    def detail(self, row: ReplayRow) -> str:
        ev = _verdict(row)
        return boot_detail(_run(row).boot, ev) if ev is not None else row.skip

    def data(self, row: ReplayRow) -> dict[str, Any]:
        run = _run(row)
        if run is None:
            return {}
        ev = _verdict(row)
        if ev is None:
            return {"synth": run.source}
        return {"recipe": run.recipe.describe(), "tricks": run.recipe.tricks(), "synth": run.source,
                "class": ev.cls.to_dict() if ev.cls else None, "contracts": list(ev.contracts),
                "boot": run.boot.to_dict()}

    def recorded(self, rows: Sequence[ReplayRow], meta: dict[str, Any]) -> dict[str, Any]:
        """The file's meta with the recipe of the first row that booted one, unless it stores one."""
        run = next((run for run in map(_run, (r for r in rows if r.tier == Tier.ENGINE))
                    if run is not None and run.recipe is not None and run.boot is not None), None)
        if run is None or (meta.get("engine") or {}).get("recipe"):
            return meta
        how = run.source or {}
        recipe = Recipe.from_dict(run.boot.to_dict()["recipe"])
        found_by = "synthesiser" if str(how.get("source", "")).startswith("synthesiser") else how.get("source", "")
        return {**meta, "engine": {"recipe": recipe.to_dict(), "describe": recipe.describe(),
                                   "tricks": recipe.tricks(), "found_by": found_by, "target": how.get("target"),
                                   "target_release": how.get("release"), "live": how.get("live")}}
