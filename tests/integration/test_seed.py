"""The seed bug against the real releases, through the bridge (integration)."""

import pytest

from kvproof.judging.judge import judge
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Tier, Verdict
from kvproof.tiers import client

pytestmark = pytest.mark.integration

SEED = Layout.from_dict({
    "groups": [{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}],
    "cache": {"block_size": 181, "enable_prefix_caching": True, "mamba_cache_mode": "align"},
})
SEED_MESSAGE = ("Each KV cache group's real block_size must be divisible by hash_block_size. "
                "block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464")


def test_seed_fails_on_0_27_with_the_coordinator_assertion(workers):
    [out] = client.outcomes(workers("0.27.0"), [SEED])
    assert out.vllm_version == "0.27.0"
    assert (out.scheduler_block_size, out.hash_block_size) == (98464, 98464)
    assert out.manager_error is not None and out.manager_error.type == "AssertionError"
    assert out.manager_error.message == SEED_MESSAGE
    assert "kv_cache_coordinator.py" in out.manager_error.frame
    j = judge(SEED, out)
    assert (j.verdict, j.tier) == (Verdict.FAIL, Tier.MANAGER)
    assert j.contract == "hybrid.group_multiple_of_hash" and j.observed == out.manager_error


@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_seed_passes_on_fixed_releases_with_hash_1_warning(workers, release):
    [out] = client.outcomes(workers(release), [SEED])
    assert (out.scheduler_block_size, out.hash_block_size) == (98464, 1)
    assert out.manager_error is None and out.coordinator == "HybridKVCacheCoordinator"
    j = judge(SEED, out)
    assert (j.verdict, j.explained, j.latent) == (Verdict.WARN, (), ())
    assert [w.contract.id for w in j.warnings] == ["efficiency.hash_block_size_1"]


@pytest.mark.parametrize("release", ["0.27.0", "0.32.0"])
def test_bad_prefix_match_unit_is_the_resolvers_value_error(workers, release):
    # Mamba at the cache block size, so 0.27's Mamba fallback does not fire first.
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32},
                                       {"kind": "mamba", "block_size": 16}],
                            "cache": {"block_size": 16, "prefix_match_unit": 5}})
    [out] = client.outcomes(workers(release), [lay])
    assert out.resolver_error is not None and out.resolver_error.type == "ValueError"
    assert "prefix_match_unit=5" in out.resolver_error.message
    assert judge(lay, out).verdict == Verdict.REJECTED


def test_fields_a_release_lacks_are_not_expressible(workers):
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "mamba", "block_size": 32, "tokens_per_state": 4}]})
    [old] = client.outcomes(workers("0.27.0"), [lay])
    assert not old.expressible and "not expressible in vLLM 0.27.0" in old.not_expressible
    [new] = client.outcomes(workers("0.32.0"), [lay])
    assert new.expressible


def test_resolver_fingerprints_differ_between_buggy_and_fixed(workers):
    a, b = workers("0.27.0").info["fingerprint"], workers("0.28.0").info["fingerprint"]
    assert a and b and a != b
