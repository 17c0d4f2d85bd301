"""The one client of a release's worker for callers outside ``check``: Layouts (each carrying its
stream, ``Layout.with_stream``) and Configs in, each answer matched to its input by key
(:func:`kvproof.tiers.batch.batch`), workers started together (``bridge.client.start_all``).

Callers that want a verdict take the runner's judged rows (``checking.run_tiers``) or the tier
member's ``judge`` (``registry.runner(tier).judge``); this module only fetches results.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kvproof.bridge.client import Worker, start_all
from kvproof.inputs.config import Config
from kvproof.consumer.result import ConsumerResult
from kvproof.derivation import Derived
from kvproof.envs import Env
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof.result import Result
from kvproof.tiers import registry
from kvproof.tiers.batch import batch, layout_key
from kvproof.tiers.classify import as_tier
from kvproof.verdicts import Tier

# A call of the consumer tier runs the real scheduler step by step under every layout's stream:
# a batch of streams outlasts the default 600 s on a loaded machine.
CONSUMER_TIMEOUT = 900.0


def results(worker: Worker, layouts: Sequence[Layout], tiers: Iterable[Tier | str]) -> list[Result]:
    """Each layout's result at ``tiers`` (one reply part: the function and manager tiers share the
    bridge's Outcome), in the order given; equal layouts (stream included) are sent once."""
    tiers = tuple(tiers)
    answers = batch(worker, [], layouts, tiers)
    if len(answers.readers) != 1:
        raise ValueError(f"results reads one reply part; tiers {[str(t) for t in tiers]} ask {len(answers.readers)}")
    return [answers.of(layout_key(lay))[0] for lay in layouts]


def payloads(worker: Worker, layouts: Sequence[Layout], tiers: Iterable[Tier | str]) -> list[Any]:
    """The tier's own record (``Result.payload``) of each layout: see :func:`results`."""
    return [r.payload for r in results(worker, layouts, tiers)]


def bridge_tiers(manager: bool = True) -> tuple[Tier, ...]:
    """The bridge's stages: the real resolver, and with ``manager`` the real KVCacheManager."""
    return registry.through(registry.default() if manager else Tier.FUNCTION)


def outcomes(worker: Worker, layouts: Sequence[Layout], manager: bool = True) -> list[Outcome]:
    """The bridge's Outcome of each layout (:func:`bridge_tiers`), in order."""
    return payloads(worker, layouts, bridge_tiers(manager))


def consumed(worker: Worker, layouts: Sequence[Layout]) -> list[ConsumerResult]:
    """The consumer tier's result of each layout under its own stream (else the default one), in order."""
    return payloads(worker, layouts, (registry.streamed(),))


def derive(worker: Worker, configs: Sequence[Config] | Iterable[Config]) -> list[Derived]:
    """Each Config through the release's own derivation (``kvproof.bridge.derive``), in order."""
    configs = list(configs)
    answers = batch(worker, configs, [], ())
    return [answers.derivation(c) for c in configs]


def start(envs: Sequence[Env], tiers: Iterable[Tier | str] = ()) -> list[Worker]:
    """One started worker per environment (their vLLM imports overlap), with the time limit of a
    call at ``tiers``; the caller closes them."""
    streamed = registry.streamed() in {as_tier(t) for t in tiers}
    return start_all(list(envs), timeout=CONSUMER_TIMEOUT if streamed else None)


def on_each(envs: Sequence[Env], layouts: Sequence[Layout], tiers: Iterable[Tier | str]) -> list[list[Any]]:
    """:func:`payloads` on each environment, in order; the workers start together and are closed after."""
    tiers = tuple(tiers)
    workers = start(envs, tiers)
    try:
        return [payloads(w, layouts, tiers) for w in workers]
    finally:
        for w in workers:
            w.close()


def on(env: Env, layouts: Sequence[Layout], tiers: Iterable[Tier | str]) -> list[Any]:
    """:func:`payloads` on one environment's fresh worker, closed after."""
    return on_each([env], layouts, tiers)[0]


def consumed_on(envs: Sequence[Env], layouts: Sequence[Layout]) -> list[list[ConsumerResult]]:
    """:func:`consumed` on each environment's fresh worker (the release differential's runner)."""
    return on_each(envs, layouts, (registry.streamed(),))
