"""The consumer oracle plug-in: the ``Oracle`` base class, and ``RunContext``, what a run's oracles share. No vLLM import.

An oracle subclasses ``Oracle``, names the ids it reports under (``ids``, from
``kvproof.judging.oracle_ids``: the registry says hard or soft), keeps its own state,
and overrides the hooks it judges. Declared in a module ``<name>_oracle`` of
this package with an ``order``, it is a standard oracle: every run builds it
(``oracles.standard`` finds it; nothing lists it). The run's ``Oracles`` (``oracles``) hands
every report of the spies (``spies``), the driver and the fake model runner
to the oracles that override its hook, in their order. What several oracles
read is one ``RunContext``: the run's facts (the result being filled, group
sizes and specs, the coordinator's name) and the ground truth (``truth``:
computed tokens, the hash index, the request table), written only by its own
``admit``, ``allocated`` and ``computed``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from kvproof.consumer.observations import Recorder
from kvproof.consumer.truth import HashIndex, Truth
from kvproof.judging.oracle_ids import OracleId

# The reports an oracle may override (``Oracle``'s no-op methods of the same names).
HOOKS = ("lookup", "answered", "reconciled", "claim", "connector_call", "scheduled", "stepped", "event",
         "published", "computed", "reused")


class RunContext:
    """One run's facts and ground truth, read by every oracle; ``res`` is the ``ConsumerResult``
    being filled (``res.alignment``: the hit alignment the coordinator promises)."""

    def __init__(self, res: Any, index: HashIndex, group_sizes: list[int], chunks: list[int],
                 mamba: bool = False, specs: Sequence[str] = (), coordinator: str = "") -> None:
        self.res = res
        self.index = index
        self.group_sizes = group_sizes
        self.chunks = chunks  # chunked local attention's chunk sizes, when every group is one
        self.mamba = mamba  # a Mamba group is present
        self.specs = list(specs)  # each group's KV cache spec class (vLLM's name), for causes
        self.coordinator = coordinator  # the coordinator class: who answered a lookup
        self.truth = Truth()
        self.live: dict[str, Any] = {}  # request id -> the real Request, for every request sent

    # --- causes: who produced the wrong thing (the class key's frame) ---------------------
    def spec(self, group: Any) -> str:
        """The KV cache spec class of group ``group`` ("?" when unknown)."""
        ok = isinstance(group, int) and 0 <= group < len(self.specs)
        return self.specs[group] if ok else "?"

    def conn(self) -> str:
        """The run's connector, as the prefix of a connector method's name in a cause."""
        name = getattr(self.res, "connector_class", "") or ""
        return f"{name}: " if name else ""

    # --- the ground truth: what the stream sent and the scheduler computed ----------------
    def admit(self, rid: str, req: Any, prompt: list[int]) -> None:
        """A request is handed to the scheduler."""
        self.live[rid] = req
        self.index.extend(rid, prompt)

    def allocated(self, request: Any, extra: int) -> None:
        """KV of scheduled tokens counts as computed from the moment its slots are allocated
        (a request later in the same step may share it: vLLM computes the batch in one pass)."""
        toks = request.all_token_ids
        self.truth.record(request.request_id, toks, min(request.num_computed_tokens + extra, len(toks)))

    def computed(self, rid: str) -> Any:
        """The model runner's output was applied: ``rid``'s tokens are computed; its Request (None: unknown)."""
        req = self.live.get(rid)
        if req is not None:
            toks = list(req.all_token_ids)
            self.index.extend(rid, toks)
            self.truth.record(rid, toks, min(req.num_computed_tokens, len(toks)))
        return req

    def locate(self, hv: Any) -> Any:
        """``index.locate(hv)``, after learning every live request's tokens when it misses: vLLM
        may cache (and publish) blocks of tokens appended within the same ``update_from_output``
        (accepted drafts), before the driver's ``stepped`` has seen them."""
        loc = self.index.locate(hv)
        if loc is None:
            for rid, req in self.live.items():
                self.index.extend(rid, list(req.all_token_ids))
            loc = self.index.locate(hv)
        return loc

    def out_of_window(self, request: Any) -> int:
        """Tokens a lookup may count as computed without any cached block: with only chunked
        local attention groups, ChunkedLocalAttentionManager.find_longest_cache_hit
        (single_type_kv_cache_manager.py:1263, 0.32) returns null blocks for every chunk left of
        the one holding token ``max_length`` (= num_tokens - 1): no later token attends to them,
        at any layer, so skipping their KV is exact, not a reuse. With any other group beside
        (Llama 4's global layers) the coordinator's hit is bounded by that group's real hit."""
        if not self.chunks:
            return 0
        m = max(request.num_tokens - 1, 0)
        # null blocks up to the block holding the chunk start: (m // c * c) // B whole blocks of B
        # tokens (local_attention_start_block_idx); a chunk smaller than a block ends inside one
        return min(m // c * c // b * b for c, b in zip(self.chunks, self.group_sizes))


class Oracle:
    """One oracle: its ids, its own state, the hooks it overrides. ``report`` records an observation."""

    ids: ClassVar[tuple[OracleId, ...]] = ()
    # A standard oracle's place among the run's oracles (they hear a report in ascending
    # ``order``), declared on its own class in a ``*_oracle`` module; None: not standard (built by
    # ``wiring`` with vLLM objects, as the shadow and the BlockRemoved oracle are). Not inherited.
    order: ClassVar[int | None] = None

    def __init__(self, ctx: RunContext, rec: Recorder) -> None:
        self.ctx, self.rec = ctx, rec

    @property
    def hard(self) -> bool:
        """Whether its observations fail a run (the registry's word for its ids)."""
        return any(i.hard for i in self.ids)

    def report(self, oracle: OracleId, detail: str, cause: str) -> None:
        """Record an observation of ``oracle`` (one of ``ids``) with its cause ("rule|producer", number-free)."""
        if oracle not in self.ids:
            raise ValueError(f"{type(self).__name__} reports {oracle!s}, not one of its ids")
        self.rec.add(oracle, detail, cause=cause)

    # --- hooks (no-ops here; ``Oracles`` calls only the ones a subclass overrides) ---------
    def lookup(self, request: Any, n: int) -> None:
        """A prefix-cache lookup returned a hit of ``n`` tokens."""

    def answered(self, groups: dict[str, list] | None) -> None:
        """The coordinator's lookup: per group kind, [asked, answered] (None: before a lookup)."""

    def reconciled(self, groups: Sequence[Any], answers: dict[int, int], blocks: Any, hit: int) -> None:
        """The hybrid coordinator returned a reconciled hit (``coord_oracle``)."""

    def claim(self, conn_name: str, request: Any, num_computed_tokens: int, got: Any) -> None:
        """A connector's ``get_num_new_matched_tokens`` answered ``got``."""

    def connector_call(self, label: str, store: bool, vals: tuple[Any, ...]) -> None:
        """A hash-carrying method of a connector's inner pieces was called with ``vals``."""

    def scheduled(self, step: int, rids: Any) -> None:
        """``schedule()`` returned a batch of ``rids``."""

    def stepped(self, req: Any) -> None:
        """A step's output was applied: ``req``'s tokens are computed (truth already knows)."""

    def event(self, ev: Any) -> None:
        """One KV event of a published batch."""

    def published(self, events: Sequence[Any]) -> None:
        """A non-empty batch of KV events was published (after each was reported)."""

    def computed(self, scheduler: Any, out: Any) -> None:
        """The fake model runner computes a scheduled batch."""

    def reused(self, blocks: Any) -> None:
        """The block pool handed ``blocks`` out again."""
