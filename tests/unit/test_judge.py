"""The one judge over hand-made Outcomes (no vLLM needed): one test per rule."""

from kvproof.judge import judge
from kvproof.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof.verdicts import Tier, Verdict

HYBRID_MSG = ("Each KV cache group's real block_size must be divisible by hash_block_size. "
              "block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464")
SEED = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544, "count": 4},
                                    {"kind": "hidden_state", "block_size": 181}],
                         "cache": {"block_size": 181, "mamba_cache_mode": "align"}})


def out(lay, s=None, h=None, **kw):
    return Outcome(layout_hash=lay.content_hash(), vllm_version="t", scheduler_block_size=s, hash_block_size=h,
                   group_block_sizes=kw.pop("sizes", [g.block_size for g in lay.groups]), **kw)


def test_manager_exception_is_fail_at_manager_tier_with_the_predicting_contract():
    j = judge(SEED, out(SEED, 98464, 98464, manager_attempted=True,
                        manager_error=StageError("AssertionError", HYBRID_MSG)))
    assert (j.verdict, j.tier) == (Verdict.FAIL, Tier.MANAGER)
    assert j.contract == "hybrid.group_multiple_of_hash" and j.observed.message == HYBRID_MSG
    assert "block_pool.target_multiple_of_hash" in {v.contract.id for v in j.latent}  # consumer tier: still latent


def test_unpredicted_manager_exception_is_fail_named_manager_constructs():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "mamba", "block_size": 16}]})
    j = judge(lay, out(lay, 16, 16, manager_attempted=True, manager_error=StageError("KeyError", "x")))
    assert (j.verdict, j.tier, j.contract) == (Verdict.FAIL, Tier.MANAGER, "manager.constructs")


def test_by_design_refusal_stays_visible_as_fail():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "sliding_window", "block_size": 16}], "dcp": 2})
    err = StageError("AssertionError", "DCP with hybrid KV cache layouts only supports full-attention and Mamba "
                                       "groups, got: SlidingWindowSpec.")
    j = judge(lay, out(lay, 32, 32, sizes=[32, 32], manager_attempted=True, manager_error=err))
    assert j.verdict == Verdict.FAIL and j.by_design and j.contract == "hybrid.dcp_full_attention_or_mamba"


def test_contract_violation_nothing_real_observed_is_latent_never_fail():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 64},
                                       {"kind": "full_attention", "block_size": 96, "sliding_window": None}],
                            "kv_connector": "OffloadingConnector", "cache": {"enable_prefix_caching": False}})
    j = judge(lay, out(lay, 192, 64, manager_attempted=True))
    assert j.verdict == Verdict.LATENT and j.observed is None
    assert {v.contract.id for v in j.latent} >= {"connector.block_multiple_of_hash"}


def test_value_error_for_the_users_prefix_match_unit_is_rejected():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32}, {"kind": "mamba", "block_size": 16}],
                            "cache": {"block_size": 16, "prefix_match_unit": 5}})
    err = StageError("ValueError", "Invalid prefix_match_unit=5; all KV cache group block sizes must be ...")
    j = judge(lay, out(lay, resolver_error=err))
    assert (j.verdict, j.tier) == (Verdict.REJECTED, Tier.FUNCTION)


def test_resolver_value_error_without_a_user_setting_is_an_availability_fail():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32}, {"kind": "mamba", "block_size": 16}]})
    j = judge(lay, out(lay, resolver_error=StageError("ValueError", "context parallelism not supported")))
    assert (j.verdict, j.tier) == (Verdict.FAIL, Tier.FUNCTION) and "availability" in j.note


def test_resolver_other_exception_is_fail_even_with_a_user_setting():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32}, {"kind": "mamba", "block_size": 16}],
                            "cache": {"prefix_match_unit": 5}})
    j = judge(lay, out(lay, resolver_error=StageError("ZeroDivisionError", "x")))
    assert (j.verdict, j.tier) == (Verdict.FAIL, Tier.FUNCTION)


def test_warn_ok_not_expressible_and_error():
    assert judge(SEED, out(SEED, 98464, 1, manager_attempted=True)).verdict == Verdict.WARN
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "mamba", "block_size": 16}]})
    assert judge(lay, out(lay, 16, 16)).verdict == Verdict.OK
    assert judge(lay, out(lay, 16, 16)).tier == Tier.FUNCTION  # no manager ran
    ne = Outcome(layout_hash="x", vllm_version="t", expressible=False, not_expressible="no field")
    assert judge(lay, ne).verdict == Verdict.NOT_EXPRESSIBLE
    err = out(lay, 16, 16, run_error=StageError("RuntimeError", "no CPU kernel"))
    assert judge(lay, err).verdict == Verdict.ERROR


def test_engine_tier_outcome_names_the_engine():
    j = judge(SEED, out(SEED, 98464, 98464, manager_error=StageError("AssertionError", HYBRID_MSG)), Tier.ENGINE)
    assert (j.verdict, j.tier) == (Verdict.FAIL, Tier.ENGINE)


def test_judgement_round_trips_to_json():
    import json

    j = judge(SEED, out(SEED, 98464, 98464, manager_attempted=True, manager_error=StageError("AssertionError", HYBRID_MSG)))
    d = json.loads(json.dumps(j.to_dict()))
    assert d["verdict"] == "FAIL" and d["tier"] == "manager" and d["explained"][0]["contract"] == "hybrid.group_multiple_of_hash"
