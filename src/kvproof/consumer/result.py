"""ConsumerResult: what one consumer-tier run observed (JSON in and out, no vLLM); RunState: one run in progress."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvproof.consumer.efficiency import Efficiency
from kvproof.consumer.observations import Observation, Recorder


@dataclass
class FrontendTally:
    """What the engine did with the frontend's hashes, over a run's requests (kvproof.consumer.frontend;
    ``kvproof.judging.judge.frontend_line`` reads it)."""

    hasher: str = "engine"
    requests: int = 0
    trusted: int = 0  # frontend_block_hashes returned them
    ignored: int = 0  # it returned None: the engine hashed the prompt itself
    differ: int = 0  # trusted, and not the hashes the engine computes for the prompt
    first_differ: str = ""  # the first request whose trusted hashes differ (rid: blocks differing of n)


@dataclass
class ConsumerResult:
    """The harness (``kvproof.consumer.harness.Harness.run``) fills one in place during a run."""

    layout_hash: str
    vllm_version: str
    observations: list[Observation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # oracle -> observations (uncapped)
    efficiency: Efficiency = field(default_factory=Efficiency)
    steps: int = 0
    seconds: float = 0.0
    scheduler_block_size: int | None = None
    hash_block_size: int | None = None
    alignment: int | None = None
    connector: str | None = None
    connector_class: str | None = None
    connector_calls: int = 0
    events_stored: int = 0
    events_without_hashes: int = 0  # BlockStored events whose blocks were all null/masked (Mamba align)
    events_opaque: int = 0  # connector BlockStored events without token ids (CPU/storage medium)
    worker_recv_dropped: int = 0  # load completions for requests no longer waiting (not reported)
    preemptions: int = 0
    not_expressible: str | None = None
    setup_error: str | None = None  # the release's config refused it (not a block-size verdict)
    # kvproof's own harness broke: a vLLM API it relies on changed (start-up signature check,
    # kvproof.bridge.compat) or an exception was raised in a kvproof frame (spies, fake
    # worker, setup). The run says nothing about vLLM: the judge's verdict is ERROR, never FAIL.
    harness_error: str | None = None
    # kvproof does not model what the run needs (a speculative method, a connector's absent
    # package): UNCHECKED with what would lift it, never a verdict about vLLM
    unchecked: str | None = None
    hits: list[dict[str, int]] = field(default_factory=list)
    # speculative decoding (the Layout's speculative, the stream's accept): draft tokens the fake model runner proposed,
    # those the scheduler scheduled and the target verified, and those it accepted
    drafts_proposed: int = 0
    drafts_verified: int = 0
    drafts_accepted: int = 0
    # the coordinator drops the unit past a hit for EAGLE-family drafters (drop_eagle_block,
    # single_type_kv_cache_manager.py), and the hash lookahead of 0.33+ (num_hash_lookahead_tokens)
    eagle_drop: bool = False
    hash_lookahead: int = 0
    # the KV slots the scheduler reserves past each request's scheduled tokens for its drafter
    # (Scheduler.num_lookahead_tokens, facts.spec_lookahead_slots), the most drafts it scheduled
    # for one request in one step, and, where group 0 is full attention, the least and most
    # slots group 0 held past a drafting request's computed tokens right after schedule()
    # (what allocate_slots reserved: from lookahead_slots to lookahead_slots + block - 1)
    lookahead_slots: int = 0
    drafts_scheduled_max: int = 0
    slot_slack_min: int | None = None
    slot_slack_max: int | None = None
    # a frontend hashed the prompts (Stream.hasher): kvproof.consumer.frontend.FrontendTally, as a dict
    frontend: dict[str, Any] | None = None

    def by(self, oracle: str) -> list[Observation]:
        return [o for o in self.observations if o.oracle == oracle]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["observations"] = [o.to_dict() for o in self.observations]
        d["efficiency"] = self.efficiency.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ConsumerResult":
        d = dict(d)
        d["observations"] = [Observation.from_dict(o) for o in d.get("observations", [])]
        d["efficiency"] = Efficiency.from_dict(d.get("efficiency", {}))
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class RunState:
    """One run in progress: the ``ConsumerResult`` it fills and the recorder of its observations
    (writing into the result's ``observations`` and ``counts``)."""

    res: ConsumerResult
    rec: Recorder = field(init=False)

    def __post_init__(self) -> None:
        self.rec = Recorder(self.res.observations, self.res.counts)
