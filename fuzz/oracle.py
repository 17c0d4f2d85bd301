"""The fuzzer's oracle: a thin use of ``kvproof.judging.judge`` and ``kvproof.findings``. Pure Python.

- FAIL: real vLLM raised (the resolver other than its documented user-error
  ValueError, or the real ``KVCacheManager`` / coordinator / block pool) on an
  input vLLM means to accept. Configurations the engine's own validation rejects
  never reach the oracle: the harness builds them through the bridge, and a
  rejection there is counted as ``BRIDGE_REJECTED``.
- UNSUPPORTED: vLLM refuses the configuration by design
  (``contracts.UNSUPPORTED_BY_DESIGN``); ERROR: a run that failed for another
  reason, kvproof's own frames included. Both are counted, never a finding.
- LATENT (a contract predicts a violation, nothing real raised) is counted and
  stored apart by the harness.

The identity of a finding is ``kvproof.judging.classkey.class_key(judgement)``:
(tier, contract or oracle, exception type, the raising vLLM frame as
file:function). Numbers in a message never enter it; one root cause is one class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from kvproof.judging.judge import Judgement
from kvproof.judging.judge import judge as _judge
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof.verdicts import Verdict

# the verdicts whose judgement names a class (kvproof.judging.classkey.class_key)
CLASSED = (Verdict.FAIL, Verdict.UNSUPPORTED, Verdict.ERROR)


@dataclass(frozen=True)
class Finding:
    """The oracle's answer for one input."""

    judgement: Judgement
    layout: Layout | None = None  # names the Mamba mode in the class of a Mamba layout

    @property
    def crash(self) -> bool:
        """A FAIL: real vLLM raised or misbehaved on an input it means to accept."""
        return self.judgement.verdict == Verdict.FAIL

    @property
    def latent(self) -> bool:
        return self.judgement.verdict == Verdict.LATENT

    @property
    def classed(self) -> bool:
        return self.judgement.verdict in CLASSED

    @property
    def contract(self) -> str:
        return self.judgement.contract

    @cached_property
    def key(self):
        """The class of a FAIL / UNSUPPORTED / ERROR judgement (``kvproof.judging.classkey.ClassKey``)."""
        from kvproof.judging.classkey import class_key

        return class_key(self.judgement, self.layout)

    @property
    def signature(self) -> str:
        return signature(self.judgement)

    @property
    def detail(self) -> str:
        j = self.judgement
        where = f"[{j.tier}] " if j.observed is not None else ""
        return where + j.line()


def signature(j: Judgement) -> str:
    """A readable summary (verdict, tier, exception type, message with numbers erased).
    Descriptive only: the class identity is ``kvproof.judging.classkey.class_key``."""
    if j.observed is None:
        return f"{j.verdict}"
    msg = re.sub(r"\[[\d,\s]*\]", "[...]", j.observed.message)
    msg = re.sub(r"\d+", "N", msg)[:120]
    return f"{j.verdict}:{j.tier}:{j.observed.type}:{msg}"


def judge(layout: Layout, out: Outcome) -> Finding:
    """The judge's verdict as a fuzz finding."""
    return Finding(_judge(layout, out), layout)
