"""Request streams in the consumer tier: the Stream type (:mod:`kvproof.inputs.stream`, an input type
below the Layout, re-exported here), and what draws (:func:`random_stream`, :func:`random_input`),
shrinks (:func:`shrink`) and defaults (:func:`default_stream`, :func:`stream_for`) streams."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from kvproof.inputs.layout import Layout
from kvproof.inputs.drafts import ALL, Drafts
from kvproof.inputs.layout import Speculative
from kvproof.inputs.stream import (MAX_REQUESTS, MAX_STEP, MAX_TOKENS_PER_PROMPT, OFFLOAD_MODES, Req,  # noqa: F401
                            Stream, prefix_tokens)
from kvproof import facts


# --- generation and shrinking ---------------------------------------------------

def random_input(rng: random.Random, layout: "Layout", scale: int = 1000, spec_share: float = 0.0,
                 method: str | None = None) -> tuple["Layout", Stream]:
    """``layout`` under a random stream (:func:`random_stream`); a ``spec_share`` of inputs
    speculate (all with ``method`` when given): the drawn method, length and modules become the
    Layout's ``speculative``, the acceptance the stream's (:func:`speculating`)."""
    stream = random_stream(rng, scale)
    if rng.random() < spec_share:  # drawn after the stream, so a seed's requests are the same either way
        layout, stream = speculating(layout, stream, random_drafts(rng, method))
    return layout, stream


def speculating(layout: "Layout", stream: Stream, drafts: Drafts) -> tuple["Layout", Stream]:
    """``layout`` and ``stream`` making ``drafts``: its method, length and modules the Layout's
    ``speculative`` (the one record of them), its acceptance the stream's."""
    spec = Speculative(drafts.method, drafts.k, drafts.modules)
    return replace(layout, speculative=spec), replace(stream, accept=drafts.acceptance)


def random_stream(rng: random.Random, scale: int = 1000) -> Stream:
    """One stream: a few shared prefixes of assorted lengths and requests over them, some of
    them next turns of earlier ones (speculation is the Layout's: :func:`random_input`)."""
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
        rng.random()  # the speculation draw random_input makes: a seed's streams stay what they were


def shrink(stream: Stream, still_fails: Callable[[Stream], bool], budget: int = 200) -> Stream:
    """Greedy shrinker: every draft accepted, drop requests, then cut lengths/tokens/budgets while
    ``still_fails`` (the Layout's speculation shrinks with the Layout: ``kvproof.fuzz.minimize``)."""
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
        if best.accept != ALL:
            changed |= attempt(replace(best, accept=ALL))
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
    """The stream a Layout is checked under: its own (``Layout.stream``, what a consumer
    finding's file carries), else :func:`default_stream`."""
    return layout.stream if layout.stream is not None else default_stream(layout)
