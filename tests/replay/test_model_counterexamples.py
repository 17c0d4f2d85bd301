"""Counterexamples the Z3 model wrote to corpus/ are real: the installed
release of the same revision violates the same contract when the layout runs
through the real resolver and KVCacheManager. A model bug that invents
counterexamples fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvproof.judging import contracts
from kvproof import envs
from kvproof.inputs.layout import Layout
from kvproof.errors import EnvError
from kvproof.spec import revision_for
from kvproof.tiers import client

from conftest import RELEASES

pytestmark = pytest.mark.replay

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
Z3_FILES = sorted(p for p in CORPUS.glob("*.json")
                  if json.loads(p.read_text()).get("kvproof", {}).get("found_by") == "z3")


def test_the_proof_run_left_counterexamples_to_replay():
    assert Z3_FILES, "corpus/ holds no Z3 counterexample; run `make verify`"


# Known disagreements of src/kvproof/judging/contracts.py with real vLLM (strict: the fix turns them into XPASS -> fail).
KNOWN_CONTRACT_GAPS: dict[str, str] = {}


def _release_of(path: Path) -> str | None:
    """The managed release that is the file's revision, if any: one under test, else any installed
    managed release (make verify / make envs-all builds 0.29 and 0.31)."""
    revision = json.loads(path.read_text())["kvproof"]["revision"]
    mine = [r for r in envs.MANAGED if revision_for(r) == revision]
    return next((r for r in mine if r in RELEASES), None) or next((r for r in mine if _installed(r)), None)


def _installed(release: str) -> bool:
    try:
        envs.find(release)
    except EnvError:
        return False
    return True


@pytest.mark.parametrize("path", Z3_FILES, ids=lambda p: p.stem)
def test_model_counterexample_is_real_on_its_release(request, workers, path):
    if path.stem in KNOWN_CONTRACT_GAPS:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_CONTRACT_GAPS[path.stem], strict=True))
    lay = Layout.from_json(path.read_text(), where=str(path))
    meta = lay.meta
    release = _release_of(path)
    if release is None:
        pytest.skip(f"revision {meta['revision']} has no managed vLLM environment (model-only finding)")
    [out] = client.outcomes(workers(release), [lay])
    assert out.expressible, out.not_expressible
    violated = {v.contract.id for v in contracts.check(lay, out)}
    assert meta["contract"] in violated, (
        f"model says {meta['contract']} fails on {meta['revision']}; real vLLM {release}: "
        f"scheduler={out.scheduler_block_size} hash={out.hash_block_size} violations={sorted(violated)} "
        f"manager={out.manager_error}")
