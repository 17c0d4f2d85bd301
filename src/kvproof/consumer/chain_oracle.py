"""The hash-chain oracle (b): ``Request.block_hashes`` against the chain rebuilt from the request's tokens. No vLLM import.

Called through ``Oracles.chain`` (``o``: the run's
:class:`kvproof.consumer.oracles.Oracles`, for its hash index, the chains it
already compared and its recorder) after every step that computed tokens.
"""

from __future__ import annotations

from typing import Any


def chain(o: Any, req: Any) -> None:
    """Compare the hashes ``req`` gained since the last call with ``o.index``'s own chain."""
    index = o.index
    real = req.block_hashes
    mine = index.chains.get(req.request_id, [])
    # block hashes only ever append to a request's list, so each is compared once
    seen, start = o.chained.get(req.request_id, (None, 0))
    start = start if seen is req else 0  # a resend is a new Request under the same id
    o.chained[req.request_id] = (req, min(len(real), len(mine)))
    for k in range(start, min(len(real), len(mine))):
        a, b = real[k], mine[k]
        if bytes(a) != bytes(b):
            part = "prompt" if (k + 1) * index.h <= req.num_prompt_tokens else "output"
            o.rec.add("hash_chain", f"{req.request_id}: block_hashes[{k}] is not the hash of tokens "
                      f"[{k * index.h}, {(k + 1) * index.h})", cause=f"{part}-block|Request.block_hashes")
            break
