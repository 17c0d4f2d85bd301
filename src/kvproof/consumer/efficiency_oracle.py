"""The efficiency oracle (e): each request's hit at its first admission against what was reusable. No vLLM import.

A measurement, never a verdict (``OracleId.EFFICIENCY`` is soft): it fills the
result's ``efficiency`` tally and ``hits`` rows, which ``kvproof.judging.judge`` holds
against its ideal. Its own state: per request, the hit its latest lookup
returned (with the truth as that lookup saw it), what each group kind's
manager answered, and what a connector claimed, until the request is scheduled.
"""

from __future__ import annotations

from typing import Any, Iterable

from kvproof.consumer.efficiency import read_limit
from kvproof.consumer.oracle import Oracle
from kvproof.judging.oracle_ids import OracleId


class EfficiencyOracle(Oracle):
    """The reconciled hit per request, local and external, counted at its first schedule."""

    ids = (OracleId.EFFICIENCY,)
    order = 20

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # req id -> (local hit, common prefix, num_tokens, null-block allowance, common tokens)
        self.pending_hit: dict[str, tuple[int, int, int, int, int | None]] = {}
        # the latest lookup's per-kind manager answers (spies.spy_coordinator: kind -> [asked,
        # answered]), and per request the one its pending hit came with
        self.group_answers: dict[str, list] | None = None
        self.pending_groups: dict[str, dict[str, list]] = {}
        self.ext_hit: dict[str, int] = {}
        # req id -> the local tokens its latest connector claim was asked after (the scheduler
        # presents a scheduler-block-aligned local hit, so it may be below the lookup's)
        self.claim_base: dict[str, int] = {}
        # req id -> local lookups since its latest async claim (a claim follows its own lookup)
        self.lookups_after_claim: dict[str, int] = {}
        self.first_seen: set[str] = set()

    def answered(self, groups: dict[str, list] | None) -> None:
        self.group_answers = groups

    def lookup(self, request: Any, n: int) -> None:
        """Pending until the first schedule: the ideal (judge.ideal_hit) reads the uncapped common
        prefix, the request's length, the null-block allowance of chunked local attention and,
        under a hash lookahead only (its one reader), the common prefix of tokens with KV or
        not, as this lookup saw them."""
        ctx = self.ctx
        toks = request.all_token_ids
        common = ctx.truth.longest_tokens(toks) if ctx.index.lookahead else None
        self.pending_hit[request.request_id] = (n, ctx.truth.longest(toks), request.num_tokens,
                                                ctx.out_of_window(request), common)
        if self.group_answers is not None:
            self.pending_groups[request.request_id] = self.group_answers
        else:
            self.pending_groups.pop(request.request_id, None)
        if request.request_id in self.lookups_after_claim:
            self.lookups_after_claim[request.request_id] += 1

    def claim(self, conn_name: str, request: Any, num_computed_tokens: int, got: Any) -> None:
        n = got[0] if isinstance(got, tuple) else got
        rid = request.request_id
        if isinstance(n, int):  # an answer (None is "ask again") replaces one the request did not use
            self.ext_hit.pop(rid, None)
            self.ext_hit.pop(rid + "#async", None)
            self.lookups_after_claim.pop(rid, None)
            self.claim_base[rid] = num_computed_tokens
        if isinstance(n, int) and n > 0:
            if isinstance(got, tuple) and len(got) > 1 and got[1]:
                # async load: counted at the request's first schedule, as external unless a later
                # local lookup already returns these tokens (lookups_after_claim)
                self.ext_hit[rid + "#async"] = n
                self.lookups_after_claim[rid] = 0
            else:
                self.ext_hit[rid] = n

    def scheduled(self, step: int, rids: Iterable[str]) -> None:
        """The hit each request got at its first admission vs what was reusable."""
        o, res = self, self.ctx.res
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
                req = self.ctx.live[rid]
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
