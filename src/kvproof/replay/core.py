"""Replay counterexamples at every tier across releases (stdlib; vLLM only in subprocesses).

The tiers are ``kvproof.tiers``' members (the registry): function and manager (the real resolver
and ``KVCacheManager``, one bridge call), consumer (the real scheduler under a stream), all three
in one round trip to each release's worker (``checking.run``); engine (a real ``vllm.LLM`` boot of
a tiny model whose live layout has the counterexample's failure class), run outside the worker.

Expectations ride in the corpus file: ``meta["kvproof"]["expect"] = {release: {tier: verdict}}``.
Rows are ``kvproof.tiers.row.ReplayRow``: the tier runner's row with the ``release`` and the tier
each answers for (``asked``); what replay shows of one (its expectation, detail, data, JSON)
is computed here from the row, each tier's own part by its member. JSON and the corpus speak the
enums' names. A FAIL names the tier that observed it; at the engine tier a clean boot whose live
layout the contracts flag is LATENT (with the contract ids), never FAIL. An engine row with no
reproducer has no judgement (printed SKIP, never recorded as an expectation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from kvproof.running import checking
from kvproof import corpus, envs
from kvproof.envs import Env
from kvproof.errors import EnvError
from kvproof.inputs.layout import Layout
from kvproof.tiers import registry
from kvproof.tiers.classify import as_tier, as_verdict
from kvproof.tiers.row import ReplayRow
from kvproof.verdicts import Tier, Verdict

REPLAY_TIERS = tuple(m.tier for m in registry.runners())  # every tier with a member, in ladder order
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


# --- what replay shows of a row ---------------------------------------------------------

def verdict_name(row: ReplayRow) -> str:
    return SKIP if row.verdict is None else row.verdict.name


def expected(row: ReplayRow) -> Verdict | None:
    """The verdict the row's file records for its release and tier (None: nothing recorded)."""
    return expectation(row.layout, row.release, row.tier)


def contradicts(row: ReplayRow) -> bool:
    exp = expected(row)
    return exp is not None and row.verdict is not None and row.verdict != exp


def observed_by(row: ReplayRow) -> str | None:
    """The tier that observed a FAIL (``None`` for every other verdict)."""
    return str(row.tier) if row.verdict == Verdict.FAIL else None


def detail(row: ReplayRow) -> str:
    """One line per tier (its member words it): the resolver's pair, the manager's error or
    coordinator, the consumer judgement, the boot (or why nothing booted)."""
    if row.judgement is None:
        return row.skip
    return registry.runner(row.tier).detail(row)


def data(row: ReplayRow) -> dict[str, Any]:
    """The tier's own fields of the row's JSON."""
    return registry.runner(row.tier).data(row)


def replay_dict(row: ReplayRow) -> dict[str, Any]:
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


# --- the tiers: the worker's (one round trip per release) and those run outside it -------

def tier_rows(named: Sequence[tuple[str, Layout]], env_map: dict[str, Env],
              tiers: Sequence[Tier | str]) -> list[ReplayRow]:
    """``checking.run`` (one worker per release, one round trip for every worker tier asked) and
    its rows with their release and tier: each runner row becomes the row of every asked tier
    whose result it carries (a bridge row: the function row, judged without the manager stage,
    and the manager row; a consumer row, under the file's own stream or the default one)."""
    members = registry.runners({as_tier(t) for t in tiers} & set(checking.CHECK_TIERS))
    if not members or not named:
        return []
    checked, _info = checking.run(named, list(env_map.values()), tiers={m.tier for m in members})
    by_env = {e.name: r for r, e in env_map.items()}
    return [m.replay_row(row, by_env[row.env]) for row in checked for m in members if m.carries(row)]


def replay(named: Sequence[tuple[str, Layout]], releases: Sequence[str], tiers: Sequence[Tier | str],
           echo: Callable[[str], None] | None = None, synthesise: bool = True) -> list[ReplayRow]:
    tiers = [as_tier(t) for t in tiers]
    env_map = resolve_envs(releases)
    outside = [(m, m.needs(named)) for m in registry.runners(tiers) if m.serve is None]
    rows = tier_rows(named, env_map, tiers + [t for _, needs in outside for t in needs if t not in tiers])
    for m, needs in outside:
        # what a tier outside the worker reads may show on a release outside the selection (the
        # engine tier's target class): the tiers it needs run on every installed release
        prior = [r for r in rows if r.tier in needs]
        extra = [r for r in default_releases() if r not in env_map]
        if needs and extra:
            prior += tier_rows(named, resolve_envs(extra), needs)
        rows += m.outside_rows(named, env_map, prior, echo=echo, synthesise=synthesise)
    keep = [r for r in rows if r.tier in tiers]
    keep.sort(key=lambda r: (r.name, version_key(r.release), r.tier))
    return keep


def format_table(rows: Sequence[ReplayRow], width: int = 150) -> str:
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


def record(path: str, layout: Layout, rows: Sequence[ReplayRow]) -> Layout:
    """Write the observed verdicts (and what a tier keeps beside them: the engine recipe used)
    into the file's meta.

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
    for m in registry.runners():
        meta = m.recorded(mine, meta)
    new = layout.with_meta(**meta)
    corpus.rewrite(Path(path), new)
    return new
