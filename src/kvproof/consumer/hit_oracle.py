"""The prefix-hit oracles (b): ``prefix_hit`` and ``spec_hit``, judged on every lookup's answer. No vLLM import.

A hit may reuse only KV computed before it: never past the longest common
token prefix with computed KV (``o.truth``), never the whole request, always
on the alignment the coordinator promises, and under an EAGLE-family drafter
one hash unit short. Called through ``Oracles.lookup`` / ``Oracles.hit``
(``o``: the run's :class:`kvproof.consumer.oracles.Oracles`).
"""

from __future__ import annotations

from typing import Any

from kvproof.consumer.efficiency import read_limit


def lookup(o: Any, request: Any, n: int) -> None:
    """A prefix-cache lookup returned a hit of ``n`` tokens: judged now, measured at first schedule."""
    hit(o, request, n)
    if o.shadow is not None:  # the blocks behind the hit, judged once its step is computed
        o.shadow.hit(request, n)
    # the ideal (judge.ideal_hit) reads the uncapped common prefix, the request's length, the
    # null-block allowance of chunked local attention and, under a hash lookahead only (its one
    # reader), the common prefix of tokens with KV or not, as this lookup saw them
    toks = request.all_token_ids
    common = o.truth.longest_tokens(toks) if o.index.lookahead else None
    o.pending_hit[request.request_id] = (n, o.truth.longest(toks), request.num_tokens, out_of_window(o, request),
                                         common)
    if o.group_answers is not None:  # what each group kind's manager answered (spies.spy_coordinator)
        o.pending_groups[request.request_id] = o.group_answers
    else:
        o.pending_groups.pop(request.request_id, None)
    if request.request_id in o.lookups_after_claim:
        o.lookups_after_claim[request.request_id] += 1


def out_of_window(o: Any, request: Any) -> int:
    """Tokens a lookup may count as computed without any cached block: with only chunked
    local attention groups, ChunkedLocalAttentionManager.find_longest_cache_hit
    (single_type_kv_cache_manager.py:1263, 0.32) returns null blocks for every chunk left of
    the one holding token ``max_length`` (= num_tokens - 1): no later token attends to them,
    at any layer, so skipping their KV is exact, not a reuse. With any other group beside
    (Llama 4's global layers) the coordinator's hit is bounded by that group's real hit."""
    if not o.chunks:
        return 0
    m = max(request.num_tokens - 1, 0)
    # null blocks up to the block holding the chunk start: (m // c * c) // B whole blocks of B
    # tokens (local_attention_start_block_idx); a chunk smaller than a block ends inside one
    return min(m // c * c // b * b for c, b in zip(o.chunks, o.group_sizes))


def hit(o: Any, request: Any, n: int) -> None:
    """Judge a hit of ``n`` tokens against the truth, the whole request, EAGLE's drop and the alignment."""
    if n <= 0:
        return
    toks = request.all_token_ids
    true_len = o.truth.longest(toks)
    if n > true_len and n == out_of_window(o, request):
        true_len = n  # only null blocks left of the local chunk: exact by design (see out_of_window)
    if n > true_len:
        o.rec.add("prefix_hit", f"{request.request_id}: hit {n} tokens but the longest common prefix with "
                  f"computed KV is {true_len} (prompt {request.num_prompt_tokens})",
                  cause=f"beyond-common-prefix|{o.coordinator}")
    ahead = o.index.lookahead
    limit = read_limit(request)
    if limit is not None and n > limit:
        # the request limits its own cache reads (prompt logprobs: the rows from its first scored
        # one must be computed to be scored; 0.34 get_prefix_cache_hit_limit, before: no reads)
        o.rec.add("prefix_hit", f"{request.request_id}: hit {n} tokens but the request reads the prefix cache "
                  f"up to {limit} (prompt logprobs)", cause=f"past-read-limit|{o.coordinator}")
    if n > request.num_tokens - max(1, ahead):
        # the last token must be computed; with hash lookahead L (0.33+) a block's hash needs the
        # L tokens after it, so no hit reaches past num_tokens - L (the proof limit)
        why = "the last must be computed" if ahead <= 1 else f"hash lookahead {ahead}: at most num_tokens - {ahead}"
        o.rec.add("prefix_hit", f"{request.request_id}: hit {n} tokens covers the whole request "
                  f"({request.num_tokens} tokens; {why})", cause=f"whole-request|{o.coordinator}")
    if o.res.eagle_drop and not o.mamba and n > max(0, min(true_len, request.num_tokens) - o.index.h):
        # drop_eagle_block (single_type_kv_cache_manager.py find_longest_cache_hit): the hit
        # gives back one hash unit (fine-grained) or one block of what matched. The unitary
        # coordinator matches up to num_tokens - 1; the hybrid one (0.32+, eagle_proof_margin in
        # kv_cache_utils.py) up to the hashed tokens, so num_tokens - 1 itself can be its answer
        # once the whole prompt is cached: the bound every release keeps is one unit below
        # min(common prefix, num_tokens). MambaManager keeps its own rule (the state one block
        # before the hit, no drop): layouts with a Mamba group are not judged here.
        o.rec.add("spec_hit", f"{request.request_id}: hit {n} tokens under EAGLE, but one "
                  f"{o.index.h}-token unit below min(common prefix {true_len}, num_tokens "
                  f"{request.num_tokens}) must be given back for the drafter",
                  cause=f"eagle-drop|{o.coordinator}")
    if o.res.alignment and n % o.res.alignment and n != request.num_tokens - 1:
        o.rec.add("prefix_hit", f"{request.request_id}: hit {n} tokens is not a multiple of the "
                  f"coordinator's alignment {o.res.alignment}", cause=f"alignment|{o.coordinator}")
