"""consumer.minimize: a consumer finding's layout shrinks with its stream, every step in the
same class, every layout candidate one the engine builds (the decoder's engine_groups and
the release's cache-block-size rule) and smaller than the one before. The real run is
stood in for by a predicate on the layout and stream (no vLLM here: what is judged is the
shrinker, not vLLM)."""

from __future__ import annotations

from kvproof.fuzz.minimize import layout_moves, minimal, size
from kvproof.consumer.stream import Req, Stream
from kvproof.fuzz.decode import engine_groups
from kvproof.inputs.layout import Layout
from kvproof import facts

RULE = "prefix_cacheable"
BIG = Layout.from_dict({
    "groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "sliding_window", "block_size": 16,
                                                              "sliding_window": 512},
               {"kind": "mamba", "block_size": 64}, {"kind": "mla", "block_size": 16}],
    "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align"},
    "kv_connector": "SimpleCPUOffloadConnector", "max_model_len": 4096})


def test_every_move_is_smaller_and_one_the_engine_builds():
    moves = list(layout_moves(BIG, RULE))
    assert len(moves) >= 5
    for m in moves:
        assert size(m) < size(BIG)
        assert tuple(engine_groups(m.groups, m.cache.mamba_cache_mode, m.max_model_len)) == m.groups
        assert m.cache.block_size == facts.engine_cache_block_size_of(m.groups, RULE)
        assert m.kv_connector == BIG.kv_connector
        if not any(g.kind == "mamba" for g in m.groups):
            assert m.cache.mamba_cache_mode == "align"


def test_a_finding_shrinks_to_the_groups_and_requests_that_matter():
    def same_class(lay, st):  # the "bug": a sliding-window group beside the connector, 2+ requests
        return (any(g.kind == "sliding_window" for g in lay.groups) and lay.kv_connector is not None
                and len(st.requests) >= 2)

    stream = Stream((64,), tuple(Req(0, 64, 10, i, 2) for i in range(5)))
    lay, st = minimal(BIG, stream, same_class, RULE, runs=200, seconds=60)
    assert [g.kind for g in lay.groups] == ["sliding_window"]
    assert lay.groups[0].sliding_window == 16  # halved down to its block
    assert lay.cache.block_size == 16 and len(st.requests) == 2 and same_class(lay, st)


def test_the_shrink_stops_at_its_budget_and_keeps_what_it_had():
    calls = []

    def same_class(lay, st):
        calls.append(1)
        return True

    stream = Stream((64,), tuple(Req(0, 64, 10, i, 2) for i in range(5)))
    lay, st = minimal(BIG, stream, same_class, RULE, runs=3, seconds=60)
    assert len(calls) == 3
    assert same_class(lay, st) and size(lay) <= size(BIG)


def test_an_exception_in_a_candidate_run_is_not_the_class():
    def same_class(lay, st):
        if lay != BIG:
            raise RuntimeError("the release refuses this layout")
        return True

    lay, _ = minimal(BIG, Stream((64,), (Req(0, 64, 10, 0, 2),)), same_class, RULE, runs=50, seconds=60)
    assert lay == BIG
