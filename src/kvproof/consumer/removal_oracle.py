"""The BlockRemoved oracle (d): the event stream, replayed, must match the block pool's prefix cache. No vLLM import.

A KV-aware router keeps the set of (group, hash) a worker announced with
``BlockStored`` and not yet withdrawn with ``BlockRemoved`` (or
``AllBlocksCleared``). vLLM's ``BlockPool`` (identical in 0.27-0.33) emits one
``BlockRemoved(group_idx=g)`` for every (hash, g) entry it drops from
``cached_block_hash_to_block`` (``_maybe_evict_cached_block`` when a cached
block is reused or evicted, a partial-to-full promotion), and an
``AllBlocksCleared`` when ``reset_prefix_cache`` drops them all; ``move_block_hashes``
re-points an entry without events (it stays cached). So, after every published
batch (plus what still waits in the pool's queue), each announced entry of the
pool's medium must still be in the pool's cache; one that is not was evicted
silently, and a router would keep sending requests to KV that is gone.

Set semantics on purpose: a hash cached in two blocks is announced twice and
withdrawn once per copy; the first withdrawal drops it here, so this side can
only miss a fault, never invent one. A ``BlockRemoved`` for an entry never
announced (on that medium and group) is a fault too.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kvproof.consumer.oracle import Oracle
from kvproof.judging.oracle_ids import OracleId

Key = tuple[Any, Any]  # (group_idx, external block hash)


class RemovalOracle(Oracle):
    """The announced prefix-cache entries of one medium (the block pool's), checked against the pool."""

    ids = (OracleId.KV_EVENT,)

    def __init__(self, ctx: Any, rec: Any, medium: str, absent: Callable[[set[Key]], set[Key]],
                 queued: Callable[[], Sequence[Any]]) -> None:
        super().__init__(ctx, rec)
        self.medium = medium
        self.absent = absent  # (entries) -> those the pool's cache no longer holds
        self.queued = queued  # () -> events the pool has queued but not yet handed out
        self.announced: set[Key] = set()
        self.ever: set[Key] = set()

    def mine(self, ev: Any) -> bool:
        return (getattr(ev, "medium", None) or "GPU") == self.medium

    def event(self, ev: Any) -> None:
        self.apply(ev, self.announced, judge=True)

    def apply(self, ev: Any, announced: set[Key], judge: bool) -> None:
        """Replay one event onto ``announced``; ``judge`` False for events still queued (judged once published)."""
        kind = type(ev).__name__
        if kind == "AllBlocksCleared":
            announced.clear()  # carries no medium: every medium's entries go
            return
        if not self.mine(ev):
            return
        g = getattr(ev, "group_idx", None)
        if kind == "BlockStored":
            for h in ev.block_hashes or ():
                announced.add((g, h))
                self.ever.add((g, h))  # a queued one too (the view always shared ``ever``)
        elif kind == "BlockRemoved":
            for h in ev.block_hashes or ():
                if judge and (g, h) not in self.ever:
                    self.bad("removed-unknown", f"BlockRemoved(group={g}) of a hash never announced "
                             f"by a BlockStored on medium {self.medium}")
                announced.discard((g, h))

    def published(self, events: Sequence[Any]) -> None:
        """After a published batch: every announced entry, the queued events applied, is still cached."""
        view = set(self.announced)
        for ev in self.queued():  # what the pool emitted after the batch was taken
            self.apply(ev, view, judge=False)
        if not view:
            return
        stale = self.absent(view)
        if stale:
            g = sorted(stale, key=repr)[0][0]
            self.bad("removed-missing", f"{len(stale)} (group, hash) entries announced by BlockStored "
                     f"are no longer in the {self.medium} prefix cache and no BlockRemoved withdrew them "
                     f"(first: group {g}); a router would keep routing to evicted KV")
            self.announced -= stale  # one report per silent eviction

    def bad(self, rule: str, text: str) -> None:
        self.report(OracleId.KV_EVENT, text, cause=f"{rule}|BlockPool (BlockRemoved[{self.medium}])")
