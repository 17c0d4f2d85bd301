"""Moved to ``kvproof.tiers.families`` (the engine tier's code sits with the other tiers).

``bench/bench_replay.py`` imports this module by its old name; it stays until that script moves
(it is being edited elsewhere). Nothing in the package imports it.
"""

from kvproof.tiers.families import *  # noqa: F403
