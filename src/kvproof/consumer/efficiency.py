"""Efficiency (e), a measurement and never a verdict: tokens a perfect prefix cache could reuse vs tokens hit. No vLLM import.

``scheduled`` is called through ``Oracles.scheduled`` (``o``: the run's
:class:`kvproof.consumer.oracles.Oracles`, for the hits its lookups and
connector claims left pending and the result it fills).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


@dataclass
class Efficiency:
    """Per stream: prompt tokens, tokens a perfect prefix cache could reuse, tokens hit."""

    prompt_tokens: int = 0
    reusable_tokens: int = 0  # sum over first admissions of min(LCP with computed KV, prompt-1)
    hit_tokens: int = 0  # local prefix-cache hit at first admission
    external_tokens: int = 0  # connector-provided tokens at first admission
    admissions: int = 0
    readmissions: int = 0  # after preemption
    preempted_recomputed: int = 0  # tokens recomputed after preemption beyond the re-hit

    @property
    def recomputed_fraction(self) -> float:
        """Fraction of the shared-prefix tokens that were recomputed (0: perfect reuse)."""
        if self.reusable_tokens == 0:
            return 0.0
        return max(0.0, 1.0 - (self.hit_tokens + self.external_tokens) / self.reusable_tokens)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["recomputed_fraction"] = round(self.recomputed_fraction, 6)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Efficiency":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def read_limit(req: Any) -> int | None:
    """The prefix a request lets the cache give it, by its own settings (None: unbounded): 0.34's
    ``prefix_cache_hit_limit`` (prompt logprobs read the cache up to their first scored row,
    ``Request.get_prefix_cache_hit_limit``); before, 0 when it skips prefix-cache reads
    (``Request.get_skip_reading_prefix_cache``, prompt logprobs' default)."""
    if hasattr(req, "get_prefix_cache_hit_limit"):
        return req.prefix_cache_hit_limit
    skip = getattr(req, "get_skip_reading_prefix_cache", None)
    return 0 if skip is not None and skip() else None


def scheduled(o: Any, step: int, rids: Iterable[str]) -> None:
    """The hit each request got at its first admission vs what was reusable."""
    res = o.res
    for rid in rids:
        if rid in o.pending_hit:
            local, true_len, num_tokens, free, common = o.pending_hit.pop(rid)
            groups = o.pending_groups.pop(rid, None)
            ext = o.ext_hit.pop(rid, 0)
            loaded = o.ext_hit.pop(rid + "#async", 0)
            base = o.claim_base.pop(rid, local)
            if base < local:
                # the connector was asked after the block-aligned part of a local hit ending
                # mid scheduler block (scheduler.py ``partial_tail``, 0.27-0.33): a longer claim
                # replaces that tail (truncate_computed_blocks), a shorter one is dropped
                if ext + loaded > local - base:
                    local = base
                else:
                    ext = loaded = 0
            relooked = o.lookups_after_claim.pop(rid, 0) > 0
            if loaded and relooked and local >= loaded:  # the loaded tokens came back as a local hit
                local, ext = local - loaded, ext + loaded
            elif loaded:
                # no lookup since the claim: the scheduler resumes the request at what the load
                # made computed (scheduler.py _update_waiting_for_remote_kv), with no local lookup
                # to return it, with or without prefix caching
                ext += loaded
            req = o.live[rid]
            cap = max(0, req.num_prompt_tokens - 1)
            limit = read_limit(req)  # what the request itself lets the cache give (prompt logprobs)
            if limit is not None:
                cap = min(cap, limit)
            # a load up to the whole prompt leaves its last token to recompute (the same
            # function: num_computed_tokens = num_tokens - 1)
            ext = max(0, min(ext, cap - local))
            if rid not in o.first_seen:
                o.first_seen.add(rid)
                res.efficiency.admissions += 1
                res.efficiency.prompt_tokens += req.num_prompt_tokens
                res.efficiency.reusable_tokens += min(true_len, cap)
                res.efficiency.hit_tokens += local
                res.efficiency.external_tokens += ext
                # truth: what a perfect cache reuses; lcp, tokens, free, lcp_tokens: what judge.ideal_hit
                # bounds; groups: each group kind's manager [asked, answered] at the lookup
                res.hits.append({"step": step, "req": int(rid[1:].split(".")[0]), "hit": local,
                                 "external": ext, "truth": min(true_len, cap), "lcp": true_len,
                                 "tokens": num_tokens, **({"free": free} if free else {}),
                                 **({"limit": limit} if limit is not None else {}),
                                 **({"lcp_tokens": common} if common is not None else {}),
                                 **({"groups": groups} if groups else {})})
            else:
                res.efficiency.readmissions += 1
