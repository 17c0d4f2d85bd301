"""Hypothesis strategies for Layouts (shared by the conformance test and the fuzzer).

``layouts()`` draws valid Layouts over every field the resolver reads:
1..max_groups groups of every kind, block sizes from a mix of realistic
values (powers of two, page-aligned odd sizes such as 181 and 544) and small
integers (where gcd/lcm corner cases live), optional spec flags, a cache
block size that is either the engine's choice (the minimum group size) or
free, prefix caching, a KV connector, prefix_match_unit, the Mamba mode,
dcp and max_model_len.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kvproof.layout import Cache, Group, Layout
from kvproof.spec import facts

REALISTIC = (1, 2, 4, 8, 16, 32, 42, 64, 128, 181, 256, 272, 544, 1024, 2048, 4096)


def block_sizes(max_value: int = 1 << 12):
    return st.one_of(st.sampled_from(REALISTIC), st.integers(1, 24), st.integers(1, max_value))


@st.composite
def groups(draw, kinds=facts.KINDS, flags: bool = True, max_value: int = 1 << 12):
    kind = draw(st.sampled_from(kinds))
    bs = draw(block_sizes(max_value))
    pc = dcp_sharded = tps = None
    if flags:
        if kind in ("full_attention", "sliding_window") and draw(st.integers(0, 5)) == 0:
            pc = False
        if draw(st.integers(0, 5)) == 0:
            dcp_sharded = draw(st.booleans())
        if kind == "mamba" and draw(st.integers(0, 3)) == 0:
            tps = draw(st.one_of(st.integers(1, 8), st.sampled_from((16, 32, 64, 128))))
    return Group(kind=kind, block_size=bs, prefix_cacheable=pc, dcp_sharded=dcp_sharded, tokens_per_state=tps)


@st.composite
def layouts(draw, max_groups: int = 8, flags: bool = True, modes=facts.ALL_MAMBA_MODES, dcps=(1, 1, 1, 2, 3, 4, 8),
            max_value: int = 1 << 12):
    """A valid Layout (round-trips through JSON)."""
    n = draw(st.integers(1, max_groups))
    flags = flags and draw(st.integers(0, 2)) == 0  # a third of the layouts use 0.29+ spec fields
    gs = draw(st.lists(groups(flags=flags, max_value=max_value), min_size=n, max_size=n))
    if draw(st.integers(0, 2)) == 0:  # free cache block size
        cache_bs = draw(block_sizes(max_value))
    else:  # what EngineCore derives (0.31+: over prefix-cacheable groups)
        pcs = [g.block_size for g in gs if g.prefix_cacheable is not False] or [g.block_size for g in gs]
        cache_bs = min(pcs) if draw(st.booleans()) else min(g.block_size for g in gs)
    pmu = None
    if draw(st.integers(0, 3)) == 0:
        pmu = draw(st.one_of(st.sampled_from(sorted({g.block_size for g in gs})), st.integers(1, 64)))
    cache = Cache(block_size=cache_bs, enable_prefix_caching=draw(st.booleans()), prefix_match_unit=pmu,
                  mamba_cache_mode=draw(st.sampled_from(modes)))
    connector = draw(st.sampled_from((None, None, facts.DEFAULT_CONNECTOR)))
    layout = Layout(groups=tuple(gs), cache=cache, kv_connector=connector, dcp=draw(st.sampled_from(dcps)),
                    max_model_len=draw(st.sampled_from((2048, 131072, 1 << 20))))
    return Layout.from_dict(layout.to_dict())  # validated
