"""Replay counterexamples at three tiers across releases (stdlib; vLLM only in subprocesses).

function: the real ``resolve_kv_cache_block_sizes`` (bridge worker), judged by the contracts
          without the manager stage.
manager:  the real ``KVCacheManager`` / coordinator built from the resolver's output.
engine:   a real ``vllm.LLM`` boot of a tiny model whose live layout has the
          counterexample's failure class: the recipe stored in the corpus file
          (meta kvproof.engine.recipe) or one the synthesiser finds.

Expectations ride in the corpus file: ``meta["kvproof"]["expect"] = {release: {tier: verdict}}``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from kvproof import checking, contracts, corpus, envs
from kvproof.envs import Env
from kvproof.errors import EnvError, KvproofError
from kvproof.layout import Layout
from kvproof.replay import classify, engine, synth
from kvproof.replay.families import BootResult, Recipe

TIERS = ("function", "manager", "engine")
SKIP = "SKIP"


def version_key(release: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in release.split("."))
    except ValueError:
        return (999,)


def default_releases() -> list[str]:
    """Managed releases that are installed here, oldest first."""
    out = []
    for r in envs.SUPPORTED:
        try:
            envs.find(r)
            out.append(r)
        except EnvError:
            pass
    return out


def resolve_envs(releases: Sequence[str]) -> dict[str, Env]:
    """release -> Env; a missing environment raises EnvError (one line)."""
    return {r: envs.find(r) for r in releases}


@dataclass
class ReplayRow:
    name: str
    layout_hash: str
    release: str
    tier: str
    verdict: str
    expected: str | None = None
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def contradicts(self) -> bool:
        return self.expected is not None and self.verdict != SKIP and self.verdict != self.expected

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "layout_hash": self.layout_hash, "release": self.release, "tier": self.tier,
                "verdict": self.verdict, "expected": self.expected, "contradicts": self.contradicts,
                "detail": self.detail, **self.data}


def expectation(layout: Layout, release: str, tier: str) -> str | None:
    expect = (layout.meta or {}).get("expect") or {}
    return (expect.get(release) or {}).get(tier)


def _stored_recipe(layout: Layout) -> Recipe | None:
    raw = ((layout.meta or {}).get("engine") or {}).get("recipe")
    return Recipe.from_dict(raw) if raw else None


# --- function + manager tiers ---------------------------------------------------

def bridge_rows(named: Sequence[tuple[str, Layout]], env_map: dict[str, Env], tiers: Sequence[str]) -> list[ReplayRow]:
    rows: list[ReplayRow] = []
    if not ({"function", "manager"} & set(tiers)) or not named:
        return rows
    checked, _info = checking.run(named, list(env_map.values()), manager="manager" in tiers)
    by_env = {e.name: r for r, e in env_map.items()}
    for row in checked:
        release = by_env[row.env]
        name, lay, o = row.name, row.layout, row.outcome
        if "function" in tiers:
            fo = classify.function_outcome(o)
            v, viol, warn = contracts.verdict(lay, fo)
            cls = classify.failure_class(lay, fo)
            detail = (f"scheduler={o.scheduler_block_size} hash={o.hash_block_size}"
                      if o.resolved else (o.resolver_error.line() if o.resolver_error else o.not_expressible))
            if cls.ids:
                detail += " " + str(cls)
            rows.append(ReplayRow(name, lay.content_hash(), release, "function", v,
                                  expectation(lay, release, "function"), detail,
                                  {"scheduler_block_size": o.scheduler_block_size, "hash_block_size": o.hash_block_size,
                                   "class": cls.to_dict(), "vllm": o.vllm_version}))
        if "manager" in tiers:
            detail = row.message() or (f"{o.coordinator} built" if o.coordinator else "")
            if o.manager_error is not None:
                detail = f"{o.manager_error.line()} [{o.manager_error.frame}]"
            rows.append(ReplayRow(name, lay.content_hash(), release, "manager", row.verdict,
                                  expectation(lay, release, "manager"), detail,
                                  {"coordinator": o.coordinator,
                                   "manager_error": o.manager_error.line() if o.manager_error else None,
                                   "vllm": o.vllm_version}))
    return rows


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
    path = _reproducer_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def target_class(layout: Layout, function_rows: Sequence[ReplayRow]) -> tuple[str, classify.FailureClass] | None:
    """The failure class to reproduce and the release it shows on (first FAIL, else first WARN)."""
    rows = sorted((r for r in function_rows if r.tier == "function" and r.layout_hash == layout.content_hash()),
                  key=lambda r: version_key(r.release))
    for wanted in (contracts.FAIL, contracts.WARN):
        for r in rows:
            if r.verdict == wanted:
                c = r.data["class"]
                return r.release, classify.FailureClass(c["verdict"], tuple(c["contracts"]))
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
    bits = [ev.detail]
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
            exp = expectation(lay, release, "engine")
            if recipe is None:
                rows.append(ReplayRow(name, lay.content_hash(), release, "engine", SKIP, exp,
                                      "no engine reproducer: " + how.get("reason", ""), {"synth": how}))
                continue
            if echo:
                echo(f"kvproof: booting {recipe.family} on vLLM {release}")
            b = engine.boot(env, recipe, timeout=timeout)
            ev = classify.engine_verdict(b)
            rows.append(ReplayRow(name, lay.content_hash(), release, "engine", ev.verdict, exp, boot_detail(b, ev),
                                  {"recipe": recipe.describe(), "tricks": recipe.tricks(), "synth": how,
                                   "class": ev.cls.to_dict() if ev.cls else None, "boot": b.to_dict()}))
    return rows


def replay(named: Sequence[tuple[str, Layout]], releases: Sequence[str], tiers: Sequence[str],
           echo: Callable[[str], None] | None = None, synthesise: bool = True) -> list[ReplayRow]:
    env_map = resolve_envs(releases)
    need_function = "engine" in tiers and not all(_stored_recipe(l) for _, l in named)
    bridge_tiers = list(dict.fromkeys([t for t in tiers if t != "engine"] + (["function"] if need_function else [])))
    rows = bridge_rows(named, env_map, bridge_tiers) if bridge_tiers else []
    if "engine" in tiers:
        # The target class may show on a release outside the selection: evaluate all installed ones.
        extra = [r for r in default_releases() if r not in env_map]
        fn_rows = [r for r in rows if r.tier == "function"]
        if need_function and extra:
            fn_rows += bridge_rows(named, resolve_envs(extra), ["function"])
        rows += engine_rows(named, env_map, fn_rows, echo, synthesise)
    keep = [r for r in rows if r.tier in tiers]
    order = {t: i for i, t in enumerate(TIERS)}
    keep.sort(key=lambda r: (r.name, version_key(r.release), order[r.tier]))
    return keep


def format_table(rows: Sequence[ReplayRow], width: int = 150) -> str:
    head = f"{'layout':16}  {'vllm':7}  {'tier':8}  {'verdict':8}  {'expect':8}  detail"
    lines = [head, "-" * min(width, 120)]
    for r in rows:
        exp = r.expected or "-"
        mark = "  <-- CONTRADICTS" if r.contradicts else ""
        detail = r.detail if len(r.detail) <= width else r.detail[:width - 3] + "..."
        lines.append(f"{r.layout_hash:16}  {r.release:7}  {r.tier:8}  {r.verdict:8}  {exp:8}  {detail}{mark}")
    return "\n".join(lines)


def record(path: str, layout: Layout, rows: Sequence[ReplayRow]) -> Layout:
    """Write the observed verdicts (and the engine recipe used) into the file's meta.

    Only the ``expect`` and ``engine`` keys of meta["kvproof"] are touched; the
    layout itself, and therefore its content hash and file name, is unchanged.
    ERROR and SKIP verdicts are not recorded as expectations.
    """
    meta = dict(layout.meta or {})
    expect = {k: dict(v) for k, v in (meta.get("expect") or {}).items()}
    for r in rows:
        if r.layout_hash != layout.content_hash() or r.verdict in (SKIP, classify.ERROR):
            continue
        expect.setdefault(r.release, {})[r.tier] = r.verdict
    meta["expect"] = dict(sorted(expect.items(), key=lambda kv: version_key(kv[0])))
    engine_row = next((r for r in rows if r.layout_hash == layout.content_hash() and r.tier == "engine"
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


class ReplayError(KvproofError):
    pass
