"""Replay counterexamples at three tiers across releases (stdlib; vLLM only in subprocesses).

function: the real ``resolve_kv_cache_block_sizes`` (bridge worker), judged by the contracts
          without the manager stage.
manager:  the real ``KVCacheManager`` / coordinator built from the resolver's output.
engine:   a real ``vllm.LLM`` boot of a tiny model whose live layout has the
          counterexample's failure class: the recipe stored in the corpus file
          (meta kvproof.engine.recipe) or one the synthesiser finds.

Expectations ride in the corpus file: ``meta["kvproof"]["expect"] = {release: {tier: verdict}}``.
Rows are ``kvproof.checking.Row`` (the tier runner's row type) with ``release`` and ``asked``
(the tier each answers for) set; what replay shows of one (its expectation, detail, data, JSON)
is computed here from the row. JSON and the corpus speak the enums' names. A FAIL names the tier
that observed it; at the engine tier a clean boot whose live layout the contracts flag is LATENT
(with the contract ids), never FAIL. An engine row with no reproducer has no judgement (printed
SKIP, never recorded as an expectation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from kvproof import checking, corpus, envs
from kvproof.envs import Env
from kvproof.errors import EnvError
from kvproof.fsio import atomic_write
from kvproof.judge import judge
from kvproof.layout import Layout
from kvproof.replay import classify, engine, synth
from kvproof.replay.classify import as_tier, as_verdict
from kvproof.replay.families import BootResult, Recipe
from kvproof.verdicts import Tier, Verdict

REPLAY_TIERS = (Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER, Tier.ENGINE)
TIERS = tuple(str(t) for t in REPLAY_TIERS)  # CLI spelling: "function", "manager", "consumer", "engine"
SKIP = "SKIP"  # how a row without a judgement (no engine reproducer) is printed; its verdict is None
UNRECORDED = (Verdict.ERROR,)  # say nothing about block sizes: never written as an expectation


def version_key(release: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in release.split("."))
    except ValueError:
        return (999,)


def installed_releases(releases: Sequence[str]) -> list[str]:
    """Those of ``releases`` whose environment is built here, in their order."""
    out = []
    for r in releases:
        try:
            envs.find(r)
            out.append(r)
        except EnvError:
            pass
    return out


def default_releases() -> list[str]:
    """The default (ci) releases that are installed here, oldest first."""
    return installed_releases(envs.SUPPORTED)


def resolve_envs(releases: Sequence[str]) -> dict[str, Env]:
    """release -> Env; a missing environment raises EnvError (one line)."""
    return {r: envs.find(r) for r in releases}


@dataclass(frozen=True)
class EngineRun:
    """What an engine-tier row carries (``checking.Row.engine``): where its recipe came from
    (stored in the file, cached, synthesised, or why there is none) and, when there was one,
    the recipe and its boot."""

    source: dict[str, Any]
    recipe: Recipe | None = None
    boot: BootResult | None = None


# --- what replay shows of a row ---------------------------------------------------------

def verdict_name(row: checking.Row) -> str:
    return SKIP if row.verdict is None else row.verdict.name


def expected(row: checking.Row) -> Verdict | None:
    """The verdict the row's file records for its release and tier (None: nothing recorded)."""
    return expectation(row.layout, row.release, row.tier)


def contradicts(row: checking.Row) -> bool:
    exp = expected(row)
    return exp is not None and row.verdict is not None and row.verdict != exp


def observed_by(row: checking.Row) -> str | None:
    """The tier that observed a FAIL (``None`` for every other verdict)."""
    return str(row.tier) if row.verdict == Verdict.FAIL else None


def _engine_verdict(row: checking.Row) -> classify.EngineVerdict | None:
    run = row.engine
    return None if run is None or run.boot is None else classify.engine_verdict(run.boot)


def detail(row: checking.Row) -> str:
    """One line per tier: the resolver's pair, the manager's error or coordinator, the consumer
    judgement, the boot (or why nothing booted)."""
    if row.judgement is None:
        return row.skip
    tier, o = row.tier, row.outcome
    if tier == Tier.FUNCTION:
        cls = classify.failure_class(row.layout, o)
        line = (f"scheduler={o.scheduler_block_size} hash={o.hash_block_size}"
                if o.resolved else (o.resolver_error.line() if o.resolver_error else o.not_expressible))
        return line + (" " + str(cls) if cls.ids else "")
    if tier == Tier.MANAGER:
        if o.manager_error is not None:
            return f"{o.manager_error.line()} [{o.manager_error.frame}]"
        return row.message() or (f"{o.coordinator} built" if o.coordinator else "")
    if tier == Tier.CONSUMER:
        j = row.judgement
        line = j.line() or j.note
        if j.note and j.line() and j.note not in line:
            line += f" ({j.note})"
        return line
    ev = _engine_verdict(row)
    return boot_detail(row.engine.boot, ev) if ev is not None else row.skip


def data(row: checking.Row) -> dict[str, Any]:
    """The tier's own fields of the row's JSON."""
    tier, o = row.tier, row.outcome
    if tier == Tier.FUNCTION:
        return {"scheduler_block_size": o.scheduler_block_size, "hash_block_size": o.hash_block_size,
                "class": classify.failure_class(row.layout, o).to_dict(), "vllm": o.vllm_version}
    if tier == Tier.MANAGER:
        return {"coordinator": o.coordinator, "manager_error": o.manager_error.line() if o.manager_error else None,
                "vllm": o.vllm_version}
    if tier == Tier.CONSUMER:
        res = row.consumer
        return {"scheduler_block_size": res.scheduler_block_size, "hash_block_size": res.hash_block_size,
                "alignment": res.alignment, "connector": res.connector_class, "steps": res.steps,
                "observations": [ob.to_dict() for ob in res.observations[:5]], "hits": res.hits,
                "vllm": res.vllm_version}
    run = row.engine
    if run is None:
        return {}
    ev = _engine_verdict(row)
    if ev is None:
        return {"synth": run.source}
    return {"recipe": run.recipe.describe(), "tricks": run.recipe.tricks(), "synth": run.source,
            "class": ev.cls.to_dict() if ev.cls else None, "contracts": list(ev.contracts),
            "boot": run.boot.to_dict()}


def replay_dict(row: checking.Row) -> dict[str, Any]:
    """The row as ``kvproof replay --json`` writes it."""
    exp = expected(row)
    return {"name": row.name, "layout_hash": row.layout.content_hash(), "release": row.release,
            "tier": str(row.tier), "verdict": verdict_name(row), "observed_by": observed_by(row),
            "expected": exp.name if exp is not None else None, "contradicts": contradicts(row),
            "detail": detail(row), **data(row)}


def expectation(layout: Layout, release: str, tier: Tier | str) -> Verdict | None:
    expect = (layout.meta or {}).get("expect") or {}
    raw = (expect.get(release) or {}).get(str(as_tier(tier)))
    return None if raw is None else as_verdict(raw)


def _stored_recipe(layout: Layout) -> Recipe | None:
    raw = ((layout.meta or {}).get("engine") or {}).get("recipe")
    return Recipe.from_dict(raw) if raw else None


# --- function, manager and consumer tiers: the one tier runner -------------------------

def tier_rows(named: Sequence[tuple[str, Layout]], env_map: dict[str, Env],
              tiers: Sequence[Tier | str]) -> list[checking.Row]:
    """``checking.run`` (one worker per release, one round trip for every tier asked) and its rows
    with their release and tier: a bridge row gives a function row (judged without the manager
    stage) and/or the manager row (the runner's own), a consumer row (the file's own stream, else
    the default one) is the runner's own."""
    tiers = {as_tier(t) for t in tiers} & set(checking.CHECK_TIERS)
    if not tiers or not named:
        return []
    checked, _info = checking.run(named, list(env_map.values()), tiers=tiers)
    by_env = {e.name: r for r, e in env_map.items()}
    rows: list[checking.Row] = []
    for row in checked:
        release = by_env[row.env]
        if row.consumer is not None:
            rows.append(replace(row, release=release, asked=Tier.CONSUMER))
            continue
        if Tier.FUNCTION in tiers:
            rows.append(function_row(row, release))
        if Tier.MANAGER in tiers:
            rows.append(replace(row, release=release, asked=Tier.MANAGER))
    return rows


def function_row(row: checking.Row, release: str) -> checking.Row:
    """The function tier's row of a bridge row: its outcome without the manager stage, judged so."""
    fo = classify.function_outcome(row.outcome)
    return replace(row, outcome=fo, judgement=judge(row.layout, fo, Tier.FUNCTION), release=release,
                   asked=Tier.FUNCTION)


# --- engine tier --------------------------------------------------------------------

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


def target_class(layout: Layout, function_rows: Sequence[checking.Row]) -> tuple[str, classify.FailureClass] | None:
    """The failure class to reproduce and the release it shows on (first predicted FAIL, else WARN)."""
    key = layout.content_hash()
    rows = sorted((r for r in function_rows if r.tier == Tier.FUNCTION and r.layout.content_hash() == key),
                  key=lambda r: version_key(r.release))
    classes = [(r.release, classify.failure_class(r.layout, r.outcome)) for r in rows]
    for wanted in (Verdict.FAIL, Verdict.WARN):  # the contracts' prediction (a function row itself is LATENT)
        for release, cls in classes:
            if cls.verdict == wanted:
                return release, cls
    return None


def find_recipe(layout: Layout, function_rows: Sequence[checking.Row], echo: Callable[[str], None] | None = None,
                synthesise: bool = True) -> tuple[Recipe | None, dict[str, Any]]:
    """The engine recipe for ``layout``: stored in the file, cached, or synthesised now."""
    stored = _stored_recipe(layout)
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


def engine_rows(named: Sequence[tuple[str, Layout]], env_map: dict[str, Env], function_rows: Sequence[checking.Row],
                echo: Callable[[str], None] | None = None, synthesise: bool = True,
                timeout: float = engine.DEFAULT_TIMEOUT) -> list[checking.Row]:
    """Per layout and release a real boot of its recipe, judged (``classify.engine_verdict``); a
    layout without a recipe gets rows without a judgement (SKIP) saying why. A release's boots
    share one import of vLLM, each in a process of its own (``engine.boot_each``)."""
    found = [(name, lay, *find_recipe(lay, function_rows, echo, synthesise)) for name, lay in named]
    recipes = [recipe for _, _, recipe, _ in found if recipe is not None]
    boots: dict[str, Iterator[BootResult]] = {}
    for release, env in env_map.items():
        if echo:
            for recipe in recipes:
                echo(f"kvproof: booting {recipe.family} on vLLM {release}")
        boots[release] = iter(engine.boot_each(env, recipes, timeout=timeout) if recipes else [])
    rows: list[checking.Row] = []
    for name, lay, recipe, how in found:
        for release, env in env_map.items():
            if recipe is None:
                rows.append(checking.Row(name, lay, env.name, None, None, release=release, asked=Tier.ENGINE,
                                         engine=EngineRun(how), skip="no engine reproducer: " + how.get("reason", "")))
                continue
            b = next(boots[release])
            ev = classify.engine_verdict(b)
            rows.append(checking.Row(name, lay, env.name, None, ev.judgement, release=release, asked=ev.tier,
                                     engine=EngineRun(how, recipe, b)))
    return rows


def replay(named: Sequence[tuple[str, Layout]], releases: Sequence[str], tiers: Sequence[Tier | str],
           echo: Callable[[str], None] | None = None, synthesise: bool = True) -> list[checking.Row]:
    tiers = [as_tier(t) for t in tiers]
    env_map = resolve_envs(releases)
    need_function = Tier.ENGINE in tiers and not all(_stored_recipe(l) for _, l in named)
    rows = tier_rows(named, env_map, tiers + ([Tier.FUNCTION] if need_function else []))
    if Tier.ENGINE in tiers:
        # The target class may show on a release outside the selection: evaluate all installed ones.
        extra = [r for r in default_releases() if r not in env_map]
        fn_rows = [r for r in rows if r.tier == Tier.FUNCTION]
        if need_function and extra:
            fn_rows += tier_rows(named, resolve_envs(extra), [Tier.FUNCTION])
        rows += engine_rows(named, env_map, fn_rows, echo, synthesise)
    keep = [r for r in rows if r.tier in tiers]
    keep.sort(key=lambda r: (r.name, version_key(r.release), r.tier))
    return keep


def format_table(rows: Sequence[checking.Row], width: int = 150) -> str:
    head = f"{'layout':16}  {'vllm':7}  {'tier':8}  {'verdict':8}  {'expect':8}  detail"
    lines = [head, "-" * min(width, 120)]
    for r in rows:
        e = expected(r)
        exp = e.name if e is not None else "-"
        mark = "  <-- CONTRADICTS" if contradicts(r) else ""
        line = detail(r)
        line = line if len(line) <= width else line[:width - 3] + "..."
        lines.append(f"{r.layout.content_hash():16}  {r.release:7}  {str(r.tier):8}  {verdict_name(r):8}  {exp:8}  "
                     f"{line}{mark}")
    return "\n".join(lines)


def record(path: str, layout: Layout, rows: Sequence[checking.Row]) -> Layout:
    """Write the observed verdicts (and the engine recipe used) into the file's meta.

    Only the ``expect`` and ``engine`` keys of meta["kvproof"] are touched; the
    layout itself, and therefore its content hash and file name, is unchanged.
    ERROR verdicts and rows without a verdict are not recorded as expectations.
    """
    meta = dict(layout.meta or {})
    expect = {k: dict(v) for k, v in (meta.get("expect") or {}).items()}
    key = layout.content_hash()
    mine = [r for r in rows if r.layout.content_hash() == key]
    for r in mine:
        if r.verdict is None or r.verdict in UNRECORDED:
            continue
        expect.setdefault(r.release, {})[str(r.tier)] = r.verdict.name
    meta["expect"] = dict(sorted(expect.items(), key=lambda kv: version_key(kv[0])))
    engine_row = next((r for r in mine if r.tier == Tier.ENGINE and r.engine is not None
                       and r.engine.recipe is not None and r.engine.boot is not None), None)
    if engine_row is not None and not (meta.get("engine") or {}).get("recipe"):
        how = engine_row.engine.source or {}
        recipe = Recipe.from_dict(engine_row.engine.boot.to_dict()["recipe"])
        meta["engine"] = {"recipe": recipe.to_dict(), "describe": recipe.describe(), "tricks": recipe.tricks(),
                          "found_by": "synthesiser" if str(how.get("source", "")).startswith("synthesiser") else
                          how.get("source", ""),
                          "target": how.get("target"), "target_release": how.get("release"),
                          "live": how.get("live")}
    new = layout.with_meta(**meta)
    corpus.rewrite(Path(path), new)
    return new
