"""Replay layer without vLLM: recipes, failure classes, engine verdicts, synthesis choice, CLI edges."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvproof.judging.judge import Judgement
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof.result import Result
from kvproof.replay import bisect, cli, core
from kvproof.tiers import classify, registry, synth
from kvproof.tiers.engine import EngineRun
from kvproof.tiers.row import ReplayRow
from kvproof.tiers.families import (FAMILIES, SEED_HIDDEN_STATES, SEED_SLIDING_WINDOW, SSM_STATE_DTYPE, BootResult,
                                     Recipe)
from kvproof import facts
from kvproof.verdicts import Tier, Verdict

SEED = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 128, "count": 2},
                                    {"kind": "sliding_window", "block_size": 64, "sliding_window": 64}],
                         "cache": {"block_size": 64}})
SEED_CLASS = classify.FailureClass(Verdict.FAIL, ("block_pool.target_multiple_of_hash",
                                                  "hybrid.group_multiple_of_hash"))
MSG = ("Each KV cache group's real block_size must be divisible by hash_block_size. "
       "block_sizes=[128, 128, 64], hash_block_size=128")


def boot_result(ok=True, scheduler=128, hash_size=64, stage="done", error=("", ""), frame="", **kw):
    groups = kw.pop("groups", [{"kind": "mamba", "block_size": 128, "layers": 1},
                               {"kind": "mamba", "block_size": 128, "layers": 1},
                               {"kind": "sliding_window", "block_size": 64, "sliding_window": 64, "layers": 1}])
    return BootResult(ok=ok, release=kw.pop("release", "0.27.0"), recipe=SEED_SLIDING_WINDOW.to_dict(), stage=stage,
                      groups=groups, cache_block_size=kw.pop("cache", 64), mamba_cache_mode="align",
                      enable_prefix_caching=kw.pop("pc", True), kv_connector=kw.pop("connector", None),
                      max_model_len=2048, scheduler_block_size=scheduler, hash_block_size=hash_size,
                      error_type=error[0], error_message=error[1], error_frame=frame, **kw)


# --- recipes ------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_renders_a_config_and_engine_args(family):
    r = Recipe(family=family)
    cfg = r.hf_config()
    assert cfg["architectures"] and cfg["num_hidden_layers"] >= 2
    kw = r.llm_kwargs("/m", "/s")
    assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] and kw["enforce_eager"]
    assert kw["mamba_cache_mode"] == "align" and kw["kv_cache_memory_bytes"] > 0
    assert Recipe.from_dict(json.loads(json.dumps(r.to_dict()))) == r


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_pins_the_ssm_state_dtype_so_every_cpu_builds_the_same_layout(family):
    """AMX CPUs force a float32 SSM state, the CPU GDN kernel needs one: pass it on every CPU (families.py)."""
    r = Recipe(family=family)
    assert r.llm_kwargs("/m", "/s")["mamba_ssm_cache_dtype"] == SSM_STATE_DTYPE == "float32"
    assert r.dtype == "bfloat16"  # the CPU GDN path asserts bf16 activations
    assert "mamba_ssm_cache_dtype" not in r.but(mamba_ssm_cache_dtype="auto").llm_kwargs("/m", "/s")
    assert "ssm_state=auto" in r.but(mamba_ssm_cache_dtype="auto").describe()
    # a corpus recipe written before the knob existed gets the pinned dtype too
    old = {k: v for k, v in r.to_dict().items() if k != "mamba_ssm_cache_dtype"}
    assert Recipe.from_dict(old).mamba_ssm_cache_dtype == SSM_STATE_DTYPE


def test_hidden_state_extraction_adds_speculative_method_and_connector():
    kw = SEED_HIDDEN_STATES.llm_kwargs("/m", "/s")
    assert kw["speculative_config"]["method"] == "extract_hidden_states"
    assert kw["speculative_config"]["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert kw["kv_transfer_config"]["kv_connector"] == facts.HIDDEN_STATES_CONNECTOR
    assert SEED_HIDDEN_STATES.connector_name == facts.HIDDEN_STATES_CONNECTOR


def test_nemotron_pattern_and_sliding_window_reach_the_config():
    cfg = SEED_SLIDING_WINDOW.but(pattern="M*M*").hf_config()
    assert cfg["hybrid_override_pattern"] == "M*M*" and cfg["num_hidden_layers"] == 4
    assert cfg["sliding_window"] == 64


def test_key_is_stable_and_knob_sensitive():
    assert SEED_SLIDING_WINDOW.key() == Recipe.from_dict(SEED_SLIDING_WINDOW.to_dict()).key()
    assert SEED_SLIDING_WINDOW.key() != SEED_SLIDING_WINDOW.but(block_size=64).key()


def test_tricks_are_labelled():
    assert SEED_SLIDING_WINDOW.tricks() == []
    assert SEED_SLIDING_WINDOW.but(max_model_len=64).tricks() == ["max_model_len=64 (tiny context)"]


def test_candidates_are_unique_and_realistic_first():
    for family in FAMILIES:
        cands = synth.candidates(family)
        assert len({c.key() for c in cands}) == len(cands)
        tricky = [bool(c.tricks()) for c in cands]
        assert tricky == sorted(tricky), f"{family}: a trick comes before a realistic recipe"


# --- classes and engine verdicts ---------------------------------------------------

def test_failure_class_of_the_seed_on_027_resolution():
    from kvproof.outcome import Outcome
    out = Outcome(layout_hash=SEED.content_hash(), vllm_version="0.27.0", scheduler_block_size=128, hash_block_size=128)
    assert classify.failure_class(SEED, out) == SEED_CLASS


def test_covers_needs_same_verdict_and_a_superset_of_contracts():
    live = classify.FailureClass(Verdict.FAIL, SEED_CLASS.ids + ("manager.constructs",))
    assert live.covers(SEED_CLASS)
    assert not SEED_CLASS.covers(live)
    assert not classify.FailureClass(Verdict.WARN, SEED_CLASS.ids).covers(SEED_CLASS)
    assert classify.FailureClass("FAIL", SEED_CLASS.ids) == SEED_CLASS  # names from JSON parse to the enum
    assert str(SEED_CLASS).startswith("FAIL{")


def test_startup_assertion_is_an_engine_fail_with_the_seed_class():
    b = boot_result(ok=False, hash_size=128, stage="engine", error=("AssertionError", MSG),
                    frame="vllm/v1/core/kv_cache_coordinator.py:563 in __init__")
    ev = classify.engine_verdict(b)
    assert ev.verdict is Verdict.FAIL and ev.tier is Tier.ENGINE and ev.cls.covers(SEED_CLASS)
    assert "kv_cache_coordinator.py" in ev.detail and MSG in ev.detail


def test_boot_and_generate_is_ok():
    b = boot_result(token_ids=[[1, 2, 3]], release="0.28.0")
    ev = classify.engine_verdict(b)
    assert (ev.verdict, ev.detail) == (Verdict.OK, "booted and generated")
    assert ev.layout.summary().startswith("mamba:128x2,sliding_window:64 cache=64")


def test_a_booted_engine_whose_layout_breaks_a_connector_contract_is_latent_not_fail():
    """The contracts judging a live layout is a prediction: the engine booted and served, so LATENT."""
    groups = [{"kind": "mamba", "block_size": 2048}, {"kind": "mamba", "block_size": 2048},
              {"kind": "full_attention", "block_size": 128}, {"kind": "hidden_state", "block_size": 42}]
    b = boot_result(groups=groups, cache=42, pc=False, connector=facts.HIDDEN_STATES_CONNECTOR,
                    scheduler=43008, hash_size=43008, token_ids=[[1, 2]])
    ev = classify.engine_verdict(b)
    assert ev.verdict is Verdict.LATENT and ev.tier is Tier.ENGINE
    assert ev.cls.verdict is Verdict.FAIL and "connector.block_multiple_of_hash" in ev.cls.ids
    assert "connector.block_multiple_of_hash" in ev.contracts and "connector.block_multiple_of_hash" in ev.detail
    assert ev.detail.startswith("booted and generated, but the contracts flag")


def test_a_consumer_assertion_while_serving_is_an_engine_fail():
    b = boot_result(ok=False, stage="generate", error=("AssertionError", "num_tokens % hash_block_size"),
                    frame="vllm/v1/core/block_pool.py:210 in cache_full_blocks")
    ev = classify.engine_verdict(b)
    assert ev.verdict is Verdict.FAIL and ev.detail.startswith("serving:")


def test_served_outputs_that_differ_with_prefix_caching_are_a_judged_engine_fail():
    """The prefix-caching comparison is an observation the one judge turns into FAIL (rule 4)."""
    sv = {"prompts": 2, "prefix_len": 64, "cached_tokens": [0, 64], "match": False, "mismatch": [1]}
    ev = classify.engine_verdict(boot_result(token_ids=[[1, 2]], release="0.28.0", serve=sv))
    assert ev.verdict is Verdict.FAIL and ev.tier is Tier.ENGINE and ev.detail.startswith("serving:")
    assert ev.judgement.verdict is Verdict.FAIL and ev.judgement.observed.type == "oracle:prefix_caching_output"
    same = classify.engine_verdict(boot_result(token_ids=[[1, 2]], release="0.28.0", serve={**sv, "match": True}))
    assert same.verdict is Verdict.OK and same.judgement.verdict is Verdict.OK


def test_a_boot_without_a_kv_layout_is_judged_error():
    for b in (BootResult(ok=False, stage="engine", error_type="ValueError", error_message="bad config"),
              BootResult(ok=True, stage="done")):
        ev = classify.engine_verdict(b)
        assert ev.verdict is Verdict.ERROR and ev.judgement.verdict is Verdict.ERROR and ev.layout is None
        assert ev.detail.startswith("unrelated to block sizes: ")


def test_a_cpu_kernel_error_while_serving_is_error_with_its_cause():
    """The GDN kernel's dtype refusal says nothing about block sizes: ERROR, cause and CPU printed."""
    b = boot_result(ok=False, stage="generate", release="0.28.0",
                    error=("RuntimeError", "chunk_gated_delta_rule_cpu: initial_state dtype mismatch"),
                    frame="vllm/_custom_ops.py:3558 in chunk_gated_delta_rule_cpu", cpu="AVX512_BF16 (_C)")
    ev = classify.engine_verdict(b)
    assert ev.verdict is Verdict.ERROR
    assert "initial_state dtype mismatch" in ev.detail and "AVX512_BF16" in ev.detail
    assert "unrelated to block sizes" in ev.detail


@pytest.mark.parametrize("stage,verdict", [("timeout", Verdict.ERROR), ("crash", Verdict.ERROR)])
def test_timeouts_and_crashes_say_nothing_about_block_sizes(stage, verdict):
    b = BootResult(ok=False, stage=stage, error_type=stage, error_message="x")
    assert classify.engine_verdict(b).verdict == verdict


def test_an_unrelated_model_error_is_error_not_fail():
    b = BootResult(ok=False, stage="engine", error_type="ValueError", error_message="bad config")
    ev = classify.engine_verdict(b)
    assert ev.verdict is Verdict.ERROR and "bad config" in ev.detail


# --- synthesis choice (probe faked) ------------------------------------------------------

def test_synthesiser_prefers_realistic_and_close_kinds(monkeypatch, tmp_path):
    monkeypatch.setenv("KVPROOF_SYNTH_HOME", str(tmp_path))
    cands = synth.candidates("nemotron_h")
    fail = dict(ok=False, hash_size=128, stage="engine", error=("AssertionError", MSG),
                frame="vllm/v1/core/kv_cache_coordinator.py:563 in __init__")

    def fake_probe(env, recipes, cache=None, echo=None):
        out = {}
        for r in recipes:
            if r.kv_cache_dtype_skip_layers or r.aux_layers:
                out[r.key()] = boot_result(**fail)
            else:
                out[r.key()] = boot_result(token_ids=[])
            out[r.key()].recipe = r.to_dict()
        return out

    monkeypatch.setattr(synth, "probe", fake_probe)
    monkeypatch.setattr(synth, "env_release", lambda env: "0.27.0")
    rep = synth.synthesise(SEED, object(), SEED_CLASS, families=("nemotron_h",))
    assert rep.found and rep.tricks == []
    assert rep.recipe.kv_cache_dtype_skip_layers == ("sliding_window",)  # SW kinds beat hidden-state ones
    assert rep.recipe == next(c for c in cands if c.kv_cache_dtype_skip_layers)


def test_synthesiser_explains_a_missing_reproducer(monkeypatch, tmp_path):
    monkeypatch.setenv("KVPROOF_SYNTH_HOME", str(tmp_path))
    monkeypatch.setattr(synth, "probe", lambda env, recipes, cache=None, echo=None:
                        {r.key(): boot_result(token_ids=[]) for r in recipes})
    monkeypatch.setattr(synth, "env_release", lambda env: "0.27.0")
    lay = Layout.from_dict({"groups": [{"kind": "mla", "block_size": 64}, {"kind": "mamba", "block_size": 128}],
                            "cache": {"block_size": 64}, "dcp": 2})
    rep = synth.synthesise(lay, object(), SEED_CLASS, families=("nemotron_h",))
    assert not rep.found
    assert "dcp=2" in rep.reason and "mla" in rep.reason and str(SEED_CLASS) in rep.reason


# --- expectations, record, bisect, CLI -------------------------------------------------------

def row(release, tier, verdict, expected=None, layout=SEED, engine=None):
    """A replay row (``ReplayRow``) as ``core.replay`` makes it: ``expected`` is recorded in the
    layout's meta; ``verdict`` None is a row with nothing judged (no engine reproducer)."""
    if expected is not None:
        layout = layout.with_meta(expect={release: {str(tier): expected.name}})
    j = None if verdict is None else Judgement(verdict, tier)
    result = (registry.runner(Tier.ENGINE).record(engine) if engine is not None
              else Result(tier, None, skip="no engine reproducer: none" if verdict is None else ""))
    return ReplayRow("f", layout, "env", result, j, release, tier)


def test_contradiction_only_against_a_recorded_expectation():
    assert core.contradicts(row("0.27.0", Tier.ENGINE, Verdict.OK, Verdict.FAIL))
    assert core.contradicts(row("0.27.0", Tier.ENGINE, Verdict.LATENT, Verdict.FAIL))
    assert not core.contradicts(row("0.27.0", Tier.ENGINE, Verdict.OK, None))
    assert not core.contradicts(row("0.27.0", Tier.ENGINE, None, Verdict.FAIL))
    assert core.expected(row("0.27.0", Tier.ENGINE, None, Verdict.FAIL)) is Verdict.FAIL
    assert core.expected(row("0.28.0", Tier.MANAGER, Verdict.OK)) is None  # nothing recorded for it


def test_tier_rows_are_the_runners_rows_with_their_release_and_tier():
    """A bridge row gives the function row (its outcome without the manager stage, judged so) and
    the manager row (the runner's own, answering for the manager tier though the resolver raised)."""
    raised = Outcome(layout_hash=SEED.content_hash(), vllm_version="0.27.0", scheduler_block_size=None,
                     hash_block_size=None, resolver_error=StageError("AssertionError", "boom", "vllm/x.py:1 in f"),
                     manager_attempted=False)
    manager = registry.runner(Tier.MANAGER)
    runner = manager.row("f", SEED, "env", manager.record(raised))
    assert runner.tier is Tier.FUNCTION
    fn = registry.runner(Tier.FUNCTION).replay_row(runner, "0.27.0")
    mgr = manager.replay_row(runner, "0.27.0")
    assert (fn.tier, fn.verdict, mgr.tier, mgr.verdict) == (Tier.FUNCTION, Verdict.FAIL, Tier.MANAGER, Verdict.FAIL)
    assert core.observed_by(mgr) == "manager" and core.replay_dict(mgr)["tier"] == "manager"
    assert "AssertionError: boom" in core.detail(fn) and core.data(fn)["vllm"] == "0.27.0"
    built = replace(raised, resolver_error=None, scheduler_block_size=128, hash_block_size=64,
                    manager_attempted=True, manager_error=StageError("AssertionError", "m", "vllm/c.py:2 in g"))
    fn = registry.runner(Tier.FUNCTION).replay_row(manager.row("f", SEED, "env", manager.record(built)), "0.27.0")
    assert fn.outcome.manager_error is None and fn.judgement.tier is Tier.FUNCTION and fn.verdict is not Verdict.FAIL


def test_rows_carry_enums_and_name_the_tier_that_observed_a_fail():
    r = row("0.27.0", Tier.ENGINE, Verdict.FAIL, Verdict.FAIL)
    assert (r.tier, r.verdict, core.expected(r)) == (Tier.ENGINE, Verdict.FAIL, Verdict.FAIL)
    d = core.replay_dict(r)
    assert (d["tier"], d["verdict"], d["observed_by"], d["expected"]) == ("engine", "FAIL", "engine", "FAIL")
    assert d["layout_hash"] == SEED.content_hash() and d["release"] == "0.27.0"
    assert core.replay_dict(row("0.28.0", Tier.ENGINE, Verdict.LATENT))["observed_by"] is None
    table = core.format_table([r])
    assert "engine" in table and "FAIL" in table


def test_a_row_without_a_reproducer_prints_skip_and_is_never_recorded(tmp_path):
    engine = registry.runner(Tier.ENGINE)
    skip = ReplayRow("f", SEED, "env", engine.record(EngineRun({"source": "none", "reason": "no stored recipe"})),
                     None, "0.28.0", Tier.ENGINE)
    assert skip.verdict is None and skip.tier is Tier.ENGINE and skip.message() == skip.skip
    d = core.replay_dict(skip)
    assert (d["verdict"], d["observed_by"], d["contradicts"]) == (core.SKIP, None, False)
    assert d["detail"] == "no engine reproducer: no stored recipe"
    assert d["synth"] == {"source": "none", "reason": "no stored recipe"}
    assert "SKIP" in core.format_table([skip])
    path = tmp_path / f"{SEED.content_hash()}.json"
    path.write_text(json.dumps(SEED.to_dict()))
    assert core.record(str(path), SEED, [skip]).meta["expect"] == {}


def test_record_writes_meta_and_keeps_the_content_hash(tmp_path):
    path = tmp_path / f"{SEED.content_hash()}.json"
    path.write_text(json.dumps(SEED.to_dict()))
    run = EngineRun({"source": "synthesiser", "target": "FAIL{}"}, SEED_SLIDING_WINDOW, boot_result(token_ids=[[1]]))
    rows = [row("0.27.0", Tier.MANAGER, Verdict.FAIL),
            row("0.28.0", Tier.ENGINE, Verdict.OK, engine=run),
            row("0.29.0", Tier.ENGINE, Verdict.LATENT),
            row("0.32.0", Tier.ENGINE, Verdict.ERROR),
            row("0.33.0", Tier.ENGINE, None)]
    core.record(str(path), SEED, rows)
    back = Layout.from_json(path.read_text())
    assert back.content_hash() == SEED.content_hash()
    assert back.meta["expect"] == {"0.27.0": {"manager": "FAIL"}, "0.28.0": {"engine": "OK"},
                                   "0.29.0": {"engine": "LATENT"}}
    assert core.expectation(back, "0.29.0", Tier.ENGINE) is Verdict.LATENT
    assert back.meta["engine"]["found_by"] == "synthesiser"
    assert Recipe.from_dict(back.meta["engine"]["recipe"]) == SEED_SLIDING_WINDOW


def test_first_fixed_release():
    rows = [row(r, Tier.ENGINE, v) for r, v in
            [("0.27.0", Verdict.FAIL), ("0.28.0", Verdict.OK), ("0.32.0", Verdict.OK)]]
    assert bisect.first_fixed(rows, Tier.ENGINE) == ("0.28.0", ["0.27.0"])
    assert bisect.first_fixed(rows[:1], "engine") == (None, ["0.27.0"])
    assert "0.28.0" in bisect.matrix(rows, ["engine"])
    latent = [rows[0], row("0.28.0", Tier.ENGINE, Verdict.LATENT)]
    assert bisect.first_fixed(latent, Tier.ENGINE) == ("0.28.0", ["0.27.0"])
    error = [rows[0], row("0.28.0", Tier.ENGINE, Verdict.ERROR)]
    assert bisect.first_fixed(error, Tier.ENGINE) == (None, ["0.27.0"])  # an ERROR says nothing
    skipped = [rows[0], row("0.28.0", Tier.ENGINE, None)]
    assert bisect.first_fixed(skipped, Tier.ENGINE) == (None, ["0.27.0"])  # nor does a SKIP
    assert "SKIP" in bisect.matrix(skipped, ["engine"])


def test_cli_input_errors_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for argv in ([str(tmp_path / "missing.json"), "--vllm", "0.27.0"], ["x.json", "--tier", "nope"],
                 [str(bad), "--vllm", "0.27.0"], []):
        for main, prog in ((cli.main, "kvproof replay"), (bisect.main, "kvproof bisect")):
            assert main(argv) == 2, (prog, argv)
            captured = capsys.readouterr()
            lines = captured.err.splitlines()
            assert len(lines) == 1 and lines[0].startswith(prog + ": "), (prog, argv, captured.err)
            assert captured.out == "", (prog, argv)


def test_version_order():
    assert sorted(["0.32.0", "0.28.0", "0.27.0", "0.100.0"], key=core.version_key) == \
        ["0.27.0", "0.28.0", "0.32.0", "0.100.0"]
