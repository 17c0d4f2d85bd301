"""The contract logic over hand-made Outcomes (no vLLM needed)."""

from kvproof.judging import contracts
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof.verdicts import Tier


def layout(groups, **cache):
    return Layout.from_dict({"groups": groups, "cache": cache})


SEED = layout([{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}],
              block_size=181)


def outcome(lay, s, h, vllm="0.32.0", **kw):
    return Outcome(layout_hash=lay.content_hash(), vllm_version=vllm, scheduler_block_size=s,
                   hash_block_size=h, **kw)


def ids(violations):
    return sorted(v.contract.id for v in violations)


def test_seed_on_027_shape_fails_hybrid_and_block_pool_contracts():
    v = contracts.check(SEED, outcome(SEED, 98464, 98464))
    assert ids(v) == ["block_pool.target_multiple_of_hash", "hybrid.group_multiple_of_hash"]
    assert "block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464" in v[0].detail


def test_seed_on_fixed_shape_is_a_hash_1_warning():
    assert contracts.check(SEED, outcome(SEED, 98464, 1)) == []
    assert ids(contracts.warnings(SEED, outcome(SEED, 98464, 1))) == ["efficiency.hash_block_size_1"]


def test_scheduler_above_max_model_len_warns():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 544},
                                       {"kind": "mamba", "block_size": 181}], "max_model_len": 4096})
    assert ids(contracts.warnings(lay, outcome(lay, 98464, 1))) == [
        "efficiency.hash_block_size_1", "efficiency.scheduler_within_max_model_len"]


def test_coordinator_contracts():
    lay = layout([{"kind": "full_attention", "block_size": 16}, {"kind": "mamba", "block_size": 24}])
    assert ids(contracts.check(lay, outcome(lay, 48, 8))) == []
    assert "coordinator.scheduler_multiple_of_group" in ids(contracts.check(lay, outcome(lay, 32, 8)))
    assert "coordinator.scheduler_multiple_of_hash" in ids(contracts.check(lay, outcome(lay, 48, 32)))


def test_unitary_contract_only_with_prefix_caching():
    on = layout([{"kind": "full_attention", "block_size": 16}])
    off = layout([{"kind": "full_attention", "block_size": 16}], enable_prefix_caching=False)
    assert ids(contracts.check(on, outcome(on, 16, 8))) == ["unitary.hash_equals_block_size"]
    assert "unitary.hash_equals_block_size" in ids(contracts.check(on, outcome(on, 32, 32)))
    assert "unitary.hash_equals_block_size" not in ids(contracts.check(off, outcome(off, 32, 32)))


def test_connector_contract_applies_without_prefix_caching():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "mamba", "block_size": 24}],
                            "cache": {"enable_prefix_caching": False}, "kv_connector": "OffloadingConnector"})
    assert ids(contracts.check(lay, outcome(lay, 48, 48))) == [
        "block_pool.target_multiple_of_hash", "connector.block_multiple_of_hash"]
    assert ids(contracts.check(lay, outcome(lay, 48, 8))) == []


def test_pmu_accepted_when_it_does_not_divide():
    lay = layout([{"kind": "full_attention", "block_size": 16}, {"kind": "mamba", "block_size": 24}],
                 prefix_match_unit=5)
    assert "resolver.rejects_bad_prefix_match_unit" in ids(contracts.check(lay, outcome(lay, 48, 5)))
    rejected = Outcome(layout_hash="x", vllm_version="t", resolver_error=StageError("ValueError", "x"))
    assert contracts.check(lay, rejected) == []  # a rejection predicts nothing: the judge decides


def test_check_is_a_pure_prediction_and_ignores_the_manager():
    lay = layout([{"kind": "sliding_window", "block_size": 16}, {"kind": "mamba", "block_size": 16}])
    boom = outcome(lay, 16, 16, manager_error=StageError("AssertionError", "something else"))
    assert contracts.check(lay, boom) == []


def test_support_contracts_predict_the_hybrid_refusals():
    dcp = Layout.from_dict({"groups": [{"kind": "sliding_window", "block_size": 16},
                                       {"kind": "full_attention", "block_size": 16}], "dcp": 2})
    assert ids(contracts.check(dcp, outcome(dcp, 32, 32, group_block_sizes=[32, 32]))) == [
        "hybrid.dcp_full_attention_or_mamba"]
    same = layout([{"kind": "mamba", "block_size": 32, "count": 3}])
    # up to 0.28 the coordinator needs two distinct specs; from 0.29 it merges equal specs
    assert ids(contracts.check(same, outcome(same, 32, 32, vllm="0.28.0"))) == ["hybrid.two_distinct_specs"]
    assert contracts.check(same, outcome(same, 32, 32, vllm="0.29.0")) == []
    assert contracts.check(same, outcome(same, 32, 32, vllm="0.32.0")) == []
    # from 0.29 it needs one prefix-cacheable group instead
    ring = layout([{"kind": "full_attention", "block_size": 16, "prefix_cacheable": False},
                   {"kind": "sliding_window", "block_size": 32, "prefix_cacheable": False}])
    assert ids(contracts.check(ring, outcome(ring, 32, 16, vllm="0.29.0"))) == ["hybrid.two_distinct_specs"]
    assert ids(contracts.check(ring, outcome(ring, 32, 16, vllm="0.32.0"))) == ["hybrid.two_distinct_specs"]


def test_dcp_rule_per_release():
    # 0.32 accepts any spec that is not dcp-sharded with dcp > 1; 0.28 only full attention and Mamba
    lay = Layout.from_dict({"groups": [{"kind": "sliding_window", "block_size": 16, "dcp_sharded": False},
                                       {"kind": "full_attention", "block_size": 16}], "dcp": 2})
    assert "hybrid.dcp_full_attention_or_mamba" not in ids(
        contracts.check(lay, outcome(lay, 32, 16, group_block_sizes=[16, 32])))
    assert contracts.dcp_refused(lay, "0.28") == ["sliding_window"] and contracts.dcp_refused(lay, "0.32") == []


def test_single_mamba_group_with_dcp_compares_the_mamba_managers_own_block_size():
    # One Mamba group, dcp 2 (0.27/0.28): the unitary coordinator works at the dcp-scaled 64 and
    # hashes at 64 (the unitary contract holds), but MambaManager undoes dcp scaling and resolves
    # hashes at its own 32: 32 % 64 != 0. Real 0.27/0.28 assert "DCP not support mamba now." at the
    # first get_computed_blocks (corpus/33c4006700b5c115.json).
    lay = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 32}], "dcp": 2})
    o = outcome(lay, 64, 64, group_block_sizes=[32], extra={"unitary_block_size": 64})
    assert ids(contracts.check(lay, o)) == ["block_pool.target_multiple_of_hash"]
    # 0.31+: dcp ignored for a spec that is not dcp_sharded, everything at 32: nothing to say
    o32 = outcome(lay, 32, 32, group_block_sizes=[32], extra={"unitary_block_size": 32})
    assert contracts.check(lay, o32) == []


def test_single_attention_group_with_dcp_keeps_the_unitary_block_size():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}], "dcp": 4})
    o = outcome(lay, 64, 64, group_block_sizes=[64], extra={"unitary_block_size": 64})
    assert contracts.check(lay, o) == []
    bad = outcome(lay, 64, 16, group_block_sizes=[64], extra={"unitary_block_size": 64})
    assert ids(contracts.check(lay, bad)) == ["unitary.hash_equals_block_size"]


def test_not_expressible_predicts_nothing():
    o = Outcome(layout_hash="x", vllm_version="t", expressible=False, not_expressible="no field")
    assert contracts.check(SEED, o) == [] and contracts.warnings(SEED, o) == []


def test_catalogue_ids_are_unique_and_name_vllm_code():
    assert len({c.id for c in contracts.CATALOGUE}) == len(contracts.CATALOGUE)
    assert all(c.protects.startswith("vllm/") and ".py:" in c.protects for c in contracts.CATALOGUE)
    assert all(isinstance(c.tier, Tier) for c in contracts.CATALOGUE)
    assert not hasattr(contracts, "Checker") and not hasattr(contracts, "FAIL") and not hasattr(contracts, "verdict")


def test_a_constructors_not_supported_refusal_is_by_design():
    """contracts.refuses_by_message: how vLLM refuses, not a hand list (issue 44 item 2)."""
    from kvproof.outcome import StageError
    mooncake = StageError("ValueError", "MooncakeStoreConnector does not support: PCP/DCP > 1 (pcp=1, dcp=8) "
                          "with hybrid attention",
                          "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/connector.py:88 in __init__")
    assert contracts.refuses_by_message(mooncake) and contracts.refused_by_design(None, mooncake)
    helper = StageError("NotImplementedError", "TieringOffloadingSpec secondary tiers are not supported on this",
                        "vllm/v1/kv_offload/tiering/spec.py:629 in _validate_tiers")
    assert contracts.refuses_by_message(helper)
    # not a refusal: an assert, a method at run time, code outside the builders, another message
    for err in (StageError("AssertionError", "does not support", mooncake.frame),
                StageError("NotImplementedError", "CrossAttentionManager does not support caching",
                           "vllm/v1/core/single_type_kv_cache_manager.py:2201 in find_longest_cache_hit"),
                StageError("ValueError", "X does not support Y", "vllm/model_executor/models/llama.py:10 in __init__"),
                StageError("ValueError", "list index out of range", mooncake.frame), None):
        assert not contracts.refuses_by_message(err), err
