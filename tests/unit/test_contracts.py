"""The contract logic over hand-made Outcomes (no vLLM needed)."""

from kvproof import contracts
from kvproof.layout import Layout
from kvproof.outcome import Outcome, StageError


def layout(groups, **cache):
    return Layout.from_dict({"groups": groups, "cache": cache})


SEED = layout([{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}],
              block_size=181)


def outcome(lay, s, h, **kw):
    return Outcome(layout_hash=lay.content_hash(), vllm_version="test", scheduler_block_size=s,
                   hash_block_size=h, **kw)


def ids(violations):
    return sorted(v.contract.id for v in violations)


def test_seed_on_027_shape_fails_hybrid_and_block_pool_contracts():
    v = contracts.check(SEED, outcome(SEED, 98464, 98464))
    assert ids(v) == ["block_pool.target_multiple_of_hash", "hybrid.group_multiple_of_hash"]
    assert "block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464" in v[0].detail


def test_seed_on_fixed_shape_is_a_hash_1_warning():
    verdict, v, w = contracts.verdict(SEED, outcome(SEED, 98464, 1))
    assert (verdict, v) == ("WARN", [])
    assert ids(w) == ["efficiency.hash_block_size_1"]


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


def test_value_error_is_a_rejection_and_other_errors_fail():
    lay = layout([{"kind": "full_attention", "block_size": 16}, {"kind": "mamba", "block_size": 24}],
                 prefix_match_unit=5)
    rejected = Outcome(layout_hash="x", vllm_version="t", resolver_error=StageError("ValueError", "Invalid prefix_match_unit=5"))
    assert contracts.verdict(lay, rejected)[0] == "REJECTED"
    crashed = Outcome(layout_hash="x", vllm_version="t", resolver_error=StageError("ZeroDivisionError", "x"))
    assert ids(contracts.check(lay, crashed)) == ["resolver.rejects_bad_prefix_match_unit"]
    accepted = outcome(lay, 48, 5)
    assert "resolver.rejects_bad_prefix_match_unit" in ids(contracts.check(lay, accepted))


def test_manager_assertion_fails_unless_unsupported_by_design():
    lay = layout([{"kind": "sliding_window", "block_size": 16}, {"kind": "mamba", "block_size": 16}])
    boom = outcome(lay, 16, 16, manager_error=StageError("AssertionError", "something else"))
    assert ids(contracts.check(lay, boom)) == ["manager.constructs"]
    dcp = outcome(lay, 16, 16, manager_error=StageError(
        "AssertionError", "DCP with hybrid KV cache layouts only supports full-attention and Mamba groups"))
    assert contracts.verdict(lay, dcp)[0] == "REJECTED"


def test_not_expressible_is_neither_pass_nor_fail():
    o = Outcome(layout_hash="x", vllm_version="t", expressible=False, not_expressible="no field")
    assert contracts.verdict(SEED, o)[0] == "NOT_EXPRESSIBLE"


def test_catalogue_ids_are_unique_and_name_vllm_code():
    assert len({c.id for c in contracts.CATALOGUE}) == len(contracts.CATALOGUE)
    assert all(c.protects.startswith("vllm/") for c in contracts.CATALOGUE)
