"""One round trip to a release's worker for every worker tier asked: the batch call and its reply,
keyed by input and read part by part by the tiers' members (``registry.readers``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvproof.bridge.client import Worker, answer, input_key
from kvproof.inputs.config import Config
from kvproof.derivation import Derived
from kvproof.errors import BridgeError
from kvproof.inputs.layout import Layout
from kvproof.tiers import registry
from kvproof.tiers.base import TierRunner
from kvproof.tiers.classify import as_tier
from kvproof.tiers.row import Row
from kvproof.verdicts import Tier


def layout_key(layout: Layout) -> str:
    return input_key("layout", layout.to_dict(with_meta=True))


def config_key(config: Config) -> str:
    return input_key("config", config.to_dict())


@dataclass(frozen=True)
class Answers:
    """A batch reply, keyed by input: ``derived`` by config key; ``parts`` (reply part -> input key
    -> result) by the key of the input they answer: a layout's (:func:`layout_key`), or the
    config's (:func:`config_key`) whose derived layout ran. ``readers``: one member per part asked."""

    derived: Mapping[str, Derived]
    parts: Mapping[str, Mapping[str, Any]]
    readers: tuple[TierRunner, ...] = ()

    @classmethod
    def from_reply(cls, configs: Sequence[Config], tiers: Iterable[Tier | str], reply: Mapping[str, Any]) -> Answers:
        """The worker's reply (objects keyed by input) read against the ``configs`` sent and the
        ``tiers`` asked."""
        by_key = {config_key(c): c for c in configs}
        unknown = sorted(set(reply.get("derived") or {}) - set(by_key))
        if unknown:
            raise BridgeError(f"the worker's reply derives an input never sent: {unknown[0]}")
        readers = tuple(registry.readers(as_tier(t) for t in tiers))
        return cls({k: Derived.from_reply(by_key[k], d) for k, d in (reply.get("derived") or {}).items()},
                   {m.part: {k: m.result(d) for k, d in (reply.get(m.part) or {}).items()} for m in readers},
                   readers)

    def of(self, key: str) -> list[Any]:
        """The input ``key``'s result of each part asked, in ladder order."""
        return [answer(self.parts[m.part], key, m.what) for m in self.readers]

    def rows(self, named: Sequence[tuple[str, Layout, str]], env_name: str) -> list[Row]:
        """The judged rows of (name, layout, key) inputs: per input one row per part asked (the
        bridge's Outcome: one row for the function and manager tiers; the consumer result), in
        ladder order; inputs in the order given."""
        return [m.row(name, lay, env_name, result)
                for name, lay, key in named for m, result in zip(self.readers, self.of(key))]

    def derivation(self, config: Config) -> Derived:
        key = config_key(config)
        if key not in self.derived:
            raise BridgeError(f"the worker's reply has no derivation for {key} ({config.to_json()[:80]})")
        return self.derived[key]


def batch(worker: Worker, configs: Sequence[Config], layouts: Sequence[Layout], tiers: Iterable[Tier | str]) -> Answers:
    """One round trip to a live worker: ``configs`` derived, then ``layouts`` and each derived
    layout at ``tiers`` (each member's part; the consumer tier under each layout's own stream or
    the default). Each input goes once, under its key; the answers come back keyed by input."""
    tiers = [as_tier(t) for t in tiers]
    reply = worker.batch([c.to_dict() for c in configs], [lay.to_dict(with_meta=True) for lay in layouts],
                         registry.asks(tiers))
    return Answers.from_reply(configs, tiers, reply)
