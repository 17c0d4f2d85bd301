"""Drive the consumer tier of a release's worker (``kvproof.worker``) from any Python (no vLLM import here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from kvproof.bridge.client import Worker, answer, input_key, start_all
from kvproof.config import Config
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream, default_stream
from kvproof.derivation import Derived
from kvproof.envs import Env
from kvproof.errors import BridgeError
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
    """The consumer tier on a live worker: each (Layout, Stream) through the real scheduler, in
    order (the worker's batch door, each layout sent with its stream and answered by key)."""
    reply = worker.batch(layouts=[lay.with_stream(s).to_dict(with_meta=True) for lay, s in items],
                         tiers=("consumer",))
    return [ConsumerResult.from_dict(answer(reply["consumer"], k, "consumer result")) for k in reply["keys"]]


def layout_key(layout: Layout) -> str:
    return input_key("layout", layout.to_dict(with_meta=True))


def config_key(config: Config) -> str:
    return input_key("config", config.to_dict())


@dataclass(frozen=True)
class Answers:
    """A batch reply, keyed by input: ``derived`` by config key, ``outcomes`` (function/manager)
    and ``consumer`` by the key of the input they answer: a layout's (:func:`layout_key`), or the
    config's (:func:`config_key`) whose derived layout ran. Empty where the tier was not asked."""

    derived: Mapping[str, Derived]
    outcomes: Mapping[str, Outcome]
    consumer: Mapping[str, ConsumerResult]
    tiers: frozenset[str] = frozenset()  # the tiers asked

    @classmethod
    def from_reply(cls, configs: Sequence[Config], tiers: Iterable[str], reply: Mapping[str, Any]) -> Answers:
        """The worker's reply (objects keyed by input) read against the ``configs`` sent and the
        ``tiers`` asked."""
        by_key = {config_key(c): c for c in configs}
        unknown = sorted(set(reply.get("derived") or {}) - set(by_key))
        if unknown:
            raise BridgeError(f"the worker's reply derives an input never sent: {unknown[0]}")
        return cls({k: Derived.from_reply(by_key[k], d) for k, d in (reply.get("derived") or {}).items()},
                   {k: Outcome.from_dict(d) for k, d in (reply.get("outcomes") or {}).items()},
                   {k: ConsumerResult.from_dict(d) for k, d in (reply.get("consumer") or {}).items()},
                   frozenset(str(t) for t in tiers))

    def of(self, key: str) -> tuple[list[Outcome], list[ConsumerResult]]:
        """The input ``key``'s bridge outcome and consumer result (each a list of one; empty
        where that tier was not asked)."""
        bridge = bool(self.tiers & {"function", "manager"})
        return ([answer(self.outcomes, key, "outcome")] if bridge else [],
                [answer(self.consumer, key, "consumer result")] if "consumer" in self.tiers else [])

    def of_layouts(self, layouts: Sequence[Layout]) -> tuple[list[Outcome], list[ConsumerResult]]:
        """Per layout, in the order given: its outcomes and its consumer results."""
        outcomes: list[Outcome] = []
        results: list[ConsumerResult] = []
        for lay in layouts:
            o, r = self.of(layout_key(lay))
            outcomes += o
            results += r
        return outcomes, results

    def of_config(self, config: Config) -> tuple[Derived, list[Outcome], list[ConsumerResult]]:
        """A config's derivation and, when it derived a layout, that layout's answers."""
        key = config_key(config)
        if key not in self.derived:
            raise BridgeError(f"the worker's reply has no derivation for {key} ({config.to_json()[:80]})")
        d = self.derived[key]
        return (d, *self.of(key)) if d.layout is not None else (d, [], [])


def batch(worker: Worker, configs: Sequence[Config], layouts: Sequence[Layout], tiers: Iterable[str]) -> Answers:
    """One round trip to a live worker: ``configs`` derived, then ``layouts`` and each derived
    layout at ``tiers`` (function/manager outcomes, consumer results under each layout's own
    stream or the default; empty where not asked). Each input goes once, under its key; the
    answers come back keyed by input (:class:`Answers`)."""
    tiers = sorted(str(t) for t in tiers)
    reply = worker.batch([c.to_dict() for c in configs], [lay.to_dict(with_meta=True) for lay in layouts], tiers)
    return Answers.from_reply(configs, tiers, reply)


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
