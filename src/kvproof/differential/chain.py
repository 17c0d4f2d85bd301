"""The release differential along a chain of releases, pair by pair, each finding kept with the
input it came from (``pairs``); its regressions and newly failing inputs summed by class with the
ledger's word on each (``regression_classes``, ``failing_classes``, ``ledgered``: ``kvproof
compare`` prints these classes, bench/bench_differential.py tables them); the runs per release
by why they could not be compared (``release_counts``); the regressions that come back when
their inputs run again (``reproduce``); the inputs' drafts (``spec_share``, ``mtp_modules``).

The ledger is passed in (anything with ``get(ClassKey)``): nothing here reads it. No vLLM import here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kvproof.judging.classkey import ClassKey
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream
from kvproof.differential.measure import Regression, Report, diff, why_not_compared
from kvproof.judging.judge import above_ideal
from kvproof.inputs.layout import Layout


class Input(NamedTuple):
    """One compared input: its name (a corpus file's SHA-1, ``gen-0003``), layout and stream."""

    name: str
    layout: Layout
    stream: Stream


class Found(NamedTuple):
    """A regression and the input it came from (``kvproof compare`` names an input by its layout hash)."""

    regression: Regression
    name: str
    layout: Layout | None = None
    stream: Stream | None = None


class Failing(NamedTuple):
    """An input the judge passes on ``previous`` and FAILs on ``release``: its FAIL's class key
    on ``release`` (as a campaign on it keys the FAIL), the input, the judge's line."""

    key: str
    release: str
    previous: str
    name: str
    layout: Layout
    stream: Stream
    line: str


@dataclass
class Pair:
    """One consecutive pair of the chain: its Report (summed input by input), its findings by input."""

    previous: str
    release: str
    report: Report
    found: list[Found] = field(default_factory=list)
    failing: list[Failing] = field(default_factory=list)

    @property
    def inputs_compared(self) -> int:
        return self.report.inputs - sum(self.report.not_compared.values())


def pairs(inputs: Sequence[Input], runs: dict[str, list[ConsumerResult]], margin: int) -> list[Pair]:
    """Each consecutive pair of ``runs`` (release order, one result per input): ``diff`` input by
    input, summed into the pair's Report, so that each regression and each newly failing input keeps
    its input. The sums equal one ``diff`` of the whole chain (its jumps aside: they weigh a class
    over all inputs at once)."""
    rels = list(runs)
    out = []
    for prev, cur in zip(rels, rels[1:]):
        pair = Pair(prev, cur, Report([prev, cur], inputs=len(inputs)))
        for (name, lay, st), a, b in zip(inputs, runs[prev], runs[cur]):
            one = diff([(lay, st)], {prev: [a], cur: [b]}, margin)
            pair.report.absorb(one)
            pair.found += [Found(reg, name, lay, st) for reg in one.regressions]
            if one.newly_failing:
                pair.failing.append(Failing(one.newly_failing_classes[0], cur, prev, name, lay, st,
                                            one.newly_failing[0][3]))
        out.append(pair)
    return out


def release_counts(runs: dict[str, list[ConsumerResult]]) -> dict[str, dict[str, int]]:
    """Per release: runs complete, the others by why they cannot be compared, admissions, and
    admissions above their ideal (``judge.ideal_hit``: must stay 0)."""
    out = {}
    for rel, results in runs.items():
        c: dict[str, int] = {}
        for r in results:
            why = why_not_compared(r) or "complete"
            c[why] = c.get(why, 0) + 1
            c["admissions"] = c.get("admissions", 0) + len(r.hits or [])
            c["above ideal"] = c.get("above ideal", 0) + len(above_ideal(r))
        out[rel] = c
    return out


def ledgered(entry: Any, release: str | None = None) -> str:
    """A ledger entry's id and status, or NEW; a fixed class met on its fix release or later says
    so (the fix is gone, or a second cause shares the key): never a quiet "known"."""
    if not entry:
        return "NEW"
    if release and entry.regressed_on(release):
        return f"{entry.id} (fixed in {entry.fixed_in}, met again on {release})"
    return f"{entry.id} ({entry.status.value})"


@dataclass
class RegressionClass:
    """One regression class met: its admissions (with their inputs) and the ledger's word."""

    key: str
    release: str  # the first bad release
    previous: str
    found: list[Found]
    ledger: str  # ``ledgered``: the entry's id and status, or NEW
    known: bool
    reproduced: int | None = None  # its admissions that regress again (``reproduce``); None: not rerun

    @property
    def admissions(self) -> int:
        return len(self.found)

    @property
    def inputs(self) -> int:
        return len({f.name for f in self.found})

    @property
    def worst(self) -> Found:
        """The admission that lost the most (the first of them)."""
        return max(self.found, key=lambda f: f.regression.before - f.regression.after)


def regression_classes(found: Sequence[Found], ledger: Any) -> list[RegressionClass]:
    """``found`` by class (``Regression.class_key``), in the order first met, each with its ledger entry."""
    by: dict[str, list[Found]] = {}
    for f in found:
        by.setdefault(f.regression.class_key, []).append(f)
    out = []
    for key, group in by.items():
        entry = ledger.get(ClassKey.parse(key)) if ledger is not None else None
        reg = group[0].regression
        out.append(RegressionClass(key, reg.release, reg.previous, group, ledgered(entry), bool(entry)))
    return out


@dataclass
class FailingClass:
    """The inputs newly failing on ``release`` (after ``previous``) in one FAIL class."""

    key: str
    release: str
    previous: str
    failing: list[Failing]
    ledger: str  # ``ledgered`` on ``release``

    @property
    def inputs(self) -> int:
        return len(self.failing)

    @property
    def first(self) -> Failing:
        return self.failing[0]


def failing_classes(failing: Sequence[Failing], ledger: Any) -> list[FailingClass]:
    """``failing`` by (pair, class), in the order first met, each with its ledger entry on the newer release."""
    by: dict[tuple[str, str, str], list[Failing]] = {}
    for f in failing:
        by.setdefault((f.previous, f.release, f.key), []).append(f)
    out = []
    for (prev, rel, key), group in by.items():
        entry = ledger.get(ClassKey.parse(key)) if ledger is not None else None
        out.append(FailingClass(key, rel, prev, group, ledgered(entry, rel)))
    return out


def reproduce(chain: Sequence[Pair], classes: Sequence[RegressionClass], envs: dict[str, Any], margin: int,
              runner: Callable | None = None) -> None:
    """Run each pair's regressing inputs once more on both releases (``runner``,
    ``tiers.client.consumed_on``'s shape: both environments, the Layouts with their streams, one call) and ``diff`` them again: each class of that
    pair gets ``reproduced``, its admissions that regress again (the same input, request,
    admission and class). A connector whose asynchronous transfers finish at another step can
    hit otherwise on a rerun of one release."""
    if runner is None:
        from kvproof.tiers.client import consumed_on as runner
    for p in chain:
        mine = [c for c in classes if (c.previous, c.release) == (p.previous, p.release)]
        if not mine:
            continue
        sub = list({f.name: Input(f.name, f.layout, f.stream) for f in p.found}.values())
        older, newer = runner([envs[p.previous], envs[p.release]], [lay.with_stream(st) for _, lay, st in sub])
        again = set()
        for (name, lay, st), a, b in zip(sub, older, newer):
            rep = diff([(lay, st)], {p.previous: [a], p.release: [b]}, margin)
            again |= {(name, r.class_key, r.request, r.admission) for r in rep.regressions}
        for c in mine:
            c.reproduced = sum((f.name, f.regression.class_key, f.regression.request, f.regression.admission) in again
                               for f in c.found)


def spec_share(layouts: Sequence[Layout]) -> tuple[int, dict[str, int]]:
    """Inputs that speculate (``Layout.speculative``), and the inputs by method ("none": no drafts)."""
    by: dict[str, int] = {}
    for lay in layouts:
        m = lay.speculative.method if lay.speculative else "none"
        by[m] = by.get(m, 0) + 1
    return len(layouts) - by.get("none", 0), dict(sorted(by.items()))


def mtp_modules(layouts: Sequence[Layout]) -> dict[int, int]:
    """MTP inputs by the target's MTP modules (``Speculative.mtp_modules``)."""
    by: dict[int, int] = {}
    for lay in layouts:
        if lay.speculative and lay.speculative.method == "mtp":
            m = lay.speculative.mtp_modules or 1
            by[m] = by.get(m, 0) + 1
    return dict(sorted(by.items()))
