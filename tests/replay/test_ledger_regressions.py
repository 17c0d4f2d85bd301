"""Every hit-regression class in the ledger is measured, not written: its input, run again on the
release before and its first bad release (the differential's own diff), regresses in the
entry's class (and in no class the ledger lacks), and the verdicts the entry records are the ones the judge gives now.

One worker call per release for all the entries between the same two releases; entries whose
releases ``make test`` does not build (the RELEASES subset) are left to ``kvproof findings
key --regression`` on a machine that has them.
"""

from __future__ import annotations

import pytest

from kvproof import envs, facts
from kvproof.judging.classkey import ClassKey
from kvproof.consumer.stream import Stream, default_stream
from kvproof.differential import diff, first_bad_release
from kvproof.findings.ledger import Ledger
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.tiers.client import consumed_on

from conftest import RELEASES, require_env

pytestmark = [pytest.mark.replay, pytest.mark.consumer]

LEDGER = Ledger.load()
REGRESSIONS = [e for e in LEDGER.entries() if first_bad_release(e.key.check)]


def _pair(e) -> tuple[str, str]:
    """The entry's first bad release (its key names it) and the recorded release before it."""
    bad = first_bad_release(e.key.check)
    older = sorted((r for r in e.releases if facts.release_key(r) < facts.release_key(bad)), key=facts.release_key)
    return (older[-1] if older else ""), bad


def _pairs() -> dict[tuple[str, str], list]:
    out: dict[tuple[str, str], list] = {}
    for e in REGRESSIONS:
        out.setdefault(_pair(e), []).append(e)
    return out


def test_the_ledger_holds_regression_classes_measured_on_both_sides():
    assert REGRESSIONS, "no regression class in the ledger"
    for e in REGRESSIONS:
        prev, bad = _pair(e)
        assert prev and bad in e.releases and e.layout and e.stream, (e.id, e.releases)


@pytest.mark.parametrize("pair", [p for p in _pairs() if set(p) <= set(RELEASES)], ids="->".join)
def test_each_regression_entry_regresses_in_its_class_on_real_vllm(pair):
    entries = _pairs()[pair]
    for rel in pair:
        require_env(rel)
    items = []
    for e in entries:
        lay = Layout.from_dict(e.layout)
        items.append((lay, Stream.from_dict(e.stream) if e.stream else default_stream(lay)))
    runs = dict(zip(pair, consumed_on([envs.find(r) for r in pair], [lay.with_stream(st) for lay, st in items])))
    for k, (e, item) in enumerate(zip(entries, items)):
        rep = diff([item], {r: [runs[r][k]] for r in pair}, margin=0)
        # the entry's class, and any other class of the same input is an entry of its own (one input
        # may lose hits in two group kinds: 0.29.0's retention default under EAGLE-3, issue 44)
        got = sorted(rep.classes())
        assert str(e.key) in got and all(ClassKey.parse(k) in LEDGER for k in got), (e.id, got, rep.not_compared)
        verdicts = {r: str(judge_consumer(runs[r][k], item[0]).verdict) for r in pair}
        assert verdicts == {r: e.releases[r] for r in pair}, (e.id, verdicts)
