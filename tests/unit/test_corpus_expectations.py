"""Every managed release has recorded expectations (no vLLM needed).

tests/replay checks each corpus file's ``kvproof.expect`` against real vLLM; a
(file, release, tier) with no expectation there used to skip, so a release added
to the release list (src/kvproof/facts/__init__.py) was silently never replayed. This test fails
for every (file, managed release, required tier) without one
(``kvproof.corpus.required_tiers``); record them with
``kvproof replay corpus/ --tier TIER --vllm RELEASE --record``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvproof import corpus
from kvproof.inputs.layout import Layout
from kvproof import facts

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def _named() -> list[tuple[str, Layout]]:
    return [(p.name, Layout.from_json(p.read_text(), where=str(p))) for p in sorted(CORPUS.glob("*.json"))]


def test_every_managed_release_has_every_required_expectation():
    named = _named()
    assert named, "corpus/ is empty"
    missing = corpus.missing_expectations(named)
    assert not missing, f"{len(missing)} expectation(s) missing:\n  " + "\n  ".join(missing)


def _lay(expect: dict, engine: dict | None = None) -> Layout:
    meta = {"expect": expect, **({"engine": engine} if engine else {})}
    return dataclasses.replace(_named()[0][1], meta=meta)


def test_a_missing_bridge_expectation_of_a_managed_release_is_reported():
    full = {r: {"function": "OK", "manager": "OK"} for r in facts.MANAGED_RELEASES}
    assert corpus.missing_expectations([("f", _lay(full))]) == []
    newest = facts.MANAGED_RELEASES[-1]
    gap = {**full, newest: {"function": "OK"}}
    assert corpus.missing_expectations([("f", _lay(gap))]) == [f"f: vLLM {newest} manager"]


def test_only_managed_releases_and_runnable_tiers_are_required():
    seed = {"recipe": {"family": "nemotron_h"}}
    lay = _lay({}, seed)
    assert corpus.required_tiers(lay, "my-overlay") == ()  # not in the release list: may skip
    assert corpus.required_tiers(lay, facts.CPU_RELEASES[0]) == ("function", "manager", "engine")
    for r in facts.PYTHON_ONLY_RELEASES:  # no engine boots on a python-only release
        assert corpus.required_tiers(lay, r) == ("function", "manager")
    assert corpus.required_tiers(_lay({}), facts.CPU_RELEASES[0]) == ("function", "manager")
