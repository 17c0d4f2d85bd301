"""An environment's health: derivation and every tier run on known inputs before it is called ready.

``kvproof env create`` asks this after a build (and after kvproof's probe changes): one worker
derives a small Config and runs a two-group layout at the function, manager and consumer
tiers. A tier "works" when its judgement is a verdict about vLLM (not ERROR, and not
NOT_EXPRESSIBLE: the probe layout is expressible on every managed release). The answer is
recorded in the manifest, so a later ``create`` does not pay for it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kvproof.inputs.config import Config
from kvproof.inputs.layout import Layout
from kvproof.tiers import registry
from kvproof.verdicts import Verdict

# Bump when the probe's inputs or rules change: environments probed before are probed again.
PROBE_VERSION = 1
PROBE_LAYOUT = {"groups": [{"kind": "full_attention", "block_size": 16},
                           {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}],
                "cache": {"block_size": 16, "enable_prefix_caching": True}}
TIERS = registry.worker_tiers()  # function, manager, consumer
BAD = (Verdict.ERROR, Verdict.NOT_EXPRESSIBLE)


@dataclass
class Health:
    """Per step ("derive", then each tier): "ok" or the one-line cause."""

    steps: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self, key: str = "") -> dict:
        return {"probe": key or probe_key({}), "steps": self.steps, "seconds": round(self.seconds, 1)}


def broken(record: dict) -> dict[str, str]:
    """The steps of a recorded probe (``Health.to_dict``) that could not run: step -> cause."""
    return {k: v for k, v in record.get("steps", {}).items() if v != "ok"}


def works(record: dict) -> list[str]:
    """The steps of a recorded probe that ran."""
    return [k for k, v in record.get("steps", {}).items() if v == "ok"]


def probe_key(manifest: dict) -> str:
    """What a recorded probe answer depends on: this probe, and the environment's stand-ins
    (their source included), so a changed stand-in is probed again."""
    import hashlib
    from pathlib import Path
    from kvproof.envs import stand_in_triton
    stand_ins = manifest.get("stand_ins") or []
    # the stand-in's mode (KVPROOF_TRITON_STAND_IN) changes what the environment can run
    text = (f"{PROBE_VERSION}|{stand_ins}|" + (stand_in_triton.mode() + Path(stand_in_triton.__file__).read_text()
                                               if stand_ins else ""))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def probe(env) -> Health:
    """Derive the probe Config and run the probe layout at every tier in one worker of ``env``."""
    from kvproof.bridge.client import Worker, start_all
    from kvproof.tiers.batch import batch, layout_key

    t0 = time.monotonic()
    health = Health()
    layout = Layout.from_dict(PROBE_LAYOUT)
    workers: list[Worker] = []
    try:
        workers = start_all([env])  # closes the worker itself when it cannot start
        answers = batch(workers[0], [Config()], [layout], TIERS)
    except Exception as err:  # noqa: BLE001 - a worker that cannot start is the answer
        health.steps["worker"] = f"{type(err).__name__}: {err}"
        health.seconds = time.monotonic() - t0
        return health
    finally:
        for w in workers:
            w.close()
    d = answers.derivation(Config())
    health.steps["derive"] = "ok" if d.layout is not None else (d.error.line() if d.error else "no layout")
    # one row per reply part (the bridge's: the function and manager tiers'; the consumer's)
    rows = answers.rows([("probe", layout, layout_key(layout))], env.name)
    of_part = {m.part: row for m, row in zip(registry.readers(TIERS), rows)}
    for member in registry.runners(TIERS):
        row = of_part[member.part]
        verdict = row.judgement.verdict if row.judgement else Verdict.ERROR
        ok = member.probe_ok(row) and verdict not in BAD
        health.steps[str(member.tier)] = "ok" if ok else f"{verdict}: {row.message()}"
    health.seconds = time.monotonic() - t0
    return health
