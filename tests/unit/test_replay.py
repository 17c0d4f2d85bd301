"""Replay layer without vLLM: recipes, failure classes, engine verdicts, synthesis choice, CLI edges."""

from __future__ import annotations

import json

import pytest

from kvproof.layout import Layout
from kvproof.replay import bisect, classify, cli, core, synth
from kvproof.replay.families import FAMILIES, SEED_HIDDEN_STATES, SEED_SLIDING_WINDOW, BootResult, Recipe

SEED = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 128, "count": 2},
                                    {"kind": "sliding_window", "block_size": 64, "sliding_window": 64}],
                         "cache": {"block_size": 64}})
SEED_CLASS = classify.FailureClass("FAIL", ("block_pool.target_multiple_of_hash", "hybrid.group_multiple_of_hash"))
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


def test_hidden_state_extraction_adds_speculative_method_and_connector():
    kw = SEED_HIDDEN_STATES.llm_kwargs("/m", "/s")
    assert kw["speculative_config"]["method"] == "extract_hidden_states"
    assert kw["speculative_config"]["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert kw["kv_transfer_config"]["kv_connector"] == "ExampleHiddenStatesConnector"
    assert SEED_HIDDEN_STATES.connector_name == "ExampleHiddenStatesConnector"


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
    live = classify.FailureClass("FAIL", SEED_CLASS.ids + ("manager.constructs",))
    assert live.covers(SEED_CLASS)
    assert not SEED_CLASS.covers(live)
    assert not classify.FailureClass("WARN", SEED_CLASS.ids).covers(SEED_CLASS)


def test_startup_assertion_is_an_engine_fail_with_the_seed_class():
    b = boot_result(ok=False, hash_size=128, stage="engine", error=("AssertionError", MSG),
                    frame="vllm/v1/core/kv_cache_coordinator.py:563 in __init__")
    ev = classify.engine_verdict(b)
    assert ev.verdict == "FAIL" and ev.cls.covers(SEED_CLASS)
    assert "kv_cache_coordinator.py" in ev.detail and MSG in ev.detail


def test_boot_and_generate_is_ok():
    b = boot_result(token_ids=[[1, 2, 3]], release="0.28.0")
    ev = classify.engine_verdict(b)
    assert (ev.verdict, ev.detail) == ("OK", "booted and generated")
    assert ev.layout.summary().startswith("mamba:128x2,sliding_window:64 cache=64")


def test_a_booted_engine_whose_layout_breaks_a_connector_contract_is_a_latent_fail():
    groups = [{"kind": "mamba", "block_size": 2048}, {"kind": "mamba", "block_size": 2048},
              {"kind": "full_attention", "block_size": 128}, {"kind": "hidden_state", "block_size": 42}]
    b = boot_result(groups=groups, cache=42, pc=False, connector="ExampleHiddenStatesConnector",
                    scheduler=43008, hash_size=43008)
    ev = classify.engine_verdict(b)
    assert ev.verdict == "FAIL" and "connector.block_multiple_of_hash" in ev.cls.ids
    assert ev.detail.startswith("booted, but")


@pytest.mark.parametrize("stage,verdict", [("timeout", "ERROR"), ("crash", "ERROR")])
def test_timeouts_and_crashes_say_nothing_about_block_sizes(stage, verdict):
    b = BootResult(ok=False, stage=stage, error_type=stage, error_message="x")
    assert classify.engine_verdict(b).verdict == verdict


def test_an_unrelated_model_error_is_error_not_fail():
    b = BootResult(ok=False, stage="engine", error_type="ValueError", error_message="bad config")
    assert classify.engine_verdict(b).verdict == "ERROR"


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

def test_contradiction_only_against_a_recorded_expectation():
    assert core.ReplayRow("f", "h", "0.27.0", "engine", "OK", "FAIL").contradicts
    assert not core.ReplayRow("f", "h", "0.27.0", "engine", "OK", None).contradicts
    assert not core.ReplayRow("f", "h", "0.27.0", "engine", core.SKIP, "FAIL").contradicts


def test_record_writes_meta_and_keeps_the_content_hash(tmp_path):
    path = tmp_path / f"{SEED.content_hash()}.json"
    path.write_text(json.dumps(SEED.to_dict()))
    boot = boot_result(token_ids=[[1]]).to_dict()
    rows = [core.ReplayRow(str(path), SEED.content_hash(), "0.27.0", "manager", "FAIL"),
            core.ReplayRow(str(path), SEED.content_hash(), "0.28.0", "engine", "OK",
                           data={"recipe": "x", "boot": boot, "synth": {"source": "synthesiser", "target": "FAIL{}"}}),
            core.ReplayRow(str(path), SEED.content_hash(), "0.32.0", "engine", "ERROR")]
    core.record(str(path), SEED, rows)
    back = Layout.from_json(path.read_text())
    assert back.content_hash() == SEED.content_hash()
    assert back.meta["expect"] == {"0.27.0": {"manager": "FAIL"}, "0.28.0": {"engine": "OK"}}
    assert back.meta["engine"]["found_by"] == "synthesiser"
    assert Recipe.from_dict(back.meta["engine"]["recipe"]) == SEED_SLIDING_WINDOW


def test_first_fixed_release():
    rows = [core.ReplayRow("f", "h", r, "engine", v) for r, v in
            [("0.27.0", "FAIL"), ("0.28.0", "OK"), ("0.32.0", "OK")]]
    assert bisect.first_fixed(rows, "engine") == ("0.28.0", ["0.27.0"])
    assert bisect.first_fixed(rows[:1], "engine") == (None, ["0.27.0"])
    assert "0.28.0" in bisect.matrix(rows, ["engine"])


def test_cli_input_errors_exit_2(tmp_path, capsys):
    assert cli.main([str(tmp_path / "missing.json"), "--vllm", "0.27.0"]) == 2
    assert cli.main(["x.json", "--tier", "nope"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cli.main([str(bad), "--vllm", "0.27.0"]) == 2
    assert "error" in capsys.readouterr().err


def test_version_order():
    assert sorted(["0.32.0", "0.28.0", "0.27.0", "0.100.0"], key=core.version_key) == \
        ["0.27.0", "0.28.0", "0.32.0", "0.100.0"]
