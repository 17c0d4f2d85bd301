"""ConsumerResult: what one consumer-tier run observed (JSON in and out, no vLLM)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvproof.consumer.oracles import Efficiency, Observation


@dataclass
class ConsumerResult:
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
    events_without_hashes: int = 0
    events_opaque: int = 0
    worker_recv_dropped: int = 0
    preemptions: int = 0
    not_expressible: str | None = None
    setup_error: str | None = None
    hits: list[dict[str, int]] = field(default_factory=list)

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

    @classmethod
    def from_state(cls, st: Any, layout_hash: str, vllm_version: str, seconds: float) -> "ConsumerResult":
        return cls(layout_hash, vllm_version, list(st.rec.observations), dict(st.rec.counts), st.eff, st.steps,
                   seconds, st.scheduler_block_size, st.hash_block_size, st.alignment, st.connector,
                   st.connector_class, st.connector_calls, st.events_stored, st.events_without_hashes, st.events_opaque, st.worker_recv_dropped,
                   st.preemptions, st.not_expressible, st.setup_error, list(st.hits))
