"""Ground truth for the consumer oracles: what was really computed, what each hash names. No vLLM import.

``Truth`` holds the token sequences whose KV has been computed (the only
source a hit may reuse); ``HashIndex`` rebuilds every request's hash chain
independently (vLLM's own ``hash_block_tokens`` primitive, chained here) and
maps each hash to the token prefix it fingerprints; ``KeyMemo`` memoizes the
connector-key oracle within one run.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence


def lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    # chunked comparison first: long equal prefixes are the common case
    step = 256
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Truth:
    """Token sequences whose KV has been computed (the only source a hit may reuse)."""

    def __init__(self) -> None:
        # key -> (every token the request holds, how many have computed KV): the tokens past the
        # KV still count for a hash lookahead (0.33: a block's hash covers the next L tokens)
        self.computed: dict[str, tuple[list[int], int]] = {}

    def record(self, key: str, tokens: Sequence[int], n: int) -> None:
        old = self.computed.get(key)
        if old is None or n > old[1] or len(tokens) > len(old[0]):
            self.computed[key] = (list(tokens), max(n, old[1] if old else 0))

    def longest(self, tokens: Sequence[int]) -> int:
        """The longest common prefix of ``tokens`` with computed KV."""
        best = 0
        for seq, n in self.computed.values():
            if n > best:
                best = max(best, min(n, lcp(tokens, seq)))
        return best

    def longest_tokens(self, tokens: Sequence[int]) -> int:
        """The longest common prefix of ``tokens`` with any recorded request's tokens, computed or not."""
        return max((lcp(tokens, seq) for seq, _ in self.computed.values()), default=0)


class HashIndex:
    """hash (bytes, or its 64-bit int form used by KV events) -> (end token, tokens)."""

    def __init__(self, hash_size: int, hash_block: Callable[..., Any], lookahead: int = 0) -> None:
        self.h = hash_size
        self.hash_block = hash_block  # (parent, tokens[, lookahead tokens]) -> hash
        # 0.33+ (EAGLE without block drop): a block's hash also covers the ``lookahead`` tokens
        # after it, and exists only once they do (``get_request_block_hasher``)
        self.lookahead = lookahead
        self.where: dict[Any, tuple[int, list[int]]] = {}
        self.chains: dict[str, list[Any]] = {}
        self.width = 0  # bytes of one hash
        # value -> what locate found: ``where`` only grows (setdefault), so a found range stays found
        self.found: dict[Any, tuple[int, int, list[int], int | None]] = {}

    def extend(self, key: str, tokens: list[int]) -> list[Any]:
        chain = self.chains.setdefault(key, [])
        h = self.h
        ahead = self.lookahead
        while (len(chain) + 1) * h + ahead <= len(tokens):
            i = len(chain)
            parent = chain[-1] if chain else None
            if ahead:
                hv = self.hash_block(parent, tokens[i * h:(i + 1) * h], tokens[(i + 1) * h:(i + 1) * h + ahead])
            else:
                hv = self.hash_block(parent, tokens[i * h:(i + 1) * h])
            chain.append(hv)
            raw = bytes(hv)
            self.width = len(raw)
            entry = (i * h + h, tokens)
            self.where.setdefault(raw, entry)
            self.where.setdefault(int.from_bytes(raw, "big") & ((1 << 64) - 1), entry)
        return chain

    def locate(self, value: Any) -> tuple[int, int, list[int], int | None] | None:
        """(start, end, tokens, group) of the prefix range a hash (or hash+group key) names."""
        try:
            got = self.found.get(value)
        except TypeError:  # unhashable: located afresh
            return self._locate(value)
        if got is None:
            got = self._locate(value)
            if got is not None:
                self.found[value] = got
        return got

    def _locate(self, value: Any) -> tuple[int, int, list[int], int | None] | None:
        if isinstance(value, int):
            got = self.where.get(value)
            return None if got is None else (got[0] - self.h, got[0], got[1], None)
        raw = bytes(value)
        w = self.width or 32
        group = None
        if len(raw) % w == 4:  # hash(es) + 4-byte group id (BlockHashWithGroupId, OffloadKey)
            group = int.from_bytes(raw[-4:], "big")
            raw = raw[:-4]
        if not raw or len(raw) % w:
            return None
        pieces = [raw[k:k + w] for k in range(0, len(raw), w)]
        spots = [self.where.get(p) for p in pieces]
        if any(s is None for s in spots):
            return None
        ends = [s[0] for s in spots]
        if any(b - a != self.h for a, b in zip(ends, ends[1:])):
            return None
        return ends[0] - self.h, ends[-1], spots[-1][1], group


def iter_hashes(obj: Any, depth: int = 0) -> Iterable[Any]:
    """Every bytes-like hash inside call arguments (lists, tuples, sets, dict keys)."""
    if depth > 3:
        return
    if isinstance(obj, (bytes, bytearray)):
        if len(obj) >= 8:
            yield obj
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for x in obj:
            yield from iter_hashes(x, depth + 1)
    elif isinstance(obj, dict):
        for x in obj:
            yield from iter_hashes(x, depth + 1)


class KeyMemo:
    """Per-run memo of the connector-key oracle (``connector_oracle.ConnectorOracle.key``).

    Connectors hand every cached key of a request to their store/lookup methods again each
    step (offloading ``_build_store_jobs``), so the same checks repeat; and comparing a
    request's tokens with a hash's token prefix slice by slice cost O(prefix) per key,
    O(tokens^2) per step. Both are memoized without weakening the check:

    - ``passed``: (hash, store, owner) keys that passed. A pass cannot turn into a failure:
      a hash names a fixed token prefix (``HashIndex`` keeps the first registration),
      requests only append tokens, the live set only grows, the alignment is fixed.
    - ``common(req, seq)``: the longest common prefix of ``req.all_token_ids`` and a token
      list ``HashIndex`` holds (never mutated), recomputed only when the request grew
      while the prefix still reached the end of the shorter one (append-only tokens).
    """

    def __init__(self) -> None:
        self.passed: set[tuple[bytes, bool, str | None]] = set()
        self._lcp: dict[tuple[str, int], tuple[int, int]] = {}

    def common(self, req: Any, seq: list[int]) -> int:
        toks = req.all_token_ids
        n = len(toks)
        key = (req.request_id, id(seq))
        got = self._lcp.get(key)
        if got is not None and (got[1] == n or got[0] < min(got[1], len(seq))):
            return got[0]
        m = lcp(toks, seq)
        self._lcp[key] = (m, n)
        return m

    def same_prefix(self, req: Any, seq: list[int], end: int) -> bool:
        """``list(req.all_token_ids[:end]) == list(seq[:end])`` for ``end <= len(seq)``."""
        return len(req.all_token_ids) >= end and self.common(req, seq) >= end
