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
