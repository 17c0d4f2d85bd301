"""The Result: what one tier did with one input on one release, the one record every tier makes.

It sits on the ground floor beside ``Outcome`` (it imports only ``kvproof.verdicts``), so a row,
a report or a test can read the fields every tier has without knowing the tier. The tier's own
record rides in ``payload``: the bridge's ``Outcome`` (function and manager tiers), the consumer
tier's ``ConsumerResult``, the engine tier's ``EngineRun``. The payload's type is not named here:
those types live above this floor (kvproof.consumer, kvproof.tiers), and the import must point down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvproof.verdicts import Tier


@dataclass(frozen=True)
class Result:
    """One tier's result record for one input on one release, before the judge reads it.

    ``tier``: the tier whose member made it (the bridge's Outcome answers the function and manager
    tiers both and is read once, by the function tier's member). ``skip``: why the tier ran
    nothing for the input (the engine tier without a reproducer); such a result is never judged."""

    tier: Tier
    payload: Any  # the tier's own record (Outcome, ConsumerResult, EngineRun)
    vllm_version: str = ""  # "" where the tier does not report it (the engine tier)
    scheduler_block_size: int | None = None
    hash_block_size: int | None = None
    skip: str = ""
