"""Drive the consumer tier of a release's worker (``kvproof.worker``) from any Python (no vLLM import here)."""

from __future__ import annotations

from typing import Iterable, Sequence

from kvproof.bridge.client import Worker, start_all
from kvproof.config import Config
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream, default_stream
from kvproof.derivation import Derived
from kvproof.envs import Env
from kvproof.layout import Layout
from kvproof.outcome import Outcome


class ConsumerWorker(Worker):
    """``with ConsumerWorker(env) as w: results = w.run([(layout, stream), ...])``: the release's
    one worker (``kvproof.worker``), its ``run`` being the consumer tier."""

    def __init__(self, env: Env, timeout: float = 900) -> None:
        super().__init__(env, timeout)

    def run(self, items: Iterable[tuple[Layout, Stream]]) -> list[ConsumerResult]:  # type: ignore[override]
        return consume(self, items)


def consume(worker: Worker, items: Iterable[tuple[Layout, Stream]]) -> list[ConsumerResult]:
    """The consumer tier on a live worker: each (Layout, Stream) through the real scheduler."""
    reply = worker.call({"op": "consume", "items": [{"layout": lay.to_dict(), "stream": s.to_dict()}
                                                     for lay, s in items]})
    return [ConsumerResult.from_dict(d) for d in reply["results"]]


def batch(worker: Worker, configs: Sequence[Config], layouts: Sequence[Layout], tiers: Iterable[str]
          ) -> tuple[list[Derived], list[Outcome], list[ConsumerResult]]:
    """One round trip to a live worker: ``configs`` derived, then ``layouts`` followed by each
    derived layout at ``tiers`` (function/manager outcomes, consumer results under each layout's
    own stream or the default; empty where not asked)."""
    reply = worker.call({"op": "batch", "configs": [c.to_dict() for c in configs],
                         "layouts": [lay.to_dict(with_meta=True) for lay in layouts], "tiers": sorted(str(t) for t in tiers)})
    return ([Derived.from_reply(c, d) for c, d in zip(configs, reply["derived"])],
            [Outcome.from_dict(d) for d in reply["outcomes"]],
            [ConsumerResult.from_dict(d) for d in reply["consumer"]])


def run_many(items: Sequence[tuple[Layout, Stream]], env: Env) -> list[ConsumerResult]:
    with ConsumerWorker(env) as w:
        return w.run(items)


def run_each(items: Sequence[tuple[Layout, Stream]], envs: Sequence[Env]) -> list[list[ConsumerResult]]:
    """``run_many`` on each environment, their workers importing vLLM in parallel."""
    workers = start_all(envs, ConsumerWorker)
    try:
        return [w.run(items) for w in workers]
    finally:
        for w in workers:
            w.close()


def run(layout: Layout, stream: Stream | None, env: Env) -> ConsumerResult:
    """One consumer-tier run of ``layout`` under ``stream`` (default: ``default_stream``) on ``env``."""
    return run_many([(layout, stream or default_stream(layout))], env)[0]
