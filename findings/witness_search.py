"""The witness search over many ledger classes at once, and the record each search leaves.

``kvproof findings witness --all`` asks every class one question per release: which reference
model, served with the flags the class implies (``witness.flag_sets``), reaches it. Classes
share flag sets (one connector, prefix caching, a model's own drafter), so the search plans
every class's Configs, derives each distinct (release, model, flags) once on one worker per
release, then runs each class's candidates at its tier on that worker. A regression class
(``regression:hits@R[cause]``) is a pair: its candidates, derived on R, run on the installed
release before R and on R, and kvproof's diff (``differential.diff``) names the class.

Every search, found or not, gives a record (:meth:`Search.record`): the models, the flag sets,
the models whose derived KV cache had the class's kinds (and what each gave), the result.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Sequence

from kvproof import facts
from kvproof.judging.classkey import ClassKey, class_key, stem
from kvproof.inputs.config import Config, reference_models
from kvproof.inputs.layout import Layout

from kvproof.findings.witness import (Witness, candidates, class_drafts, flag_sets, regression_release,
                                      same_shape)


@dataclass
class Search:
    """One class searched on one release (a regression class: ``before`` -> ``release``)."""

    entry: object
    release: str
    before: str | None
    models: tuple[str, ...]
    sets: dict[str, list[tuple[str, ...]]]  # model -> its flag sets, in search order
    refusals: dict[str, int] = field(default_factory=dict)  # why the release would not derive a Config: how many
    got: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # shaped (model, set) -> its rows
    witnesses: list[Witness] = field(default_factory=list)

    def record(self) -> dict:
        """What the ledger entry keeps of this search (``Entry.searches``)."""
        distinct: dict[tuple[str, ...], list[str]] = {}
        for m in self.models:
            for f in self.sets[m]:  # grouped without the text-only families' own flag (said below)
                distinct.setdefault(tuple(x for x in f if x != facts.LANGUAGE_MODEL_ONLY), []).append(m)
        index = {f: i for i, f in enumerate(distinct)}
        sets = [{"flags": list(f), "models": len(ms)} | ({} if len(ms) == len(self.models) else {"only": ms})
                for f, ms in distinct.items()]
        w = self.witnesses[0] if self.witnesses else None
        out = {"release": self.release, "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
               "tier": self.entry.key.tier, "models": list(self.models), "flag_sets": sets,
               "configs": sum(len(v) for v in self.sets.values()), "refused": sum(self.refusals.values()),
               "refusals": dict(sorted(self.refusals.items(), key=lambda kv: -kv[1])),
               "shaped": [{"model": m, "flag_set": index[tuple(x for x in self.sets[m][i] if x != facts.LANGUAGE_MODEL_ONLY)],
                           "got": "; ".join(g) or "not run: no scaled stream fits max_model_len"}
                          for (m, i), g in self.got.items()],
               "result": f"witness {w.config.describe()}: {w.message}"[:600] if w else "no reference model reaches it"}
        text_only = [m for m in self.models if m in facts.TEXT_ONLY_REFERENCE_MODELS]
        if text_only:
            out["plus"] = {facts.LANGUAGE_MODEL_ONLY: text_only}
        found, drafts = Layout.from_dict(self.entry.layout), class_drafts(self.entry, Layout.from_dict(self.entry.layout))
        if found.dcp > 1:
            out["dcp"] = f"{found.dcp}, laid on each dcp-1 derivation (one CPU process derives dcp 1 only)"
        if drafts is not None:
            out["drafts"] = (f"the class's {drafts.label()} in the consumer stream; a set with --speculative-config "
                             f"derives the model's own drafter and runs the stream at its depth")
        if self.before:
            out["compared_with"] = self.before
        return out


def before(release: str) -> str:
    """The installed release right before ``release`` (a regression class's other side)."""
    from kvproof import envs
    from kvproof.facts import release_key
    have = sorted({e["vllm"] for e in envs.installed(disk=False) if e.get("status") == "ready"
                   and e.get("vllm") not in (None, "-")}, key=release_key)
    older = [r for r in have if release_key(r) < release_key(release)]
    if not older:
        from kvproof.errors import UsageError
        raise UsageError(f"no installed release before {release} to compare a regression class with")
    return older[-1]


def search(entry, release: str, models: Sequence[str] | None = None) -> list[Witness]:
    """Every reference model (or ``models``) that reaches ``entry``'s class on ``release`` (a
    regression class: from the release before it to ``release``), the plainest KV cache (fewest
    groups, smallest blocks) first."""
    return search_many([(entry, release)], models)[0].witnesses


def search_many(jobs: Sequence[tuple[object, str]], models: Sequence[str] | None = None) -> list[Search]:
    """Each (entry, release) job, in order: one pass per release, each distinct Config derived once."""
    from kvproof.running import checking
    from kvproof import envs
    from kvproof.derivation import config_key

    models = tuple(models or reference_models())
    done: dict[int, Search] = {}
    for release in dict.fromkeys(r for _, r in jobs):
        mine = [(i, e) for i, (e, r) in enumerate(jobs) if r == release]
        plans = {i: Search(e, release, before(release) if regression_release(e) else None, models,
                           {m: flag_sets(e, Layout.from_dict(e.layout), m) for m in models}) for i, e in mine}
        want = [envs.find(release)] + [envs.find(b) for b in dict.fromkeys(p.before for p in plans.values() if p.before)]
        configs = {config_key(Config(model=m, flags=f)): Config(model=m, flags=f)
                   for p in plans.values() for m in models for f in p.sets[m]}
        with checking.Workers.start(want) as pool:
            derived = checking.derive_all(release, list(configs.values()), pool.by_env[want[0].name],
                                          chunk=checking.MODEL_CHUNK)
            by_key = dict(zip(configs, derived))
            for i, plan in plans.items():
                _run(plan, by_key, pool)
                done[i] = plan
    return [done[i] for i in range(len(jobs))]


def _run(s: Search, by_key: dict, pool) -> None:
    """``s``'s candidates at its class's tier: its rows, refusals and witnesses, filled in."""
    from kvproof.derivation import config_key
    from kvproof.findings.measure import TIERS

    found = Layout.from_dict(s.entry.layout)
    named, config_of = [], {}
    for m in s.models:
        for i, f in enumerate(s.sets[m]):
            d = by_key[config_key(Config(model=m, flags=f))]
            if d.layout is None:
                why = f"{d.error.stage}: {d.error.type}: {stem(d.error.message) or d.error.message[:60]}"
                s.refusals[why] = s.refusals.get(why, 0) + 1
            elif same_shape(found, d.layout):
                s.got[(m, i)] = []
                config_of[(m, i)] = d.config if found.dcp == 1 else Config(model=m, flags=d.config.flags + (
                    # the dcp its candidates ran at (laid on the dcp-1 derivation), and the TP it needs
                    "--tensor-parallel-size", str(found.dcp), "--decode-context-parallel-size", str(found.dcp)))
                named += candidates(s.entry, found, d.layout, f"{m}#{i}")
    rows = _tiers(named, TIERS[s.entry.key.tier], s.release, pool)
    judged = _pairs(s, named, rows, pool) if s.before else [(r, _class(r), r.message()) for r in rows]
    hits: dict[str, Witness] = {}
    for row, key, message in judged:
        head, _, scale = row.name.partition(" ")  # "model#set" and, consumer tier, the stream scale "xk"
        m, i = head.rsplit("#", 1)
        mine = "the class" if key == s.entry.key else key.id if key else ""
        s.got[(m, int(i))].append(" ".join(x for x in (scale, str(row.verdict), mine) if x))
        if key == s.entry.key and m not in hits:
            hits[m] = Witness(s.release, config_of[(m, int(i))], row.layout, message)
    s.witnesses = sorted(hits.values(), key=lambda w: (len(w.layout.groups), sorted(g.block_size for g in w.layout.groups),
                                                       w.config.model))


# candidates per worker call: a model's stream scaled by hundreds runs for minutes on a loaded
# machine, and one call must answer within the worker's 600 s (measured: 0.28.0 on 313e3ccb4709's
# Mamba hybrids, all in one call, outran it at load 13)
RUN_CHUNK = 4


def _tiers(named, tiers, release: str, pool) -> list:
    """``checking.run_tiers`` on ``release``'s worker, :data:`RUN_CHUNK` candidates a call."""
    from kvproof.running import checking
    from kvproof import envs
    env = envs.find(release).name
    return [row for i in range(0, len(named), RUN_CHUNK)
            for row in checking.run_tiers(named[i:i + RUN_CHUNK], tiers, env, pool.by_env[env])]


def _class(row) -> ClassKey | None:
    return None if row.judgement is None or row.judgement.observed is None else class_key(row.judgement, row.layout)


def _pairs(s: Search, named, rows, pool) -> list:
    """A regression class's rows: each candidate run on ``s.before`` too, the two diffed; the key is
    the one regression class of the candidate that is ``s.entry``'s, else its first, else None."""
    from kvproof.differential import diff
    from kvproof.tiers import registry

    older = _tiers(named, (registry.streamed(),), s.before, pool)
    out = []
    for (name, lay), a, b in zip(named, older, rows):
        classes = diff([(lay, lay.stream)], {s.before: [a.consumer], s.release: [b.consumer]},
                       0).classes() if a.consumer is not None and b.consumer is not None else {}
        keys = sorted(classes, key=lambda k: ClassKey.parse(k) != s.entry.key)
        if not keys:
            out.append((b, None, b.message()))
            continue
        r = classes[keys[0]][0]
        out.append((b, ClassKey.parse(keys[0]), f"request {r.request} hits {r.before} -> {r.after} of {r.truth} "
                                               f"tokens from vLLM {s.before} to {s.release}"))
    return out
