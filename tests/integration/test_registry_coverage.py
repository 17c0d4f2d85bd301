"""Every architecture the newest release registers with a non-attention KV cache spec has a
reference config (spec/models/) or a named reason (issue 27 item 1).

The list comes from the release's own source, read without importing vLLM: the architecture ->
(module, class) tables of ``vllm/model_executor/models/registry.py`` (kvproof.registry) and the classes under
``vllm/model_executor/models/`` and ``vllm/models/``; an architecture counts when its class
derives (by name, through any file) from ``IsHybrid`` or ``IsAttentionFree``, the interfaces
whose models build Mamba-style specs. Architectures whose several spec kinds come from the config
(sliding window, chunked local, MLA beside an indexer) are not listed by this scan. A new such
architecture in a new release turns the test red until it gets a reference config or a reason;
a reason that no longer applies asks to be removed.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from conftest import require_env

from kvproof import envs, facts
from kvproof.config import models_dir
from kvproof.registry import registered

NEWEST = facts.MANAGED_RELEASES[-1]
ROOTS = ("IsHybrid", "IsAttentionFree")

_WRAPS = "its language model is {}'s (a reference config), under a multimodal, pooling or classification head"
_SAME_CLASS = ("its registry entry is {}'s model class (a reference config) under another name; no config.json of "
               "its own (a Puzzle model's per-layer block_configs) sourced here")
# Why a registered architecture with a non-attention spec has no reference config of its own.
REASONS = {
    "ColQwen3_5": _WRAPS.format("Qwen3_5ForCausalLM"),
    "Qwen3_5ForConditionalGeneration": _WRAPS.format("Qwen3_5ForCausalLM"),
    "JambaForSequenceClassification": _WRAPS.format("JambaForCausalLM"),
    "Qwen3_5MoeForConditionalGeneration": _WRAPS.format("Qwen3_5MoeForCausalLM"),
    "Glm5NextForConditionalGeneration": _WRAPS.format("Glm5NextForCausalLM"),
    "Qwen4ExpForConditionalGeneration": _WRAPS.format("Qwen4ExpForCausalLM"),
    "KimiK3ForConditionalGeneration": _WRAPS.format("KimiLinearForCausalLM"),  # "Kimi-K2.5 vision and KimiLinear text"
    "NemotronHPuzzleForCausalLM": _SAME_CLASS.format("NemotronHForCausalLM"),
    "ColBERTLfm2Model": _WRAPS.format("Lfm2ForCausalLM"),
    "Lfm2VlForConditionalGeneration": _WRAPS.format("Lfm2ForCausalLM"),
    "NemotronH_Nano_VL_V2": _WRAPS.format("NemotronHForCausalLM"),
    "NemotronH_Nano_Omni_Reasoning_V3": _WRAPS.format("NemotronHForCausalLM"),
    "NemotronH_Omni_Reasoning_V3": _WRAPS.format("NemotronHForCausalLM"),
    "NemotronH_Super_Omni_Reasoning_V3": _WRAPS.format("NemotronHForCausalLM"),
    # Qwen3_5MoeForConditionalGeneration's subclass (time-series weights dropped); the text dimensions a
    # quantization's model card lists for internlm/Intern-S2-Preview (40 layers, hidden 2048, 16/2 heads of
    # 256, 256 experts top-8, GDN with full attention every 4th) are qwen3_5_moe.json's
    "InternS2PreviewForConditionalGeneration": _WRAPS.format("Qwen3_5MoeForCausalLM"),
    "ClefFlashForJointSchema": _WRAPS.format("Qwen3_5ForCausalLM"),  # Qwen3_5ForConditionalGeneration + a pooler
    "MiniCPMV4_6ForConditionalGeneration": _WRAPS.format("Qwen3_5ForCausalLM"),  # language_model: Qwen3_5ForCausalLM
    "MiniCPMV4_7ForConditionalGeneration": _WRAPS.format("Qwen3_5ForCausalLM"),  # MiniCPMV4_6's subclass
    "MiniCPMOcrForConditionalGeneration": _WRAPS.format("Qwen3_5ForCausalLM"),  # MiniCPMV4_6's subclass
    "BailingMoeV3VLForConditionalGeneration": _WRAPS.format("BailingMoeV3ForCausalLM"),  # text_config: Ling-3.0-flash's
    # 0.34.0's new entries
    "KimiK31ForConditionalGeneration": _WRAPS.format("KimiLinearForCausalLM"),  # registry: KimiK3ForConditionalGeneration
    "Nemotron3_5TranscribeForConditionalGeneration": _WRAPS.format("NemotronHForCausalLM"),  # its decoder's default
    "MingV3ASRForConditionalGeneration": _WRAPS.format("BailingMoeV3ForCausalLM"),  # language_model = BailingMoeV3ForCausalLM
    "Lfm3ForCausalLM": (
        "no reference config yet: new in 0.34.0 (short-conv states, a 256-token sliding window, full attention); no "
        "published config.json of an LFM3 checkpoint was found from this machine (no model hub), and a config at "
        "guessed dimensions would make its derivations claims about no real model (issue 42 adds it with a source)"),
    "Lfm3AudioForConditionalGeneration": (
        "wraps Lfm3ForCausalLM (init_vllm_registered_model on text_config, architectures=['Lfm3ForCausalLM']), "
        "which has no reference config yet (see Lfm3ForCausalLM)"),
    "Lfm3VlForConditionalGeneration": (
        "wraps Lfm3ForCausalLM (init_vllm_registered_model on text_config, architectures=['Lfm3ForCausalLM']), "
        "which has no reference config yet (see Lfm3ForCausalLM)"),
    "ZayaForCausalLM": (
        "no reference config yet: new in 0.34.0 (Mamba state, a sliding window and full attention, IsHybrid); no "
        "published config.json of a Zaya checkpoint was found from this machine (no model hub), and a config at "
        "guessed dimensions would make its derivations claims about no real model (issue 42 adds it with a source)"),
    "InternS2MobiusForConditionalGeneration": (
        "no reference config: the registered architecture is multimodal (a nested text_config; spec/models holds "
        "ForCausalLM configs) and its language model, InternS2MobiusForCausalLM (Qwen3.5 GDN hybrid layers whose "
        "routed MoE banks are shared by several decoder layers), is no registered architecture of its own; the only "
        "source found, InternLM/Intern-S2-Mobius's configuration_interns2_mobius.py (code search), is remote code "
        "(model_type interns2_mobius, which neither environment registers) whose class defaults (40 layers, hidden "
        "2048, 16/2 heads of 256, GDN 16/32 heads of 128, 256 experts top-8, num_blocks 4) are not a published "
        "config.json"),
    "Terratorch": (
        "no reference config: not a language model but IBM's geospatial (Prithvi-style) pooling wrapper, chosen with "
        "--model-impl terratorch; it declares IsAttentionFree only to get no KV cache at all (no Mamba state shape, "
        "an IdentityPooler over terratorch.vllm's InferenceRunner), and its config is the terratorch package's "
        "pretrained_cfg, a package installed in neither environment (vllm/model_executor/models/terratorch.py "
        "imports terratorch.vllm at module level)"),
}


def class_bases(vllm: Path) -> dict[str, set[str]]:
    """class name -> the names of its bases, over every model file (a name defined twice: both)."""
    bases: dict[str, set[str]] = {}
    for root in (vllm / "model_executor" / "models", vllm / "models"):
        for f in sorted(root.rglob("*.py")) if root.exists() else ():
            try:
                tree = ast.parse(f.read_text())
            except SyntaxError:
                continue
            for n in ast.walk(tree):
                if isinstance(n, ast.ClassDef):
                    names = bases.setdefault(n.name, set())
                    for b in n.bases:
                        b = b.value if isinstance(b, ast.Subscript) else b
                        if isinstance(b, ast.Name):
                            names.add(b.id)
                        elif isinstance(b, ast.Attribute):
                            names.add(b.attr)
    return bases


def non_attention_architectures(vllm: Path) -> set[str]:
    bases = class_bases(vllm)
    memo: dict[str, bool] = {}

    def reaches(name: str, path: tuple[str, ...] = ()) -> bool:
        if name in ROOTS:
            return True
        if name not in memo:
            memo[name] = name not in path and any(reaches(b, path + (name,)) for b in bases.get(name, ()))
        return memo[name]

    return {arch for arch, (_, cls) in registered(vllm).items() if reaches(cls)}


def reference_architectures() -> dict[str, str]:
    out = {}
    for f in sorted(models_dir().glob("*.json")):
        for arch in json.loads(f.read_text()).get("architectures", []):
            out[arch] = f.stem
    return out


def test_every_non_attention_architecture_of_the_newest_release_has_a_config_or_a_reason():
    env = require_env(NEWEST)
    vllm = envs.site_packages(env.root) / "vllm"
    found = non_attention_architectures(vllm)
    # the scan sees what it must: the architectures the reference set already derives
    assert {"JambaForCausalLM", "NemotronHForCausalLM", "Qwen3_5ForCausalLM", "KimiLinearForCausalLM"} <= found
    covered = reference_architectures()
    missing = sorted(a for a in found if a not in covered and a not in REASONS)
    assert not missing, (f"vLLM {NEWEST} registers {len(missing)} architecture(s) with a non-attention KV cache "
                         f"spec and neither a reference config (spec/models/) nor a reason here: {missing}")
    stale = sorted(a for a in REASONS if a not in found or a in covered)
    assert not stale, f"reasons for architectures {NEWEST} no longer lists (or that now have a config): {stale}"
    for arch, reason in REASONS.items():
        if reason.startswith(("its language model is", "its registry entry is")):
            assert reason.split("is ", 1)[1].split("'s", 1)[0] in covered, (arch, reason)


def test_the_newest_release_families_are_read_from_its_own_package():
    """kvproof.registry.families (bench/results/derive_0.33.0.md's second table): 0.33's vllm/models/
    packages and what each registers; the families the issue lists are there, common/ is not."""
    from kvproof.registry import families

    fams = families(envs.site_packages(require_env(NEWEST).root) / "vllm")
    assert {"deepseek_v4", "glm5next", "kimi_k3", "qwen4_exp"} <= set(fams) and "common" not in fams, sorted(fams)
    assert "Glm5NextForCausalLM" in fams["glm5next"] and "KimiLinearForCausalLM" in fams["kimi_k3"], fams

