"""Config: JSON in/out and one-line validation errors (no vLLM)."""

from __future__ import annotations

import json

import pytest
from kvproof import facts

from kvproof.inputs.config import Config
from kvproof.derivation import all_configs, enumerate_configs, layout_dict
from kvproof.errors import KvproofError, LayoutError
from kvproof.inputs.layout import Layout
from kvproof.tiers.families import SEED_HIDDEN_STATES, Recipe


def test_round_trip_and_minimal_json():
    c = Config(family="granite_moe_hybrid", block_size=32, mamba_cache_mode="align", aux_layers=(),
               kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=("sliding_window",), dcp=2)
    assert Config.from_dict(c.to_dict()) == c
    assert Config.from_json(c.to_json()) == c
    assert json.loads(c.to_json()) == {"family": "granite_moe_hybrid", "block_size": 32, "mamba_cache_mode": "align",
                                       "kv_cache_dtype": "fp8", "kv_cache_dtype_skip_layers": ["sliding_window"],
                                       "dcp": 2}
    assert Config.from_dict({}) == Config()


def test_composes_the_boot_recipe():
    c = Config.from_recipe(SEED_HIDDEN_STATES)
    assert Recipe.from_config(c) == SEED_HIDDEN_STATES
    assert c.connector_name == facts.HIDDEN_STATES_CONNECTOR
    kw = Config(dcp=2).llm_kwargs("/m", "/s")
    assert kw["decode_context_parallel_size"] == 2 and "mamba_cache_mode" not in kw
    assert "decode_context_parallel_size" not in Config().llm_kwargs("/m", "/s")
    assert Config(mamba_cache_mode="none").llm_kwargs("/m", "/s")["mamba_cache_mode"] == "none"
    assert Recipe.from_config(Config(block_size=16)) == Recipe(block_size=16, mamba_cache_mode=None)


@pytest.mark.parametrize("data, revision, words", [
    ({"famliy": "nemotron_h"}, None, ["unknown config field 'famliy'", "family"]),
    ({"family": "llama"}, None, ["family must be one of", "nemotron_h", '"llama"']),
    ({"block_size": "16"}, None, ["block_size must be an integer", '"16"']),
    ({"block_size": True}, None, ["block_size must be an integer"]),
    ({"block_size": 0}, None, ["block_size must be between 1"]),
    ({"enable_prefix_caching": "yes"}, None, ["enable_prefix_caching must be true or false"]),
    ({"mamba_cache_mode": "all"}, "0.32", ["mamba_cache_mode must be one of align, none in vLLM 0.32", '"all"']),
    ({"mamba_cache_mode": "partial"}, None, ["mamba_cache_mode must be one of align, all, none"]),
    ({"kv_connector": "NoSuchConnector"}, "0.27",
     ["kv_connector must be one of", facts.DEFAULT_CONNECTOR, "in vLLM 0.27", "NoSuchConnector"]),
    ({"kv_connector": facts.HIDDEN_STATES_CONNECTOR}, None, ["needs aux_layers"]),
    ({"aux_layers": [0, 9]}, None, ["aux_layers[1] must be between 0 and 3"]),
    ({"aux_layers": "0,1"}, None, ["aux_layers must be a list"]),
    ({"pattern": "MXM"}, None, ["pattern 'MXM' has 'X'"]),
    ({"pattern": "MM-"}, None, ["at least one M (mamba) and one * (attention)"]),
    ({"family": "qwen3_next", "sliding_window": 64}, None, ["sliding_window is a nemotron_h knob"]),
    ({"num_heads": 3}, None, ["num_heads (3) must be a multiple of num_kv_heads (2)"]),
    ({"dtype": "fp4"}, None, ["dtype must be one of"]),
    ({"dcp": 0}, None, ["dcp must be between 1 and 64"]),
    ([], None, ["a config must be a JSON object, got list"]),
    ({}, "0.99", ["unknown revision '0.99'"]),
])
def test_bad_input_is_one_clear_line(data, revision, words):
    with pytest.raises(LayoutError) as info:
        Config.from_dict(data, revision)
    text = str(info.value)
    assert "\n" not in text
    for w in words:
        assert w in text, text
    assert isinstance(info.value, KvproofError) and info.value.exit_code == 2


def test_connector_names_come_from_the_release():
    for rev in facts.MAMBA_MODES:
        for name in facts.connectors(rev):
            assert Config.from_dict({"kv_connector": name} if name != facts.HIDDEN_STATES_CONNECTOR
                                    else {"kv_connector": name, "aux_layers": [0]}, rev)
        for mode in facts.MAMBA_MODES[rev]:
            assert Config.from_dict({"mamba_cache_mode": mode}, rev).mamba_cache_mode == mode


def test_from_json_names_the_place():
    with pytest.raises(LayoutError, match=r"^cfg.json: not JSON"):
        Config.from_json("{", where="cfg.json")
    with pytest.raises(LayoutError, match=r"^cfg.json: unknown config field 'x'"):
        Config.from_json('{"x": 1}', where="cfg.json")
    with pytest.raises(LayoutError, match=r"^cfg.json: JSON nested too deeply"):
        Config.from_json("[" * 100000, where="cfg.json")
    with pytest.raises(LayoutError, match=r"^cfg.json: not usable JSON"):
        Config.from_json("1" + "0" * 5000, where="cfg.json")
    with pytest.raises(LayoutError, match="in vLLM 0.32"):
        Config(mamba_cache_mode="all").check("0.32")
    assert Config(mamba_cache_mode="all").check("0.27")


def test_layout_dict_keeps_only_the_release_fields():
    groups = [{"kind": "mamba", "block_size": 544, "prefix_cacheable": True, "tokens_per_state": -1,
               "mamba_cache_mode": "align"},
              {"kind": "sliding_window", "block_size": 64, "sliding_window": 64, "dcp_sharded": True,
               "prefix_cacheable": True}]
    kw = {"cache_block_size": 64, "enable_prefix_caching": True, "prefix_match_unit": None,
          "mamba_cache_mode": "align", "kv_connector": None, "dcp": 1, "max_model_len": 2048}
    old = Layout.from_dict(layout_dict(groups, "0.27", **kw))
    assert old.groups[0].prefix_cacheable is None and old.groups[1].dcp_sharded is None
    assert old.groups[1].sliding_window == 64 and old.summary() == "mamba:544,sliding_window:64 cache=64 pc mamba=align"
    new = Layout.from_dict(layout_dict(groups, "0.32", **kw))
    assert new.groups[0].prefix_cacheable is True and new.groups[0].tokens_per_state is None
    assert new.groups[1].dcp_sharded is True


def test_layout_dict_keeps_a_compression_on_any_kind():
    """DeepSeek-V4's MLAAttentionSpec carries its compress ratio (0.32.0 derives tokens_per_state 128);
    the AttentionSpec default 1, a ring buffer and Whisper's Fraction (a string) are no compression."""
    groups = [{"kind": "mla", "block_size": 256, "tokens_per_state": 128, "prefix_cacheable": True},
              {"kind": "sliding_window", "block_size": 64, "sliding_window": 128, "tokens_per_state": 1},
              {"kind": "full_attention", "block_size": 16, "tokens_per_state": "1/4"},
              {"kind": "full_attention", "block_size": 8, "tokens_per_state": 4, "prefix_cacheable": False},
              {"kind": "mamba", "block_size": 256, "tokens_per_state": 8}]
    kw = {"cache_block_size": 8, "enable_prefix_caching": True, "prefix_match_unit": None,
          "mamba_cache_mode": "align", "kv_connector": None, "dcp": 1, "max_model_len": 2048}
    lay = Layout.from_dict(layout_dict(groups, "0.32", **kw))
    assert [g.tokens_per_state for g in lay.groups] == [128, None, None, None, 8]
    assert not any(g.tokens_per_state for g in Layout.from_dict(layout_dict(groups, "0.28", **kw)).groups)


def test_enumeration_is_bounded_and_release_specific():
    every = all_configs("0.32.0")
    assert {c.mamba_cache_mode for c in every} == {None, "align", "none"}
    assert {c.mamba_cache_mode for c in all_configs("0.27.0")} == {None, "align", "all", "none"}
    assert {c.family for c in every} == {"nemotron_h", "granite_moe_hybrid", "qwen3_next"}
    assert all(c.dcp == 1 for c in every)
    assert all(not c.aux_layers for c in every if c.family != "nemotron_h")
    assert all(c.kv_connector is None for c in every if c.aux_layers)
    sample = list(enumerate_configs("0.32.0", 50))
    assert len(sample) == 50 == len(set(sample)) and sample == list(enumerate_configs("0.32.0", 50))
    for c in sample:
        c.check("0.32")


@pytest.mark.parametrize("argv, words", [
    (["derive", '{"bogus": 1}', "--vllm", "0.27.0"], ["config (vLLM 0.27.0): unknown config field 'bogus'"]),
    (["derive", '{"mamba_cache_mode": "all"}', "--vllm", "0.32.0"], ["must be one of align, none in vLLM 0.32"]),
    (["derive", '[{}, {"kv_connector": "Nope"}]', "--vllm", "0.28.0"], ["config[1] (vLLM 0.28.0): kv_connector"]),
    (["derive", "/no/such/config.json"], ["no such file"]),
    (["derive", "{oops"], ["not JSON"]),
    (["derive", "{}", "--vllm", "0.99.0"], ["0.99.0 is not modelled"]),
])
def test_cli_derive_bad_input_is_one_line_exit_2(argv, words, capsys):
    from kvproof.commands.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for w in words:
        assert w in err, err
