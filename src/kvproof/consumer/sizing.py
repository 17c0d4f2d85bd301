"""How many KV blocks a consumer run gets. No vLLM (the fuzzer sizes streams before vLLM runs)."""

from __future__ import annotations

import math
from typing import Any

from kvproof.consumer.drafts import draft_slots


def auto_blocks(layout: Any, stream: Any) -> int:
    """Blocks for every request of ``stream`` at once (no pressure), resends counted twice."""
    need, slots = 0, draft_slots(layout)
    for i, r in enumerate(stream.requests):
        n = stream.prompt_len(i) + r.max_tokens + 1 + slots
        need += sum(math.ceil(n / g.block_size) + 1 for g in layout.groups)
    need *= 2 if any(r.resend_at is not None for r in stream.requests) else 1
    return need + 8 * len(layout.groups) + 16


def min_blocks(layout: Any, stream: Any) -> int:
    """The engine refuses a KV cache that cannot hold one longest request; so does the harness."""
    slots = draft_slots(layout)
    longest = max(stream.prompt_len(i) + r.max_tokens + 1 + slots
                  for i, r in enumerate(stream.requests))
    return sum(math.ceil(longest / g.block_size) + 2 for g in layout.groups) + 1


def num_blocks(layout: Any, stream: Any) -> int:
    """The stream's own ``num_blocks`` (at least ``min_blocks``), else ``auto_blocks``."""
    if stream.num_blocks:
        return max(stream.num_blocks, min_blocks(layout, stream))
    return auto_blocks(layout, stream)
