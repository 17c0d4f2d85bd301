"""The one greedy shrinker (kvproof.judging.shrinking): first vs smallest move, lazy verdicts, deadline, rounds."""

from __future__ import annotations

import time
from dataclasses import replace

from kvproof.inputs.layout import Layout
from kvproof.judging.shrinking import shrink

START = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 96}], "cache": {"block_size": 96}})


def size(lay):
    return lay.groups[0].block_size


def halves_and_ones(lay):  # in order: one less, then a third, then 1
    b = size(lay)
    for v in (b - 1, b // 3, 1):
        if v >= 1:
            yield replace(lay, groups=(replace(lay.groups[0], block_size=v),), cache=replace(lay.cache, block_size=v))


def even(cands):
    return [size(c) % 2 == 0 for c in cands]


def test_first_takes_the_first_holding_candidate_and_smallest_the_smallest():
    assert size(shrink(START, halves_and_ones, size, even)) == 10  # 96 -> 32 -> 10, then 9, 3, 1 are odd
    assert size(shrink(START, halves_and_ones, size, even, smallest=True)) == 10
    assert size(shrink(START, halves_and_ones, size, lambda cs: [True] * len(cs), smallest=True)) == 1
    assert size(shrink(START, halves_and_ones, size, lambda cs: [True] * len(cs), rounds=1)) == 95


def test_lazy_verdicts_are_read_only_up_to_the_move():
    asked = []

    def lazy(cands):
        for c in cands:
            asked.append(size(c))
            yield size(c) % 2 == 0
    shrink(START, halves_and_ones, size, lazy, rounds=1)
    assert asked == [95, 32]  # 1 never asked: 32 was the move


def test_deadline_and_rounds_stop_it():
    assert shrink(START, halves_and_ones, size, even, deadline=time.monotonic() - 1) == START
    assert size(shrink(START, halves_and_ones, size, even, rounds=1)) == 32


def test_candidates_the_layout_type_refuses_are_skipped():
    def bad(lay):
        yield replace(lay, groups=())  # no groups: Layout.from_dict refuses it
        yield from halves_and_ones(lay)
    assert size(shrink(START, bad, size, even)) == 10


def test_a_lazy_still_builds_candidates_only_up_to_the_move():
    """The round's list is built as far as ``still`` reads it; a batch ``still`` (a list) gets them all."""
    made = []

    def counted(lay):
        for cand in halves_and_ones(lay):
            made.append(size(cand))
            yield cand

    def lazy(cands):
        return (size(c) % 2 == 0 for c in cands)
    shrink(START, counted, size, lazy, rounds=1)
    assert made == [95, 32]  # 1 never built: 32 was the move
    made.clear()
    shrink(START, counted, size, even, rounds=1)
    assert made == [95, 32, 1]
