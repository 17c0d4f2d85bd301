"""The KV-event oracle (d): a BlockStored event against the blocks it describes. No vLLM import.

Stateless: each event is judged against the context's hash index, group
sizes and spec names; the counts of events go to the result.
"""

from __future__ import annotations

from typing import Any

from kvproof.consumer.oracle import Oracle
from kvproof.judging.oracle_ids import OracleId


class EventOracle(Oracle):
    """Each published ``BlockStored`` against the blocks it describes."""

    ids = (OracleId.KV_EVENT,)
    order = 50

    def event(self, ev: Any) -> None:
        """BlockStored rules, read from ``BlockPool`` (identical in 0.27, 0.28 and 0.32):

        - ``cache_full_blocks`` (block_pool.py:226): ``token_ids`` span every newly full block
          ``[num_cached, num_full) * block_size``, but ``block_hashes`` list only the blocks that
          are not null or masked out (Mamba align mode keeps one state block per request, sliding
          window drops blocks outside the window), so an event may carry fewer hashes than
          blocks, zero included; ``parent_block_hash`` is the hash of block ``num_cached - 1``.
          Each hash must name the tokens of a block inside that span, in order.
        - ``cache_partial_block`` (fine-grained hits): one hash for a prompt tail that ends
          inside a cache block; ``block_size`` is the tail's length, not the group's.
        - ``emit_cached_block_events``: a contiguous run from block 0, parent None.
        - ``cache_partial_block`` events cover the last hash unit of the tail:
          ``[(n // h - 1) * h, n)``, parent ``block_hashes[n // h - 2]`` (block_pool.py:578).
        - connector-sourced events (CPU/storage medium) may be opaque: no token ids, no parent,
          ``block_size`` 0 or the group's (OffloadingConnector without
          ``self_describing_kv_events``, offloading/events.py; SimpleCPUOffloadConnector when
          its snapshot is missing or sized differently, manager.py:1120, "until #49962").
          Only their hashes are checked: each must name a real token prefix.
        """
        if type(ev).__name__ != "BlockStored":
            return
        o = self.ctx
        index, group_sizes = o.index, o.group_sizes
        o.res.events_stored += 1
        hashes = list(ev.block_hashes or ())
        toks = list(ev.token_ids)
        bs = ev.block_size
        gidx = getattr(ev, "group_idx", None)
        gsize = group_sizes[gidx] if gidx is not None and 0 <= gidx < len(group_sizes) else None
        where = f"BlockStored(group={gidx}, block_size={bs}, {len(hashes)} hashes, {len(toks)} tokens)"
        medium = getattr(ev, "medium", None) or "GPU"
        # the producer: the block pool publishes GPU-medium events; another medium is a connector's
        source = "BlockPool (BlockStored[GPU])" if medium == "GPU" else \
            f"{getattr(o.res, 'connector_class', None) or '?'} (BlockStored[{medium}])"

        # one rule, "hash-vs-tokens", for a hash that names other tokens than the event's (another
        # position or another request's): one fault shows as either, depending on whose block it reused
        def bad(rule: str, text: str) -> None:
            self.report(OracleId.KV_EVENT, f"{where} of {o.spec(gidx)}: {text}", cause=f"{rule}|{source}")
        if not hashes:
            o.res.events_without_hashes += 1
        if not toks and hashes:
            o.res.events_opaque += 1
            for k, hv in enumerate(hashes):
                if o.locate(hv) is None:
                    bad("unknown-hash", f"hash #{k} names no token prefix at granularity {index.h}")
            return
        start = 0
        if ev.parent_block_hash is not None:
            p = o.locate(ev.parent_block_hash)
            if p is None:
                bad("unknown-parent", "parent hash names no token prefix")
                return
            start = p[1]
        partial = gsize is not None and bs != gsize and len(hashes) == 1 and len(toks) == bs
        if gsize is not None and not partial and bs != gsize:
            bad("block-size", f"block_size disagrees with group block size {gsize}")
            return
        if bs <= 0 or len(toks) % bs or len(hashes) > len(toks) // bs:
            bad("token-count", f"{len(toks)} token ids cannot hold {len(hashes)} blocks of {bs}")
            return
        prev_end = start
        for k, hv in enumerate(hashes):
            loc = o.locate(hv)
            if loc is None:
                bad("unknown-hash", f"hash #{k} names no token prefix at granularity {index.h}")
                return
            _, end, seq, _ = loc
            if partial:
                if end % index.h:
                    bad("partial-granularity", f"partial tail ends at {end}, off the hash granularity {index.h}")
                if end != start + bs:
                    bad("partial-span", f"partial tail hash ends at {end}, event covers [{start}, "
                        f"{start + bs})")
                    return
            elif (end - start) % bs or end <= prev_end or end > start + len(toks):
                bad("hash-vs-tokens", f"hash #{k} ends at token {end}, not a block boundary of {bs} "
                    f"after {prev_end} within [{start}, {start + len(toks)})")
                return
            off = end - start
            if list(seq[end - bs:end]) != toks[off - bs:off]:
                bad("hash-vs-tokens", f"hash #{k} names tokens [{end - bs}, {end}) but the event "
                    f"carries other token ids there")
            prev_end = end
