"""The one judge over hand-made Outcomes (no vLLM needed): one test per rule."""

from kvproof.judging.judge import judge
from kvproof.inputs.layout import Layout
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


def test_by_design_refusal_is_unsupported_with_its_message():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "sliding_window", "block_size": 16}], "dcp": 2})
    err = StageError("AssertionError", "DCP with hybrid KV cache layouts only supports full-attention and Mamba "
                                       "groups, got: SlidingWindowSpec.")
    j = judge(lay, out(lay, 32, 32, sizes=[32, 32], manager_attempted=True, manager_error=err))
    assert j.verdict == Verdict.UNSUPPORTED and j.by_design and j.contract == "hybrid.dcp_full_attention_or_mamba"
    assert "DCP with hybrid KV cache layouts" in j.line() and Verdict.REJECTED < j.verdict < Verdict.LATENT
    # the same assertion with another message is a real failure
    other = StageError("AssertionError", "Each KV cache group's real block_size must be divisible by hash_block_size.")
    j = judge(lay, out(lay, 32, 32, sizes=[32, 32], manager_attempted=True, manager_error=other))
    assert j.verdict == Verdict.FAIL and not j.by_design


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


# --- consumer tier: judge_consumer over hand-made ConsumerResults (rules C1-C6) ---------------

from kvproof.consumer.oracles import Efficiency, Observation  # noqa: E402
from kvproof.consumer.result import ConsumerResult  # noqa: E402
from kvproof.judging.judge import judge_consumer  # noqa: E402

FIXED = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544, "count": 4},
                                     {"kind": "hidden_state", "block_size": 181}],
                          "cache": {"block_size": 181, "mamba_cache_mode": "align", "enable_prefix_caching": True},
                          "kv_connector": "SimpleCPUOffloadConnector"})


def cres(obs=(), s=98464, h=1, eff=None, **kw):
    obs = [Observation(*o) for o in obs]
    counts = {}
    for o in obs:
        counts[o.oracle] = counts.get(o.oracle, 0) + 1
    return ConsumerResult("x", "t", obs, counts, eff or Efficiency(100, 50, 50, 0, 2), scheduler_block_size=s,
                          hash_block_size=h, **kw)


def test_consumer_not_expressible_and_setup_error():
    assert judge_consumer(cres(not_expressible="no SupportsHMA")).verdict == Verdict.NOT_EXPRESSIBLE
    j = judge_consumer(cres(setup_error="TypeError: x"))
    assert (j.verdict, j.tier) == (Verdict.ERROR, Tier.CONSUMER)


def test_consumer_exception_is_fail_explained_by_the_contract_whose_file_raised():
    msg = ("Scheduler(): AssertionError: Each KV cache group's real block_size must be divisible by "
           "hash_block_size. block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464 "
           "@ vllm/v1/core/kv_cache_coordinator.py:563 in __init__")
    j = judge_consumer(cres([("exception", 0, msg)], h=98464), FIXED)
    assert (j.verdict, j.tier) == (Verdict.FAIL, Tier.CONSUMER)
    assert j.observed.type == "AssertionError" and j.observed.frame.startswith("vllm/v1/core/kv_cache_coordinator")
    assert j.contract == "hybrid.group_multiple_of_hash"
    assert "connector.block_multiple_of_hash" in {v.contract.id for v in j.latent}


def test_consumer_oracle_observation_is_fail_with_its_oracle_type():
    j = judge_consumer(cres([("kv_event", 3, "BlockStored(...): hash #0 names no token prefix")]))
    assert j.verdict == Verdict.FAIL and j.observed.type == "oracle:kv_event" and "step 3" in j.note


def test_consumer_resolver_value_error_rejected_only_for_the_users_pmu():
    pmu = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "mamba", "block_size": 32}],
                            "cache": {"block_size": 16, "prefix_match_unit": 5}})
    err = "resolver: ValueError: prefix_match_unit 5 does not divide @ vllm/v1/core/kv_cache_utils.py:1 in f"
    assert judge_consumer(cres([("exception", 0, err)]), pmu).verdict == Verdict.REJECTED
    other = "resolver: ValueError: something else @ vllm/v1/core/kv_cache_utils.py:1 in f"
    assert judge_consumer(cres([("exception", 0, other)]), pmu).verdict == Verdict.FAIL


def test_consumer_by_design_and_harness_fed_frames():
    cl = ("AssertionError: KV cache groups with different block sizes are not compatible with chunked local "
          "attention now @ vllm/v1/core/single_type_kv_cache_manager.py:1325 in find_longest_cache_hit")
    j = judge_consumer(cres([("exception", 0, cl)]))
    assert j.verdict == Verdict.UNSUPPORTED and j.by_design
    fed = "AssertionError:  @ vllm/v1/core/sched/scheduler.py:3230 in _update_from_kv_xfer_finished"
    assert judge_consumer(cres([("exception", 5, fed)])).verdict == Verdict.ERROR
    ours = ("TypeError: lookup() takes 1 positional argument but 2 were given @ "
            "/root/.cache/kvproof/import-roots/ab/kvproof/consumer/harness.py:400 in lookup")
    assert judge_consumer(cres([("exception", 5, ours)])).verdict == Verdict.ERROR
    theirs = ours.replace("/root/.cache/kvproof/import-roots/ab/kvproof/consumer/harness.py", "vllm/v1/core/x.py")
    assert judge_consumer(cres([("exception", 5, theirs)])).verdict == Verdict.FAIL


def test_consumer_stalled_is_error_and_efficiency_warns_with_numbers():
    assert judge_consumer(cres([("stalled", 9, "3 requests unfinished")])).verdict == Verdict.ERROR
    poor = judge_consumer(cres(eff=Efficiency(1000, 800, 100, 0, 4)))
    assert poor.verdict == Verdict.WARN and poor.contract == "efficiency.consumer_prefix_reuse"
    assert "100 of 800" in poor.line()
    good = judge_consumer(cres(eff=Efficiency(1000, 800, 700, 50, 4)), FIXED)
    assert good.verdict == Verdict.WARN and good.contract == "efficiency.hash_block_size_1"  # hash 1 still warns
    assert judge_consumer(cres(eff=Efficiency(1000, 800, 700, 50, 4), h=16, s=16)).verdict == Verdict.OK


def test_refusing_a_dividing_prefix_match_unit_is_an_availability_fail():
    from kvproof.judging.judge import judge
    from kvproof.inputs.layout import Layout
    from kvproof.outcome import Outcome, StageError
    from kvproof.verdicts import Tier, Verdict

    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32},
                                       {"kind": "mamba", "block_size": 64}],
                            "cache": {"prefix_match_unit": 16, "mamba_cache_mode": "align"}})
    err = StageError("ValueError", "Invalid prefix_match_unit=16; KV cache group block sizes must be divisible")
    j = judge(lay, Outcome(lay.content_hash(), "0.32.0", resolver_error=err))
    assert (j.verdict, j.tier, j.contract) == (Verdict.FAIL, Tier.FUNCTION, "resolver.accepts_the_configuration")
    bad = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32},
                                       {"kind": "mamba", "block_size": 64}],
                            "cache": {"prefix_match_unit": 24, "mamba_cache_mode": "align"}})
    assert judge(bad, Outcome(bad.content_hash(), "0.32.0", resolver_error=err)).verdict == Verdict.REJECTED


def test_consumer_run_with_nothing_reusable_is_judged_without_dividing_by_zero():
    j = judge_consumer(cres(eff=Efficiency(64, 0, 0, 0, 2), h=16, s=16, hits=[{"truth": 0}]), FIXED)
    assert j.verdict in (Verdict.OK, Verdict.WARN) and "0 of 0" in j.note


def test_consumer_harness_error_is_error_never_ok_or_fail():
    j = judge_consumer(cres(harness_error="consumer harness: vllm ... lookup(self, keys, ctx) changed"))
    assert j.verdict == Verdict.ERROR and j.observed.type == "HarnessError"


def test_consumer_dcp_sliding_window_refusal_is_unsupported():
    sw = ("AssertionError: DCP not support sliding window attn now. @ "
          "vllm/v1/core/single_type_kv_cache_manager.py:971 in find_longest_cache_hit")
    assert judge_consumer(cres([("exception", 2, sw)])).verdict == Verdict.UNSUPPORTED


def test_consumer_resolver_refusal_is_the_function_tier_class():
    """A resolver exception met in a consumer run is judged and keyed as the function tier
    judges it (one class for both campaigns)."""
    from kvproof.judging.classkey import class_key
    from kvproof.inputs.layout import Layout
    lay = Layout.from_dict({"groups": [{"kind": "mla", "block_size": 1504, "tokens_per_state": 4},
                                       {"kind": "full_attention", "block_size": 1},
                                       {"kind": "mamba", "block_size": 1504}],
                            "cache": {"block_size": 1, "enable_prefix_caching": True, "mamba_cache_mode": "align"}})
    raised = ("resolver: ValueError: Invalid prefix_match_unit=1; prefix-cache boundaries must align with each "
              "spec's per-state compression. Got alignments=[4]. @ vllm/v1/core/kv_cache_utils.py:1 in "
              "resolve_kv_cache_block_sizes")
    j = judge_consumer(cres([("exception", 0, raised)]), lay)
    assert j.verdict == Verdict.FAIL and str(j.tier) == "function"
    assert str(class_key(j, lay)) == ("function|resolver.accepts_the_configuration[align]|ValueError|"
                                      "vllm/v1/core/kv_cache_utils.py:resolve_kv_cache_block_sizes")


def test_offloading_connector_refusal_is_by_design_only_with_prefix_caching_off():
    """OffloadingConnector's own divisibility assert names its remedy (--enable-prefix-caching).
    With prefix caching off that is a refusal by design (UNSUPPORTED, a class of its own); with
    prefix caching on the remedy does not apply (the 0.27 seed layout reaches it with
    tokens_per_hash=98464): the connector contract's violation, FAIL."""
    from kvproof.judging.classkey import class_key
    from kvproof.inputs.layout import Layout
    off = ("AssertionError: tokens_per_block=544 not divisible by tokens_per_hash=98464. Hybrid models (e.g. "
           "Mamba+Attention) need --enable-prefix-caching to align block sizes. @ vllm/distributed/kv_transfer/"
           "kv_connector/v1/offloading/config.py:91 in build_offloading_config")
    groups = [{"kind": "full_attention", "block_size": 8}, {"kind": "mamba", "block_size": 8192}]
    conn = "OffloadingConnector"
    pc_off = Layout.from_dict({"groups": groups, "kv_connector": conn,
                               "cache": {"block_size": 8, "enable_prefix_caching": False, "mamba_cache_mode": "none"}})
    seed = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544}] * 4
                             + [{"kind": "hidden_state", "block_size": 181}], "kv_connector": conn,
                             "cache": {"block_size": 181, "enable_prefix_caching": True, "mamba_cache_mode": "align"}})
    by_design = judge_consumer(cres([("exception", 0, off)]), pc_off)
    failure = judge_consumer(cres([("exception", 0, off)]), seed)
    assert by_design.verdict == Verdict.UNSUPPORTED and by_design.by_design, by_design.line()
    assert failure.verdict == Verdict.FAIL and not failure.by_design, failure.line()
    assert judge_consumer(cres([("exception", 0, off)])).verdict == Verdict.FAIL  # no layout: no exemption
    assert class_key(by_design, pc_off) != class_key(failure, seed)
    assert class_key(by_design, pc_off).check.startswith("by-design:")


def test_the_ideal_respects_a_requests_own_read_limit():
    """Prompt logprobs limit what a request reads from the prefix cache (0.34: up to its first
    scored row, and no connector); the ideal never asks more of the cache than the request allows."""
    from types import SimpleNamespace
    from kvproof.consumer.efficiency import read_limit
    from kvproof.judging.judge import ideal_hit
    r = SimpleNamespace(hash_block_size=16, hash_lookahead=0, eagle_drop=False)
    row = {"truth": 204, "lcp": 200, "tokens": 205, "hit": 96, "external": 0}
    assert ideal_hit(r, row) == 192 and ideal_hit(r, {**row, "limit": 100}) == 96
    assert ideal_hit(r, {**row, "limit": 0}) == 0
    # the request's own settings, as each release exposes them (0.34: an attribute it computes)
    assert read_limit(SimpleNamespace(get_prefix_cache_hit_limit=lambda: 5, prefix_cache_hit_limit=5)) == 5
    assert read_limit(SimpleNamespace(get_prefix_cache_hit_limit=lambda: None, prefix_cache_hit_limit=None)) is None
    assert read_limit(SimpleNamespace(get_skip_reading_prefix_cache=lambda: True)) == 0
    assert read_limit(SimpleNamespace(get_skip_reading_prefix_cache=lambda: False)) is None
    assert read_limit(SimpleNamespace()) is None


def test_a_frontend_breaking_the_prefix_hash_config_is_unsupported_and_an_exact_one_is_judged():
    """C1b: what a contract-breaking frontend caused is shown, never FAIL; the exact frontend is judged."""
    from kvproof import facts

    obs = [("hash_chain", 0, "r0: the engine trusted ... differ", "frontend-trusted|frontend_block_hashes")]
    tally = {"requests": 2, "trusted": 2, "ignored": 0, "differ": 2, "first_differ": "r0: 13 of 13 blocks"}
    for hasher in facts.CONTRACT_BREAKING_HASHERS:
        r = cres(obs)
        r.frontend = {"hasher": hasher, **tally}
        j = judge_consumer(r)
        assert j.verdict is Verdict.UNSUPPORTED and "trusted 2 and ignored 0 of 2" in j.note, j.line()
        assert "then hash_chain" in j.note
    r = cres(obs, frontend={"hasher": "frontend", **tally})
    assert judge_consumer(r).verdict is Verdict.FAIL


def test_what_vllm_raised_leads_and_the_oracles_earlier_observation_follows():
    """C4: an exception later in the run is the verdict's observed error; the first oracle note follows."""
    r = cres([("prefix_hit", 3, "group 4 (HiddenStateCacheSpec) holds 9 blocks of 181 after a reconciled hit of 1088",
               "coord-held|HybridKVCacheCoordinator (reconciled)"),
              ("exception", 4, "AssertionError: ", "vllm/v1/core/single_type_kv_cache_manager.py:_apply_cow")])
    j = judge_consumer(r)
    assert j.verdict is Verdict.FAIL and j.observed.type == "AssertionError", j.line()
    assert j.note.startswith("exception at step 4") and "before it, prefix_hit at step 3: group 4" in j.note, j.note
    only = judge_consumer(cres([("prefix_hit", 3, "x", "coord-held|HybridKVCacheCoordinator (reconciled)")]))
    assert only.observed.type == "oracle:prefix_hit" and "before it" not in only.note
