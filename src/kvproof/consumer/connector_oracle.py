"""The connector oracle (c): what a connector's scheduler side claims, stores and looks up. No vLLM import.

A hash a connector stored or looked up must be the hash of a real token
prefix, belong to the request it was used for, and end on a block boundary
of the group it is paired with (or be a partial prompt tail the managers
register); a connector may not claim external tokens beyond the true common
prefix. Its own state: the memo of keys that passed (``truth.KeyMemo``).
"""

from __future__ import annotations

from typing import Any, Iterable

from kvproof.consumer.oracle import Oracle
from kvproof.consumer.truth import KeyMemo, iter_hashes
from kvproof.judging.oracle_ids import OracleId


def mamba_checkpoint_position(num_prompt_tokens: int, h: int, eagle_drop: bool, lookahead: int = 0) -> int:
    """Where an align-mode MambaManager keys its prompt-tail state (0.30+): vLLM's
    ``get_mamba_prefill_checkpoint_position(num_prompt_tokens, hash_block_size,
    drop_eagle_checkpoint_block, num_hash_lookahead_tokens)`` (kv_cache_interface.py:1169, 0.33;
    :1110, 0.32), read by ``MambaManager._cache_partial_tail_block`` as
    ``latest_prompt_hash_boundary`` (single_type_kv_cache_manager.py:2087, 0.33; :2069, 0.32).
    Under EAGLE's block drop (the coordinator sets ``drop_eagle_checkpoint_block`` whenever it
    drops, "Match Mamba checkpoints to Eagle's attention replay boundary", kv_cache_coordinator.py
    :177, 0.33; :173, 0.32) the state sits one hash unit below the whole prompt's last boundary,
    where a resend's hit lands after the drop: ``n//h*h - h``. Otherwise one token (0.33: the
    hash lookahead, at least one) is left to recompute: ``(n - max(1, L))//h*h``. The CoW copy of
    that state is handed to connectors (boundary-state offloads) under this key."""
    if eagle_drop:
        return max(num_prompt_tokens // h * h - h, 0)
    return max((num_prompt_tokens - max(1, lookahead)) // h * h, 0)


_CONTAINERS = (list, tuple, set, frozenset, dict)


def _arg_hashes(vals: tuple[Any, ...]) -> Iterable[Any]:
    """``iter_hashes(list(vals))`` without a generator per argument: a lookup spy runs once per
    key in some connectors (offloading ``_maximal_prefix_lookup``: millions of calls a run)."""
    for a in vals:
        if isinstance(a, (bytes, bytearray)):
            if len(a) >= 8:
                yield a
        elif isinstance(a, _CONTAINERS):
            yield from iter_hashes(a, 1)


class ConnectorOracle(Oracle):
    """A connector's claims (``claim``) and the keys its inner pieces store and look up (``connector_call``)."""

    ids = (OracleId.CONNECTOR,)
    order = 40

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.memo = KeyMemo()

    def claim(self, conn_name: str, request: Any, num_computed_tokens: int, got: Any) -> None:
        """``get_num_new_matched_tokens`` answered ``got`` ((tokens, async) or tokens)."""
        n = got[0] if isinstance(got, tuple) else got
        if isinstance(n, int) and n > 0:
            o = self.ctx
            true_len = max(o.truth.longest(request.all_token_ids), o.out_of_window(request))
            if num_computed_tokens + n > true_len:
                self.report(OracleId.CONNECTOR, f"{conn_name} claims {n} external tokens after "
                            f"{num_computed_tokens} local for {request.request_id}, beyond the "
                            f"true common prefix {true_len}",
                            cause=f"claim-beyond-common-prefix|{conn_name}.get_num_new_matched_tokens")

    def connector_call(self, label: str, store: bool, vals: tuple[Any, ...]) -> None:
        """A method of a connector's inner pieces (``label``) was called with ``vals``: check every
        block hash among them (and the request it was used for, when an argument names one)."""
        o, owner = self.ctx, None
        for a in vals:
            rid = getattr(a, "req_id", None) or getattr(a, "request_id", None)
            if isinstance(rid, str) and rid in o.live:
                owner = o.live[rid]
        who = None if owner is None else owner.request_id
        for hv in _arg_hashes(vals):
            k = (bytes(hv), store, who)
            if k not in self.memo.passed and self.key(hv, label, owner, store):
                self.memo.passed.add(k)

    def key(self, hv: Any, label: str, owner: Any, store: bool) -> bool:
        """A (hash, group) key a connector's inner block pool stores or looks up.

        Pairing rule (single_type_kv_cache_manager.py, 0.27-0.32): a key ends on a block
        boundary of its group, except in fine-grained mode (the coordinator's hit alignment
        ``a`` < the group's block size ``G`` and ``G % a == 0``): then ``find_longest_cache_hit``
        probes every interior hash boundary (FullAttentionManager phase 2, MambaManager
        right-to-left), so a lookup may end at any multiple of ``a``; and a store off a block
        boundary must be a partial prompt tail (``_cache_partial_tail_block``: the last hash
        boundary of a request's prompt, ``(prompt-1)//h*h``, or ``prompt//h*h`` with EAGLE; a
        Mamba group's also at its prefill checkpoint, ``mamba_checkpoint_position``).
        True when the key passed (nothing recorded).
        """
        o, memo = self.ctx, self.memo
        index, group_sizes = o.index, o.group_sizes
        loc = o.locate(hv)
        if loc is None:
            self.report(OracleId.CONNECTOR, f"{label}: a {len(bytes(hv))}-byte hash names no token prefix at "
                        f"granularity {index.h}", cause=f"unknown-hash|{o.conn()}{label}")
            return False
        passed = True
        start, end, seq, group = loc
        if group is not None and 0 <= group < len(group_sizes) and end % group_sizes[group]:
            g = group_sizes[group]
            a = o.res.alignment or g
            fine = a < g and g % a == 0 and end % a == 0
            # stores: FullAttentionManager.cache_blocks registers the partial tail whenever
            # block_size != hash_block_size, whatever the alignment (GPU and CPU pools alike)
            # lookups: an interior hash boundary in fine-grained mode, or a key a partial-tail store
            # registers (the EAGLE margin of 0.32+ looks the whole prompt's tail up, prompt // h * h)
            tail = self.partial_tail(end, seq, group)
            ok = tail if store else (fine or tail)
            if not ok:
                what = "a stored key that is no request's prompt tail" if fine else f"{end} is not a block boundary"
                self.report(OracleId.CONNECTOR, f"{label}: hash of tokens [0, {end}) paired with group {group} whose "
                            f"blocks are {g} tokens ({what})",
                            cause=f"off-block-boundary|{o.conn()}{label}")
                passed = False
        if owner is not None:
            if not memo.same_prefix(owner, seq, end):
                self.report(OracleId.CONNECTOR, f"{label}: hash of tokens [0, {end}) used for {owner.request_id}, "
                            f"whose tokens differ there", cause=f"other-request|{o.conn()}{label}")
                passed = False
        return passed

    def partial_tail(self, end: int, seq: list[int], group: int) -> bool:
        """Whether ``end`` is the partial prompt tail of a live request whose tokens ``seq`` holds,
        for group ``group``: ``(prompt-1)//h*h`` or ``prompt//h*h`` (FullAttentionManager, and
        MambaManager up to 0.29), or for a Mamba group its prefill checkpoint position (0.30+,
        ``mamba_checkpoint_position``: ``prompt//h*h - h`` under EAGLE's block drop)."""
        o, memo = self.ctx, self.memo
        h = o.index.h
        spec = o.spec(group)
        mamba = spec == "MambaSpec" or (spec == "?" and o.mamba)
        for req in o.live.values():
            n = req.num_prompt_tokens
            tails = {(n - 1) // h * h, n // h * h}
            if mamba:
                tails.add(mamba_checkpoint_position(n, h, bool(o.res.eagle_drop), o.index.lookahead))
            if end in tails and memo.same_prefix(req, seq, end):
                return True
        return False
