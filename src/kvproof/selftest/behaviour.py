"""The behavioural layers a mutant is run against: the known consumer inputs and a consumer campaign.

``known``: the consumer tier's oracles on the self-test's hand-written (Layout, stream) inputs
(kvproof.selftest.known), each against the base release's run of the same input, with the
``differential`` signal (an admission's hit, external hit or BlockStored count moved).
``campaign``: a time-boxed ``kvproof fuzz --target consumers`` on the overlay, each new class
re-run on the base. Both run on consumer workers (``start_consumers``) under the inputs' own
streams; each returns Catch cells like the layers in kvproof.selftest.layers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kvproof.envs import Env
from kvproof.inputs.layout import Layout
from kvproof.selftest.layers import Catch, stored_classes


@dataclass(frozen=True)
class ConsumerJudged:
    """One consumer run, judged: verdict name, class id (FAIL/ERROR/UNSUPPORTED), line, and what
    the differential compares (each admission's local and external hit, BlockStored count)."""

    verdict: str
    key: str
    line: str
    hits: tuple

    @property
    def failed(self) -> bool:
        return self.verdict == "FAIL"


def judge_consumer_results(layouts: Sequence[Layout], results) -> list[ConsumerJudged]:
    from kvproof.judging.classkey import class_key
    from kvproof.fuzz.oracle import CLASSED
    from kvproof.tiers import registry

    member = registry.runner(registry.streamed())  # the consumer tier's own judge
    out = []
    for lay, r in zip(layouts, results):
        j = member.judge(lay, r)
        key = class_key(j, lay).id if j.verdict in CLASSED else ""
        hits = tuple((h.get("req"), h.get("hit"), h.get("external")) for h in r.hits) + (r.events_stored,)
        out.append(ConsumerJudged(j.verdict.name, key, (j.line() or j.note or "")[:200], hits))
    return out


def consumer_new(base: ConsumerJudged, got: ConsumerJudged) -> str:
    """Why ``got`` (an overlay's run) is a catch against ``base`` (the release's run of the same
    input), "" when it is not: a FAIL the base does not have (or of another class), or a WARN
    where the base was OK (the PR gate's rule: a consumer FAIL or WARN the base does not show)."""
    if got.failed and (not base.failed or base.key != got.key):
        return "FAIL"
    if got.verdict == "WARN" and base.verdict == "OK":
        return "WARN"
    return ""


def start_consumers(env_list: Sequence[Env]) -> list:
    """One worker per environment for the consumer tier, importing vLLM in parallel."""
    from kvproof.tiers import client, registry

    return client.start(list(env_list), (registry.streamed(),))


def run_consumers(worker, items: Sequence[tuple[str, Layout, object]]) -> list[ConsumerJudged]:
    """The consumer tier on (name, Layout, Stream) ``items`` (each Layout under its Stream), judged."""
    from kvproof.tiers import client

    got = client.consumed(worker, [lay.with_stream(s) for _, lay, s in items])
    return judge_consumer_results([lay for _, lay, _ in items], got)


def known(items: Sequence[tuple[str, Layout, object]], base: Sequence[ConsumerJudged],
          got: Sequence[ConsumerJudged], seconds: float, confirm=None) -> dict[str, Catch]:
    """The ``known`` bug layer (the consumer tier's oracles on the known inputs, against the base's
    run of each) and the ``differential`` signal layer (some admission's hit, external hit or the
    BlockStored count differs from the base's on the same input).

    ``confirm(indices) -> (base, got)`` re-runs the catching inputs on both: a catch counts only
    when it comes back (OffloadingConnector's external hits vary run to run)."""
    caught = [i for i, (b, g) in enumerate(zip(base, got)) if consumer_new(b, g)]
    if caught and confirm is not None:
        b2, g2 = confirm(caught)
        caught = [i for i, b, g in zip(caught, b2, g2) if consumer_new(b, g)]
    moved = [i for i, (b, g) in enumerate(zip(base, got)) if b.hits != g.hits]
    if caught:
        i = caught[0]
        why = consumer_new(base[i], got[i])
        detail = (f"{len(caught)} of {len(items)} inputs newly {why} (confirmed on a rerun); first "
                  f"{items[i][0]}: {base[i].verdict}->{got[i].verdict} {got[i].line}")
    else:
        detail = f"no known input newly FAILs or WARNs ({len(items)} inputs)"
    cells = {"known": Catch("known", bool(caught), seconds, detail)}
    if moved:
        i = moved[0]
        cells["differential"] = Catch("differential", True, seconds,
                                      f"{len(moved)} inputs' hits or events differ from the base's; first "
                                      f"{items[i][0]}")
    else:
        cells["differential"] = Catch("differential", False, seconds, "every hit and event count as the base's")
    return cells


def campaign(env: Env, seconds: int, workdir: Path, base_worker, overlay_worker=None) -> Catch:
    """A time-boxed ``kvproof fuzz --target consumers`` on the overlay; each new FAIL class's stored
    (Layout, stream) is re-run on the base (a class the base FAILs in the same way is pre-existing)
    and, with ``overlay_worker``, once more on the overlay (it must come back)."""
    failed, lays, dt = stored_classes("campaign", env, "consumers", seconds, workdir)
    if failed is not None:
        return failed
    items = [(c, lay, lay.stream) for c, lay in lays if lay.stream is not None]
    if not items:
        return Catch("campaign", False, dt, f"clean: no new consumer FAIL class in {seconds} s")
    t = time.monotonic()
    trio = [(str(c.get("id", "")), lay, s) for c, lay, s in items]
    base = run_consumers(base_worker, trio)
    again = run_consumers(overlay_worker, trio) if overlay_worker is not None else None
    dt += time.monotonic() - t
    new = []
    for k, ((c, lay, s), b) in enumerate(zip(items, base)):
        if b.failed and b.key == str(c.get("id", "")):
            continue  # the base FAILs this input in the same class: pre-existing
        if again is not None and not (again[k].failed and again[k].key == str(c.get("id", ""))):
            continue  # did not come back on the overlay
        new.append((c, s))
    if new:
        c, s = new[0]
        return Catch("campaign", True, dt, f"{len(new)} new consumer FAIL class(es) ({len(items) - len(new)} "
                                           f"pre-existing or not reproduced); first after {c['seconds']} s of "
                                           f"fuzzing: {str(c.get('detail', ''))[:140]} [{s.summary()}]")
    return Catch("campaign", False, dt, f"{len(items)} FAIL class(es), each pre-existing on the base or not "
                                        f"reproduced")
