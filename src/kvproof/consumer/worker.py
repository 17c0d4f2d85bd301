"""The consumer tier inside a vLLM env, served by the release's one worker (``kvproof.running.worker``).

``run_one(layout, stream)`` -> one ConsumerResult (the worker's batch op calls it for each
layout at the consumer tier, under the layout's own stream; tests call it in-process). The
harness (its vLLM imports, the model config it caches) is built on the first call and kept.
"""

from __future__ import annotations

from typing import Any

_HARNESS: Any = None


def harness() -> Any:
    global _HARNESS
    if _HARNESS is None:
        from kvproof.consumer.harness import Harness  # imports vLLM
        _HARNESS = Harness()
    return _HARNESS


def run_one(layout: Any, stream: Any) -> Any:
    """One Layout under one Stream -> its ConsumerResult (in this process)."""
    return harness().run(layout, stream)


def answers(bridge: Any, layouts: list[tuple[str, Any]]) -> dict[str, dict]:
    """The consumer part of a batch (the consumer tier's serving function): each keyed layout
    under its own stream, else the default one."""
    from kvproof.consumer.stream import stream_for
    return {k: run_one(lay, stream_for(lay)).to_dict() for k, lay in layouts}
