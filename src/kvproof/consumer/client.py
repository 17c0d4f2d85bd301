"""Drive the consumer worker from any Python (no vLLM import here)."""

from __future__ import annotations

from typing import Iterable, Sequence

from kvproof.bridge.client import Worker, start_all
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Req, Stream
from kvproof.envs import Env
from kvproof.layout import Layout


def default_stream(layout: Layout) -> Stream:
    """A shared-prefix stream sized to the layout: full, partial and resent prefixes, some decode,
    and a next turn of the first request (its prompt and outputs, then new tokens).

    The prefix is about four of the largest group blocks long (capped by
    max_model_len), so every release's hit alignment has room to land.
    """
    big = layout.largest_block
    # the longest request is p + 64 prompt tokens + 4 outputs (+1) (the next turn: p + 28 + 2): it must fit max_model_len,
    # or the scheduler never finishes it (a harness stall, not a vLLM verdict)
    p = max(8, min(4 * big + 7, layout.max_model_len - 64 - 5))
    reqs = (Req(0, p, 16, 0, 4),
            Req(0, p, 32, 3, 2),
            Req(0, p // 2, 9, 5, 2),
            Req(0, p, 16, 8, 2, resend_at=None),
            Req(0, p, 64, 10, 3, resend_at=30),
            Req(suffix_len=8, arrival=36, max_tokens=2, extends=0))  # r0's next turn
    return Stream((p,), reqs, None, max(512, big), 8)


def stream_for(layout: Layout) -> Stream:
    """The stream a Layout is checked under: its own (``meta["stream"]``, what a consumer
    finding's file carries), else :func:`default_stream`."""
    raw = (layout.meta or {}).get("stream")
    return Stream.from_dict(raw) if isinstance(raw, dict) else default_stream(layout)


class ConsumerWorker(Worker):
    """``with ConsumerWorker(env) as w: results = w.run([(layout, stream), ...])``."""

    MODULE = "kvproof.consumer.worker"

    def __init__(self, env: Env, timeout: float = 900) -> None:
        super().__init__(env, timeout)

    def run(self, items: Iterable[tuple[Layout, Stream]]) -> list[ConsumerResult]:
        batch = [{"layout": lay.to_dict(), "stream": s.to_dict()} for lay, s in items]
        reply = self._call({"op": "run", "items": batch})
        return [ConsumerResult.from_dict(d) for d in reply["results"]]


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
