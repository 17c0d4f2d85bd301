"""CrossHair's view of the same question the Z3 model answers.

Run INSIDE a vLLM environment (crosshair-tool installed there) by
bench/bench_crosshair.py: `crosshair check` explores the REAL installed
resolver through kvproof's bridge builder. The postcondition is the hybrid
coordinator contract in align mode with prefix caching on and the engine's
cache block size (the smallest group): every group's block size is a
multiple of hash_block_size.
"""

from crosshair import realize

from kvproof.bridge.build import Builder
from kvproof.inputs.layout import Layout
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes


def _hash(groups: list, cache_bs: int) -> int:
    # VllmConfig is pydantic-validated and rejects symbolic ints: the cache
    # block size is made concrete there (CrossHair forks a path per value).
    layout = Layout.from_dict({"groups": groups, "cache": {
        "block_size": realize(cache_bs), "enable_prefix_caching": True, "mamba_cache_mode": "align"}})
    builder = Builder()  # no caches across calls: CrossHair needs deterministic re-execution
    _, h = resolve_kv_cache_block_sizes(builder.kv_cache_config(layout), builder.vllm_config(layout))
    return h


def hybrid_align_2(mamba: int, attn: int) -> bool:
    """
    pre: 1 <= mamba <= 1048576
    pre: 1 <= attn <= 1048576
    post: __return__
    """
    h = _hash([{"kind": "mamba", "block_size": mamba}, {"kind": "full_attention", "block_size": attn}],
              min(mamba, attn))
    return mamba % h == 0 and attn % h == 0


def hybrid_align_3(m1: int, m2: int, attn: int) -> bool:
    """
    pre: 1 <= m1 <= 1048576
    pre: 1 <= m2 <= 1048576
    pre: 1 <= attn <= 1048576
    post: __return__
    """
    h = _hash([{"kind": "mamba", "block_size": m1}, {"kind": "mamba", "block_size": m2},
               {"kind": "full_attention", "block_size": attn}], min(m1, m2, attn))
    return m1 % h == 0 and m2 % h == 0 and attn % h == 0
