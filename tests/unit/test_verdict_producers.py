"""Every place that makes a NOT_EXPRESSIBLE, and what kind of statement each is (issue 44 item 1).

NOT_EXPRESSIBLE says "this release has no such setting", or "the release (or the engine that
derives layouts) refuses this combination by its own rules". kvproof's own limits are UNCHECKED
(``kvproof.errors.Unchecked``) and a machine's limits ERROR (``facts.ENVIRONMENT_REFUSALS``).
This test finds every producer in the source and fails on one that is not reviewed here, so a
new producer is classed when it is written."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("src/kvproof", "spec", "verify", "fuzz", "findings")
PRODUCER = re.compile(r"raise NotExpressible\(|not_expressible = |expressible=False")

SETTING = "the release has no such setting (a field or class read from it)"
REFUSED = "the release's own validation refused the configuration (its message kept)"
ENGINE = "the engine never builds this combination (the rule it follows is named)"
MODEL = "kvproof's model of the release says it has no such setting"
PASSED = "passes on a producer's reason from the lines above"

REVIEWED = {
    "src/kvproof/bridge/build.py": [SETTING] * 7 + [REFUSED, SETTING],
    "src/kvproof/bridge/runtime.py": [SETTING, PASSED],
    "src/kvproof/consumer/configs.py": [SETTING, ENGINE, ENGINE],
    # its SpeculativeMethod literal; its validation, and the same refusal again from build's memo
    "src/kvproof/consumer/drafters.py": [SETTING, REFUSED, REFUSED],
    "src/kvproof/consumer/harness.py": [PASSED],  # refusals.refusal: the engine's rules
    "src/kvproof/consumer/scheduler.py": [PASSED, ENGINE, ENGINE],  # CONNECTOR_SETUP_REFUSALS, SupportsHMA
    "spec/model.py": [MODEL],
}


def _producers() -> Counter:
    found: Counter = Counter()
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            n = len(PRODUCER.findall(text))
            if n:
                found[path.relative_to(ROOT).as_posix()] = n
    return found


def test_every_not_expressible_producer_is_reviewed():
    found = _producers()
    reviewed = {f: len(kinds) for f, kinds in REVIEWED.items()}
    assert found == reviewed, (f"NOT_EXPRESSIBLE producers changed: found {dict(found)}, reviewed {reviewed}. "
                               "Class each new one here: a setting the release lacks, the release's or the "
                               "engine's refusal; kvproof's own gap is Unchecked, a machine's limit "
                               "facts.ENVIRONMENT_REFUSALS")


def test_kvproofs_own_gaps_are_unchecked():
    drafts = (ROOT / "src/kvproof/consumer/drafts.py").read_text()
    assert "raise Unchecked(" in drafts and "NotExpressible" not in drafts


def test_a_connector_that_needs_an_accelerator_is_unchecked_here():
    """A connector refusing for want of pinned memory says what this machine lacks: the consumer
    tier's Scheduler() step sends it to UNCHECKED with what lifts it, not NOT_EXPRESSIBLE."""
    from kvproof import facts
    sched = (ROOT / "src/kvproof/consumer/scheduler.py").read_text()
    assert "facts.CONNECTOR_MACHINE_LIMITS" in sched and "st.res.unchecked = " in sched
    assert not any("pin_memory" in needle for needle, _ in facts.CONNECTOR_SETUP_REFUSALS)
    assert any(needle == "pin_memory" for needle, _, _ in facts.CONNECTOR_MACHINE_LIMITS)


def test_a_machine_limit_never_becomes_not_expressible():
    from kvproof import facts
    build = (ROOT / "src/kvproof/bridge/build.py").read_text()
    # the catch-all "its config rejects it" runs only after the environment's refusals are taken out
    assert build.index("facts.environment_refusal(") < build.index('its config rejects it')
    assert facts.environment_refusal("RuntimeError: vLLM on x86 CPUs requires Triton (triton-cpu).")
    assert facts.environment_refusal("Input should be 'align' or 'none'") is None
