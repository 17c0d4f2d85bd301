"""The BlockRemoved and reconciliation oracles' pure logic (no vLLM): event replay against a
prefix cache, and a hybrid coordinator's groups against the hit it returns."""

from __future__ import annotations

from kvproof.consumer.coord_oracle import Group, judge
from kvproof.consumer.observations import Recorder
from kvproof.consumer.removal_oracle import RemovalOracle
from kvproof.consumer.result import ConsumerResult


class Ev:
    def __init__(self, kind: str, hashes=(), group=0, medium="GPU") -> None:
        self.kind, self.block_hashes, self.group_idx, self.medium = kind, list(hashes), group, medium


def ev(kind: str, *a, **kw):
    return type(kind, (Ev,), {})(kind, *a, **kw)


class Removals:
    """The oracle on a hand-held cache and queue: ``apply`` publishes one event, ``check`` ends a
    batch with ``queued`` still in the pool's queue."""

    def __init__(self, cache: set) -> None:
        res = ConsumerResult("x", "v")
        self.queue: list = []
        self.oracle = RemovalOracle(None, Recorder(res.observations, res.counts), "GPU",
                                    lambda entries: entries - set(cache),
                                    lambda: list(self.queue))
        self.seen = res.observations

    def apply(self, e) -> None:
        self.oracle.event(e)

    def check(self, queued=()) -> None:
        self.queue[:] = queued
        self.oracle.published(())


def removals(cache: set):
    rm = Removals(cache)
    return rm, rm.seen


def rules(seen) -> list[str]:
    assert all(o.oracle == "kv_event" and o.cause.endswith("|BlockPool (BlockRemoved[GPU])") for o in seen)
    return [o.cause.partition("|")[0] for o in seen]


def test_an_eviction_without_block_removed_is_reported():
    cache = {(0, b"a"), (0, b"b")}
    rm, seen = removals(cache)
    rm.apply(ev("BlockStored", [b"a", b"b"]))
    rm.check()
    assert seen == []
    cache.discard((0, b"b"))  # the pool reused the block; no BlockRemoved came
    rm.check()
    assert rules(seen) == ["removed-missing"]
    rm.check()  # reported once
    assert len(seen) == 1


def test_announced_evictions_and_clears_are_clean():
    cache = {(0, b"a"), (1, b"a")}
    rm, seen = removals(cache)
    rm.apply(ev("BlockStored", [b"a"], group=0))
    rm.apply(ev("BlockStored", [b"a"], group=1))
    cache.discard((1, b"a"))
    rm.check([ev("BlockRemoved", [b"a"], group=1)])  # still queued in the pool: not yet a fault
    rm.apply(ev("BlockRemoved", [b"a"], group=1))
    rm.check()
    cache.clear()
    rm.apply(ev("AllBlocksCleared"))
    rm.check()
    rm.apply(ev("BlockStored", [b"c"], medium="CPU"))  # another medium: a connector's
    rm.check()
    assert seen == []


def test_a_duplicate_copy_never_invents_a_fault():
    cache = {(0, b"a")}
    rm, seen = removals(cache)
    rm.apply(ev("BlockStored", [b"a"]))
    rm.apply(ev("BlockStored", [b"a"]))  # a second block holds the same hash
    rm.apply(ev("BlockRemoved", [b"a"]))  # one copy evicted, the other stays
    rm.check()
    cache.clear()
    rm.apply(ev("BlockRemoved", [b"a"]))
    rm.check()
    assert seen == []


def test_block_removed_of_a_hash_never_stored_is_reported():
    rm, seen = removals(set())
    rm.apply(ev("BlockStored", [b"a"], group=0))
    rm.apply(ev("BlockRemoved", [b"a"], group=1))
    assert rules(seen) == ["removed-unknown"]


def _groups():
    return [Group(True, [0], 16, False, False, "FullAttentionSpec"),
            Group(False, [1], 16, False, False, "SlidingWindowSpec"),
            Group(False, [2], 16, False, False, "SlidingWindowSpec")]


def _judge(groups, answers, blocks, hit):
    seen: list[str] = []
    judge(groups, answers, blocks, hit, lambda rule, text: seen.append(rule))
    return seen


def test_a_fixed_point_every_group_accepts_is_clean():
    assert _judge(_groups(), {0: 96, 1: 64, 2: 64}, [[1] * 4, [1] * 4, [1] * 4], 64) == []


def test_a_group_left_at_a_longer_length_is_unreconciled():
    # one pass only: group 2 shrank the hit to 48, group 1 was never asked again
    assert _judge(_groups(), {0: 96, 1: 64, 2: 48}, [[1] * 3, [1] * 4, [1] * 3], 48) == ["unreconciled"]


def test_full_attention_blocks_past_the_hit_are_reported():
    assert _judge(_groups(), {0: 96, 1: 48, 2: 48}, [[1] * 6, [1] * 3, [1] * 3], 48) == ["past-hit"]
    keeps = _groups()
    keeps[0] = Group(True, [0], 16, False, True, "FullAttentionSpec")  # retains_longer_hit
    assert _judge(keeps, {0: 96, 1: 48, 2: 48}, [[1] * 6, [1] * 3, [1] * 3], 48) == []


def test_an_eagle_group_may_answer_past_the_candidate_never_short():
    g = _groups()
    g[1] = Group(False, [1], 16, True, False, "SlidingWindowSpec")
    assert _judge(g, {0: 96, 1: 80, 2: 64}, [[1] * 4, [1] * 5, [1] * 4], 64) == []
    assert _judge(g, {0: 96, 1: 48, 2: 64}, [[1] * 4, [1] * 3, [1] * 4], 64) == ["unreconciled"]
