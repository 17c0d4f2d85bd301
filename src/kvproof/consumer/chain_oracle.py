"""The hash-chain oracle (b): ``Request.block_hashes`` against the chain rebuilt from the request's tokens. No vLLM import.

Judged after every step that computed a request's tokens, against the
context's hash index (vLLM's own hash primitive, chained independently).
"""

from __future__ import annotations

from typing import Any

from kvproof.consumer.oracle import Oracle
from kvproof.judging.oracle_ids import OracleId


class ChainOracle(Oracle):
    """Compares the hashes a request gained since the last step with the index's own chain."""

    ids = (OracleId.HASH_CHAIN,)
    order = 30

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.chained: dict[str, tuple[Any, int]] = {}  # request id -> (Request, hashes compared)

    def stepped(self, req: Any) -> None:
        index = self.ctx.index
        real = req.block_hashes
        mine = index.chains.get(req.request_id, [])
        # block hashes only ever append to a request's list, so each is compared once
        seen, start = self.chained.get(req.request_id, (None, 0))
        start = start if seen is req else 0  # a resend is a new Request under the same id
        self.chained[req.request_id] = (req, min(len(real), len(mine)))
        for k in range(start, min(len(real), len(mine))):
            a, b = real[k], mine[k]
            if bytes(a) != bytes(b):
                part = "prompt" if (k + 1) * index.h <= req.num_prompt_tokens else "output"
                self.report(OracleId.HASH_CHAIN, f"{req.request_id}: block_hashes[{k}] is not the hash of tokens "
                            f"[{k * index.h}, {(k + 1) * index.h})", cause=f"{part}-block|Request.block_hashes")
                break
