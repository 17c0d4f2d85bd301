"""Reference models at their real dimensions through each release's own derivation (kvproof.bridge.derive).

A few architectures per release (each derivation is ~0.3-3 s once vLLM is imported): the layout
keeps every layer of the real depth, the release's own flag parser reads the vllm serve flags,
the KV memory is sized without a user's number, and `check --config` judges the derived layout.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import RELEASES as ALL_RELEASES
from conftest import require_env, worker_for

from kvproof.bridge.client import package_root
from kvproof.running.checking import check_configs, derive_all
from kvproof.inputs.config import Config, load_model_config
from kvproof.verdicts import Tier, Verdict

RELEASES = ("0.27.0", "0.28.0", "0.32.0")


def extraction_flags(storage: str) -> list[str]:
    """Hidden-state extraction as a user types it on the vllm serve command line (prefix caching on)."""
    spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}}
    ktc = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
           "kv_connector_extra_config": {"shared_storage_path": storage}}
    return ["--enable-prefix-caching", "--speculative-config", json.dumps(spec), "--kv-transfer-config",
            json.dumps(ktc)]


def _layers(name: str) -> tuple[int, int]:
    """(Mamba layers, attention layers) of a NemotronH reference config, from its pattern."""
    pattern = load_model_config(name)["hybrid_override_pattern"]
    return pattern.count("M"), pattern.count("*")


@pytest.mark.parametrize("release", RELEASES)
def test_nemotron_h_8b_derives_at_real_depth(release):
    require_env(release)
    d, = derive_all(release, [Config(model="nemotron_h_8b", flags=("--enable-prefix-caching",))],
                    worker_for(release))
    assert d.error is None, d.error.line()
    mamba, attention = _layers("nemotron_h_8b")
    by_kind: dict[str, int] = {}
    for g in d.raw["groups"]:
        by_kind[g["kind"]] = by_kind.get(g["kind"], 0) + g["layers"]
    assert by_kind == {"mamba": mamba, "full_attention": attention}, by_kind
    sizes = [g.block_size for g in d.layout.groups]
    assert d.log_line() == f"block_sizes={sizes}, hash_block_size={d.hash_block_size}"
    # sized from the model's own specs: at least one max_model_len request of every layer fits
    assert d.raw["kv_cache_memory_bytes"] > 0 and d.layout.max_model_len == 8192
    assert d.peak_rss_mb is not None and d.peak_rss_mb < 2048


def test_sliding_window_and_chunked_local_models_on_0_32():
    release = "0.32.0"
    require_env(release)
    out = derive_all(release, [Config(model="gpt_oss"), Config(model="llama4", flags=("--max-model-len", "32768"))],
                     worker_for(release))
    for d in out:
        assert d.error is None, (d.config.model, d.error.line())
    kinds = [{g.kind for g in d.layout.groups} for d in out]
    assert kinds == [{"sliding_window", "full_attention"}, {"chunked_local", "full_attention"}]
    assert out[1].layout.max_model_len == 32768  # the flag, read by the release's own parser


def test_a_refused_flag_is_the_release_answer_not_a_traceback():
    release = "0.32.0"
    require_env(release)
    d, = derive_all(release, [Config(model="jamba", flags=("--mamba-cache-mode", "bogus"))], worker_for(release))
    assert d.layout is None and d.error is not None and d.error.stage == "flags"
    assert "mamba-cache-mode" in d.error.message and "Traceback" not in d.error.message


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_qwen3_5_derives_although_the_environment_has_no_torchvision(release):
    """Qwen3.5's module imports qwen3_vl (its multimodal sibling), whose image processor imports
    torchvision, which the environments do not have (envs.BROKEN_ON_CPU: no CPU wheel on the package
    index). The derive worker answers that import with a placeholder and names it as a stand-in; the
    text model derives at its real depth: a Mamba (GDN) group per three linear-attention layers and
    one full-attention group. Fails when Qwen3.5 stops deriving on any installed release."""
    from kvproof.envs import BROKEN_ON_CPU
    assert "torchvision" in BROKEN_ON_CPU
    require_env(release)
    d, = derive_all(release, [Config(model="qwen3_5")], worker_for(release))
    assert d.error is None, d.error.line()
    layer_types = load_model_config("qwen3_5")["layer_types"]
    by_kind: dict[str, int] = {}
    for g in d.raw["groups"]:
        by_kind[g["kind"]] = by_kind.get(g["kind"], 0) + g["layers"]
    assert by_kind == {"mamba": layer_types.count("linear_attention"),
                       "full_attention": layer_types.count("full_attention")}, by_kind
    assert d.stand_in and "torchvision import placeholder" in d.stand_in, d.stand_in
    assert d.log_line() == f"block_sizes={[g.block_size for g in d.layout.groups]}, hash_block_size={d.hash_block_size}"


def test_the_torchvision_placeholder_only_imports_and_availability_checks_still_see_none():
    """Inside the worker: torchvision's names import, calling one raises ImportError naming it, and
    importlib.util.find_spec (before the first placeholder import) and transformers'
    is_torchvision_available (after it too) answer "not installed", so no guarded code path
    switches to torchvision. A model that does not import a multimodal
    processor gets no stand-in."""
    release = "0.32.0"
    env = require_env(release)
    code = (
        "import importlib.util, json, kvproof.bridge.derive as d\n"
        "from transformers.utils import is_torchvision_available\n"
        "none = importlib.util.find_spec('torchvision') is None\n"
        "from torchvision.transforms.v2 import functional as tvF\n"
        "from torchvision.transforms import InterpolationMode\n"
        "out = {'absent': d.TORCHVISION_ABSENT, 'find_spec': none,\n"
        "       'transformers': is_torchvision_available(), 'mode': repr(InterpolationMode.BICUBIC),\n"
        "       'hash': hash(InterpolationMode.BICUBIC) == hash(InterpolationMode.BICUBIC)}\n"
        "try:\n"
        "    tvF.resize(None, [2, 2])\n"
        "    out['called'] = 'no error'\n"
        "except ImportError as e:\n"
        "    out['called'] = str(e)\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(package_root()), "VLLM_LOGGING_LEVEL": "ERROR"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["absent"] is True and out["find_spec"] is True and out["transformers"] is False, out
    assert out["mode"] == "<kvproof placeholder torchvision.transforms.InterpolationMode.BICUBIC>" and out["hash"], out
    assert out["called"].startswith("torchvision.transforms.v2.functional.resize: torchvision is not installed"), out
    d, = derive_all(release, [Config(model="qwen3_next")], worker_for(release))
    assert d.error is None and not d.stand_in, (d.error, d.stand_in)


def test_check_config_hidden_state_extraction_fails_only_on_0_27(tmp_path):
    for r in RELEASES:
        require_env(r)
    cfg = Config(model="nemotron_h_8b", flags=tuple(extraction_flags(str(tmp_path))))
    envs = [require_env(r) for r in RELEASES]
    checks = check_configs([("nemotron_h_8b", cfg)], envs, tiers=(Tier.FUNCTION, Tier.MANAGER),
                           workers={e.name: worker_for(r) for e, r in zip(envs, RELEASES)})
    verdicts = {c.env: [(r.verdict, r.tier) for r in c.rows] for c in checks}
    assert all(c.not_derivable is None for c in checks), [c.not_derivable for c in checks]
    by_release = dict(zip(RELEASES, (verdicts[require_env(r).name] for r in RELEASES)))
    assert (Verdict.FAIL, Tier.MANAGER) in by_release["0.27.0"], by_release
    assert all(v != Verdict.FAIL for r in ("0.28.0", "0.32.0") for v, _ in by_release[r]), by_release
    layout = checks[0].derived.layout
    assert [g.kind for g in layout.groups][-1] == "hidden_state"


def test_muse_spark_derives_as_its_text_decoder_and_says_why_not_without_it():
    """0.33's Muse Spark registers only a multimodal class. Its processor needs a tokenizer on
    0.33, and kvproof derives without one: vLLM's refusal carries kvproof's note (0.34 derives the
    whole model, and it must derive the text decoder's groups). With
    --language-model-only (its reference flag sets' suffix) the text decoder derives at its real
    depth: a sliding-window layer per window layer of the config, a full-attention one per full."""
    from kvproof import facts
    from kvproof.derivation import harness_note, reference_flags
    release = facts.MANAGED_RELEASES[-1]
    require_env(release)
    asked = ("--enable-prefix-caching",)
    text_only, plain = derive_all(release, [Config(model="muse_spark", flags=reference_flags("muse_spark", asked)),
                                            Config(model="muse_spark", flags=asked)], worker_for(release))
    assert facts.LANGUAGE_MODEL_ONLY in text_only.config.flags
    assert text_only.error is None, text_only.error.line()
    layer_types = load_model_config("muse_spark")["text_config"]["layer_types"]
    by_kind: dict[str, int] = {}
    for g in text_only.raw["groups"]:
        by_kind[g["kind"]] = by_kind.get(g["kind"], 0) + g["layers"]
    assert by_kind == {"sliding_window": layer_types.count("sliding_attention"),
                       "full_attention": layer_types.count("full_attention")}, by_kind
    if plain.layout is not None:
        # 0.34 builds the multimodal processor without a tokenizer: the whole model derives, and
        # its towers add no KV cache (the same groups, layer for layer, as the text decoder)
        assert plain.raw["groups"] == text_only.raw["groups"], (plain.raw["groups"], text_only.raw["groups"])
        return
    assert plain.error is not None
    assert harness_note(plain.error.message), plain.error.line()
