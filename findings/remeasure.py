"""Re-measure ledger entries on a release: is the class still there (``kvproof findings remeasure``)?

A new release is measured against every known class the way ``findings add`` measured it: a
finding's layout (and stream) at its tier, judged and keyed on the release; a hit-regression
class by running its input on the release before its first bad one and on the new release
(``kvproof.differential.diff``): still present when the new release hits less than that one.
One worker per release serves every entry. Nothing here imports vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvproof import envs, facts
from kvproof.judging.classkey import class_key
from kvproof.differential import diff, first_bad_release
from kvproof.findings.ledger import Entry, Ledger
from kvproof.findings.measure import SHOWN, judge_all
from kvproof.inputs.layout import Layout


@dataclass(frozen=True)
class Remeasured:
    entry: Entry
    release: str
    verdict: str  # the release's verdict on the entry's input (what entry.releases records)
    present: bool  # the entry's class is shown on the release
    detail: str  # one line: the class, another class, or the regression's numbers
    # what the entry's releases record (as findings add would): None when the input shows
    # another class there, which is that class's fact, not this entry's
    record_as: str | None = None

    def line(self) -> str:
        state = "still present" if self.present else "not shown"
        return f"  {self.entry.id} {self.entry.status}: vLLM {self.release}: {self.verdict}, {state} ({self.detail})"


def _input(e: Entry) -> tuple[Layout, object]:
    from kvproof.consumer.stream import Stream, default_stream
    lay = Layout.from_dict(e.layout)
    stream = Stream.from_dict(e.stream) if e.stream else default_stream(lay)
    return lay, stream


def _plain(entries: list[Entry], release: str) -> list[Remeasured]:
    out = []
    for tier in sorted({e.key.tier for e in entries}):
        mine = [e for e in entries if e.key.tier == tier]
        named = []
        for e in mine:
            lay, stream = _input(e)
            named.append((e.id, lay.with_stream(stream) if e.stream else lay))
        judged = judge_all(named, [release], tier)[0]
        for e, (_, lay) in zip(mine, named):
            j = judged[e.id]
            key = class_key(j, lay) if j.verdict in SHOWN else None
            present = key == e.key
            detail = ("its class" if present else f"another class {key.id}: {key}" if key is not None
                      else j.line() if hasattr(j, "line") else str(j.verdict))
            own = key is None or present
            out.append(Remeasured(e, release, str(j.verdict), present, detail[:300], str(j.verdict) if own else None))
    return out


def _before(e: Entry) -> str | None:
    bad = first_bad_release(e.key.check)
    older = [r for r in e.releases if facts.release_key(r) < facts.release_key(bad)]
    return max(older, key=facts.release_key) if older else None


def _regressions(entries: list[Entry], release: str) -> list[Remeasured]:
    from kvproof.judging.judge import judge_consumer
    from kvproof.tiers.client import consumed_on

    from kvproof.errors import EnvError

    out = []
    for before in sorted({_before(e) for e in entries if _before(e)}, key=facts.release_key):
        mine = [e for e in entries if _before(e) == before]
        try:
            envs.find(before)
        except EnvError as err:  # measured nothing: said so, never a verdict
            out += [Remeasured(e, release, "-", False, f"not measured: {err}") for e in mine]
            continue
        items = [_input(e) for e in mine]
        old, new = consumed_on([envs.find(before), envs.find(release)], [lay.with_stream(st) for lay, st in items])
        for e, item, a, b in zip(mine, items, old, new):
            rep = diff([item], {before: [a], release: [b]}, 0)
            # the entry's own cause (what lost the hit, issue 44); another cause is another class
            cause = e.key.check.partition("[")[2].removesuffix("]")
            regs = [r for r in rep.regressions if r.cause == cause]
            lost = sum(r.before - r.after for r in regs)
            detail = (f"{len(regs)} admission(s) hit {lost} tokens less than on {before}" if regs
                      else f"every admission hits at least as much as on {before}" if not rep.regressions
                      else f"no admission in its class; other causes: "
                           + ", ".join(sorted({r.cause for r in rep.regressions})))
            j = judge_consumer(b, item[0])
            other = j.verdict in SHOWN  # the input also shows a class of its own there (a FAIL, ...)
            if other:
                detail += f"; the input shows another class there: {str(j.line())[:160]}"
            out.append(Remeasured(e, release, str(j.verdict), bool(regs), detail,
                                  None if other else str(j.verdict)))
    for e in entries:
        if _before(e) is None:
            out.append(Remeasured(e, release, "-", False, "no release before its first bad one is recorded"))
    return out


def remeasure(entries: list[Entry], release: str) -> list[Remeasured]:
    """Each entry measured on ``release`` (input order kept)."""
    regs = [e for e in entries if first_bad_release(e.key.check)]
    plain = [e for e in entries if not first_bad_release(e.key.check)]
    got = {m.entry.id: m for m in _plain(plain, release) + _regressions(regs, release)}
    return [got[e.id] for e in entries]


def record(ledger: Ledger, results: list[Remeasured]) -> int:
    """Write each measured verdict into its entry's releases; returns the entries changed."""
    changed = 0
    for m in results:
        now = ledger.get(m.entry.key) or m.entry  # the ledger's entry as it is now
        if m.record_as is None or now.releases.get(m.release) == m.record_as:
            continue
        releases = dict(sorted({**now.releases, m.release: m.record_as}.items(),
                               key=lambda kv: facts.release_key(kv[0])))
        ledger.add(replace(now, releases=releases))
        changed += 1
    return changed
