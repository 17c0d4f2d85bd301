"""The synthesiser: find a tiny model + engine arguments whose REAL layout has a given failure class.

Search is cheap first: every candidate recipe is booted in *probe* mode (the
engine is built, its live KV layout and the resolver's answer are read back,
nothing is generated), many candidates per process so vLLM is imported once,
and every probe result is cached per release and family under
``~/.cache/kvproof/synth/<release>/<family>.json`` keyed by the recipe. A
later search for another counterexample on the same release costs no boots
for recipes already probed. Only the winner is then booted for real (fresh
process, with generation) by the engine tier.

Candidates come in preference order: realistic knobs first (a sliding window,
a quantised KV cache with unquantised sliding-window layers, hidden-state
extraction, a block size, prefix caching off with a connector), tricks last
(labelled: a tiny max_model_len). Among the matches, the one with no tricks,
group kinds closest to the counterexample and earliest in the list wins.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kvproof.envs import Env
from kvproof.fsio import atomic_write
from kvproof.inputs.layout import Layout
from kvproof.tiers import classify
from kvproof.tiers.boots import boot_many, env_release
from kvproof.tiers.families import FAMILIES, BootResult, Recipe
from kvproof.settings import settings
from kvproof import facts

PRODUCIBLE_KINDS = {"mamba", "full_attention", "sliding_window", "hidden_state"}
BATCH = 14  # probes per process: RSS grows ~65 MB per boot in one process


def synth_home() -> Path:
    return settings().synth_home


# --- candidates -----------------------------------------------------------------

def candidates(family: str) -> list[Recipe]:
    """Recipes of ``family`` in preference order (realistic first, tricks last)."""
    if family == "nemotron_h":
        base = Recipe(family="nemotron_h", pattern="M*M-")
        sw = base.but(sliding_window=64)
        fp8_sw = sw.but(kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=("sliding_window",))
        aux = base.but(aux_layers=(0, 1, 2))
        offload = facts.DEFAULT_CONNECTOR  # OffloadingConnector
        out = [
            base, sw, base.but(sliding_window=1024), base.but(block_size=64), base.but(block_size=32),
            sw.but(block_size=32), base.but(kv_cache_dtype="fp8"),
            fp8_sw, fp8_sw.but(sliding_window=1024), fp8_sw.but(block_size=64), fp8_sw.but(block_size=32),
            base.but(mamba_cache_mode=None), sw.but(mamba_cache_mode=None), fp8_sw.but(mamba_cache_mode=None),
            fp8_sw.but(enable_prefix_caching=False, mamba_cache_mode=None),
            aux, base.but(aux_layers=(0, 1)), base.but(aux_layers=(0,)), base.but(aux_layers=(0, 1, 2, 3)),
            aux.but(block_size=64), aux.but(block_size=32), aux.but(hidden_size=192, num_heads=6),
            aux.but(hidden_size=160, num_heads=5, num_kv_heads=1), aux.but(mamba_cache_mode=None),
            aux.but(enable_prefix_caching=False), base.but(aux_layers=(0, 1), enable_prefix_caching=False),
            aux.but(enable_prefix_caching=False, mamba_cache_mode=None),
            # KV offloading to CPU (OffloadingConnector resolves block sizes itself and asserts divisibility;
            # its worker side needs a GPU, so on CPU only a layout refusal is observable)
            fp8_sw.but(kv_connector=offload), sw.but(kv_connector=offload),
            fp8_sw.but(kv_connector=offload, enable_prefix_caching=False),
            sw.but(kv_connector=offload, enable_prefix_caching=False),
            # a user-set prefix-cache hash unit (CacheConfig.prefix_match_unit)
            base.but(prefix_match_unit=16), base.but(prefix_match_unit=1), sw.but(prefix_match_unit=16),
            # tricks: a context shorter than the scheduler block
            base.but(max_model_len=64), aux.but(max_model_len=128), fp8_sw.but(max_model_len=64),
        ]
    elif family == "granite_moe_hybrid":
        base = Recipe(family="granite_moe_hybrid", pattern="M*M")
        out = [base, base.but(block_size=64), base.but(kv_cache_dtype="fp8"), base.but(mamba_cache_mode=None),
               base.but(max_model_len=64)]
    elif family == "qwen3_next":
        base = Recipe(family="qwen3_next", pattern="MMM*", head_dim=64)
        out = [base, base.but(block_size=64), base.but(mamba_cache_mode=None)]
    else:
        raise ValueError(f"unknown family {family!r}")
    seen: set[str] = set()
    uniq = []
    for r in out:
        if r.key() not in seen:
            seen.add(r.key())
            uniq.append(r)
    return uniq


# --- per-release, per-family probe cache -------------------------------------------

class ProbeCache:
    def __init__(self, release: str) -> None:
        self.dir = synth_home() / release
        self._data: dict[str, dict[str, Any]] = {}

    def _file(self, family: str) -> Path:
        return self.dir / f"{family}.json"

    def _load(self, family: str) -> dict[str, Any]:
        if family not in self._data:
            try:
                self._data[family] = json.loads(self._file(family).read_text())
            except (OSError, ValueError):
                self._data[family] = {}
        return self._data[family]

    def get(self, recipe: Recipe) -> BootResult | None:
        d = self._load(recipe.family).get(recipe.key())
        return BootResult.from_dict(d) if d else None

    def put(self, results: Iterable[BootResult]) -> None:
        touched = set()
        for r in results:
            if r.stage in ("timeout", "crash"):
                continue  # not a property of the recipe; try again next time
            recipe = Recipe.from_dict(r.recipe)
            self._load(recipe.family)[recipe.key()] = r.to_dict()
            touched.add(recipe.family)
        for family in touched:
            atomic_write(self._file(family), json.dumps(self._data[family], indent=1, sort_keys=True))


def _batches(recipes: Sequence[Recipe]) -> list[list[Recipe]]:
    plain = [r for r in recipes if not r.aux_layers]
    aux = [r for r in recipes if r.aux_layers]
    ordered = plain + aux  # connectors are torn down between boots; keep them together anyway
    return [list(ordered[i:i + BATCH]) for i in range(0, len(ordered), BATCH)]


def probe(env: Env, recipes: Sequence[Recipe], cache: ProbeCache | None = None,
          echo: Callable[[str], None] | None = None) -> dict[str, BootResult]:
    """Live layouts of ``recipes`` on ``env`` (cached); key -> BootResult."""
    cache = cache or ProbeCache(env_release(env))
    out: dict[str, BootResult] = {}
    todo = []
    for r in recipes:
        hit = cache.get(r)
        if hit is not None:
            out[r.key()] = hit
        else:
            todo.append(r)
    for batch in _batches(todo):
        if echo:
            echo(f"kvproof: probing {len(batch)} recipes on {env.name}")
        results = boot_many(env, [r.but(generate=False) for r in batch], probe=True)
        for r, res in zip(batch, results):
            res.recipe = r.to_dict()  # keyed by the recipe as listed (generate flag included)
            out[r.key()] = res
        cache.put(results_with_keys(batch, results))
    return out


def results_with_keys(batch: Sequence[Recipe], results: Sequence[BootResult]) -> list[BootResult]:
    for r, res in zip(batch, results):
        res.recipe = r.to_dict()
    return list(results)


# --- the search ---------------------------------------------------------------------

@dataclass
class Reproducer:
    found: bool
    target: str  # the failure class searched for
    release: str
    recipe: Recipe | None = None
    live: str = ""  # live layout summary of the winner (probe)
    live_class: str = ""
    tricks: list[str] = field(default_factory=list)
    probed: int = 0
    booted: int = 0  # probes that were not cached
    seconds: float = 0.0
    reason: str = ""  # why there is none

    def to_dict(self) -> dict[str, Any]:
        return {"found": self.found, "target": self.target, "release": self.release,
                "recipe": self.recipe.to_dict() if self.recipe else None,
                "describe": self.recipe.describe() if self.recipe else "", "live": self.live,
                "live_class": self.live_class, "tricks": self.tricks, "probed": self.probed,
                "booted": self.booted, "seconds": round(self.seconds, 1), "reason": self.reason}


def blockers(layout: Layout) -> list[str]:
    """Premises of ``layout`` that no tiny-model boot on one CPU can have (hints, not vetoes)."""
    out = []
    if layout.dcp > 1:
        out.append(f"dcp={layout.dcp}: decode-context parallelism needs >= {layout.dcp} ranks; one device here")
    if layout.cache.prefix_match_unit not in (None, 1, 16):
        out.append(f"prefix_match_unit={layout.cache.prefix_match_unit}: recipes only try 1 and 16")
    missing = sorted({g.kind for g in layout.groups} - PRODUCIBLE_KINDS)
    if missing:
        out.append(f"group kinds {missing}: no family builds them (MLA, chunked local attention)")
    if len(layout.groups) == 1:
        out.append("one KV cache group: every family here is a hybrid (two or more groups)")
    if layout.cache.mamba_cache_mode == "all":
        out.append("mamba_cache_mode=all: not tried (recipes use align or the release default)")
    if any(g.tokens_per_state is not None or g.dcp_sharded is not None for g in layout.groups):
        out.append("tokens_per_state / dcp_sharded: spec fields no engine knob here sets")
    engine = {facts.engine_cache_block_size_of(layout.groups, rule)  # either release's rule
              for rule in set(facts.ENGINE_BLOCK_SIZE_OVER.values())}
    if layout.groups and layout.cache.block_size not in engine:
        out.append(f"cache.block_size={layout.cache.block_size} is not what an engine sets after KV init "
                   f"({' or '.join(map(str, sorted(engine)))}: the smallest group, from 0.31 the smallest "
                   "prefix-cacheable one): a free premise")
    return out


def _kind_distance(layout: Layout, live: Layout | None) -> int:
    if live is None:
        return 99
    a = {g.kind for g in layout.groups}
    b = {g.kind for g in live.groups}
    return len(a ^ b) * 4 + abs(len(layout.groups) - len(live.groups))


def _premise_mismatch(layout: Layout, live: Layout) -> int:
    """Premises the consumers branch on: prefix caching, a KV connector, Mamba present."""
    return ((layout.cache.enable_prefix_caching != live.cache.enable_prefix_caching)
            + ((layout.kv_connector is None) != (live.kv_connector is None))
            + (layout.has_mamba != live.has_mamba))


def _extra_ids(live: classify.FailureClass, target: classify.FailureClass) -> int:
    """Contracts the live layout breaks beyond the target's (the startup assertion itself not counted)."""
    return len(set(live.ids) - set(target.ids) - {"manager.constructs"})


def synthesise(layout: Layout, env: Env, target: classify.FailureClass,
               families: Sequence[str] = FAMILIES,
               echo: Callable[[str], None] | None = None) -> Reproducer:
    """Search the families on ``env`` for a recipe whose live layout has class ``target``."""
    t0 = time.monotonic()
    release = env_release(env)
    cache = ProbeCache(release)
    probed = booted = 0
    best: tuple[tuple, Recipe, BootResult, classify.FailureClass] | None = None
    for family in families:
        recipes = candidates(family)
        before = sum(1 for r in recipes if cache.get(r) is None)
        results = probe(env, recipes, cache, echo)
        probed += len(recipes)
        booted += before
        for i, r in enumerate(recipes):
            res = results[r.key()]
            live = classify.live_layout(res)
            if live is None:
                continue
            ev = classify.engine_verdict(res)
            if ev.cls is None or not ev.cls.covers(target):
                continue
            score = (len(r.tricks()), _premise_mismatch(layout, live), _extra_ids(ev.cls, target),
                     _kind_distance(layout, live), i)
            if best is None or score < best[0]:
                best = (score, r, res, ev.cls)
        if best is not None and not best[1].tricks():
            break  # a realistic reproducer: no need to probe the other families
    seconds = time.monotonic() - t0
    if best is None:
        hints = blockers(layout)
        searched = (f"no live layout of {probed} recipes ({', '.join(families)}) on vLLM {release} "
                    f"has class {target}")
        why = "; ".join(hints + [searched])
        return Reproducer(False, str(target), release, probed=probed, booted=booted, seconds=seconds, reason=why)
    _, recipe, res, cls = best
    return Reproducer(True, str(target), release, recipe=recipe, live=res.layout_summary(), live_class=str(cls),
                      tricks=recipe.tricks(), probed=probed, booted=booted, seconds=seconds)


def families_summary(env: Env) -> list[dict[str, Any]]:
    """What each cached probe produced on ``env``: for reports and the bench."""
    cache = ProbeCache(env_release(env))
    rows = []
    for family in FAMILIES:
        for r in candidates(family):
            res = cache.get(r)
            if res is None:
                continue
            ev = classify.engine_verdict(res)
            rows.append({"family": family, "recipe": r.describe(), "live": res.layout_summary(),
                         "scheduler": res.scheduler_block_size, "hash": res.hash_block_size,
                         "verdict": ev.verdict.name, "class": str(ev.cls) if ev.cls else "", "detail": ev.detail[:160]})
    return rows
