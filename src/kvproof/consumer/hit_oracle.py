"""The prefix-hit oracle (b): ``prefix_hit`` and ``spec_hit``, judged on every lookup's answer. No vLLM import.

A hit may reuse only KV computed before it: never past the longest common
token prefix with computed KV (the context's ``truth``), never the whole
request, never past the request's own read limit, always on the alignment
the coordinator promises, and under an EAGLE-family drafter one hash unit short.
"""

from __future__ import annotations

from typing import Any

from kvproof.consumer.efficiency import read_limit
from kvproof.consumer.oracle import Oracle
from kvproof.judging.oracle_ids import OracleId


class HitOracle(Oracle):
    """Judges a hit of ``n`` tokens against the truth, the whole request, EAGLE's drop and the alignment."""

    ids = (OracleId.PREFIX_HIT, OracleId.SPEC_HIT)
    order = 10

    def lookup(self, request: Any, n: int) -> None:
        ctx = self.ctx
        if n <= 0:
            return
        toks = request.all_token_ids
        true_len = ctx.truth.longest(toks)
        if n > true_len and n == ctx.out_of_window(request):
            true_len = n  # only null blocks left of the local chunk: exact by design (see out_of_window)
        if n > true_len:
            self.report(OracleId.PREFIX_HIT, f"{request.request_id}: hit {n} tokens but the longest common prefix with "
                        f"computed KV is {true_len} (prompt {request.num_prompt_tokens})",
                        cause=f"beyond-common-prefix|{ctx.coordinator}")
        ahead = ctx.index.lookahead
        limit = read_limit(request)
        if limit is not None and n > limit:
            # the request limits its own cache reads (prompt logprobs: the rows from its first scored
            # one must be computed to be scored; 0.34 get_prefix_cache_hit_limit, before: no reads)
            self.report(OracleId.PREFIX_HIT, f"{request.request_id}: hit {n} tokens but the request reads the "
                        f"prefix cache up to {limit} (prompt logprobs)", cause=f"past-read-limit|{ctx.coordinator}")
        if n > request.num_tokens - max(1, ahead):
            # the last token must be computed; with hash lookahead L (0.33+) a block's hash needs the
            # L tokens after it, so no hit reaches past num_tokens - L (the proof limit)
            why = "the last must be computed" if ahead <= 1 else f"hash lookahead {ahead}: at most num_tokens - {ahead}"
            self.report(OracleId.PREFIX_HIT, f"{request.request_id}: hit {n} tokens covers the whole request "
                        f"({request.num_tokens} tokens; {why})", cause=f"whole-request|{ctx.coordinator}")
        if ctx.res.eagle_drop and not ctx.mamba and n > max(0, min(true_len, request.num_tokens) - ctx.index.h):
            # drop_eagle_block (single_type_kv_cache_manager.py find_longest_cache_hit): the hit
            # gives back one hash unit (fine-grained) or one block of what matched. The unitary
            # coordinator matches up to num_tokens - 1; the hybrid one (0.32+, eagle_proof_margin in
            # kv_cache_utils.py) up to the hashed tokens, so num_tokens - 1 itself can be its answer
            # once the whole prompt is cached: the bound every release keeps is one unit below
            # min(common prefix, num_tokens). MambaManager keeps its own rule (the state one block
            # before the hit, no drop): layouts with a Mamba group are not judged here.
            self.report(OracleId.SPEC_HIT, f"{request.request_id}: hit {n} tokens under EAGLE, but one "
                        f"{ctx.index.h}-token unit below min(common prefix {true_len}, num_tokens "
                        f"{request.num_tokens}) must be given back for the drafter",
                        cause=f"eagle-drop|{ctx.coordinator}")
        if ctx.res.alignment and n % ctx.res.alignment and n != request.num_tokens - 1:
            self.report(OracleId.PREFIX_HIT, f"{request.request_id}: hit {n} tokens is not a multiple of the "
                        f"coordinator's alignment {ctx.res.alignment}", cause=f"alignment|{ctx.coordinator}")
