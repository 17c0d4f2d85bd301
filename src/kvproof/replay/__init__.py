"""The ``replay`` and ``bisect`` commands: corpus files through every tier on every release.

The engine tier's code (families, boots, their classification, the synthesiser) lives in
``kvproof.tiers`` with the other tiers. ``bench/bench_replay.py`` still imports ``classify``,
``engine``, ``synth`` and ``families`` from here; they are served from their new home (lazily:
importing this package loads nothing) until that script moves (it is being edited elsewhere).
"""

from __future__ import annotations


def __getattr__(name: str):
    # an import statement, not importlib: the layer test sees this edge (replay -> tiers, downward)
    from kvproof.tiers import boots, classify, synth
    moved = {"classify": classify, "engine": boots, "synth": synth}
    if name not in moved:
        raise AttributeError(f"module 'kvproof.replay' has no attribute {name!r}")
    return moved[name]
