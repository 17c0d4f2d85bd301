"""A request stream: what the consumer tier feeds the real scheduler. Stdlib only.

An input type: a Layout carries its own (``Layout.stream``; on disk under the Layout's
``kvproof.inputs.stream``, read by :meth:`Stream.from_dict`, the one parse function). It sits below
:mod:`kvproof.inputs.layout`; what draws, shrinks and defaults streams is ``kvproof.consumer.stream``.

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
     "accept": {"mode": "seeded", "p": 0.5, "seed": 7}}

``tokens`` (explicit prompt ids) overrides prefix/suffix. ``resend_at``: the
same prompt arrives again as a new request at that step. ``abort_at``: the
request is aborted at that step if still unfinished. ``extends``: an earlier
request's index; this prompt is that request's prompt and its outputs (the
fake model runner's tokens, ``drafts.output_token``), then the suffix: a next
turn of a conversation. ``num_blocks`` null: enough for every request at once
(no pressure). ``accept``: how the target judges drafts (``kvproof.inputs.drafts.Acceptance``; absent:
all accepted) where the Layout speculates: which method drafts how many tokens is the Layout's
``speculative``, recorded there only.
``offload``: SimpleCPUOffloadConnector's mode. ``hasher``: who hashes the
prompts (``facts.PROMPT_HASHERS``; ``kvproof.consumer.frontend``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kvproof.inputs.drafts import ALL, VOCAB, Acceptance, output_token, parse_acceptance
from kvproof.errors import LayoutError
from kvproof.inputs.reading import parse_json_as
from kvproof import facts

MAX_TOKENS_PER_PROMPT = 1 << 17
MAX_REQUESTS = 512
MAX_STEP = 10_000
_REQ_KEYS = {"prefix", "prefix_len", "suffix_len", "arrival", "max_tokens", "resend_at", "abort_at", "tokens",
             "extends", "prompt_logprobs_from"}
_TOP_KEYS = {"prefixes", "requests", "num_blocks", "max_num_batched_tokens", "max_num_seqs", "accept", "offload",
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
    accept: Acceptance = ALL  # how the target judges drafts where the Layout speculates
    offload: str = "eager"  # SimpleCPUOffloadConnector's mode (OFFLOAD_MODES); other connectors ignore it
    # who hashes the prompts (facts.PROMPT_HASHERS): the engine, or a frontend sending
    # EngineCoreRequest.block_hashes (0.34) from the engine's PrefixHashConfig, or breaking it
    hasher: str = "engine"

    # --- token content ------------------------------------------------------
    def prompt(self, i: int) -> list[int]:
        """Prompt token ids of request ``i`` (deterministic from the stream; a fresh list)."""
        return list(self._prompts()[i])

    def prompt_len(self, i: int) -> int:
        """``len(self.prompt(i))`` without building a prompt: sizing a stream (the fuzzer sizes
        each input's several times) reads lengths only."""
        lens = self.__dict__.get("_len_cache")
        if lens is None:
            out: list[int] = []
            for r in self.requests:  # ``extends`` names an earlier request (validated)
                if r.tokens is not None:
                    out.append(len(r.tokens))
                elif r.extends is not None:
                    out.append(out[r.extends] + self.requests[r.extends].max_tokens + r.suffix_len)
                else:
                    out.append(r.prefix_len + r.suffix_len)
            lens = tuple(out)
            object.__setattr__(self, "_len_cache", lens)
        return lens[i]

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
        if self.accept != ALL:  # absent at the default: streams that never speculate keep their form
            d["accept"] = self.accept.to_dict()
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
        n = sum(self.prompt_len(i) for i in range(len(self.requests)))
        spec = (f", accept {self.accept.label()}" if self.accept != ALL else "") + (
            f", offload {self.offload}" if self.offload != "eager" else "")
        spec += f", hashed by {self.hasher}" if self.hasher != "engine" else ""
        return (f"{len(self.requests)} requests, {n} prompt tokens, prefixes {list(self.prefixes)}, "
                f"blocks={self.num_blocks or 'auto'}, batch={self.max_num_batched_tokens}{spec}")


_PREFIXES: dict[int, tuple[int, ...]] = {}  # prefix -> its longest tokens built so far
_PREFIX_MEMO = 16  # prefixes remembered (a campaign's streams use a handful; each at most 2 * MAX_TOKENS_PER_PROMPT)


def prefix_tokens(p: int, n: int) -> list[int]:
    """The first ``n`` tokens of shared prefix ``p`` (a fresh list). Token ``k`` depends on
    ``p`` and ``k`` only, so one prefix's tokens are built once and sliced: the fuzzer's
    streams ask for the same few prefixes at many lengths, input after input."""
    have = _PREFIXES.get(p, ())
    if len(have) < n:
        c, m = 1009 * (p + 1), VOCAB - 1
        have += tuple(1 + (31 * k + c) % m for k in range(len(have), max(n, min(2 * len(have), MAX_TOKENS_PER_PROMPT))))
        if len(_PREFIXES) >= _PREFIX_MEMO and p not in _PREFIXES:
            _PREFIXES.clear()
        _PREFIXES[p] = have
    return list(have[:n])


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
    if "spec" in data:  # the form before speculation moved to the Layout
        raise LayoutError("stream.spec: speculation is the Layout's now: its method, k and modules are the "
                          "layout's \"speculative\" {method, num_speculative_tokens, mtp_modules}, its accept, "
                          "p and seed the stream's \"accept\" {mode, p, seed}")
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
                    _int(data.get("max_num_seqs", 16), "max_num_seqs", 1, 1024), parse_acceptance(data.get("accept")),
                    _choice(data.get("offload", "eager"), "offload", OFFLOAD_MODES),
                    _choice(data.get("hasher", "engine"), "hasher", facts.PROMPT_HASHERS))
    longest = max(len(p) for p in stream._prompts())
    if longest > MAX_TOKENS_PER_PROMPT:
        raise LayoutError(f"a prompt (with the turns it extends) is longer than {MAX_TOKENS_PER_PROMPT} tokens")
    return stream
