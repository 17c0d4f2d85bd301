"""The fuzzer's oracle: a thin use of ``kvproof.judge``. Pure Python.

- a **crash** is a FAIL: real vLLM raised (the resolver other than its
  documented user-error ValueError, or the real ``KVCacheManager`` /
  coordinator / block pool). A real exception is never waived: there are no
  waivers here. Configurations the engine's own validation rejects never reach
  the oracle: the harness builds them through the bridge (``VllmConfig`` and
  the KV cache config), and a rejection there is counted as
  ``BRIDGE_REJECTED``, which is that validation run.
- **LATENT** (a contract predicts a violation, nothing real raised) is counted
  and stored separately by the harness, never a crash.
- REJECTED / NOT_EXPRESSIBLE / WARN / OK are counted.

The class of a finding (for de-duplication, one corpus file per class) is
coarse on purpose: verdict + naming contract + the exception's signature
(type and message with numbers erased) + ``shape``: kinds present + the flags
that pick a resolver branch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kvproof.judge import Judgement
from kvproof.judge import judge as _judge
from kvproof.layout import Layout
from kvproof.outcome import Outcome
from kvproof.verdicts import Verdict


@dataclass(frozen=True)
class Finding:
    """The oracle's answer for one input."""

    judgement: Judgement

    @property
    def crash(self) -> bool:
        return self.judgement.verdict == Verdict.FAIL

    @property
    def latent(self) -> bool:
        return self.judgement.verdict == Verdict.LATENT

    @property
    def contract(self) -> str:
        return self.judgement.contract

    @property
    def signature(self) -> str:
        return signature(self.judgement)

    @property
    def detail(self) -> str:
        j = self.judgement
        where = f"[{j.tier}] " if j.observed is not None else ""
        return where + j.line()


def signature(j: Judgement) -> str:
    """Verdict, tier and the real exception's type + message with numbers erased."""
    if j.observed is None:
        return f"{j.verdict}"
    msg = re.sub(r"\[[\d,\s]*\]", "[...]", j.observed.message)  # group lists of any length are one class
    msg = re.sub(r"\d+", "N", msg)[:120]
    return f"{j.verdict}:{j.tier}:{j.observed.type}:{msg}"


def judge(layout: Layout, out: Outcome, strict: bool = False) -> Finding:
    """The judge's verdict as a fuzz finding. ``strict`` is accepted for the
    runner's ``--strict`` flag and changes nothing: there are no waivers."""
    del strict
    return Finding(_judge(layout, out))


def shape(layout: Layout) -> tuple[Any, ...]:
    """The coarse class of a layout for de-duplication (with the contract id): what
    picks a resolver branch, not which attention kinds happen to be present."""
    c = layout.cache
    mamba_vs_cache = ""
    if layout.has_mamba:
        mb = {g.block_size for g in layout.groups if g.kind == "mamba"}
        mamba_vs_cache = "eq" if mb == {c.block_size} else "ne"
    return (layout.has_mamba, any(g.is_attention for g in layout.groups), len(layout.groups) > 1,
            c.enable_prefix_caching, layout.kv_connector is not None, layout.dcp > 1,
            c.prefix_match_unit is not None, c.mamba_cache_mode if layout.has_mamba else "",
            mamba_vs_cache, any(g.prefix_cacheable is False for g in layout.groups))


def dedup_key(vllm_version: str, contract: str, layout: Layout, signature: str = "") -> str:
    return _dedup_key(vllm_version, contract, shape(layout), signature)


@lru_cache(maxsize=1 << 14)
def _dedup_key(vllm_version: str, contract: str, layout_shape: tuple[Any, ...], signature: str) -> str:
    """Memoised: a campaign re-meets the same few classes on most inputs (json + sha256 once each)."""
    import hashlib
    import json

    parts = [vllm_version, contract, list(map(str, layout_shape))] + ([signature] if signature else [])
    text = json.dumps(parts)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
