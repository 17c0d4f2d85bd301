"""Replay tests generated from corpus/: every file x managed release x tier.

A file's expectations live in its meta: ``kvproof.expect = {release: {tier: verdict}}``
(written by ``kvproof replay --record``). Releases: KVPROOF_RELEASES (conftest's
RELEASES, default the ci subset). A managed release (src/kvproof/facts/__init__.py) without an
expectation for a tier it must record (``kvproof.corpus.required_tiers``; checked
without vLLM by tests/unit/test_corpus_expectations.py) fails; only a release
outside the release list (an overlay) or a tier a release cannot run (the engine
on a python-only release) skips. A release whose environment is missing skips
cleanly (fails under ``make test``, which sets KVPROOF_REQUIRE_ENVS=1).

The engine tier boots a real tiny model per (file, release): it runs for files
marked ``kvproof.engine.ci = true`` (the seed class), every file with
KVPROOF_ENGINE_ALL=1. Verdicts are ``Verdict`` enums from the one judge; an
engine FAIL is only what real vLLM raised, a clean boot the contracts flag is
LATENT, a boot that failed for an unrelated reason (a CPU kernel) is ERROR and
fails the test with its cause, whatever the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvproof import corpus
from kvproof.judging.judge import judge
from kvproof.inputs.layout import Layout
from kvproof.tiers import boots as engine, classify
from kvproof.tiers.families import Recipe
from kvproof.settings import settings
from kvproof import facts
from kvproof.verdicts import Tier, Verdict
from kvproof.tiers import client

from conftest import RELEASES, require_env

pytestmark = pytest.mark.replay

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
FILES = sorted(CORPUS.glob("*.json"))


def _load(path: Path) -> Layout:
    return Layout.from_json(path.read_text(), where=str(path))


def _expected(lay: Layout, release: str, tier: Tier) -> Verdict:
    exp = ((lay.meta or {}).get("expect") or {}).get(release, {}).get(str(tier))
    if exp is None:
        if str(tier) in corpus.required_tiers(lay, release):
            pytest.fail(f"no recorded {tier} expectation for managed release vLLM {release}: "
                        f"kvproof replay FILE --tier {tier} --vllm {release} --record")
        why = ("not a managed release" if release not in facts.MANAGED_RELEASES
               else "a python-only release boots no engine" if release in facts.PYTHON_ONLY_RELEASES
               else "not required of it: kvproof.corpus.required_tiers")
        pytest.skip(f"no recorded {tier} expectation for vLLM {release} ({why})")
    return classify.as_verdict(exp)


def test_corpus_files_are_named_by_content_hash():
    for path in FILES:
        assert path.stem == _load(path).content_hash(), f"{path.name}: rename to {_load(path).content_hash()}.json"


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("tier", [Tier.FUNCTION, Tier.MANAGER], ids=str)
def test_bridge_tiers(workers, path, release, tier):
    lay = _load(path)
    expected = _expected(lay, release, tier)
    [out] = client.outcomes(workers(release), [lay], manager=(tier == Tier.MANAGER))
    if tier == Tier.FUNCTION:
        out = classify.function_outcome(out)
    j = judge(lay, out, tier)
    assert j.verdict == expected, f"{tier} on {release}: {j.verdict} at {j.tier}: {j.line()}"


def _engine_selected(lay: Layout) -> bool:
    return bool(((lay.meta or {}).get("engine") or {}).get("ci")) or settings().engine_all


@pytest.mark.engine
@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_engine_tier(path, release):
    lay = _load(path)
    if not _engine_selected(lay):
        pytest.skip("engine replay of this file only with KVPROOF_ENGINE_ALL=1")
    raw = ((lay.meta or {}).get("engine") or {}).get("recipe")
    if not raw:
        pytest.skip("no engine recipe recorded (kvproof replay --record)")
    expected = _expected(lay, release, Tier.ENGINE)
    env = require_env(release)
    boot = engine.boot(env, Recipe.from_dict(raw))
    ev = classify.engine_verdict(boot)
    assert ev.verdict is not Verdict.ERROR, f"boot failed for a reason unrelated to block sizes: {ev.detail}; " \
                                            f"log: {boot.log_tail[-3:]}"
    assert ev.verdict == expected, f"{ev.verdict} at {ev.tier}: {ev.detail}; log: {boot.log_tail[-3:]}"
    if expected == Verdict.FAIL:
        assert not boot.ok, "an engine FAIL must be something real vLLM raised"
        assert "kv_cache_coordinator.py" in boot.error_frame or "block_size" in boot.error_message
    if expected == Verdict.LATENT:
        assert boot.ok and ev.contracts, ev.detail
    if expected == Verdict.OK and boot.recipe.get("generate") and not boot.notes:
        assert boot.token_ids and all(len(t) == Recipe.from_dict(raw).max_tokens for t in boot.token_ids)


SEED_FILE = CORPUS / "28ac3a5ad68a6bff.json"


def test_replay_exits_1_when_a_replay_contradicts_the_file(tmp_path, capsys):
    import json

    from kvproof.replay import cli
    require_env("0.27.0")
    data = json.loads(SEED_FILE.read_text())
    data["kvproof"]["expect"]["0.27.0"]["manager"] = Verdict.OK.name  # wrong on purpose: 0.27.0 asserts
    path = tmp_path / SEED_FILE.name
    path.write_text(json.dumps(data))
    assert cli.main([str(path), "--tier", "manager", "--vllm", "0.27.0"]) == 1
    assert "CONTRADICTS" in capsys.readouterr().out


def test_bisect_names_028_for_the_seed_class_at_the_manager_tier(capsys):
    from kvproof.replay import bisect
    for release in ("0.27.0", "0.28.0"):
        require_env(release)
    assert bisect.main([str(SEED_FILE), "--tier", "manager", "--vllm", "0.27.0", "--vllm", "0.28.0"]) == 0
    out = capsys.readouterr().out
    assert "first release where it stops failing (manager tier): 0.28.0 (fails on 0.27.0)" in out
