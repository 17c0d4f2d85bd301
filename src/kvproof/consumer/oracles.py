"""The consumer-tier oracles: observations on the real scheduler. No vLLM import.

Oracle ids (each observation carries one), and the module that judges each:

exception   (a) real vLLM raised on some step (type, message, frame): ``failures``.
prefix_hit  (b) a prefix hit covered a token beyond the longest common token
            prefix the request truly shares with KV computed before it, or
            landed off the alignment the release's coordinator promises: ``hit_oracle``;
            or a block the hit hands the request holds other tokens, another
            position or another prefix than the request's (cause ``shadow-*``): ``shadow``.
            Or the hybrid coordinator's groups disagree on the hit it reconciled
            (cause ``coord-*``): ``coord_oracle``.
hash_chain  (b) ``Request.block_hashes`` disagree with the request's tokens: ``chain_oracle``.
connector   (c) a hash a connector stored or looked up is not the hash of a
            real token prefix, does not belong to the request it was used for,
            or ends off the block boundary of the group it is paired with;
            or a connector claimed external tokens beyond the true prefix: ``connector_oracle``.
kv_event    (d) a BlockStored event's hashes, token ids, parent or block size
            disagree with the blocks it describes: ``event_oracle``; or an entry
            announced by BlockStored left the prefix cache without a BlockRemoved,
            or a BlockRemoved withdraws one never announced: ``removal_oracle``.
spec_hit    (b) under an EAGLE-family drafter, a hit covered the unit before the
            generation point that drop_eagle_block makes the drafter recompute: ``hit_oracle``.
efficiency  (e) measurement only: tokens reusable in principle vs hit: ``efficiency``.
stalled     the stream could not finish in the step budget (harness limit,
            not a vLLM verdict): ``driver``.

The harness (``kvproof.consumer.harness``) drives the real scheduler and
reports what it saw to one ``Oracles`` per run (lookups, allocations, steps,
KV events, connector calls); ``Oracles`` keeps the state they share and the
ground truth (``kvproof.consumer.truth``: computed token sequences, the hash
index), and each oracle module records an ``Observation`` where vLLM
disagrees. Which oracle ids make a verdict is the judge's business
(``kvproof.judge``).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from kvproof.consumer import chain_oracle, connector_oracle, efficiency, hit_oracle
from kvproof.consumer.efficiency import Efficiency  # noqa: F401  (re-exported: result, judge, tests)
from kvproof.consumer.event_oracle import judge_event
from kvproof.consumer.observations import MAX_OBS_PER_ORACLE, Observation, Recorder  # noqa: F401  (re-exported)
from kvproof.consumer.truth import HashIndex, KeyMemo, Truth


class Oracles:
    """The judging half of one consumer run: the state the oracles share, and one entry per report.

    The harness reports what the real scheduler did (``admit``, ``lookup``, ``allocated``,
    ``scheduled``, ``stepped``, ``event``, ``connector_claim``, ``connector_args``); each
    report goes to the oracle module that judges it against the ground truth (``truth``,
    ``index``) and records an observation in ``rec`` where vLLM disagrees, or fills the
    result's measurements (efficiency, hits, event counts). ``res`` is the ``ConsumerResult``
    being filled; ``res.alignment`` is the hit alignment the coordinator promises (read by the
    harness before the first step).
    """

    def __init__(self, res: Any, rec: Recorder, index: HashIndex, group_sizes: list[int],
                 chunks: list[int], mamba: bool = False, specs: Sequence[str] = (),
                 coordinator: str = "") -> None:
        self.res = res
        self.rec = rec
        self.index = index
        self.group_sizes = group_sizes
        self.chunks = chunks
        self.mamba = mamba  # a Mamba group is present (spec_hit does not judge it)
        self.specs = list(specs)  # each group's KV cache spec class (vLLM's name), for causes
        self.coordinator = coordinator  # the coordinator class: who answered a lookup
        self.truth = Truth()
        self.live: dict[str, Any] = {}  # request id -> the real Request, for every request sent
        self.memo = KeyMemo()
        self.chained: dict[str, tuple[Any, int]] = {}  # request id -> (Request, hashes compared)
        # req id -> (local hit, common prefix, num_tokens, null-block allowance) from get_computed_blocks
        self.pending_hit: dict[str, tuple[int, int, int, int, int | None]] = {}
        # the latest lookup's per-kind manager answers (spies.spy_coordinator: kind -> [asked,
        # answered]), and per request the one its pending hit came with (None: not recorded)
        self.group_answers: dict[str, list] | None = None
        self.pending_groups: dict[str, dict[str, list]] = {}
        self.ext_hit: dict[str, int] = {}
        # req id -> the local tokens its latest connector claim was asked after (the scheduler
        # presents a scheduler-block-aligned local hit, so it may be below the lookup's)
        self.claim_base: dict[str, int] = {}
        # req id -> local lookups since its latest async claim (a claim follows its own lookup)
        self.lookups_after_claim: dict[str, int] = {}
        self.first_seen: set[str] = set()
        self.shadow: Any = None  # what each block holds (``shadow.Shadow``), once the harness wires one
        self.removals: Any = None  # announced prefix-cache entries (``removal_oracle.Removals``), once wired
        self.queued: Any = tuple  # () -> events the block pool has queued but not yet handed out

    # The oracles proper live in their own modules as functions of this object (``o``); bound
    # here as methods, so a report costs no call more than it did when they were written inline.
    lookup = hit_oracle.lookup
    hit = hit_oracle.hit
    out_of_window = hit_oracle.out_of_window
    chain = chain_oracle.chain
    scheduled = efficiency.scheduled
    connector_claim = connector_oracle.claim
    connector_args = connector_oracle.args
    connector_key = connector_oracle.key
    event = judge_event

    # --- causes: the rule that broke, and who produced the wrong thing (the class key's frame) ----
    def spec(self, group: Any) -> str:
        """The KV cache spec class of group ``group`` ("?" when unknown)."""
        ok = isinstance(group, int) and 0 <= group < len(self.specs)
        return self.specs[group] if ok else "?"

    def conn(self) -> str:
        """The run's connector, as the prefix of a connector method's name in a cause."""
        name = getattr(self.res, "connector_class", "") or ""
        return f"{name}: " if name else ""

    # --- the ground truth: what the stream sent and the scheduler computed --------------------
    def admit(self, rid: str, req: Any, prompt: list[int]) -> None:
        """A request is handed to the scheduler."""
        self.live[rid] = req
        self.index.extend(rid, prompt)

    def allocated(self, request: Any, extra: int) -> None:
        """KV of scheduled tokens counts as computed from the moment its slots are allocated
        (a request later in the same step may share it: vLLM computes the batch in one pass)."""
        toks = request.all_token_ids
        self.truth.record(request.request_id, toks, min(request.num_computed_tokens + extra, len(toks)))

    def stepped(self, rids: Iterable[str]) -> None:
        """The model runner's output was applied: the scheduled requests' tokens are computed."""
        for rid in rids:
            req = self.live.get(rid)
            if req is not None:
                toks = list(req.all_token_ids)
                self.index.extend(rid, toks)
                self.truth.record(rid, toks, min(req.num_computed_tokens, len(toks)))
                self.chain(req)

    def locate(self, hv: Any) -> Any:
        """``index.locate(hv)``, after learning every live request's tokens when it misses: vLLM
        may cache (and publish) blocks of tokens appended within the same ``update_from_output``
        (accepted drafts), before the harness's ``stepped`` has seen them."""
        loc = self.index.locate(hv)
        if loc is None:
            for rid, req in self.live.items():
                self.index.extend(rid, list(req.all_token_ids))
            loc = self.index.locate(hv)
        return loc
