"""The consumer tier's ground truth (no vLLM): what KV was computed, and which tokens exist."""

from __future__ import annotations

from kvproof.consumer.truth import Truth


def test_computed_kv_and_tokens_are_two_bounds():
    t = Truth()
    t.record("r0", list(range(10)), 4)  # ten tokens, KV for four
    assert t.longest(list(range(10))) == 4 and t.longest_tokens(list(range(10))) == 10
    assert t.longest([0, 1, 9]) == 2 and t.longest_tokens([0, 1, 2, 3, 4, 99]) == 5
    # a token appended without new KV still counts for the lookahead bound (the last sampled
    # token of a finished request), and the KV bound keeps its larger count
    t.record("r0", list(range(11)), 3)
    assert t.longest_tokens(list(range(12))) == 11 and t.longest(list(range(12))) == 4
    t.record("r0", list(range(11)), 9)
    assert t.longest(list(range(12))) == 9
    assert Truth().longest_tokens([1, 2]) == 0


def test_a_hash_index_answers_as_a_fresh_lookup_while_it_grows():
    """``locate`` keeps what it found (``where`` only grows); it must answer every value as the
    uncached lookup does, before and after the requests that name it are learned."""
    import hashlib
    import random

    from kvproof.consumer.truth import HashIndex

    def block(parent, toks, ahead=()):
        return hashlib.sha256(repr((parent, list(toks), list(ahead))).encode()).digest()

    rng = random.Random(5)
    index = HashIndex(4, block)
    prompts = {f"r{i}": [rng.randrange(3) for _ in range(rng.randint(4, 40))] for i in range(12)}
    learned: list = []
    values = []
    for rid, toks in prompts.items():
        chain = HashIndex(4, block).extend(rid, toks)  # the hashes vLLM would send, learned or not yet
        values += chain + [hv + (g).to_bytes(4, "big") for hv in chain for g in (0, 2)]
        values += [int.from_bytes(hv, "big") & ((1 << 64) - 1) for hv in chain]
        values.append(b"".join(chain[:2]))
    found = 0
    for rid, toks in prompts.items():
        for v in rng.sample(values, 60):
            got, fresh = index.locate(v), index._locate(v)
            assert got == fresh, (v, got, fresh)
            found += got is not None
        index.extend(rid, toks[:rng.randint(0, len(toks))])  # part of it now, the rest later
        index.extend(rid, toks)
        learned.append(rid)
    assert found > 50
    assert all(index.locate(v) == index._locate(v) is not None for v in values[:20])
