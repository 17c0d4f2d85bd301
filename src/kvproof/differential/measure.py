"""The release differential's measure: the same inputs' consumer results on releases in order,
admission by admission (``kvproof compare`` runs them and prints it; ``kvproof findings add
--regression`` and the fuzzer's differential key a class by it).

Requests are matched by their index in the stream and their admission order (a resend is its
own admission). An admission whose prefix hit (local + external) is more than ``margin`` tokens
below the release before is a regression, named by its first bad release: one class per (first
bad release, drafter family, the group kinds that lost the hit: ``lost_by``), or per (first bad
release, ``scheduler-block``) when the newer release built another scheduler block. Runs that do not complete on both sides are counted,
never compared; admissions hitting more than ``margin`` above the release before are counted
(``gains``). A FAIL class both releases show whose observations more than double (by at least
JUMP_MIN) is a jump. No vLLM import here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from kvproof.judging.classkey import class_key
from kvproof.consumer.drafts import effective_drafts
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream
from kvproof.errors import Unchecked
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.judging.oracle_ids import CHECK_PREFIX
from kvproof.verdicts import Verdict


@dataclass(frozen=True)
class Regression:
    release: str  # the first bad release
    previous: str
    input_hash: str
    request: int
    admission: int
    before: int
    after: int
    truth: int
    spec: str
    blocks: tuple[int | None, int | None] = (None, None)  # scheduler block size before, after
    lost: str = ""  # what lost the hit (``lost_by``): group kinds joined by "+", or "connector"; "" unknown

    @property
    def family(self) -> str:
        return self.spec.split(" ")[0] if self.spec else "no-drafts"

    @property
    def cause(self) -> str:
        """What the class is keyed by: the drafter family and what lost the hit
        (``mtp:sliding_window``; the family alone when the runs did not record it) when both
        releases built the same scheduler block; ``scheduler-block`` when the newer release built
        another layout (one cause, whatever drafts ride on it)."""
        if self.blocks[0] != self.blocks[1]:
            return "scheduler-block"
        return f"{self.family}:{self.lost}" if self.lost else self.family

    @property
    def class_key(self) -> str:
        return f"consumer|{REGRESSION_CHECK}{self.release}[{self.cause}]||"


REGRESSION_CHECK = "regression:hits@"  # a regression class's check: REGRESSION_CHECK + release + [cause]


def lost_by(x: dict[str, Any], y: dict[str, Any]) -> str:
    """What lost an admission's hit from hit record ``x`` (the release before) to ``y`` (the
    newer one), read from the coordinator's per-group answers ``y`` carries (``groups``: kind ->
    [max_length asked, tokens answered], kvproof.consumer.spies.spy_coordinator):

    - ``connector``: the local hit held; the connector's part shrank;
    - the kinds whose manager, asked for at least the hit it had before, answered less (a group
      asked for less only followed another's cut: not named), joined by "+";
    - else the kinds whose answer fell below their own answer before (the lookup itself was asked
      for less: a shorter hash list, a lower cap), else ``lookup``;
    - "" when the newer run recorded no answers (results from before the field)."""
    old = x["hit"]
    if y["hit"] >= old:
        return "connector"
    gy = y.get("groups")
    if not gy:
        return ""
    kinds = sorted(k for k, (asked, got) in gy.items() if asked is not None and asked >= old > got)
    if not kinds:
        gx = x.get("groups") or {}
        kinds = sorted(k for k, (_, got) in gy.items() if k in gx and got < gx[k][1])
    return "+".join(kinds) or "lookup"


def first_bad_release(check: str) -> str | None:
    """The first bad release a regression class's check names (``Regression.class_key``), else None."""
    if not check.startswith(REGRESSION_CHECK):
        return None
    return check.removeprefix(REGRESSION_CHECK).split("[", 1)[0]


@dataclass
class Report:
    releases: list[str]
    inputs: int = 0
    requests_compared: int = 0
    not_compared: dict[str, int] = field(default_factory=dict)
    regressions: list[Regression] = field(default_factory=list)
    # inputs the judge passes on a release and FAILs on the next (an exception or a hard
    # oracle): (release, previous, input hash, the judgement's line) -- what a PR gate must
    # not let through
    newly_failing: list[tuple[str, str, str, str]] = field(default_factory=list)
    # the class key of each newly failing input's FAIL on the newer release (same order): the
    # ledger says whether it is known, and an unknown one is what turns a PR gate red
    newly_failing_classes: list[str] = field(default_factory=list)
    # a FAIL class both releases show whose observations over the same inputs jump on the newer
    # one (release, previous, class key, before, after): a new fault hiding in a known class
    jumps: list[tuple[str, str, str, int, int]] = field(default_factory=list)
    # the other side: per newer release, [admissions, tokens] hitting more than ``margin`` above
    # the release before (a change that loses on some inputs may gain on others)
    gains: dict[str, list[int]] = field(default_factory=dict)

    def gain(self, release: str, admissions: int, tokens: int) -> None:
        g = self.gains.setdefault(release, [0, 0])
        g[0], g[1] = g[0] + admissions, g[1] + tokens

    def absorb(self, other: "Report") -> None:
        """Add ``other``'s per-input counts (the same releases, other inputs). Jumps compare a class
        over the whole input set, so they are not summed."""
        self.requests_compared += other.requests_compared
        for why, k in other.not_compared.items():
            self.not_compared[why] = self.not_compared.get(why, 0) + k
        self.regressions += other.regressions
        self.newly_failing += other.newly_failing
        self.newly_failing_classes += other.newly_failing_classes
        for rel, (n, tokens) in other.gains.items():
            self.gain(rel, n, tokens)

    def classes(self) -> dict[str, list[Regression]]:
        out: dict[str, list[Regression]] = {}
        for r in self.regressions:
            out.setdefault(r.class_key, []).append(r)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"releases": self.releases, "inputs": self.inputs, "requests_compared": self.requests_compared,
                "not_compared": self.not_compared, "newly_failing": [list(x) for x in self.newly_failing],
                "newly_failing_classes": self.newly_failing_classes,
                "jumps": [list(x) for x in self.jumps], "gains": self.gains,
                "classes": {k: [dict(r.__dict__, cause=r.cause) for r in v] for k, v in self.classes().items()}}


def admissions(res: ConsumerResult) -> dict[tuple[int, int], dict[str, int]]:
    """(request index, admission number) -> that admission's hit record."""
    seen: dict[int, int] = {}
    out = {}
    for h in res.hits:
        k = seen.get(h["req"], 0)
        seen[h["req"]] = k + 1
        out[(h["req"], k)] = h
    return out


def why_not_compared(res: ConsumerResult) -> str | None:
    """Why ``res`` cannot be compared, or None."""
    if res.not_expressible:
        return "not expressible"
    if res.harness_error or res.setup_error:
        return "error"
    if any(o.oracle in ("exception", "stalled") for o in res.observations):
        return "raised or stalled"
    return None


# A class "jumps" when the newer release shows it more than JUMP_FACTOR times as often as the
# one before over the same inputs, and by at least JUMP_MIN observations: run-to-run noise
# (OffloadingConnector's timing, a few inputs more or less) stays under it; the seeded
# BlockStored fault of issue 24 went from 5-12 to 451 observations in the same time.
JUMP_FACTOR, JUMP_MIN = 2, 5


def class_weights(items: Sequence[tuple[Layout, Stream]], results: Sequence[ConsumerResult]) -> dict[str, int]:
    """FAIL class key -> its oracle's observations over ``items`` (uncapped; an exception counts once)."""
    out: dict[str, int] = {}
    for (lay, _), res in zip(items, results):
        j = judge_consumer(res, lay)
        if j.verdict == Verdict.FAIL:
            key = class_key(j, lay)
            oracle = key.check.removeprefix(CHECK_PREFIX)
            out[str(key)] = out.get(str(key), 0) + max(1, res.counts.get(oracle, 0))
    return out


def _drafts_label(lay: Layout, st: Stream) -> str:
    """The drafts a compared run used (the harness's rule: the Layout's, under the stream's acceptance)."""
    try:
        drafts = effective_drafts(lay, st)
    except Unchecked as err:  # a method kvproof does not draft for: named, never compared
        return str(err).split(":")[0]
    return drafts.label() if drafts else ""


def diff(items: Sequence[tuple[Layout, Stream]], runs: dict[str, list[ConsumerResult]], margin: int) -> Report:
    """Compare each release with the one before it (``runs`` in release order)."""
    rels = list(runs)
    rep = Report(rels, inputs=len(items))
    weights = {r: class_weights(items, runs[r]) for r in rels}  # once per release, not per pair side
    for prev, cur in zip(rels, rels[1:]):
        was, now = weights[prev], weights[cur]
        rep.jumps += [(cur, prev, k, was[k], n) for k, n in now.items()
                      if was.get(k) and n > JUMP_FACTOR * was[k] and n - was[k] >= JUMP_MIN]
        for (lay, st), a, b in zip(items, runs[prev], runs[cur]):
            ja, jb = judge_consumer(a, lay), judge_consumer(b, lay)
            if ja.verdict < Verdict.FAIL <= jb.verdict:
                rep.newly_failing.append((cur, prev, lay.content_hash(), jb.line()[:300]))
                rep.newly_failing_classes.append(str(class_key(jb, lay)))
            why = why_not_compared(a) or why_not_compared(b)
            if why:
                rep.not_compared[why] = rep.not_compared.get(why, 0) + 1
                continue
            before, after = admissions(a), admissions(b)
            for key in sorted(set(before) & set(after)):
                x, y = before[key], after[key]
                rep.requests_compared += 1
                got_x, got_y = x["hit"] + x["external"], y["hit"] + y["external"]
                if got_y - got_x > margin:
                    rep.gain(cur, 1, got_y - got_x)
                if got_x - got_y > margin:
                    rep.regressions.append(Regression(cur, prev, lay.content_hash(), key[0], key[1], got_x, got_y,
                                                      x["truth"], _drafts_label(lay, st),
                                                      (a.scheduler_block_size, b.scheduler_block_size),
                                                      lost_by(x, y)))
    return rep
