"""The consumer tier inside a vLLM env, served by the release's one worker (``kvproof.worker``).

``consume(items)``: ``[{"layout": {...}, "stream": {...}}, ...]`` -> ConsumerResult dicts;
``run_one(layout, stream)`` -> one ConsumerResult (tests call it in-process). The
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


def consume(items: list[dict]) -> list[dict]:
    from kvproof.consumer.stream import Stream
    from kvproof.layout import Layout
    return [run_one(Layout.from_dict(it["layout"]), Stream.from_dict(it["stream"])).to_dict() for it in items]
