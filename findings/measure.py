"""Measure a finding on real releases: its class key and its verdict per release.

The measured half of a ledger entry (``kvproof findings add``): the layout (and
stream, for consumer findings) runs through each installed release at the
asked tier; every release that shows it must show the same class.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvproof.errors import UsageError
from kvproof.judging.classkey import ClassKey, class_key
from kvproof.judging.judge import Judgement
from kvproof.inputs.layout import Layout
from kvproof.tiers import registry
from kvproof.verdicts import Verdict

SHOWN = (Verdict.FAIL, Verdict.UNSUPPORTED, Verdict.ERROR)


@dataclass(frozen=True)
class Measured:
    key: ClassKey | None  # the class every release that shows the finding agrees on
    releases: dict[str, str]  # release -> verdict
    judgements: dict[str, Judgement]


# The tiers a finding of each worker tier is measured at (checking's one tier runner: the function
# and manager tiers share one bridge call, the consumer tier runs the finding's own stream).
TIERS = {str(t): registry.through(t) for t in registry.worker_tiers()}


def judge_all(named: list[tuple[str, Layout]], releases: list, tier: str,
              workers: dict | None = None) -> list[dict[str, Judgement]]:
    """Per release (in order): label -> judgement of each named Layout at ``tier``, through
    ``kvproof.running.checking.run`` (every release's workers started together). A consumer Layout
    runs under its own stream (``Layout.stream``), else the default one. A release may be an
    Env (a cached fix overlay); ``workers`` (env name -> live worker) are used, not closed."""
    from kvproof.running import checking
    from kvproof import envs

    if tier not in TIERS:
        raise UsageError(f"tier {tier!r}: expected function, manager or consumer")
    if not named:
        return [{} for _ in releases]
    found = [r if isinstance(r, envs.Env) else envs.find(r) for r in releases]
    rows, _ = checking.run(named, found, tiers=TIERS[tier], workers=workers)
    by_env: dict[str, dict[str, Judgement]] = {e.name: {} for e in found}
    for row in rows:
        by_env[row.env][row.name] = row.judgement
    return [by_env[e.name] for e in found]


def judgements(layout: Layout, releases: list[str], tier: str, stream=None) -> dict[str, Judgement]:
    """One judgement per release at ``tier``."""
    if stream is not None:
        layout = layout.with_stream(stream)
    per = judge_all([("finding", layout)], releases, tier)
    return {r: js["finding"] for r, js in zip(releases, per)}


def measure(layout: Layout, releases: list[str], tier: str, stream=None) -> Measured:
    js = judgements(layout, releases, tier, stream)
    keys = {r: class_key(j, layout) for r, j in js.items() if j.verdict in SHOWN}
    distinct = set(keys.values())
    if len(distinct) > 1:
        raise UsageError("the releases show different classes: "
                         + "; ".join(f"{r}: {k}" for r, k in sorted(keys.items())))
    return Measured(next(iter(distinct), None), {r: str(j.verdict) for r, j in js.items()}, js)


def regression(layout: Layout, releases: list[str], stream=None, margin: int = 0, cause: str | None = None
               ) -> Measured:
    """The hit-regression class of one consumer input along ``releases`` (oldest first; ``kvproof
    compare``'s diff: a request admission hitting more than ``margin`` tokens less than on the
    release before), a class no one release's judgement gives, and each release's verdict.
    ``cause``: of several classes, the one keyed ``[cause]`` (an input whose loss in one group
    kind follows from its loss in another shows both)."""
    from kvproof import envs, facts
    from kvproof.differential import diff
    from kvproof.consumer.stream import default_stream
    from kvproof.judging.judge import judge_consumer
    from kvproof.tiers.client import consumed_on

    rels = sorted(dict.fromkeys(releases), key=facts.release_key)
    if len(rels) < 2:
        raise UsageError("--regression: name at least two releases (--vllm), oldest first or not")
    item = (layout, stream or default_stream(layout))
    runs = dict(zip(rels, consumed_on([envs.find(r) for r in rels], [layout.with_stream(item[1])])))
    classes = diff([item], runs, margin).classes()
    keys = sorted(classes)
    if cause is not None:
        picked = sorted(k for k, regs in classes.items() if regs[0].cause == cause)
        if not picked:
            raise UsageError(f"--cause {cause}: the input's classes are " + (", ".join(keys) or "none"))
        keys = picked
    if len(keys) > 1:
        raise UsageError("the input regresses on several releases: " + ", ".join(keys) + " (record it "
                         "with the releases around one of them: --vllm OLD --vllm NEW)")
    js = {r: judge_consumer(res[0], layout) for r, res in runs.items()}
    return Measured(ClassKey.parse(keys[0]) if keys else None, {r: str(j.verdict) for r, j in js.items()}, js)
