"""The fake model runner: what the worker would return for a scheduled batch. In a vLLM env.

A deterministic target model (``drafts.output_token``): a request whose
prompt and outputs so far are computed samples the token at its next
position. Under speculative decoding it also verifies the drafts the
scheduler scheduled (``scheduled_spec_decode_tokens``) the way the
rejection sampler does for a greedy target: the leading drafts equal to the
target's tokens are accepted, then one bonus token (the target's own); the
scheduler rolls ``num_computed_tokens`` back past the rejected ones
(``update_from_output``). After each step it proposes the next drafts to the
scheduler (``update_draft_token_ids``), as the engine core does with the
drafter's output.
"""

from __future__ import annotations

from typing import Any

from kvproof.consumer.compat import kwargs_for
from kvproof.consumer.drafts import Drafts, output_token


class FakeModelRunner:
    def __init__(self, mro_cls: Any, kvco_cls: Any, drafts: Drafts | None, draft_ids_cls: Any = None) -> None:
        self.mro_cls = mro_cls
        self.kvco_cls = kvco_cls
        self.fields = set(getattr(mro_cls, "__dataclass_fields__", {}))
        self.drafts = drafts
        self.draft_ids_cls = draft_ids_cls
        self.proposed = 0  # draft tokens handed to the scheduler
        self.verified = 0  # draft tokens the scheduler scheduled and the target verified
        self.accepted = 0

    def output(self, scheduler: Any, out: Any, sending: set[str], recving: set[str], worker_meta: Any = None) -> Any:
        req_ids = list(out.num_scheduled_tokens)
        spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
        sampled = []
        for rid in req_ids:
            req = scheduler.requests[rid]
            drafts = list(spec.get(rid, ()))
            # schedule() already advanced num_computed_tokens past the scheduled drafts
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append(self._verify(req.num_tokens, drafts) if done else [])
        kw: dict[str, Any] = dict(req_ids=req_ids, req_id_to_index={r: k for k, r in enumerate(req_ids)},
                                  sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                  pooler_output=[])
        if scheduler.connector is not None:
            kw["kv_connector_output"] = self.kvco_cls(finished_sending=sending or None,
                                                      finished_recving=recving or None,
                                                      kv_connector_worker_meta=worker_meta)
        return self.mro_cls(**{k: v for k, v in kw.items() if k in self.fields})

    def _verify(self, n: int, drafts: list[int]) -> list[int]:
        """Greedy verification of ``drafts`` placed at positions ``n, n+1, ...``."""
        good = 0
        while good < len(drafts) and drafts[good] == output_token(n + good):
            good += 1
        self.verified += len(drafts)
        self.accepted += good
        return [output_token(n + j) for j in range(good + 1)]

    def propose(self, scheduler: Any, sampled_rids: list[str]) -> None:
        """Hand the scheduler the next drafts of every request that just sampled and goes on."""
        if self.drafts is None or self.draft_ids_cls is None:
            return
        rids, ids = [], []
        for rid in sampled_rids:
            req = scheduler.requests.get(rid)
            if req is None or req.is_finished():
                continue
            rids.append(rid)
            ids.append(self.drafts.proposal(rid, req.num_tokens))
        if rids:
            self.proposed += sum(len(d) for d in ids)
            scheduler.update_draft_token_ids(self.draft_ids_cls(**kwargs_for(
                self.draft_ids_cls, req_ids=rids, draft_token_ids=ids)))
