"""The Triton stand-in of a release that refuses x86 CPUs without Triton (0.34+, kvproof.envs.stand_in_triton).

Three claims, on real vLLM:
- no tier's result depends on the stand-in's choice: the function, manager and consumer tiers
  answer the same under ``gate`` (Triton seen only by vLLM's start-up gates) and ``everywhere``
  (every later reader sees Triton, as a triton-cpu install reports), over the corpus and the
  speculative/connector layouts the consumer tier drives;
- without a stand-in, vLLM's refusal is the environment's ERROR, never a verdict about vLLM;
- derivation under the stand-in gives the layout the previous release derives for the same
  Config (0.33.0 and 0.34.0 share the resolver and the tiny families' spec code).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conftest import RELEASES, require_env
from kvproof import facts
from kvproof.bridge.client import Worker
from kvproof.running.checking import derive_all
from kvproof.commands.compare import generated
from kvproof.inputs.config import Config
from kvproof.tiers.batch import batch, layout_key
from kvproof.judging.judge import judge, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.envs.stand_in_triton import VARIABLE
from kvproof.verdicts import Verdict

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
# Releases whose environment carries the stand-in: the newest two cover 0.33.0 (none) and 0.34.0.
NEEDS = [r for r in RELEASES if facts.release_key(r) >= facts.release_key("0.34.0")]


def _layouts() -> list[Layout]:
    out = [Layout.from_json(p.read_text(), where=str(p)) for p in sorted(CORPUS.glob("*.json"))]
    base = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                        {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}],
                             "cache": {"block_size": 16, "enable_prefix_caching": True}})
    out += [dataclasses.replace(base, kv_connector=c) for c in ("SimpleCPUOffloadConnector", "OffloadingConnector")]
    # speculative streams (every method drawn) on the reference layouts, bare and under a
    # connector that keeps 0.34's lookahead hashes
    for lay, st in generated(4, 1.0, seed=41):
        out += [dataclasses.replace(lay, kv_connector=c, meta={"stream": st.to_dict()})
                for c in (None, "SimpleCPUOffloadConnector")]
    return out


def _run(env, mode: str, layouts: list[Layout], monkeypatch) -> tuple[list, list]:
    monkeypatch.setenv(VARIABLE, mode)
    with Worker(env) as w:
        answers = batch(w, [], layouts, ["function", "manager", "consumer"])
    outcomes, results = zip(*((a.payload for a in answers.of(layout_key(lay))) for lay in layouts))
    return list(outcomes), list(results)


def _consumer_view(r) -> dict:
    d = r.to_dict()
    d.pop("seconds", None)
    return d


@pytest.mark.parametrize("release", NEEDS or [pytest.param("0.34.0", marks=pytest.mark.skip("no release needs it"))])
def test_no_tier_depends_on_the_stand_in_choice(release, monkeypatch):
    env = require_env(release)
    layouts = _layouts()
    gate = _run(env, "gate", layouts, monkeypatch)
    everywhere = _run(env, "everywhere", layouts, monkeypatch)
    for lay, a, b in zip(layouts, gate[0], everywhere[0]):
        assert a.run_error is None, f"{lay.summary()}: {a.run_error}"
        assert dataclasses.replace(a, layout_hash="") == dataclasses.replace(b, layout_hash=""), lay.summary()
    for lay, a, b in zip(layouts, gate[1], everywhere[1]):
        assert a.setup_error is None or "Triton" not in a.setup_error, f"{lay.summary()}: {a.setup_error}"
        assert _consumer_view(a) == _consumer_view(b), lay.summary()
    ran = [r for r in gate[1] if r.steps]
    assert len(ran) >= 15 and all(r.steps for r in gate[1][-10:]), "the consumer tier drove too few layouts"
    assert any(r.drafts_proposed for r in gate[1]), "no speculative stream ran"


@pytest.mark.parametrize("release", NEEDS or [pytest.param("0.34.0", marks=pytest.mark.skip("no release needs it"))])
def test_without_the_stand_in_every_tier_is_an_environment_error(release, monkeypatch):
    env = require_env(release)
    lay = _layouts()[-10]  # the two-group base layout under SimpleCPUOffloadConnector
    outcomes, results = _run(env, "off", [lay], monkeypatch)
    j = judge(lay, outcomes[0])
    assert j.verdict is Verdict.ERROR, j
    assert outcomes[0].run_error.type == "EnvironmentError" and "Triton" in outcomes[0].run_error.message
    assert not outcomes[0].not_expressible
    c = judge_consumer(results[0], lay)
    assert c.verdict is Verdict.ERROR and "Triton" in (results[0].setup_error or ""), c


@pytest.mark.parametrize("release", NEEDS or [pytest.param("0.34.0", marks=pytest.mark.skip("no release needs it"))])
def test_derivation_under_the_stand_in_matches_the_previous_release(release):
    require_env(release)
    previous = facts.MANAGED_RELEASES[facts.MANAGED_RELEASES.index(release) - 1]
    require_env(previous)
    configs = [Config(), Config(mamba_cache_mode="align", block_size=64)]
    new, old = derive_all(release, configs), derive_all(previous, configs)
    for c, a, b in zip(configs, new, old):
        assert a.layout is not None, f"{release} {c.describe()}: {a.error}"
        assert a.layout == b.layout, f"{c.describe()}: {a.layout.summary()} on {release}, {b.layout.summary()} on {previous}"
        assert "Triton" not in str(a.raw.get("stand_in_backend") or "")
