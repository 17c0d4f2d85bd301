"""The consumer-tier oracles: observations on the real scheduler. No vLLM import.

Oracle ids (each observation carries one):

exception   (a) real vLLM raised on some step (type, message, frame).
prefix_hit  (b) a prefix hit covered a token beyond the longest common token
            prefix the request truly shares with KV computed before it, or
            landed off the alignment the release's coordinator promises.
hash_chain  (b) ``Request.block_hashes`` disagree with the request's tokens.
connector   (c) a hash a connector stored or looked up is not the hash of a
            real token prefix, does not belong to the request it was used for,
            or ends off the block boundary of the group it is paired with;
            or a connector claimed external tokens beyond the true prefix.
kv_event    (d) a BlockStored event's hashes, token ids, parent or block size
            disagree with the blocks it describes.
spec_hit    (b) under an EAGLE-family drafter, a hit covered the unit before the
            generation point that drop_eagle_block makes the drafter recompute.
efficiency  (e) measurement only: tokens reusable in principle vs hit.
stalled     the stream could not finish in the step budget (harness limit,
            not a vLLM verdict).

The harness (``kvproof.consumer.harness``) drives the real scheduler and
reports what it saw to one ``Oracles`` per run (lookups, allocations, steps,
KV events, connector calls); ``Oracles`` judges each against the ground truth
(``kvproof.consumer.truth``: computed token sequences, the hash index) and
records an ``Observation`` where vLLM disagrees. Which oracle ids make a
verdict is the judge's business (``kvproof.judge``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from kvproof.consumer.event_oracle import judge_event
from kvproof.consumer.truth import HashIndex, KeyMemo, Truth, iter_hashes

MAX_OBS_PER_ORACLE = 20


@dataclass
class Observation:
    oracle: str
    step: int
    detail: str
    # "rule|producer", number-free: the rule that broke and who produced the wrong thing (the
    # block pool or connector that published an event and its medium, the connector and its
    # method, the coordinator). A finding's class carries the producer (findings/key.py), so a
    # second fault of one oracle is not counted under a known first one.
    cause: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {"oracle": self.oracle, "step": self.step, "detail": self.detail}
        if self.cause:
            d["cause"] = self.cause
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Observation":
        return cls(str(d["oracle"]), int(d["step"]), str(d["detail"]), str(d.get("cause", "")))


@dataclass
class Efficiency:
    """Per stream: prompt tokens, tokens a perfect prefix cache could reuse, tokens hit."""

    prompt_tokens: int = 0
    reusable_tokens: int = 0  # sum over first admissions of min(LCP with computed KV, prompt-1)
    hit_tokens: int = 0  # local prefix-cache hit at first admission
    external_tokens: int = 0  # connector-provided tokens at first admission
    admissions: int = 0
    readmissions: int = 0  # after preemption
    preempted_recomputed: int = 0  # tokens recomputed after preemption beyond the re-hit

    @property
    def recomputed_fraction(self) -> float:
        """Fraction of the shared-prefix tokens that were recomputed (0: perfect reuse)."""
        if self.reusable_tokens == 0:
            return 0.0
        return max(0.0, 1.0 - (self.hit_tokens + self.external_tokens) / self.reusable_tokens)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["recomputed_fraction"] = round(self.recomputed_fraction, 6)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Efficiency":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class Recorder:
    """Collects observations, capped per oracle so a broken run stays readable."""

    observations: list[Observation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    step: int = 0

    def add(self, oracle: str, detail: str, step: int | None = None, cause: str = "") -> None:
        n = self.counts.get(oracle, 0)
        self.counts[oracle] = n + 1
        if n < MAX_OBS_PER_ORACLE:
            self.observations.append(Observation(oracle, self.step if step is None else step, detail, cause))


def local_chunks(kv_cache_config: Any) -> list[int]:
    """Attention chunk sizes when EVERY group is chunked local attention, else []."""
    chunks = [getattr(g.kv_cache_spec, "attention_chunk_size", None) for g in kv_cache_config.kv_cache_groups]
    ok = chunks and all(type(g.kv_cache_spec).__name__ == "ChunkedLocalAttentionSpec" and isinstance(c, int)
                        and c > 0 for g, c in zip(kv_cache_config.kv_cache_groups, chunks))
    return chunks if ok else []


def mamba_checkpoint_position(num_prompt_tokens: int, h: int, eagle_drop: bool, lookahead: int = 0) -> int:
    """Where an align-mode MambaManager keys its prompt-tail state (0.30+): vLLM's
    ``get_mamba_prefill_checkpoint_position(num_prompt_tokens, hash_block_size,
    drop_eagle_checkpoint_block, num_hash_lookahead_tokens)`` (kv_cache_interface.py:1169, 0.33;
    :1110, 0.32), read by ``MambaManager._cache_partial_tail_block`` as
    ``latest_prompt_hash_boundary`` (single_type_kv_cache_manager.py:2087, 0.33; :2069, 0.32).
    Under EAGLE's block drop (the coordinator sets ``drop_eagle_checkpoint_block`` whenever it
    drops, "Match Mamba checkpoints to Eagle's attention replay boundary", kv_cache_coordinator.py
    :177, 0.33; :173, 0.32) the state sits one hash unit below the whole prompt's last boundary,
    where a resend's hit lands after the drop: ``n//h*h - h``. Otherwise one token (0.33: the
    hash lookahead, at least one) is left to recompute: ``(n - max(1, L))//h*h``. The CoW copy of
    that state is handed to connectors (boundary-state offloads) under this key."""
    if eagle_drop:
        return max(num_prompt_tokens // h * h - h, 0)
    return max((num_prompt_tokens - max(1, lookahead)) // h * h, 0)


_CONTAINERS = (list, tuple, set, frozenset, dict)


def _arg_hashes(vals: tuple[Any, ...]) -> Iterable[Any]:
    """``iter_hashes(list(vals))`` without a generator per argument: a lookup spy runs once per
    key in some connectors (offloading ``_maximal_prefix_lookup``: millions of calls a run)."""
    for a in vals:
        if isinstance(a, (bytes, bytearray)):
            if len(a) >= 8:
                yield a
        elif isinstance(a, _CONTAINERS):
            yield from iter_hashes(a, 1)


class Oracles:
    """The judging half of one consumer run.

    The harness reports what the real scheduler did (``admit``, ``lookup``, ``allocated``,
    ``scheduled``, ``stepped``, ``event``, ``connector_claim``, ``connector_args``); each call
    compares it with the ground truth (``truth``, ``index``) and records an observation in
    ``rec`` where vLLM disagrees, or fills the result's measurements (efficiency, hits,
    event counts). ``res`` is the ``ConsumerResult`` being filled; ``res.alignment`` is the
    hit alignment the coordinator promises (read by the harness before the first step).
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
        self.pending_hit: dict[str, tuple[int, int]] = {}  # req id -> (local, truth) from get_computed_blocks
        self.ext_hit: dict[str, int] = {}
        # req id -> local lookups since its latest async claim (a claim follows its own lookup)
        self.lookups_after_claim: dict[str, int] = {}
        self.first_seen: set[str] = set()

    # --- causes: the rule that broke, and who produced the wrong thing (the class key's frame) ----
    def spec(self, group: Any) -> str:
        """The KV cache spec class of group ``group`` ("?" when unknown)."""
        ok = isinstance(group, int) and 0 <= group < len(self.specs)
        return self.specs[group] if ok else "?"

    def conn(self) -> str:
        """The run's connector, as the prefix of a connector method's name in a cause."""
        name = getattr(self.res, "connector_class", "") or ""
        return f"{name}: " if name else ""

    # --- what the stream and the scheduler did ----------------------------------------
    def admit(self, rid: str, req: Any, prompt: list[int]) -> None:
        """A request is handed to the scheduler."""
        self.live[rid] = req
        self.index.extend(rid, prompt)

    def allocated(self, request: Any, extra: int) -> None:
        """KV of scheduled tokens counts as computed from the moment its slots are allocated
        (a request later in the same step may share it: vLLM computes the batch in one pass)."""
        toks = request.all_token_ids
        self.truth.record(request.request_id, toks, min(request.num_computed_tokens + extra, len(toks)))

    def lookup(self, request: Any, n: int) -> None:
        """A prefix-cache lookup returned a hit of ``n`` tokens."""
        self.hit(request, n)
        self.pending_hit[request.request_id] = (n, self.truth.longest(request.all_token_ids))
        if request.request_id in self.lookups_after_claim:
            self.lookups_after_claim[request.request_id] += 1

    def scheduled(self, step: int, rids: Iterable[str]) -> None:
        """Efficiency (e): the hit each request got at its first admission vs what was reusable."""
        res = self.res
        for rid in rids:
            if rid in self.pending_hit:
                local, true_len = self.pending_hit.pop(rid)
                ext = self.ext_hit.pop(rid, 0)
                loaded = self.ext_hit.pop(rid + "#async", 0)
                relooked = self.lookups_after_claim.pop(rid, 0) > 0
                if loaded and relooked and local >= loaded:  # the loaded tokens came back as a local hit
                    local, ext = local - loaded, ext + loaded
                elif loaded:
                    # no lookup since the claim: the scheduler resumes the request at what the load
                    # made computed (scheduler.py _update_waiting_for_remote_kv), with no local lookup
                    # to return it, with or without prefix caching
                    ext += loaded
                req = self.live[rid]
                cap = max(0, req.num_prompt_tokens - 1)
                # a load up to the whole prompt leaves its last token to recompute (the same
                # function: num_computed_tokens = num_tokens - 1)
                ext = max(0, min(ext, cap - local))
                if rid not in self.first_seen:
                    self.first_seen.add(rid)
                    res.efficiency.admissions += 1
                    res.efficiency.prompt_tokens += req.num_prompt_tokens
                    res.efficiency.reusable_tokens += min(true_len, cap)
                    res.efficiency.hit_tokens += local
                    res.efficiency.external_tokens += ext
                    res.hits.append({"step": step, "req": int(rid[1:].split(".")[0]), "hit": local,
                                     "external": ext, "truth": min(true_len, cap)})
                else:
                    res.efficiency.readmissions += 1

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

    # --- (b) prefix hits and hash chains ------------------------------------------------
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

    def hit(self, request: Any, n: int) -> None:
        if n <= 0:
            return
        toks = request.all_token_ids
        true_len = self.truth.longest(toks)
        if n > true_len and n == self.out_of_window(request):
            true_len = n  # only null blocks left of the local chunk: exact by design (see out_of_window)
        if n > true_len:
            self.rec.add("prefix_hit", f"{request.request_id}: hit {n} tokens but the longest common prefix with "
                         f"computed KV is {true_len} (prompt {request.num_prompt_tokens})",
                         cause=f"beyond-common-prefix|{self.coordinator}")
        ahead = self.index.lookahead
        if n > request.num_tokens - max(1, ahead):
            # the last token must be computed; with hash lookahead L (0.33+) a block's hash needs the
            # L tokens after it, so no hit reaches past num_tokens - L (the proof limit)
            why = "the last must be computed" if ahead <= 1 else f"hash lookahead {ahead}: at most num_tokens - {ahead}"
            self.rec.add("prefix_hit", f"{request.request_id}: hit {n} tokens covers the whole request "
                         f"({request.num_tokens} tokens; {why})", cause=f"whole-request|{self.coordinator}")
        if self.res.eagle_drop and not self.mamba and n > max(0, min(true_len, request.num_tokens) - self.index.h):
            # drop_eagle_block (single_type_kv_cache_manager.py find_longest_cache_hit): the hit
            # gives back one hash unit (fine-grained) or one block of what matched. The unitary
            # coordinator matches up to num_tokens - 1; the hybrid one (0.32+, eagle_proof_margin in
            # kv_cache_utils.py) up to the hashed tokens, so num_tokens - 1 itself can be its answer
            # once the whole prompt is cached: the bound every release keeps is one unit below
            # min(common prefix, num_tokens). MambaManager keeps its own rule (the state one block
            # before the hit, no drop): layouts with a Mamba group are not judged here.
            self.rec.add("spec_hit", f"{request.request_id}: hit {n} tokens under EAGLE, but one "
                         f"{self.index.h}-token unit below min(common prefix {true_len}, num_tokens "
                         f"{request.num_tokens}) must be given back for the drafter",
                         cause=f"eagle-drop|{self.coordinator}")
        if self.res.alignment and n % self.res.alignment and n != request.num_tokens - 1:
            self.rec.add("prefix_hit", f"{request.request_id}: hit {n} tokens is not a multiple of the "
                         f"coordinator's alignment {self.res.alignment}", cause=f"alignment|{self.coordinator}")

    def chain(self, req: Any) -> None:
        index = self.index
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
                self.rec.add("hash_chain", f"{req.request_id}: block_hashes[{k}] is not the hash of tokens "
                             f"[{k * index.h}, {(k + 1) * index.h})", cause=f"{part}-block|Request.block_hashes")
                break

    # --- (d) KV events ----------------------------------------------------------------------
    def event(self, ev: Any) -> None:
        """A published KV event (``kvproof.consumer.event_oracle.judge_event``)."""
        judge_event(self, ev)

    # --- (c) the connector's scheduler side ---------------------------------------------
    def connector_claim(self, conn_name: str, request: Any, num_computed_tokens: int, got: Any) -> None:
        """``get_num_new_matched_tokens`` answered ``got`` ((tokens, async) or tokens)."""
        n = got[0] if isinstance(got, tuple) else got
        rid = request.request_id
        if isinstance(n, int):  # an answer (None is "ask again") replaces one the request did not use
            self.ext_hit.pop(rid, None)
            self.ext_hit.pop(rid + "#async", None)
            self.lookups_after_claim.pop(rid, None)
        if isinstance(n, int) and n > 0:
            if isinstance(got, tuple) and len(got) > 1 and got[1]:
                # async load: counted at the request's first schedule, as external unless a later
                # local lookup already returns these tokens (lookups_after_claim)
                self.ext_hit[request.request_id + "#async"] = n
                self.lookups_after_claim[request.request_id] = 0
            else:
                self.ext_hit[request.request_id] = n
            true_len = max(self.truth.longest(request.all_token_ids), self.out_of_window(request))
            if num_computed_tokens + n > true_len:
                self.rec.add("connector", f"{conn_name} claims {n} external tokens after "
                             f"{num_computed_tokens} local for {request.request_id}, beyond the "
                             f"true common prefix {true_len}",
                             cause=f"claim-beyond-common-prefix|{conn_name}.get_num_new_matched_tokens")

    def connector_args(self, label: str, store: bool, vals: tuple[Any, ...]) -> None:
        """A method of a connector's inner pieces (``label``) was called with ``vals``: check every
        block hash among them (and the request it was used for, when an argument names one)."""
        owner = None
        for a in vals:
            rid = getattr(a, "req_id", None) or getattr(a, "request_id", None)
            if isinstance(rid, str) and rid in self.live:
                owner = self.live[rid]
        who = None if owner is None else owner.request_id
        for hv in _arg_hashes(vals):
            key = (bytes(hv), store, who)
            if key not in self.memo.passed and self.connector_key(hv, label, owner, store):
                self.memo.passed.add(key)

    def connector_key(self, hv: Any, label: str, owner: Any, store: bool) -> bool:
        """A (hash, group) key a connector's inner block pool stores or looks up.

        Pairing rule (single_type_kv_cache_manager.py, 0.27-0.32): a key ends on a block
        boundary of its group, except in fine-grained mode (the coordinator's hit alignment
        ``a`` < the group's block size ``G`` and ``G % a == 0``): then ``find_longest_cache_hit``
        probes every interior hash boundary (FullAttentionManager phase 2, MambaManager
        right-to-left), so a lookup may end at any multiple of ``a``; and a store off a block
        boundary must be a partial prompt tail (``_cache_partial_tail_block``: the last hash
        boundary of a request's prompt, ``(prompt-1)//h*h``, or ``prompt//h*h`` with EAGLE; a
        Mamba group's also at its prefill checkpoint, ``mamba_checkpoint_position``).
        True when the key passed (nothing recorded).
        """
        index, group_sizes, memo = self.index, self.group_sizes, self.memo
        loc = self.locate(hv)
        if loc is None:
            self.rec.add("connector", f"{label}: a {len(bytes(hv))}-byte hash names no token prefix at "
                         f"granularity {index.h}", cause=f"unknown-hash|{self.conn()}{label}")
            return False
        passed = True
        start, end, seq, group = loc
        if group is not None and 0 <= group < len(group_sizes) and end % group_sizes[group]:
            g = group_sizes[group]
            a = self.res.alignment or g
            fine = a < g and g % a == 0 and end % a == 0
            # stores: FullAttentionManager.cache_blocks registers the partial tail whenever
            # block_size != hash_block_size, whatever the alignment (GPU and CPU pools alike)
            # lookups: an interior hash boundary in fine-grained mode, or a key a partial-tail store
            # registers (the EAGLE margin of 0.32+ looks the whole prompt's tail up, prompt // h * h)
            tail = self._partial_tail(end, seq, group)
            ok = tail if store else (fine or tail)
            if not ok:
                what = "a stored key that is no request's prompt tail" if fine else f"{end} is not a block boundary"
                self.rec.add("connector", f"{label}: hash of tokens [0, {end}) paired with group {group} whose "
                             f"blocks are {g} tokens ({what})",
                             cause=f"off-block-boundary|{self.conn()}{label}")
                passed = False
        if owner is not None:
            if not memo.same_prefix(owner, seq, end):
                self.rec.add("connector", f"{label}: hash of tokens [0, {end}) used for {owner.request_id}, "
                             f"whose tokens differ there", cause=f"other-request|{self.conn()}{label}")
                passed = False
        return passed

    def _partial_tail(self, end: int, seq: list[int], group: int) -> bool:
        """Whether ``end`` is the partial prompt tail of a live request whose tokens ``seq`` holds,
        for group ``group``: ``(prompt-1)//h*h`` or ``prompt//h*h`` (FullAttentionManager, and
        MambaManager up to 0.29), or for a Mamba group its prefill checkpoint position (0.30+,
        ``mamba_checkpoint_position``: ``prompt//h*h - h`` under EAGLE's block drop)."""
        h, memo = self.index.h, self.memo
        spec = self.spec(group)
        mamba = spec == "MambaSpec" or (spec == "?" and self.mamba)
        for req in self.live.values():
            n = req.num_prompt_tokens
            tails = {(n - 1) // h * h, n // h * h}
            if mamba:
                tails.add(mamba_checkpoint_position(n, h, bool(self.res.eagle_drop), self.index.lookahead))
            if end in tails and memo.same_prefix(req, seq, end):
                return True
        return False
