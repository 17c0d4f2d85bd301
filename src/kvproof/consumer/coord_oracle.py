"""The reconciliation oracle (b): the hybrid coordinator's groups agree on the hit it returns. No vLLM import.

``HybridKVCacheCoordinator.find_longest_cache_hit`` (kv_cache_coordinator.py,
0.27-0.33) runs a fixed point: every attention group's manager either accepts
the candidate length or shrinks it, and a shrink restarts the pass (the simple
hybrid, full attention + one other group, needs one pass: the other group is
last). Full-attention groups are downward-closed and looked up once; at the end
their blocks are cut to the reconciled hit (``del blks[cdiv(hit, block_size):]``),
except a manager that ``retains_longer_hit``. So, for the returned hit:

- "unreconciled": every other group's last lookup answered exactly the hit
  (more: its window or state was verified at another length than the one
  used; less: the hit covers tokens that group does not hold). An EAGLE group
  looks one unit past the candidate and drops back, so only "less" is judged there.
- "past-hit": no full-attention group holds a block wholly past the hit.

A length-based oracle cannot see either: the hit stays within the true prefix.
The spy on the coordinator (``spies.spy_coordinator``) reads the groups and
each manager's answers, and reports every reconciled hit here.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kvproof.consumer.oracle import Oracle
from kvproof.judging.oracle_ids import OracleId


class Group:
    """One attention group of the coordinator (``SpecGroup``): its kind and what judges it."""

    __slots__ = ("full", "group_ids", "block_size", "eagle", "keeps_longer", "name")

    def __init__(self, full: bool, group_ids: Sequence[int], block_size: int, eagle: bool,
                 keeps_longer: bool, name: str) -> None:
        self.full, self.group_ids, self.block_size = full, list(group_ids), block_size
        self.eagle, self.keeps_longer, self.name = eagle, keeps_longer, name


def judge(groups: Sequence[Group], answers: dict[int, int], blocks: Sequence[Sequence[Any]], hit: int,
          report: Callable[[str, str], None]) -> None:
    """``answers``: attention-group index -> the length its last lookup returned; ``blocks``: the
    returned blocks per KV cache group; ``hit``: the reconciled hit."""
    for k, g in enumerate(groups):
        if g.full:
            if g.keeps_longer or g.block_size <= 0:
                continue
            allowed = -(-hit // g.block_size)
            for gid in g.group_ids:
                n = len(blocks[gid]) if gid < len(blocks) else 0
                if n > allowed:
                    report("past-hit", f"group {gid} ({g.name}) holds {n} blocks of {g.block_size} after a "
                           f"reconciled hit of {hit} tokens (at most {allowed})")
                    return
            continue
        got = answers.get(k)
        if got is None or got == hit or (g.eagle and got > hit):
            continue
        report("unreconciled", f"group {g.group_ids[0]} ({g.name}) last accepted {got} tokens, but the "
               f"coordinator returned a hit of {hit}: that group never verified the hit it is handed")
        return


class CoordOracle(Oracle):
    """The reconciled hit of the run's hybrid coordinator, judged by ``judge``."""

    ids = (OracleId.PREFIX_HIT,)
    order = 60

    def reconciled(self, groups: Sequence[Group], answers: dict[int, int], blocks: Any, hit: int) -> None:
        def report(rule: str, text: str) -> None:
            self.report(OracleId.PREFIX_HIT, text, cause=f"coord-{rule}|{self.ctx.coordinator} (reconciled)")
        judge(groups, answers, blocks, hit, report)
