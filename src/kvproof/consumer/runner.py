"""The fake model runner: what the worker would return for a scheduled batch. In a vLLM env.

A deterministic target model (``drafts.output_token``): a request whose
prompt and outputs so far are computed samples the token at its next
position; one still in prefill samples nothing. The output carries the fake
connector worker's report (``kvproof.consumer.fake_worker``) when a connector
is configured. Speculative decoding extends it (``kvproof.consumer.spec_runner``).
"""

from __future__ import annotations

from typing import Any

from kvproof.consumer.drafts import output_token


class FakeModelRunner:
    """The target model without a drafter: the ``ModelRunnerOutput`` of each step."""

    def __init__(self, mro_cls: Any, kvco_cls: Any) -> None:
        self.mro_cls = mro_cls
        self.kvco_cls = kvco_cls
        self.fields = set(getattr(mro_cls, "__dataclass_fields__", {}))
        self.proposed = 0  # draft tokens handed to the scheduler
        self.verified = 0  # draft tokens the scheduler scheduled and the target verified
        self.accepted = 0
        self.oracles: Any = None  # the run's ``oracles.Oracles``: told of each batch computed (the shadow)

    def output(self, scheduler: Any, out: Any, sending: set[str], recving: set[str], worker_meta: Any = None) -> Any:
        if self.oracles is not None:  # the batch's tokens land in their blocks
            self.oracles.computed(scheduler, out)
        req_ids = list(out.num_scheduled_tokens)
        spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
        sampled = []
        for rid in req_ids:
            req = scheduler.requests[rid]
            drafts = list(spec.get(rid, ()))
            # schedule() already advanced num_computed_tokens past the scheduled drafts
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append(self.sample(req.num_tokens, drafts) if done else [])
        kw: dict[str, Any] = dict(req_ids=req_ids, req_id_to_index={r: k for k, r in enumerate(req_ids)},
                                  sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                  pooler_output=[])
        if scheduler.connector is not None:
            kw["kv_connector_output"] = self.kvco_cls(finished_sending=sending or None,
                                                      finished_recving=recving or None,
                                                      kv_connector_worker_meta=worker_meta)
        return self.mro_cls(**{k: v for k, v in kw.items() if k in self.fields})

    def sample(self, n: int, drafts: list[int]) -> list[int]:
        """The tokens sampled for a request of ``n`` tokens: the target's own at position ``n``.
        Without a drafter nothing proposes, so the scheduler schedules no drafts to verify."""
        return [output_token(n)]

    def propose(self, scheduler: Any, sampled_rids: list[str]) -> None:
        """Without a drafter there is nothing to propose."""
