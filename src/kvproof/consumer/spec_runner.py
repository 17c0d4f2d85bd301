"""The fake model runner under speculative decoding: verifies drafts, then proposes the next ones. In a vLLM env.

It verifies the drafts the scheduler scheduled (``scheduled_spec_decode_tokens``)
the way the rejection sampler does for a greedy target: the leading drafts
equal to the target's tokens are accepted, then one bonus token (the
target's own); the scheduler rolls ``num_computed_tokens`` back past the
rejected ones (``update_from_output``). After each step it proposes the next
drafts (``drafts.Drafts.proposal``) to the scheduler
(``update_draft_token_ids``), as the engine core does with the drafter's output.
"""

from __future__ import annotations

from typing import Any

from kvproof.bridge.compat import kwargs_for
from kvproof.consumer.drafts import Drafts, output_token
from kvproof.consumer.runner import FakeModelRunner


class SpeculativeRunner(FakeModelRunner):
    """``FakeModelRunner`` with a drafter (``drafts``) and the release's ``DraftTokenIds``."""

    def __init__(self, mro_cls: Any, kvco_cls: Any, drafts: Drafts, draft_ids_cls: Any) -> None:
        super().__init__(mro_cls, kvco_cls)
        self.drafts = drafts
        self.draft_ids_cls = draft_ids_cls
        self.drafts_scheduled_max = 0
        self.slot_slack: tuple[int, int] | None = None  # (least, most) slots held past the computed tokens

    def output(self, scheduler: Any, out: Any, sending: set[str], recving: set[str], worker_meta: Any = None) -> Any:
        self.measure(scheduler, out)
        return super().output(scheduler, out, sending, recving, worker_meta)

    def measure(self, scheduler: Any, out: Any) -> None:
        """The drafts ``schedule()`` scheduled per request and, where group 0 is full attention (its
        blocks never freed while the request runs), the slots it holds past the request's computed
        tokens (``schedule()`` already counted the scheduled drafts): what ``allocate_slots``
        reserved with the scheduler's ``num_lookahead_tokens``."""
        spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
        group0 = scheduler.kv_cache_config.kv_cache_groups[0].kv_cache_spec
        full = type(group0).__name__ == "FullAttentionSpec"
        for rid, drafts in spec.items():
            self.drafts_scheduled_max = max(self.drafts_scheduled_max, len(drafts))
            req = scheduler.requests.get(rid)
            if not full or req is None or not drafts:
                continue
            held = len(scheduler.kv_cache_manager.get_block_ids(rid)[0]) * group0.block_size
            slack = held - req.num_computed_tokens
            self.slot_slack = (slack, slack) if self.slot_slack is None else \
                (min(self.slot_slack[0], slack), max(self.slot_slack[1], slack))

    def sample(self, n: int, drafts: list[int]) -> list[int]:
        """Greedy verification of ``drafts`` placed at positions ``n, n+1, ...``."""
        good = 0
        while good < len(drafts) and drafts[good] == output_token(n + good):
            good += 1
        self.verified += len(drafts)
        self.accepted += good
        return [output_token(n + j) for j in range(good + 1)]

    def propose(self, scheduler: Any, sampled_rids: list[str]) -> None:
        """Hand the scheduler the next drafts of every request that just sampled and goes on."""
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
