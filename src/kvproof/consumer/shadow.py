"""The shadow oracle (b): what each physical KV block holds, checked on every prefix-cache hit. No vLLM import.

AddressSanitizer keeps shadow memory for bytes; this is the same idea for KV
blocks. The record is written when the fake model runner "computes" a step
(``computed``: each scheduled request's tokens land in its blocks, group by
group, drafts included), follows the worker's block copies (the CoW copies
of partial hits, ``kv_cache_block_copies``), and is cleared when the block
pool hands a block out again (``reused``). A hit is judged once its step is
computed (a request later in the same batch may reuse KV the batch computes):
every block the request then reads below the hit must hold exactly that
request's tokens at that position, computed under the same prefix, in every
group. The length-based oracle (``hit_oracle``) compares only the hit's
length with the true common prefix; a hit of a plausible length built on a
block that holds other tokens passes it, and fails here.

Per group kind: sliding-window and chunked-local groups may hand the null
block for what the kernel does not read (left of the window, of the chunk);
Mamba state blocks and non-cacheable groups are not judged (a state is not a
token range). With a KV connector, blocks a load filled carry no record
(loads are the connector oracle's): a block without a record is then not
judged; without a connector it is a fault.

A fault is a ``prefix_hit`` observation whose cause is ``shadow-<rule>|<coordinator>
(shadow)``: a class of its own (src/kvproof/judging/classkey.py keys on the producer), apart from
the length-based oracle's.
"""

from __future__ import annotations

from typing import Any

from kvproof.consumer.oracle import Oracle, RunContext
from kvproof.consumer.observations import Recorder
from kvproof.consumer.truth import lcp
from kvproof.judging.oracle_ids import OracleId


class Held:
    """What one block holds: group ``group``'s KV of ``tokens`` from position ``start``, computed by
    ``writer`` (a Request: its tokens before ``start`` are the prefix); ``tokens`` None: unknown."""

    __slots__ = ("group", "start", "tokens", "writer")

    def __init__(self, group: int, start: int, tokens: list[int] | None, writer: Any) -> None:
        self.group, self.start, self.tokens, self.writer = group, start, tokens, writer


def group_rule(spec: Any) -> tuple[str, int]:
    """(kind, span) of a group's spec: ("full", 0), ("window", sliding_window), ("chunk",
    attention_chunk_size) or ("skip", 0) for state and non-cacheable groups."""
    name = type(spec).__name__
    if "Mamba" in name or "CircularBuffer" in name:
        return "skip", 0
    if "SlidingWindow" in name:
        return "window", int(getattr(spec, "sliding_window", 0) or 0)
    if "ChunkedLocal" in name:
        return "chunk", int(getattr(spec, "attention_chunk_size", 0) or 0)
    return "full", 0


class Shadow(Oracle):
    """The shadow record of one run: written by ``computed``, cleared by ``reused``, judged on ``lookup``."""

    ids = (OracleId.PREFIX_HIT,)

    def __init__(self, ctx: RunContext, rec: Recorder, coordinator: Any, rules: list[tuple[str, int]],
                 connector: bool) -> None:
        super().__init__(ctx, rec)
        self.coord = coordinator
        self.rules = rules
        self.connector = connector  # blocks a connector loaded carry no record
        self.held: dict[int, Held] = {}
        self.pending: dict[str, tuple[Any, int]] = {}  # req id -> (Request, hit) awaiting its step

    # --- writes -------------------------------------------------------------------------
    def reused(self, blocks: Any) -> None:
        """The block pool handed ``blocks`` out again: what they held is gone."""
        for b in blocks:
            self.held.pop(b.block_id, None)

    def computed(self, scheduler: Any, out: Any) -> None:
        """The fake model runner computed ``out``'s batch: copies first (the worker runs them
        before the forward pass), then every scheduled token into its request's blocks; then
        the step's hits are judged."""
        for c in getattr(out, "kv_cache_block_copies", None) or ():
            src = self.held.get(c.src_block_id)
            if src is None:
                self.held.pop(c.dst_block_id, None)
            else:
                self.held[c.dst_block_id] = Held(src.group, src.start, None if src.tokens is None
                                                 else list(src.tokens), src.writer)
        spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
        for rid, n in out.num_scheduled_tokens.items():
            req = scheduler.requests.get(rid)
            if req is not None and n > 0:
                self._write(req, req.num_computed_tokens - n, req.num_computed_tokens, list(spec.get(rid, ())))
        for rid in out.num_scheduled_tokens:
            got = self.pending.pop(rid, None)
            if got is not None and scheduler.requests.get(rid) is got[0]:
                self._judge(*got)
        self.pending.clear()  # a hit whose request was not scheduled is looked up again

    def _write(self, req: Any, lo: int, hi: int, drafts: list[int]) -> None:
        toks = list(req.all_token_ids)
        toks.extend(drafts)  # schedule() placed the drafts right after the request's tokens
        blocks = self.coord.get_blocks(req.request_id)
        for g, (kind, _) in enumerate(self.rules):
            if kind == "skip":
                continue
            size, mine = self.ctx.group_sizes[g], blocks[g]
            for j in range(lo // size, min(-(-hi // size), len(mine))):
                blk = mine[j]
                if blk.is_null:
                    continue
                s = j * size
                a, e = max(lo, s), min(hi, s + size)
                old = self.held.get(blk.block_id)
                if a == s:
                    self.held[blk.block_id] = Held(g, s, toks[s:e], req)
                elif old is not None and old.tokens is not None and old.group == g and old.start == s \
                        and len(old.tokens) >= a - s and (old.writer is req or lcp(old.writer.all_token_ids, toks) >= a):
                    old.tokens[a - s:] = toks[a:e]
                    old.writer = req
                else:  # written from inside the block over contents not known to be this prefix's
                    self.held[blk.block_id] = Held(g, s, None, req)

    # --- the check ------------------------------------------------------------------------
    def lookup(self, request: Any, n: int) -> None:
        """A lookup answered ``n`` tokens: judged after the step that uses it is computed."""
        if n > 0:
            self.pending[request.request_id] = (request, n)

    def _judge(self, req: Any, n: int) -> None:
        toks = req.all_token_ids
        blocks = self.coord.get_blocks(req.request_id)
        prefix: dict[int, int] = {}  # id(writer) -> common prefix with req
        for g, (kind, span) in enumerate(self.rules):
            if kind == "skip":
                continue
            size, mine = self.ctx.group_sizes[g], blocks[g]
            # what the kernel reads for the first token after the hit (position n)
            lo = max(0, n - span + 1) if kind == "window" and span > 0 else \
                n // span * span if kind == "chunk" and span > 0 else 0
            for j in range(min(-(-n // size), len(mine))):
                s = j * size
                blk = mine[j]
                if blk.is_null:
                    if kind == "full" or s + size > lo:
                        self._bad(req, n, g, j, blk, "is the null block, inside what the kernel reads", "null-block")
                        return
                    continue
                held = self.held.get(blk.block_id)
                if held is None:
                    if not self.connector:
                        self._bad(req, n, g, j, blk, "holds nothing computed: freed and "
                                  "handed out again, or never written", "unwritten-block")
                        return
                    continue
                if held.tokens is None:
                    continue
                need = min(size, n - s)
                if held.group != g or held.start != s:
                    self._bad(req, n, g, j, blk, f"holds group {held.group}'s tokens from "
                              f"position {held.start}", "other-position")
                    return
                if len(held.tokens) < need or held.tokens[:need] != list(toks[s:s + need]):
                    self._bad(req, n, g, j, blk, f"holds other tokens than the request's "
                              f"[{s}, {s + need})", "other-tokens")
                    return
                w = held.writer
                if w is not req and s > 0:
                    common = prefix.get(id(w))
                    if common is None:
                        common = prefix[id(w)] = lcp(toks, w.all_token_ids)
                    if common < s:
                        self._bad(req, n, g, j, blk, f"holds the request's tokens [{s}, "
                                  f"{s + need}) computed after another prefix ({w.request_id}'s, common "
                                  f"{common})", "other-prefix")
                        return

    def _bad(self, req: Any, n: int, g: int, j: int, blk: Any, what: str, rule: str) -> None:
        o = self.ctx
        # a prefix_hit of its own class: the producer names the shadow (src/kvproof/judging/classkey.py keys on it)
        self.report(OracleId.PREFIX_HIT, f"{req.request_id}: a hit of {n} tokens hands block #{j} of group {g} "
                    f"({o.spec(g)}, block id {blk.block_id}), which {what}",
                    cause=f"shadow-{rule}|{o.coordinator} (shadow)")
