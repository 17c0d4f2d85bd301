"""The smallest (layout, stream) that keeps a consumer finding in its class.

A campaign stores a new class with what a maintainer should read first: the stream
shrunk (``stream.shrink``: every draft accepted, fewer requests, shorter prompts, earlier
arrivals, aborts or resends that do not matter), then the layout (fewer groups, shorter windows,
no context parallelism, no ``prefix_match_unit``, no or shorter drafts; the one greedy loop of
``kvproof.judging.shrinking``), then the stream once more for the smaller layout. Every step
must keep the class key, so a shrink never trades one bug for another.

A layout candidate stays one the engine builds: its groups go through the fuzz
decoder's ``engine_groups`` and its cache block size through the release's own rule
(``facts.engine_cache_block_size_of``), as a decoded input's do. Pure Python: the
caller's ``same_class`` runs real vLLM.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Iterator

from kvproof.inputs.layout import Cache, Layout
from kvproof import facts


def _engine(layout: Layout, groups: list, rule: str | None) -> Layout:
    """``groups`` as the engine would hand them over beside ``layout``'s other settings
    (``rule`` None: the free premise, the groups as they are)."""
    from kvproof.fuzz.decode import engine_groups

    if rule is None:
        return replace(layout, groups=tuple(groups))

    mode = layout.cache.mamba_cache_mode if any(g.kind == "mamba" for g in groups) else "align"
    out = engine_groups(groups, mode, layout.max_model_len)
    cache = Cache(facts.engine_cache_block_size_of(out, rule), layout.cache.enable_prefix_caching,
                  layout.cache.prefix_match_unit, mode)
    return replace(layout, groups=tuple(out), cache=cache)


def layout_moves(layout: Layout, rule: str | None) -> Iterator[Layout]:
    """Smaller neighbours of ``layout``, the biggest cuts first."""
    groups = list(layout.groups)
    for i in range(len(groups) - 1, -1, -1):
        if len(groups) > 1:
            yield _engine(layout, groups[:i] + groups[i + 1:], rule)
    if layout.dcp > 1:
        yield replace(_engine(layout, [replace(g, dcp_sharded=None) for g in groups], rule), dcp=1)
    if layout.cache.prefix_match_unit is not None:
        yield replace(layout, cache=replace(layout.cache, prefix_match_unit=None))
    for i, g in enumerate(groups):
        for field in ("sliding_window", "attention_chunk_size"):
            v = getattr(g, field)
            if v and v > g.block_size:
                yield _engine(layout, groups[:i] + [replace(g, **{field: max(g.block_size, v // 2)})]
                              + groups[i + 1:], rule)
    sp = layout.speculative
    if sp is not None:  # no drafts, then one draft token, then one MTP module
        yield replace(layout, speculative=None)
        for cut in (replace(sp, num_speculative_tokens=1), replace(sp, mtp_modules=1)):
            if cut != sp:
                yield replace(layout, speculative=cut)


def size(layout: Layout) -> tuple:
    sp = layout.speculative
    return (len(layout.groups), layout.dcp, layout.cache.prefix_match_unit is not None,
            sum((g.sliding_window or 0) + (g.attention_chunk_size or 0) for g in layout.groups),
            (sp.num_speculative_tokens, sp.mtp_modules) if sp else (0, 0))


def minimal(layout: Layout, stream: Any, same_class: Callable[[Layout, Any], bool], rule: str | None,
            runs: int, seconds: float) -> tuple[Layout, Any]:
    """``(layout, stream)`` shrunk while ``same_class`` holds; at most ``runs`` calls and
    ``seconds`` of wall time in all (a call past either answers False)."""
    from kvproof.consumer.stream import shrink as shrink_stream
    from kvproof.judging.shrinking import shrink as shrink_layout

    end, left = time.monotonic() + seconds, [runs]

    def holds(lay: Layout, st: Any) -> bool:
        if left[0] <= 0 or time.monotonic() > end:
            return False
        left[0] -= 1
        try:
            return same_class(lay, st)
        except Exception:  # noqa: BLE001 -- a candidate the release refuses is not the class
            return False

    stream = shrink_stream(stream, lambda st: holds(layout, st), budget=runs)
    small = shrink_layout(layout, lambda lay: layout_moves(lay, rule), size,
                          lambda cands: (holds(c, stream) for c in cands), deadline=end)
    if small != layout:
        layout, stream = small, shrink_stream(stream, lambda st: holds(small, st), budget=runs)
    return layout, stream
