"""Drive the consumer tier of a release's worker (``kvproof.worker``) from any Python (no vLLM import here).

The batch call for every worker tier at once, read by the tiers' members, is ``kvproof.tiers.batch``.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from kvproof.bridge.client import Worker, answer, start_all
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream, default_stream
from kvproof.envs import Env
from kvproof.layout import Layout


class ConsumerWorker(Worker):
    """``with ConsumerWorker(env) as w: results = w.run([(layout, stream), ...])``: the release's
    one worker (``kvproof.worker``), its ``run`` being the consumer tier."""

    def __init__(self, env: Env, timeout: float = 900) -> None:
        super().__init__(env, timeout)

    def run(self, items: Iterable[tuple[Layout, Stream]]) -> list[ConsumerResult]:  # type: ignore[override]
        return consume(self, items)


def consume(worker: Worker, items: Iterable[tuple[Layout, Stream]]) -> list[ConsumerResult]:
    """The consumer tier on a live worker: each (Layout, Stream) through the real scheduler, in
    order (the worker's batch door, each layout sent with its stream and answered by key)."""
    reply = worker.batch(layouts=[lay.with_stream(s).to_dict(with_meta=True) for lay, s in items],
                         tiers=("consumer",))
    return [ConsumerResult.from_dict(answer(reply["consumer"], k, "consumer result")) for k in reply["keys"]]


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
