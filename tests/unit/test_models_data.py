"""Reference model configurations as data, real-model Configs, the layering, and judge rule C6 (no vLLM)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvproof import facts
from kvproof.inputs.config import SOURCE_KEY, Config, load_model_config, models_dir, reference_models
from kvproof.consumer.oracles import Efficiency, Observation
from kvproof.consumer.result import ConsumerResult
from kvproof.errors import KvproofError, LayoutError
from kvproof.judging.judge import CONSUMER_WARN_FRACTION, CONSUMER_WARN_TOKENS, judge_consumer
from kvproof.verdicts import Verdict

REQUIRED = ("nemotron_h_8b", "nemotron_h_nano_9b_v2", "granitemoehybrid", "jamba", "falcon_h1", "zamba2",
            "qwen3_next", "qwen3_5", "lfm2", "bailing_moe_linear", "kimi_linear", "minimax", "deepseek_v4",
            "gpt_oss", "gemma3", "llama4",
            # issue 42: a sliding window beside MTP, short-conv + window + full, window + full, Mamba + full
            "mimo_v2_flash", "lfm3", "ricursive", "zaya")


# A reference config names a *ForCausalLM architecture, except these multimodal classes: their
# vllm/models/ family registers no ForCausalLM (0.33.0's muse_spark registers only
# MuseSparkForConditionalGeneration and the MuseSparkDSparkModel draft), so the published
# config.json can name nothing else. Their text model's depth is read from text_config.
CONDITIONAL_GENERATION_ONLY = tuple(facts.TEXT_ONLY_REFERENCE_MODELS.values())


def test_every_required_architecture_ships_a_config_that_names_its_source():
    assert set(REQUIRED) <= set(reference_models())
    for name in reference_models():
        raw = json.loads((models_dir() / f"{name}.json").read_text())
        assert isinstance(raw.get(SOURCE_KEY), str) and len(raw[SOURCE_KEY]) > 20, name
        cfg = load_model_config(name)
        arch = cfg["architectures"][0]
        assert SOURCE_KEY not in cfg and (arch.endswith("ForCausalLM") or arch in CONDITIONAL_GENERATION_ONLY), name
        text = cfg["text_config"] if arch in CONDITIONAL_GENERATION_ONLY else cfg
        assert text["num_hidden_layers"] >= 8, f"{name}: a reference model keeps its real depth"


def test_the_conditional_generation_exception_stays_narrow():
    assert all(a.endswith("ForConditionalGeneration") for a in CONDITIONAL_GENERATION_ONLY)
    for model, arch in facts.TEXT_ONLY_REFERENCE_MODELS.items():
        assert load_model_config(model)["architectures"] == [arch], "an allowed exception no reference config needs"


def test_a_multimodal_only_family_is_derived_as_its_text_decoder_in_every_flag_set():
    """kvproof derives without a tokenizer; a multimodal-only family's processor needs one, so its
    every flag set (the common ones, then its own) adds --language-model-only, and no other does."""
    from kvproof.derivation import MODEL_FLAG_SETS, model_flag_sets, reference_flags
    asked = ("--enable-prefix-caching",)  # what findings witness asks of every model
    assert reference_flags("gpt_oss", asked) == asked
    assert reference_flags("muse_spark", asked) == asked + (facts.LANGUAGE_MODEL_ONLY,)
    for model in reference_models():
        sets = model_flag_sets(model)
        text_only = model in facts.TEXT_ONLY_REFERENCE_MODELS
        assert all((facts.LANGUAGE_MODEL_ONLY in s) == text_only for s in sets), model
        common = [s[:-1] if text_only else s for s in sets[:len(MODEL_FLAG_SETS)]]
        assert common == list(MODEL_FLAG_SETS), model


def test_speculative_sets_sweep_mtp_depths_and_reference_drafts_only():
    """The derive tables' speculative rows (bench_derive): every model's MTP k=1 row, MTP at each
    depth for the models with MTP layers, EAGLE-3 where a reference draft exists; never the
    hidden-state extraction head (a connector set, not a drafter)."""
    from kvproof.inputs.config import reference_drafts
    from kvproof.derivation import MTP_DEPTHS, speculative_flag_sets
    for model in reference_models():
        specs = [json.loads(s[s.index("--speculative-config") + 1]) for s in speculative_flag_sets(model)]
        methods = [d["method"] for d in specs]
        assert "extract_hidden_states" not in methods and methods[0] == "mtp", model
        depths = sorted(d["num_speculative_tokens"] for d in specs[1:] if d["method"] == "mtp")
        assert depths == (list(MTP_DEPTHS) if model in facts.MTP_REFERENCE_MODELS else []), model
        assert ("eagle3" in methods) == (f"{model}_eagle3" in reference_drafts()), model


def test_nemotron_h_8b_has_the_real_pattern():
    cfg = load_model_config("nemotron_h_8b")
    pattern = cfg["hybrid_override_pattern"]
    assert len(pattern) == cfg["num_hidden_layers"] == 52
    assert (pattern.count("M"), pattern.count("*"), cfg["hidden_size"], cfg["mamba_num_heads"]) == (24, 4, 4096, 128)


def test_real_model_config_round_trip_and_one_line_errors(tmp_path):
    c = Config.from_dict({"model": "jamba", "flags": ["--block-size", "64"]})
    assert c.model == "jamba" and c.flags == ("--block-size", "64")
    assert json.loads(c.to_json()) == {"model": "jamba", "flags": ["--block-size", "64"]}
    assert Config.from_json(c.to_json()) == c
    assert c.describe() == "jamba --block-size 64"
    own = tmp_path / "m"
    own.mkdir()
    (own / "config.json").write_text(json.dumps({"architectures": ["JambaForCausalLM"], "num_hidden_layers": 8}))
    mine = Config.from_dict({"model": str(own)})
    assert mine.model == str(own.resolve()) and load_model_config(mine.model)["num_hidden_layers"] == 8
    with pytest.raises(LayoutError, match="neither a reference configuration"):
        Config.from_dict({"model": "no_such_model"})
    with pytest.raises(LayoutError, match="block_size is a tiny-family knob"):
        Config.from_dict({"model": "jamba", "block_size": 64})
    with pytest.raises(LayoutError, match="flags .* go with model"):
        Config.from_dict({"flags": ["--block-size", "64"]})
    with pytest.raises(KvproofError, match="flags\\[0\\] must be a non-empty string"):
        Config.from_dict({"model": "jamba", "flags": [3]})
    (tmp_path / "bad.json").write_text(json.dumps({"model_type": "x"}))
    with pytest.raises(LayoutError, match="names no architectures"):
        load_model_config(str(tmp_path / "bad.json"))


@pytest.mark.parametrize("module, forbidden", [
    ("kvproof.inputs.config", ("kvproof.replay", "kvproof.bridge", "kvproof.derivation", "kvproof.running.checking")),
    ("kvproof.derivation", ("kvproof.replay", "kvproof.bridge", "kvproof.running.checking")),
])
def test_layers_point_down(module, forbidden):
    """Config and derivation import nothing above them (not even lazily, on use)."""
    code = (f"import sys, {module} as m\n"
            "from kvproof.inputs.config import Config\n"
            "c = Config.from_dict({'model': 'jamba'}); Config().hf_config(); Config().llm_kwargs('/m', '/s')\n"
            "if m.__name__ == 'kvproof.derivation':\n"
            "    m.all_configs('0.32.0'); m.load_table('0.32.0'); m.load_model_table('0.32.0')\n"
            "    m.find_config('0.32', 'efficiency.scheduler_within_max_model_len[any]')\n"
            "print(' '.join(sorted(k for k in sys.modules if k.startswith('kvproof'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.split()
    assert not [m for m in loaded if m.startswith(forbidden)], loaded


def _result(hits, hash_block_size, hit_tokens):
    reusable = sum(h["truth"] for h in hits)
    eff = Efficiency(prompt_tokens=reusable + 100, reusable_tokens=reusable, hit_tokens=hit_tokens,
                     admissions=len(hits))
    return ConsumerResult("x", "t", [], {}, eff, scheduler_block_size=13824, hash_block_size=hash_block_size,
                          hits=hits)


def test_c6_compares_with_the_finest_granularity_and_shows_both_numbers():
    # Three admissions sharing 20000 tokens: a hit at the 13824 LCM recomputes 6176 each; hits on
    # every 384-token hash block would recompute 20000 % 384 = 32 each.
    hits = [{"truth": 20000}] * 3
    coarse = judge_consumer(_result(hits, 384, 3 * 13824))
    assert coarse.verdict == Verdict.WARN and coarse.contract == "efficiency.consumer_prefix_reuse"
    assert "30.9% recomputed" in coarse.note and "ideal at the finest granularity (384 tokens) 0.2% recomputed" \
        in coarse.note and "6144 tokens lost per request" in coarse.note
    fine = judge_consumer(_result(hits, 384, 3 * (20000 - 32)))
    assert fine.verdict == Verdict.OK and "0 tokens lost per request" in fine.note
    # a connector load beyond the last hash boundary (token-granular) loses nothing, not -32 tokens
    beyond = judge_consumer(_result(hits, 384, 3 * (20000 - 1)))
    assert beyond.verdict == Verdict.OK and " 0 tokens lost per request" in beyond.note, beyond.note
    # the margin: just under it is OK, over it WARN (a granularity of 1000 tokens ideally recomputes 0)
    near = [{"truth": 10000}] * 2
    under = int(20000 * (1 - CONSUMER_WARN_FRACTION)) + 2
    assert judge_consumer(_result(near, 1000, under)).verdict == Verdict.OK
    assert judge_consumer(_result(near, 1000, under - 4)).verdict == Verdict.WARN
    # the token floor: 10 points over the ideal, but under CONSUMER_WARN_TOKENS per request, is OK
    short = [{"truth": 200}] * 2
    assert 40 < 2 * CONSUMER_WARN_TOKENS
    assert judge_consumer(_result(short, 8, 400 - 40)).verdict == Verdict.OK
    many = [{"truth": 20 * CONSUMER_WARN_TOKENS}] * 2
    assert judge_consumer(_result(many, 8, 2 * 20 * CONSUMER_WARN_TOKENS - 2 * CONSUMER_WARN_TOKENS - 2)
                          ).verdict == Verdict.WARN


def test_c6_without_per_admission_hits_keeps_the_unmeasured_rule():
    r = ConsumerResult("x", "t", [Observation("efficiency", 0, "")][:0], {}, Efficiency(1000, 800, 700, 50, 4),
                       scheduler_block_size=16, hash_block_size=16)
    assert judge_consumer(r).verdict == Verdict.OK


def test_cli_reads_reference_names_config_files_folders_and_serve_flags(tmp_path):
    from kvproof.commands.cli import load_configs
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps({"architectures": ["JambaForCausalLM"]}))
    (tmp_path / "mine.json").write_text(json.dumps({"architectures": ["GptOssForCausalLM"]}))
    (tmp_path / "tiny.json").write_text(json.dumps([{"family": "qwen3_next"}, {"model": "gemma3"}]))
    flags = "--enable-prefix-caching --speculative-config '{\"method\": \"extract_hidden_states\"}'"
    named = load_configs(["jamba", str(tmp_path / "a"), str(tmp_path)], flags)
    names = [n for n, _ in named]
    assert names[:2] == ["jamba", "a"]
    assert named[0][1].flags == ("--enable-prefix-caching", "--speculative-config",
                                 '{"method": "extract_hidden_states"}')
    folder = {c.model or c.family for _, c in named[2:]}
    assert folder == {str((tmp_path / "mine.json").resolve()), "qwen3_next", "gemma3"}


@pytest.mark.parametrize("argv, words", [
    (["check", "--config", "jamba", "--flags", "--speculative-config '{"], ["--flags", "quotation"]),
    (["check", "--config", "/no/such/model"], ["no such file", "nemotron_h_8b"]),
    (["check", "--groups", "mamba:64", "--flags", "--block-size 16"], ["--flags go with --config"]),
    (["derive", "--models"], ["--models goes with --enumerate"]),
    (["derive", '{"model": "jamba", "block_size": 16}'], ["block_size is a tiny-family knob"]),
])
def test_cli_config_input_errors_are_one_line_exit_2(argv, words, capsys):
    from kvproof.commands.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for w in words:
        assert w in err, err


def test_c6_prefix_caching_off_expects_no_hits():
    """0 of 2,000 reusable tokens hit: WARN with prefix caching on, OK when the user turned it off."""
    from kvproof.inputs.layout import Layout
    hits = [{"truth": 1000}] * 2
    r = ConsumerResult("x", "t", [], {}, Efficiency(prompt_tokens=2100, reusable_tokens=2000, hit_tokens=0,
                                                    admissions=2),
                       scheduler_block_size=16, hash_block_size=16, hits=hits)
    lay = {"groups": [{"kind": "full_attention", "block_size": 16}], "cache": {"block_size": 16}}
    on = Layout.from_dict({**lay, "cache": {"block_size": 16, "enable_prefix_caching": True}})
    off = Layout.from_dict({**lay, "cache": {"block_size": 16, "enable_prefix_caching": False}})
    assert judge_consumer(r, on).verdict == Verdict.WARN
    j = judge_consumer(r, off)
    assert j.verdict == Verdict.OK and "prefix caching is off" in j.note


def test_reference_drafts_name_their_source_and_are_eagle3_heads():
    """spec/models/drafts/: what a --speculative-config "model" may name (no hub here); the derive
    bridge swaps the name for a folder holding the config (bridge/derive.py _reference_draft)."""
    from kvproof.inputs.config import load_draft_config, reference_drafts
    assert {"gpt_oss_eagle3", "qwen3_next_eagle3"} <= set(reference_drafts())
    for name in reference_drafts():
        raw = json.loads((models_dir() / "drafts" / f"{name}.json").read_text())
        assert isinstance(raw.get(SOURCE_KEY), str) and len(raw[SOURCE_KEY]) > 20, name
        cfg = load_draft_config(name)
        assert SOURCE_KEY not in cfg and cfg["architectures"] == ["LlamaForCausalLMEagle3"], name
        target = load_model_config(name.rsplit("_eagle3", 1)[0])
        assert cfg["hidden_size"] == target["hidden_size"], name  # EAGLE-3 reads the target's hidden states
    assert not set(reference_drafts()) & set(reference_models())


def test_reference_flag_sets_sweep_mtp_depth_and_eagle3_where_the_model_has_them():
    """MTP k=1 for every model (the release refuses models without MTP layers), k=2,3 only for
    the MTP architectures, EAGLE-3 only where a reference draft exists; every draft it names
    is one the derivation bridge can find (spec/models/drafts/)."""
    from kvproof.inputs.config import reference_drafts
    from kvproof.derivation import model_configs, model_flag_sets

    def specs(model):
        return [json.loads(f[f.index("--speculative-config") + 1]) for f in model_flag_sets(model)
                if "--speculative-config" in f]
    for model in reference_models():
        sets = model_flag_sets(model)
        assert len(set(sets)) == len(sets)
        mtp = sorted(s["num_speculative_tokens"] for s in specs(model) if s["method"] == "mtp")
        assert mtp == ([1, 1, 2, 3] if model in facts.MTP_REFERENCE_MODELS else [1]), model  # k=1: default pc, pc on
        eagle3 = [s for s in specs(model) if s["method"] == "eagle3"]
        assert [s["model"] for s in eagle3] == ([f"{model}_eagle3"] if f"{model}_eagle3" in reference_drafts() else [])
    assert set(facts.MTP_REFERENCE_MODELS) <= set(reference_models())
    assert {"gpt_oss_eagle3", "qwen3_next_eagle3"} <= set(reference_drafts())  # a window model, a Mamba hybrid
    names = [c.model for c in model_configs()]
    assert len(model_configs()) == sum(len(model_flag_sets(m)) for m in reference_models()) == len(names)


def test_derive_keep_needs_enumerate_models(capsys):
    from kvproof.commands.cli import main
    assert main(["derive", "--keep", "--enumerate"]) == 2
    assert "--keep goes with --enumerate --models" in capsys.readouterr().err


def test_hit_matrix_rows_are_each_speculative_models_drafts_in_table_order():
    from kvproof.differential.hitmatrix import _label, speculative_configs
    labels = [_label(c) for c in speculative_configs()]
    assert labels[labels.index("qwen3_next mtp k=1"):][:4] == [
        "qwen3_next mtp k=1", "qwen3_next mtp k=2", "qwen3_next mtp k=3", "qwen3_next eagle3 k=3"]
    assert "gpt_oss eagle3 k=3" in labels and not any(lab.startswith("gemma2") for lab in labels)
    assert "gpt_oss mtp k=1" not in labels  # only the sets beyond the common ones
    assert all("--enable-prefix-caching" in c.flags for c in speculative_configs())
    assert labels == sorted(labels, key=lambda lab: lab.split()[0]) and len(set(labels)) == len(labels)


def test_the_hit_matrix_reads_layouts_from_a_table_derived_on_this_cpu_kind(monkeypatch):
    """make matrix reuses the checked-in derivations (the table tests re-derive samples of them);
    a table derived on another CPU kind, or --derive, sends every Config to the release."""
    from kvproof.running import checking
    from kvproof import derivation
    from kvproof.differential import hitmatrix
    rel = "0.32.0"
    table = derivation.load_model_table(rel)
    configs = [c for c in hitmatrix.speculative_configs()
               if derivation.config_key(c) in {derivation.config_key(r.config) for r in table}]
    assert configs, "the 0.32.0 model table has the speculative rows"
    asked: list = []

    def derive_all(release, todo, worker=None):
        asked.extend(todo)
        return [derivation.Derived(c, None, None) for c in todo]

    monkeypatch.setattr(checking, "derive_all", derive_all)
    cpu = json.loads((derivation.table_dir() / "models" / f"{rel}.json").read_text())["cpu"]
    monkeypatch.setattr(derivation, "host_cpu", lambda: cpu)
    got = hitmatrix.derived_on(rel, configs)
    rows = {derivation.config_key(r.config): r for r in table}
    assert not asked and [d.layout for d in got] == [rows[derivation.config_key(c)].layout for c in configs]
    hitmatrix.derived_on(rel, configs, fresh=True)
    assert asked == configs
    asked.clear()
    monkeypatch.setattr(derivation, "host_cpu", lambda: "AVX2-not-" + cpu)
    assert [d.layout for d in hitmatrix.derived_on(rel, configs)] == [None] * len(configs) and asked == configs


def test_derive_retry_refused_needs_keep(capsys):
    from kvproof.commands.cli import main
    assert main(["derive", "--enumerate", "--models", "--retry-refused"]) == 2
    assert "--retry-refused goes with --keep" in capsys.readouterr().err


def test_keep_with_retry_refused_derives_refused_rows_again_but_not_memory_caps(tmp_path, monkeypatch):
    """--keep derives only what the table lacks; --retry-refused also sends vLLM's refusals back,
    except the ones this machine's memory caused (they would cost minutes and answer the same)."""
    from kvproof.running import checking
    from kvproof.derivation import config_key, host_cpu, model_configs
    configs = model_configs()[:3]
    derived, refused, memory = configs
    rows = [{"config": derived.to_dict(minimal=True), "error": None},
            {"config": refused.to_dict(minimal=True),
             "error": {"message": "Unsupported speculative method: 'mtp'"}},
            {"config": memory.to_dict(minimal=True),
             "error": {"message": "DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB"}}]
    rows += [{"config": c.to_dict(minimal=True), "error": None} for c in model_configs()[3:]]
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "0.32.0.json").write_text(json.dumps({"cpu": host_cpu(), "entries": rows}))
    asked: list[list[str]] = []

    class Asked(Exception):
        pass

    def fake_derive_all(release, configs, **kw):
        asked.append([config_key(c) for c in configs])
        raise Asked

    monkeypatch.setattr(checking, "derive_all", fake_derive_all)
    for retry, expected in ((False, []), (True, [config_key(refused)])):
        with pytest.raises(Asked):  # the fake stops at the derivation: the table is not rewritten
            checking.write_model_table("0.32.0", folder=tmp_path, keep=True, retry_refused=retry)
        assert asked.pop() == expected
    assert not checking.retry_worthy(rows[0]) and not checking.retry_worthy(rows[2])
