"""Known consumer inputs: the fixed (Layout, Stream) pairs the self-test replays on the base release
and on each mutant overlay (the ``known`` layer). Stdlib + kvproof input types only.

One pair per consumer path the behavioural mutants edit, each clean on the base release (its
consumer verdict OK or WARN, never FAIL: ``tests/integration/test_selftest_consumers.py`` checks
that on 0.32.0), so a FAIL on an overlay is the mutant's:

- full attention, one group: shared prefixes, a partial prefix, a resend, a next turn
  (``default_stream``), the same under block pressure (eviction, preemption) and under EAGLE;
- full attention + sliding window (hybrid, scheduler 32 / hash 16), plain and under EAGLE, and a
  block-aligned prompt resent (the replay boundary sparse retention keeps);
- three spec groups (full attention + two sliding windows), in both orders of the windows: the
  coordinator's fixed point needs more than one pass;
- chunked local attention alone and beside full attention;
- Mamba in align mode beside full attention, at the block granularity and fine-grained
  (``prefix_match_unit`` below the block: the managers' phase-2 / partial-tail paths and
  partial-tail ``BlockStored`` events);
- OffloadingConnector and SimpleCPUOffloadConnector on full attention under block pressure
  (stores, CPU hits, loads), SimpleCPUOffloadConnector on the hybrid.

``SEEDED`` adds the consumer fuzzer's own random streams (``fuzz.consumers.fit_input``) on the
same layouts, a few seeds each, so the replay is not only hand-written shapes.
"""

from __future__ import annotations

from kvproof.consumer.stream import Req, Stream
from kvproof.inputs.layout import Layout

FA = {"groups": [{"kind": "full_attention", "block_size": 16}],
      "cache": {"block_size": 16, "enable_prefix_caching": True}}
HYBRID = {"groups": [{"kind": "full_attention", "block_size": 16},
                     {"kind": "sliding_window", "block_size": 32, "sliding_window": 128}],
          "cache": {"block_size": 16, "enable_prefix_caching": True}}
THREE = {"groups": [{"kind": "full_attention", "block_size": 16},
                    {"kind": "sliding_window", "block_size": 16, "sliding_window": 48},
                    {"kind": "sliding_window", "block_size": 16, "sliding_window": 160}],
         "cache": {"block_size": 16, "enable_prefix_caching": True}}
# the same windows, the wider first: a pass where the narrow window shrinks the hit below what the
# wide one accepted, so the coordinator's fixed point must ask the wide one again (the first order's
# windows never disagree that way under sparse retention)
THREE_WIDE_FIRST = {"groups": [{"kind": "full_attention", "block_size": 16},
                               {"kind": "sliding_window", "block_size": 16, "sliding_window": 160},
                               {"kind": "sliding_window", "block_size": 16, "sliding_window": 48}],
                    "cache": {"block_size": 16, "enable_prefix_caching": True}}
CHUNKED = {"groups": [{"kind": "chunked_local", "block_size": 16, "attention_chunk_size": 64}],
           "cache": {"block_size": 16, "enable_prefix_caching": True}}
FA_CHUNKED = {"groups": [{"kind": "full_attention", "block_size": 16},
                         {"kind": "chunked_local", "block_size": 16, "attention_chunk_size": 64}],
              "cache": {"block_size": 16, "enable_prefix_caching": True}}
MAMBA = {"groups": [{"kind": "full_attention", "block_size": 64}, {"kind": "mamba", "block_size": 64}],
         "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align"}}
MAMBA_FINE = {"groups": [{"kind": "full_attention", "block_size": 64}, {"kind": "mamba", "block_size": 64}],
              "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align",
                        "prefix_match_unit": 16}}


def _with(base: dict, **top) -> dict:
    return {**base, **top}


# r0 a 200-token prefix + 10; r1 shares 150 of it; r2 all 200 (+20 new), resent at step 12; r3 a
# next turn of r0 (its prompt and outputs, then 8 new tokens)
SHARED = Stream((200,), (Req(0, 200, 10, 0, 2), Req(0, 150, 5, 3, 2), Req(0, 200, 20, 6, 3, resend_at=12),
                         Req(suffix_len=8, arrival=16, max_tokens=2, extends=0)),
                max_num_batched_tokens=64)
# Long prefixes through a cache that holds about two requests: blocks are evicted and reused
# (BlockRemoved, a resend that hits only part of what it once cached, preemption)
PRESSURE = Stream((300, 260), (Req(0, 300, 20, 0, 3), Req(1, 260, 30, 1, 3), Req(0, 300, 9, 4, 2),
                               Req(1, 200, 40, 6, 2), Req(0, 300, 20, 14, 2, resend_at=24),
                               Req(1, 260, 30, 18, 2)),
                  num_blocks=60, max_num_batched_tokens=128, max_num_seqs=4)
# the same prompts again long after their first computation: the GPU copies are gone, a connector's
# CPU copies are not
LATER = Stream((176, 240), (Req(0, 176, 1, 0, 4), Req(1, 240, 16, 1, 2), Req(0, 176, 40, 4, 2),
                            Req(1, 240, 0, 30, 1), Req(0, 176, 0, 40, 1), Req(0, 120, 30, 44, 2)),
               num_blocks=64, max_num_batched_tokens=256, max_num_seqs=2)
# A block-aligned prompt (256 tokens) resent once it finished: a resend's hit is capped at
# num_tokens - 1, so under sparse retention (the engine's default interval 0) the sliding-window
# group must keep its state at the replay boundary 255 (kv_cache_coordinator.replay_boundaries);
# kept at 256 only, the resend's hit collapses to 0.
REPLAY = Stream((256,), (Req(0, 192, 64, 0, 2, resend_at=6),), max_num_batched_tokens=512)
EAGLE = {"method": "eagle", "num_speculative_tokens": 2}  # every draft accepted (the stream's default)


def hand() -> list[tuple[str, Layout, Stream]]:
    """The hand-written pairs (name, layout, stream)."""
    from kvproof.consumer.stream import default_stream

    out: list[tuple[str, dict, Stream | None]] = [
        ("fa", FA, None), ("fa-shared", FA, SHARED), ("fa-pressure", FA, PRESSURE),
        ("fa-eagle", _with(FA, speculative=EAGLE), SHARED),
        ("hybrid", HYBRID, SHARED), ("hybrid-pressure", HYBRID, PRESSURE),
        ("hybrid-eagle", _with(HYBRID, speculative=EAGLE), SHARED),
        ("hybrid-replay", HYBRID, REPLAY),
        ("three-groups", THREE, SHARED), ("three-groups-pressure", THREE, PRESSURE),
        ("three-groups-wide-first", THREE_WIDE_FIRST, SHARED),
        ("chunked", CHUNKED, SHARED), ("fa-chunked", FA_CHUNKED, SHARED),
        ("mamba", MAMBA, None), ("mamba-shared", MAMBA, SHARED), ("mamba-pressure", MAMBA, PRESSURE),
        ("mamba-fine", MAMBA_FINE, None), ("mamba-fine-shared", MAMBA_FINE, SHARED),
        ("offloading", _with(FA, kv_connector="OffloadingConnector"), LATER),
        ("offloading-pressure", _with(FA, kv_connector="OffloadingConnector"), PRESSURE),
        ("simple-cpu", _with(FA, kv_connector="SimpleCPUOffloadConnector"), LATER),
        ("simple-cpu-pressure", _with(FA, kv_connector="SimpleCPUOffloadConnector"), PRESSURE),
        ("simple-cpu-hybrid", _with(HYBRID, kv_connector="SimpleCPUOffloadConnector"), LATER),
    ]
    pairs = []
    for name, d, s in out:
        lay = Layout.from_dict(d)
        pairs.append((name, lay, s if s is not None else default_stream(lay)))
    return pairs


SEEDS = (1, 2, 3)


def seeded(seeds: tuple[int, ...] = SEEDS) -> list[tuple[str, Layout, Stream]]:
    """The consumer fuzzer's inputs (``fit_input``) on each hand-written layout, ``seeds`` each."""
    from kvproof.fuzz.consumers import fit_input

    layouts: dict[str, tuple[str, Layout]] = {}
    for name, lay, _ in hand():
        if lay.speculative is not None:  # the fuzzer's inputs draw their own speculation
            continue
        layouts.setdefault(lay.content_hash(), (name.removesuffix("-shared").removesuffix("-pressure"), lay))
    return [(f"{name}+seed{s}", *fit_input(lay, s)) for name, lay in layouts.values() for s in seeds]


def inputs(seeds: tuple[int, ...] = SEEDS) -> list[tuple[str, Layout, Stream]]:
    return hand() + seeded(seeds)
