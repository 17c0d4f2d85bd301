"""Measure a finding on real releases: its class key and its verdict per release.

The measured half of a ledger entry (``kvproof findings add``): the layout (and
stream, for consumer findings) runs through each installed release at the
asked tier; every release that shows it must show the same class.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvproof.errors import UsageError
from kvproof.findings.key import ClassKey, class_key
from kvproof.judge import Judgement
from kvproof.layout import Layout
from kvproof.verdicts import Verdict

SHOWN = (Verdict.FAIL, Verdict.UNSUPPORTED, Verdict.ERROR)


@dataclass(frozen=True)
class Measured:
    key: ClassKey | None  # the class every release that shows the finding agrees on
    releases: dict[str, str]  # release -> verdict
    judgements: dict[str, Judgement]


def judgements(layout: Layout, releases: list[str], tier: str, stream=None) -> dict[str, Judgement]:
    """One judgement per release at ``tier`` (function/manager through the bridge, consumer
    through the real scheduler)."""
    from kvproof import envs

    out: dict[str, Judgement] = {}
    if tier == "consumer":
        from kvproof.consumer.client import run
        from kvproof.judge import judge_consumer

        for r in releases:
            out[r] = judge_consumer(run(layout, stream, envs.find(r)), layout)
        return out
    if tier not in ("function", "manager"):
        raise UsageError(f"tier {tier!r}: expected function, manager or consumer")
    from kvproof import checking

    rows, _ = checking.run([("finding", layout)], [envs.find(r) for r in releases], manager=tier == "manager")
    for r, row in zip(releases, rows):
        out[r] = row.judgement
    return out


def measure(layout: Layout, releases: list[str], tier: str, stream=None) -> Measured:
    js = judgements(layout, releases, tier, stream)
    keys = {r: class_key(j, layout) for r, j in js.items() if j.verdict in SHOWN}
    distinct = set(keys.values())
    if len(distinct) > 1:
        raise UsageError("the releases show different classes: "
                         + "; ".join(f"{r}: {k}" for r, k in sorted(keys.items())))
    return Measured(next(iter(distinct), None), {r: str(j.verdict) for r, j in js.items()}, js)
