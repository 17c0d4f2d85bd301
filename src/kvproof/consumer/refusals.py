"""Inputs no engine builds, refused before a consumer run starts (NOT_EXPRESSIBLE). No vLLM import.

What kvproof itself cannot run (a speculative method it does not draft for) is not a refusal:
``effective_drafts`` raises ``Unchecked`` through :func:`refusal`.

Each refusal names the engine rule that keeps the combination from reaching
one scheduler, so a run never judges vLLM on a KV cache no model derives.
"""

from __future__ import annotations

from kvproof.consumer.drafts import Drafts, effective_drafts
from kvproof.consumer.stream import Stream
from kvproof.inputs.layout import Layout
from kvproof import facts


def refusal(layout: Layout, stream: Stream, takes_drafts: bool,
            takes_frontend_hashes: bool = True, release: str | None = None) -> tuple[Drafts | None, str | None]:
    """(the drafts the run makes, why the engine would not build it or None).

    ``takes_drafts``: the release's scheduler takes draft token ids (``DraftTokenIds``);
    ``takes_frontend_hashes``: its engine takes a frontend's prompt block hashes; ``release``: the
    vLLM version (the engine's EAGLE group rule, ``facts.eagle_block_drop``; any EAGLE-family
    method when None)."""
    if stream.hasher != "engine" and not takes_frontend_hashes:
        return None, ("a frontend's prompt block hashes: this release's EngineCoreRequest carries none "
                        "(block_hashes and PrefixHashConfig appear in 0.34)")
    if layout.groups and all(g.prefix_cacheable is False for g in layout.groups):
        # Only CircularBufferSpec opts a group out of prefix caching (kv_cache_interface.py,
        # 0.32), and only DeepSeek-V4-style compressor caches build it, always beside
        # MLA/attention groups that are cacheable: no model derives a KV cache of such
        # groups alone. vLLM then raises in whatever reads the cacheable groups first
        # (HybridKVCacheCoordinator, offloading/config.py:76, simple_kv_offload/manager.py:193).
        return None, ("every group opts out of prefix caching (CircularBufferSpec only): no model derives "
                        "such a KV cache; they sit beside cacheable MLA/attention groups")
    # the Layout's speculative method drafts, under the stream's acceptance; one kvproof does not
    # draft for raises Unchecked (the caller's UNCHECKED, never a refusal)
    drafts = effective_drafts(layout, stream)
    flags = drafts is not None and (drafts.eagle if release is None else facts.eagle_block_drop(drafts.method, release))
    if any(g.eagle for g in layout.groups) and not flags:
        # kv_cache_utils.py (0.33+ kv_cache_planning.py) annotates is_eagle_group only under
        # use_eagle_block_drop(): never for DSpark and DFlash from 0.33
        drafter = "" if drafts is None else f" ({drafts.method} on {release or 'this release'})"
        return drafts, (f"a group flagged eagle without a drafter the engine drops a block for{drafter}: it sets "
                        f"is_eagle_group only under use_eagle_block_drop() ({', '.join(facts.EAGLE_METHODS)}; "
                        f"{', '.join(facts.PARALLEL_DRAFT_METHODS)} only up to 0.32)")
    if drafts is not None and not takes_drafts:
        return drafts, "this release's scheduler takes no draft token ids (no DraftTokenIds)"
    if drafts is not None and drafts.eagle and len(layout.groups) > 1 \
            and any(g.kind == "chunked_local" for g in layout.groups):
        # vllm/config/vllm.py turns the hybrid KV cache manager off for chunked local
        # attention, always with EAGLE: these groups never reach one coordinator
        return drafts, ("EAGLE with chunked local attention: the engine turns the hybrid KV cache manager "
                        "off, so these groups never share a coordinator")
    return drafts, None
