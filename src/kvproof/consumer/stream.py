"""A request stream: what the consumer tier feeds the real scheduler. Stdlib only.

A ``Stream`` is a list of requests whose prompts are built from shared
prefixes of assorted lengths (so prefix-cache hits are possible and their
true extent is known), plus the scheduler's budget (blocks, batched tokens,
running requests) that decides chunked prefill and preemption.

JSON::

    {"prefixes": [1000, 300],            # shared prefix lengths (token content is derived)
     "requests": [{"prefix": 0, "prefix_len": 700, "suffix_len": 40, "arrival": 0,
                   "max_tokens": 3, "resend_at": 9, "abort_at": null, "tokens": null,
                   "extends": null}],
     "num_blocks": null, "max_num_batched_tokens": 512, "max_num_seqs": 8,
     "spec": {"method": "eagle3", "k": 2, "accept": "all"}}

``tokens`` (explicit prompt ids) overrides prefix/suffix. ``resend_at``: the
same prompt arrives again as a new request at that step. ``abort_at``: the
request is aborted at that step if still unfinished. ``extends``: an earlier
request's index; this prompt is that request's prompt and its outputs (the
fake model runner's tokens, ``drafts.output_token``), then the suffix: a next
turn of a conversation. ``num_blocks`` null: enough for every request at once
(no pressure). ``spec``: speculative decoding (``kvproof.consumer.drafts``).
``offload``: SimpleCPUOffloadConnector's mode. ``hasher``: who hashes the
prompts (``facts.PROMPT_HASHERS``; ``kvproof.consumer.frontend``).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from kvproof.layout import Layout

from kvproof.consumer.drafts import VOCAB, Drafts, output_token, parse_drafts
from kvproof.errors import LayoutError
from kvproof.reading import parse_json_as
from kvproof import facts

MAX_TOKENS_PER_PROMPT = 1 << 17
MAX_REQUESTS = 512
MAX_STEP = 10_000
_REQ_KEYS = {"prefix", "prefix_len", "suffix_len", "arrival", "max_tokens", "resend_at", "abort_at", "tokens",
             "extends", "prompt_logprobs_from"}
_TOP_KEYS = {"prefixes", "requests", "num_blocks", "max_num_batched_tokens", "max_num_seqs", "spec", "offload",
             "hasher"}
# SimpleCPUOffloadConnector's two modes (kv_connector_extra_config "lazy_offload", 0.27+): eager
# stores every computed block, lazy offloads only the blocks the GPU pool is about to evict
OFFLOAD_MODES = ("eager", "lazy")


@dataclass(frozen=True)
class Req:
    prefix: int = 0
    prefix_len: int = 0
    suffix_len: int = 1
    arrival: int = 0
    max_tokens: int = 1
    resend_at: int | None = None
    abort_at: int | None = None
    tokens: tuple[int, ...] | None = None
    extends: int | None = None
    # asks prompt logprobs from this prompt position on (SamplingParams prompt_logprobs=1 and, where
    # the release has it, prompt_logprob_start: 0.34 reads the prefix cache up to it and the KV
    # connector not at all; earlier releases skip prefix-cache reads for such a request)
    prompt_logprobs_from: int | None = None


@dataclass(frozen=True)
class Stream:
    prefixes: tuple[int, ...] = ()
    requests: tuple[Req, ...] = ()
    num_blocks: int | None = None
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 16
    spec: Drafts | None = None
    offload: str = "eager"  # SimpleCPUOffloadConnector's mode (OFFLOAD_MODES); other connectors ignore it
    # who hashes the prompts (facts.PROMPT_HASHERS): the engine, or a frontend sending
    # EngineCoreRequest.block_hashes (0.34) from the engine's PrefixHashConfig, or breaking it
    hasher: str = "engine"

    @property
    def spec_slots(self) -> int:
        """KV slots a request may hold past its tokens for drafts (0 without speculation)."""
        return self.spec.k if self.spec else 0

    # --- token content ------------------------------------------------------
    def prompt(self, i: int) -> list[int]:
        """Prompt token ids of request ``i`` (deterministic from the stream; a fresh list)."""
        return list(self._prompts()[i])

    def _prompts(self) -> tuple[tuple[int, ...], ...]:
        # computed once per stream: the harness asks for each prompt several times per run
        cached = self.__dict__.get("_prompt_cache")
        if cached is None:
            cached = tuple(self._make_prompt(i) for i in range(len(self.requests)))
            object.__setattr__(self, "_prompt_cache", cached)
        return cached

    def _make_prompt(self, i: int) -> tuple[int, ...]:
        r = self.requests[i]
        if r.tokens is not None:
            return tuple(r.tokens)
        if r.extends is not None:
            prev = self._make_prompt(r.extends)
            n = len(prev) + self.requests[r.extends].max_tokens
            head = list(prev) + [output_token(k) for k in range(len(prev), n)]
        else:
            head = prefix_tokens(r.prefix, r.prefix_len)
        tail = [1 + (7919 * (i + 1) + 104729 * k + 17) % (VOCAB - 1) for k in range(r.suffix_len)]
        return tuple(head + tail)

    # --- JSON edge ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        reqs = []
        for r in self.requests:
            d = {k: v for k, v in asdict(r).items() if v is not None}
            if r.tokens is not None:
                d["tokens"] = list(r.tokens)
            reqs.append(d)
        d = {"prefixes": list(self.prefixes), "requests": reqs, "num_blocks": self.num_blocks,
             "max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": self.max_num_seqs}
        if self.spec is not None:
            d["spec"] = self.spec.to_dict()
        if self.offload != "eager":  # absent at the default: streams written before keep their form
            d["offload"] = self.offload
        if self.hasher != "engine":
            d["hasher"] = self.hasher
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> "Stream":
        return _parse(data)

    @classmethod
    def from_json(cls, text: str, where: str = "stream") -> "Stream":
        return parse_json_as(text, where, _parse)

    def summary(self) -> str:
        n = sum(len(self.prompt(i)) for i in range(len(self.requests)))
        spec = (f", spec {self.spec.label()}" if self.spec else "") + (f", offload {self.offload}"
                                                                     if self.offload != "eager" else "")
        spec += f", hashed by {self.hasher}" if self.hasher != "engine" else ""
        return (f"{len(self.requests)} requests, {n} prompt tokens, prefixes {list(self.prefixes)}, "
                f"blocks={self.num_blocks or 'auto'}, batch={self.max_num_batched_tokens}{spec}")


def prefix_tokens(p: int, n: int) -> list[int]:
    """The first ``n`` tokens of shared prefix ``p`` (one list: the fuzzer builds many)."""
    c, m = 1009 * (p + 1), VOCAB - 1
    return [1 + (31 * k + c) % m for k in range(n)]


# --- validation ---------------------------------------------------------------

def _int(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise LayoutError(f"{name} must be an integer, got {json.dumps(v)[:40]}")
    if not lo <= v <= hi:
        raise LayoutError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _opt(v: Any, name: str, lo: int, hi: int) -> int | None:
    return None if v is None else _int(v, name, lo, hi)


def _choice(v: Any, name: str, allowed: tuple[str, ...]) -> str:
    if v not in allowed:
        raise LayoutError(f"{name} must be one of {', '.join(allowed)}, got {v!r}")
    return v


def _parse(data: Any) -> Stream:
    if not isinstance(data, dict):
        raise LayoutError(f"stream must be an object, got {type(data).__name__}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise LayoutError(f"stream has unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_TOP_KEYS))})")
    prefixes = data.get("prefixes", [])
    if not isinstance(prefixes, list):
        raise LayoutError("prefixes must be a list of lengths")
    pre = tuple(_int(v, f"prefixes[{i}]", 0, MAX_TOKENS_PER_PROMPT) for i, v in enumerate(prefixes))
    raw = data.get("requests")
    if not isinstance(raw, list) or not raw:
        raise LayoutError("requests must be a non-empty list")
    if len(raw) > MAX_REQUESTS:
        raise LayoutError(f"requests: at most {MAX_REQUESTS}, got {len(raw)}")
    reqs = []
    for i, r in enumerate(raw):
        w = f"requests[{i}]"
        if not isinstance(r, dict):
            raise LayoutError(f"{w} must be an object, got {type(r).__name__}")
        bad = sorted(set(r) - _REQ_KEYS)
        if bad:
            raise LayoutError(f"{w} has unknown field {bad[0]!r} (allowed: {', '.join(sorted(_REQ_KEYS))})")
        tokens = r.get("tokens")
        if tokens is not None:
            if not isinstance(tokens, list) or not tokens or len(tokens) > MAX_TOKENS_PER_PROMPT:
                raise LayoutError(f"{w}.tokens must be a non-empty list of token ids")
            tokens = tuple(_int(t, f"{w}.tokens[{k}]", 0, VOCAB - 1) for k, t in enumerate(tokens))
        prefix = _int(r.get("prefix", 0), f"{w}.prefix", 0, max(len(pre) - 1, 0))
        plen = _int(r.get("prefix_len", 0), f"{w}.prefix_len", 0, pre[prefix] if pre else 0)
        slen = _int(r.get("suffix_len", 1), f"{w}.suffix_len", 0, MAX_TOKENS_PER_PROMPT)
        if tokens is None and plen + slen == 0:
            raise LayoutError(f"{w}: prompt is empty (prefix_len + suffix_len == 0)")
        if tokens is None and plen + slen > MAX_TOKENS_PER_PROMPT:
            raise LayoutError(f"{w}: prompt longer than {MAX_TOKENS_PER_PROMPT} tokens")
        arrival = _int(r.get("arrival", 0), f"{w}.arrival", 0, MAX_STEP)
        extends = _opt(r.get("extends"), f"{w}.extends", 0, max(i - 1, 0))
        if extends is not None and (i == 0 or tokens is not None):
            raise LayoutError(f"{w}.extends needs an earlier request and no explicit tokens")
        reqs.append(Req(prefix, plen, slen, arrival, _int(r.get("max_tokens", 1), f"{w}.max_tokens", 1, 4096),
                        _opt(r.get("resend_at"), f"{w}.resend_at", 0, MAX_STEP),
                        _opt(r.get("abort_at"), f"{w}.abort_at", 0, MAX_STEP), tokens, extends,
                        _opt(r.get("prompt_logprobs_from"), f"{w}.prompt_logprobs_from", 0, MAX_TOKENS_PER_PROMPT)))
    stream = Stream(pre, tuple(reqs), _opt(data.get("num_blocks"), "num_blocks", 1, 1 << 22),
                    _int(data.get("max_num_batched_tokens", 2048), "max_num_batched_tokens", 1, 1 << 20),
                    _int(data.get("max_num_seqs", 16), "max_num_seqs", 1, 1024), parse_drafts(data.get("spec")),
                    _choice(data.get("offload", "eager"), "offload", OFFLOAD_MODES),
                    _choice(data.get("hasher", "engine"), "hasher", facts.PROMPT_HASHERS))
    longest = max(len(p) for p in stream._prompts())
    if longest > MAX_TOKENS_PER_PROMPT:
        raise LayoutError(f"a prompt (with the turns it extends) is longer than {MAX_TOKENS_PER_PROMPT} tokens")
    return stream


# --- generation and shrinking ---------------------------------------------------

def random_stream(rng: random.Random, scale: int = 1000, spec_share: float = 0.0,
                  method: str | None = None) -> Stream:
    """One stream: a few shared prefixes of assorted lengths and requests over them, some of
    them next turns of earlier ones; a ``spec_share`` of streams carry speculative settings
    (all of ``method`` when given)."""
    scale = max(scale, 64)
    prefixes = tuple(rng.choice([rng.randint(1, 64), rng.randint(64, scale), rng.randint(scale, 3 * scale)])
                     for _ in range(rng.randint(1, 3)))
    reqs = []
    for _ in range(rng.randint(2, 8)):
        p = rng.randrange(len(prefixes))
        plen = rng.choice([prefixes[p], rng.randint(0, prefixes[p])])
        slen = rng.choice([0, 1, rng.randint(1, 200)]) if plen else rng.randint(1, 200)
        reqs.append(Req(p, plen, slen, rng.randint(0, 6), rng.randint(1, 6),
                        rng.choice([None, None, rng.randint(2, 20)]),
                        rng.choice([None, None, None, rng.randint(1, 10)])))
    pressure = rng.random() < 0.3
    stream = Stream(prefixes, tuple(reqs), rng.randint(4, 40) if pressure else None,
                    rng.choice([64, 256, 1024, 4096]), rng.choice([2, 4, 16]))
    # drawn after the rest, so a seed's requests are the same with or without them
    if rng.random() < 0.3:  # next turns of a conversation
        reqs = [replace(r, extends=rng.randrange(i), tokens=None) if i and rng.random() < 0.4 else r
                for i, r in enumerate(reqs)]
        stream = replace(stream, requests=tuple(reqs))
    if rng.random() < spec_share:
        stream = replace(stream, spec=random_drafts(rng, method))
    return stream


def random_drafts(rng: random.Random, only: str | None = None) -> Drafts:
    """Speculative settings: a method, k up to 4 (often 1-2), an acceptance pattern; MTP with k > 1
    drafts from one module, two, or one per draft token (0.33's multi-module hash lookahead)."""
    method, k = rng.choice(facts.GENERATED_SPEC_METHODS), rng.choice([1, 1, 2, 2, 3, 4])
    accept = rng.choice(facts.SPEC_ACCEPT)
    method = only or method  # drawn all the same: ``only`` changes the method alone
    p, seed = rng.choice([0.3, 0.5, 0.8]), rng.randrange(1 << 16)
    d = Drafts(method, k, accept, p, seed) if accept == "seeded" else Drafts(method, k, accept)
    if method == "mtp" and k > 1:  # drawn last: a seed's other settings stay what they were
        d = replace(d, modules=rng.choice([1, 2, k]))
    return d


def streams(seed: int, scale: int = 1000) -> Iterator[Stream]:
    """An endless, reproducible sequence of streams."""
    rng = random.Random(seed)
    while True:
        yield random_stream(rng, scale)


def shrink(stream: Stream, still_fails: Callable[[Stream], bool], budget: int = 200) -> Stream:
    """Greedy shrinker: drop requests, then cut lengths/tokens/budgets while ``still_fails``."""
    best = stream
    tries = 0

    def attempt(candidate: Stream) -> bool:
        nonlocal best, tries
        if tries >= budget or candidate == best:
            return False
        tries += 1
        try:
            ok = still_fails(candidate)
        except Exception:
            ok = False
        if ok:
            best = candidate
        return ok

    changed = True
    while changed and tries < budget:
        changed = False
        for simpler in (lambda d: None, lambda d: replace(d, k=1), lambda d: replace(d, modules=1),
                        lambda d: Drafts(d.method, d.k, modules=d.modules)):
            if best.spec is not None and simpler(best.spec) != best.spec:
                changed |= attempt(replace(best, spec=simpler(best.spec)))
        for i in range(len(best.requests) - 1, -1, -1):
            if len(best.requests) > 1 and i < len(best.requests):
                changed |= attempt(_without(best, i))
        for i in range(len(best.requests)):
            r = best.requests[i]
            for cand in (replace(r, extends=None), replace(r, resend_at=None), replace(r, abort_at=None),
                         replace(r, max_tokens=1),
                         replace(r, arrival=0), replace(r, suffix_len=max(r.suffix_len // 2, 0 if r.prefix_len else 1)),
                         replace(r, prefix_len=r.prefix_len // 2 if r.suffix_len else max(r.prefix_len // 2, 1))):
                if cand != r:
                    changed |= attempt(replace(best, requests=best.requests[:i] + (cand,) + best.requests[i + 1:]))
        if best.num_blocks is not None:
            changed |= attempt(replace(best, num_blocks=None))
    return best


def _without(stream: Stream, i: int) -> Stream:
    """``stream`` less request ``i``; later requests' ``extends`` indices follow (a turn that
    extended request ``i`` starts a conversation of its own)."""
    reqs = []
    for j, r in enumerate(stream.requests):
        if j == i:
            continue
        if r.extends is not None and r.extends >= i:
            r = replace(r, extends=None if r.extends == i else r.extends - 1)
        reqs.append(r)
    return replace(stream, requests=tuple(reqs))


def default_stream(layout: "Layout") -> Stream:
    """A shared-prefix stream sized to the layout: full, partial and resent prefixes, some decode,
    and a next turn of the first request (its prompt and outputs, then new tokens).

    The prefix is about four of the largest group blocks long (capped by
    max_model_len), so every release's hit alignment has room to land.
    """
    big = layout.largest_block
    # the longest request is p + 64 prompt tokens + 4 outputs (+1) (the next turn: p + 28 + 2): it must fit max_model_len,
    # or the scheduler never finishes it (a harness stall, not a vLLM verdict)
    p = max(8, min(4 * big + 7, layout.max_model_len - 64 - 5))
    reqs = (Req(0, p, 16, 0, 4),
            Req(0, p, 32, 3, 2),
            Req(0, p // 2, 9, 5, 2),
            Req(0, p, 16, 8, 2, resend_at=None),
            Req(0, p, 64, 10, 3, resend_at=30),
            Req(suffix_len=8, arrival=36, max_tokens=2, extends=0))  # r0's next turn
    return Stream((p,), reqs, None, max(512, big), 8)


def stream_for(layout: "Layout") -> Stream:
    """The stream a Layout is checked under: its own (``meta["stream"]``, what a consumer
    finding's file carries), else :func:`default_stream`."""
    raw = (layout.meta or {}).get("stream")
    return Stream.from_dict(raw) if isinstance(raw, dict) else default_stream(layout)
