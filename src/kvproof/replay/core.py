"""Replay counterexamples at three tiers across releases (stdlib; vLLM only in subprocesses).

function: the real ``resolve_kv_cache_block_sizes`` (bridge worker), judged by the contracts
          without the manager stage.
manager:  the real ``KVCacheManager`` / coordinator built from the resolver's output.
engine:   a real ``vllm.LLM`` boot of a tiny model whose live layout has the
          counterexample's failure class: the recipe stored in the corpus file
          (meta kvproof.engine.recipe) or one the synthesiser finds.

Expectations ride in the corpus file: ``meta["kvproof"]["expect"] = {release: {tier: verdict}}``.
Rows carry ``Verdict`` and ``Tier`` enums; JSON and the corpus speak their names. A FAIL names
the tier that observed it; at the engine tier a clean boot whose live layout the contracts flag is
LATENT (with the contract ids), never FAIL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

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
SKIP = "SKIP"  # how a row without a verdict (no engine reproducer) is printed; ReplayRow.verdict is None
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


@dataclass
class ReplayRow:
    name: str
    layout_hash: str
    release: str
    tier: Tier
    verdict: Verdict | None  # None: nothing replayed (no engine reproducer)
    expected: Verdict | None = None
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tier = as_tier(self.tier)
        if self.verdict is not None and not (isinstance(self.verdict, str) and self.verdict == SKIP):
            self.verdict = as_verdict(self.verdict)
        else:
            self.verdict = None
        self.expected = None if self.expected is None else as_verdict(self.expected)

    @property
    def contradicts(self) -> bool:
        return self.expected is not None and self.verdict is not None and self.verdict != self.expected

    @property
    def verdict_name(self) -> str:
        return SKIP if self.verdict is None else self.verdict.name

    @property
    def observed_by(self) -> str | None:
        """The tier that observed a FAIL (``None`` for every other verdict)."""
        return str(self.tier) if self.verdict == Verdict.FAIL else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "layout_hash": self.layout_hash, "release": self.release, "tier": str(self.tier),
                "verdict": self.verdict_name, "observed_by": self.observed_by,
                "expected": self.expected.name if self.expected is not None else None,
                "contradicts": self.contradicts, "detail": self.detail, **self.data}


def expectation(layout: Layout, release: str, tier: Tier | str) -> Verdict | None:
    expect = (layout.meta or {}).get("expect") or {}
    raw = (expect.get(release) or {}).get(str(as_tier(tier)))
    return None if raw is None else as_verdict(raw)


def _stored_recipe(layout: Layout) -> Recipe | None:
    raw = ((layout.meta or {}).get("engine") or {}).get("recipe")
    return Recipe.from_dict(raw) if raw else None


# --- function, manager and consumer tiers: the one tier runner -------------------------

def tier_rows(named: Sequence[tuple[str, Layout]], env_map: dict[str, Env],
              tiers: Sequence[Tier | str]) -> list[ReplayRow]:
    """``checking.run`` (one worker per release, one round trip for every tier asked) and its rows
    as replay rows: a bridge row gives a function and/or a manager row, a consumer row (the
    file's own stream, else the default one) a consumer row; each with the file's expectation."""
    tiers = {as_tier(t) for t in tiers} & set(checking.CHECK_TIERS)
    if not tiers or not named:
        return []
    checked, _info = checking.run(named, list(env_map.values()), tiers=tiers)
    by_env = {e.name: r for r, e in env_map.items()}
    rows: list[ReplayRow] = []
    for row in checked:
        release = by_env[row.env]
        if row.consumer is not None:
            rows.append(_consumer_row(row, release))
            continue
        if Tier.FUNCTION in tiers:
            rows.append(_function_row(row, release))
        if Tier.MANAGER in tiers:
            rows.append(_manager_row(row, release))
    return rows


def _function_row(row: checking.Row, release: str) -> ReplayRow:
    lay, o = row.layout, row.outcome
    fo = classify.function_outcome(o)
    cls = classify.failure_class(lay, fo)
    detail = (f"scheduler={o.scheduler_block_size} hash={o.hash_block_size}"
              if o.resolved else (o.resolver_error.line() if o.resolver_error else o.not_expressible))
    if cls.ids:
        detail += " " + str(cls)
    return ReplayRow(row.name, lay.content_hash(), release, Tier.FUNCTION, judge(lay, fo, Tier.FUNCTION).verdict,
                     expectation(lay, release, Tier.FUNCTION), detail,
                     {"scheduler_block_size": o.scheduler_block_size, "hash_block_size": o.hash_block_size,
                      "class": cls.to_dict(), "vllm": o.vllm_version})


def _manager_row(row: checking.Row, release: str) -> ReplayRow:
    lay, o = row.layout, row.outcome
    detail = row.message() or (f"{o.coordinator} built" if o.coordinator else "")
    if o.manager_error is not None:
        detail = f"{o.manager_error.line()} [{o.manager_error.frame}]"
    return ReplayRow(row.name, lay.content_hash(), release, Tier.MANAGER, judge(lay, o, Tier.MANAGER).verdict,
                     expectation(lay, release, Tier.MANAGER), detail,
                     {"coordinator": o.coordinator, "manager_error": o.manager_error.line() if o.manager_error else None,
                      "vllm": o.vllm_version})


def _consumer_row(row: checking.Row, release: str) -> ReplayRow:
    """The real Scheduler, block pool, KV events and connector scheduler side, judged by ``judge_consumer``."""
    j, res = row.judgement, row.consumer
    detail = j.line() or j.note
    if j.note and j.line() and j.note not in detail:
        detail += f" ({j.note})"
    return ReplayRow(row.name, row.layout.content_hash(), release, Tier.CONSUMER, j.verdict,
                     expectation(row.layout, release, Tier.CONSUMER), detail,
                     {"scheduler_block_size": res.scheduler_block_size, "hash_block_size": res.hash_block_size,
                      "alignment": res.alignment, "connector": res.connector_class, "steps": res.steps,
                      "observations": [o.to_dict() for o in res.observations[:5]], "hits": res.hits,
                      "vllm": res.vllm_version})


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


def target_class(layout: Layout, function_rows: Sequence[ReplayRow]) -> tuple[str, classify.FailureClass] | None:
    """The failure class to reproduce and the release it shows on (first predicted FAIL, else WARN)."""
    rows = sorted((r for r in function_rows if r.tier == Tier.FUNCTION and r.layout_hash == layout.content_hash()),
                  key=lambda r: version_key(r.release))
    for wanted in (Verdict.FAIL, Verdict.WARN):  # the contracts' prediction (a function row itself is LATENT)
        for r in rows:
            c = r.data.get("class") or {}
            if c and as_verdict(c["verdict"]) == wanted:
                return r.release, classify.FailureClass(as_verdict(c["verdict"]), tuple(c["contracts"]))
    return None


def find_recipe(layout: Layout, function_rows: Sequence[ReplayRow], echo: Callable[[str], None] | None = None,
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


def engine_rows(named: Sequence[tuple[str, Layout]], env_map: dict[str, Env], function_rows: Sequence[ReplayRow],
                echo: Callable[[str], None] | None = None, synthesise: bool = True,
                timeout: float = engine.DEFAULT_TIMEOUT) -> list[ReplayRow]:
    rows: list[ReplayRow] = []
    for name, lay in named:
        recipe, how = find_recipe(lay, function_rows, echo, synthesise)
        for release, env in env_map.items():
            exp = expectation(lay, release, Tier.ENGINE)
            if recipe is None:
                rows.append(ReplayRow(name, lay.content_hash(), release, Tier.ENGINE, None, exp,
                                      "no engine reproducer: " + how.get("reason", ""), {"synth": how}))
                continue
            if echo:
                echo(f"kvproof: booting {recipe.family} on vLLM {release}")
            b = engine.boot(env, recipe, timeout=timeout)
            ev = classify.engine_verdict(b)
            rows.append(ReplayRow(name, lay.content_hash(), release, ev.tier, ev.verdict, exp, boot_detail(b, ev),
                                  {"recipe": recipe.describe(), "tricks": recipe.tricks(), "synth": how,
                                   "class": ev.cls.to_dict() if ev.cls else None,
                                   "contracts": list(ev.contracts), "boot": b.to_dict()}))
    return rows


def replay(named: Sequence[tuple[str, Layout]], releases: Sequence[str], tiers: Sequence[Tier | str],
           echo: Callable[[str], None] | None = None, synthesise: bool = True) -> list[ReplayRow]:
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


def format_table(rows: Sequence[ReplayRow], width: int = 150) -> str:
    head = f"{'layout':16}  {'vllm':7}  {'tier':8}  {'verdict':8}  {'expect':8}  detail"
    lines = [head, "-" * min(width, 120)]
    for r in rows:
        exp = r.expected.name if r.expected is not None else "-"
        mark = "  <-- CONTRADICTS" if r.contradicts else ""
        detail = r.detail if len(r.detail) <= width else r.detail[:width - 3] + "..."
        lines.append(f"{r.layout_hash:16}  {r.release:7}  {str(r.tier):8}  {r.verdict_name:8}  {exp:8}  "
                     f"{detail}{mark}")
    return "\n".join(lines)


def record(path: str, layout: Layout, rows: Sequence[ReplayRow]) -> Layout:
    """Write the observed verdicts (and the engine recipe used) into the file's meta.

    Only the ``expect`` and ``engine`` keys of meta["kvproof"] are touched; the
    layout itself, and therefore its content hash and file name, is unchanged.
    ERROR verdicts and rows without a verdict are not recorded as expectations.
    """
    meta = dict(layout.meta or {})
    expect = {k: dict(v) for k, v in (meta.get("expect") or {}).items()}
    for r in rows:
        if r.layout_hash != layout.content_hash() or r.verdict is None or r.verdict in UNRECORDED:
            continue
        expect.setdefault(r.release, {})[str(r.tier)] = r.verdict.name
    meta["expect"] = dict(sorted(expect.items(), key=lambda kv: version_key(kv[0])))
    engine_row = next((r for r in rows if r.layout_hash == layout.content_hash() and r.tier == Tier.ENGINE
                       and r.data.get("recipe")), None)
    if engine_row is not None and not (meta.get("engine") or {}).get("recipe"):
        how = engine_row.data.get("synth") or {}
        recipe = Recipe.from_dict(engine_row.data["boot"]["recipe"])
        meta["engine"] = {"recipe": recipe.to_dict(), "describe": recipe.describe(), "tricks": recipe.tricks(),
                          "found_by": "synthesiser" if str(how.get("source", "")).startswith("synthesiser") else
                          how.get("source", ""),
                          "target": how.get("target"), "target_release": how.get("release"),
                          "live": how.get("live")}
    new = layout.with_meta(**meta)
    corpus.rewrite(Path(path), new)
    return new
