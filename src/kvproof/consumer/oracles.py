"""The consumer-tier oracles: observations on the real scheduler. No vLLM import.

Oracle ids (each observation carries one):

exception   (a) real vLLM raised on some step (type, message, frame).
prefix_hit  (b) a prefix hit covered a token beyond the longest common token
            prefix the request truly shares with KV computed before it, or
            landed off the alignment the release's coordinator promises.
hash_chain  (b) ``Request.block_hashes`` disagree with the request's tokens.
connector   (c) a hash a connector stored or looked up is not the hash of a
            real token prefix, does not belong to the request it was used for,
            or ends off the block boundary of the group it is paired with;
            or a connector claimed external tokens beyond the true prefix.
kv_event    (d) a BlockStored event's hashes, token ids, parent or block size
            disagree with the blocks it describes.
efficiency  (e) measurement only: tokens reusable in principle vs hit.
stalled     the stream could not finish in the step budget (harness limit,
            not a vLLM verdict).

``HashIndex`` is the ground truth for hashes: it rebuilds every request's hash
chain independently (vLLM's own ``hash_block_tokens`` primitive, chained here)
and maps each hash to the token prefix it fingerprints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

HARD = ("exception", "prefix_hit", "hash_chain", "connector", "kv_event")
SOFT = ("efficiency", "stalled")
MAX_OBS_PER_ORACLE = 20


@dataclass
class Observation:
    oracle: str
    step: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"oracle": self.oracle, "step": self.step, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Observation":
        return cls(str(d["oracle"]), int(d["step"]), str(d["detail"]))


@dataclass
class Efficiency:
    """Per stream: prompt tokens, tokens a perfect prefix cache could reuse, tokens hit."""

    prompt_tokens: int = 0
    reusable_tokens: int = 0  # sum over first admissions of min(LCP with computed KV, prompt-1)
    hit_tokens: int = 0  # local prefix-cache hit at first admission
    external_tokens: int = 0  # connector-provided tokens at first admission
    admissions: int = 0
    readmissions: int = 0  # after preemption
    preempted_recomputed: int = 0  # tokens recomputed after preemption beyond the re-hit

    @property
    def recomputed_fraction(self) -> float:
        """Fraction of the shared-prefix tokens that were recomputed (0: perfect reuse)."""
        if self.reusable_tokens == 0:
            return 0.0
        return max(0.0, 1.0 - (self.hit_tokens + self.external_tokens) / self.reusable_tokens)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["recomputed_fraction"] = round(self.recomputed_fraction, 6)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Efficiency":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


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
        self.computed: dict[str, tuple[list[int], int]] = {}  # key -> (tokens, computed length)

    def record(self, key: str, tokens: Sequence[int], n: int) -> None:
        old = self.computed.get(key)
        if old is None or n > old[1]:
            self.computed[key] = (list(tokens[:n]), n)

    def longest(self, tokens: Sequence[int]) -> int:
        best = 0
        for seq, n in self.computed.values():
            if n > best:
                best = max(best, lcp(tokens, seq[:n]))
        return best


class HashIndex:
    """hash (bytes, or its 64-bit int form used by KV events) -> (end token, tokens)."""

    def __init__(self, hash_size: int, hash_block: Callable[[Any, Sequence[int]], Any]) -> None:
        self.h = hash_size
        self.hash_block = hash_block  # (parent, tokens) -> hash
        self.where: dict[Any, tuple[int, list[int]]] = {}
        self.chains: dict[str, list[Any]] = {}
        self.width = 0  # bytes of one hash

    def extend(self, key: str, tokens: list[int]) -> list[Any]:
        chain = self.chains.setdefault(key, [])
        h = self.h
        while (len(chain) + 1) * h <= len(tokens):
            i = len(chain)
            parent = chain[-1] if chain else None
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


@dataclass
class Recorder:
    """Collects observations, capped per oracle so a broken run stays readable."""

    observations: list[Observation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    step: int = 0

    def add(self, oracle: str, detail: str, step: int | None = None) -> None:
        n = self.counts.get(oracle, 0)
        self.counts[oracle] = n + 1
        if n < MAX_OBS_PER_ORACLE:
            self.observations.append(Observation(oracle, self.step if step is None else step, detail))
