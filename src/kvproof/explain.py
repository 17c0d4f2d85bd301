"""Turn a vLLM startup assertion line into a Layout and a diagnosis.

The coordinator prints only block sizes and the hash block size, not group
kinds, so the Layout is a reconstruction: on vLLM <= 0.27 the only branch that
returns hash == LCM while prefix caching is on is the Mamba fallback, so a
hash equal to the LCM names the groups above the smallest size as Mamba.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvproof.errors import UsageError
from kvproof.layout import Layout

_PATTERN = re.compile(r"block_sizes=\[([\d,\s]+)\],\s*hash_block_size=(\d+)")


@dataclass(frozen=True)
class Diagnosis:
    block_sizes: tuple[int, ...]
    hash_block_size: int
    layout: Layout
    known_bug: bool  # the shape of the vLLM <= 0.27 Mamba align fallback bug
    reasoning: str


def parse(line: str) -> tuple[list[int], int]:
    m = _PATTERN.search(line)
    if not m:
        raise UsageError("explain: no 'block_sizes=[...], hash_block_size=N' in the given line")
    try:
        sizes = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
        hash_size = int(m.group(2))
    except ValueError:  # digits past Python's integer-string limit
        raise UsageError("explain: block sizes too large to be vLLM block sizes") from None
    if not sizes or min(sizes) < 1 or hash_size < 1:
        raise UsageError("explain: block sizes and hash_block_size must be positive integers")
    return sizes, hash_size


def diagnose(line: str) -> Diagnosis:
    sizes, hash_size = parse(line)
    lcm, smallest = math.lcm(*sizes), min(sizes)
    fallback = hash_size == lcm and len(sizes) > 1 and any(s % hash_size for s in sizes)
    if fallback:
        # The <= 0.27 engine sets cache.block_size to the smallest group; Mamba
        # groups above it trip `block_size != cache_config.block_size`.
        groups = [{"kind": "mamba" if s != smallest else "hidden_state", "block_size": s} for s in sizes]
        reasoning = (f"hash_block_size {hash_size} is the LCM of the group block sizes while prefix caching is on: "
                     f"only vLLM <= 0.27's Mamba fallback (Mamba block size != cache block size {smallest}, "
                     f"align mode) returns that; groups above {smallest} are taken as Mamba")
        cache = {"block_size": smallest, "enable_prefix_caching": True, "mamba_cache_mode": "align"}
    else:
        groups = [{"kind": "full_attention", "block_size": s} for s in sizes]
        gcd = math.gcd(*sizes)
        pmu = hash_size if hash_size != gcd else None
        reasoning = ("hash_block_size is not the LCM, so this is not the Mamba fallback; "
                     + (f"it differs from the GCD {gcd}, so it is read as prefix_match_unit={hash_size}"
                        if pmu else "it is the GCD of the groups"))
        cache = {"block_size": smallest, "enable_prefix_caching": True, "prefix_match_unit": pmu}
    layout = Layout.from_dict({"groups": groups, "cache": cache,
                               "kvproof": {"explained_from": line.strip()[:500]}})
    return Diagnosis(tuple(sizes), hash_size, layout, fallback, reasoning)
