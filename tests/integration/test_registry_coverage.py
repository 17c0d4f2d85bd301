"""Every architecture that 0.33.0 and 0.34.0 register with a KV cache of more than one spec kind
(or a non-attention kind), and every drafter they register, has a reference config or a named reason
(issue 27 item 1, issue 42 item 1).

The lists come from each release's own source, read without importing vLLM: the architecture ->
(module, class) tables of ``vllm/model_executor/models/registry.py`` (kvproof.facts.models; the drafters
are its ``_SPECULATIVE_DECODING_MODELS`` table) and the classes under ``vllm/model_executor/models/``
and ``vllm/models/``. The rule, per architecture: read the files of its module (a whole package for
``vllm.models.<family>``) and the files that define its class and every base class reached by name.
It counts when those files
- derive the class from ``IsHybrid`` or ``IsAttentionFree`` (Mamba, GDN, short-conv states: "state");
- give an attention layer its own window (``per_layer_sliding_window=``: per-layer sliding windows,
  whether from ``layer_types``, a pattern or a window list, and short-conv or SWA layers beside full
  ones: "window");
- build chunked local attention (``ChunkedLocalAttention`` / ``attention_chunk_size``: "chunked");
- build an indexer beside MLA (``Indexer`` / ``SparseAttnIndexer`` / an indexer cache: "indexer");
- build a spec themselves (``SlidingWindowSpec(``, ``ChunkedLocalAttentionSpec(``, ``MambaSpec(``,
  ``SlidingWindowMLASpec(``, ``CrossAttentionSpec(``: "spec");
- or attend across an encoder (``AttentionType.ENCODER_DECODER``: "cross").
What it cannot see: a wrapper that builds its language model through ``init_vllm_registered_model`` or
an attribute of another file's class without deriving from it (a multimodal or pooling head over a
listed text model: the text model is listed), a window that comes only from ``cache_config`` (one
window for every layer: a single kind), and kinds chosen inside vLLM's shared layers from a config
field no model file names. It over-approximates: a family that can take per-layer windows counts even
when its released checkpoints set none, and its reason says so.

Covered without a reason: an architecture a reference config (spec/models/*.json) or reference draft
(spec/models/drafts/*.json) names, or one registered to the same (module, class) as such an
architecture (the KV specs come from the class); an MTP drafter the release maps a model of
facts.MTP_REFERENCE_MODELS to (its config/speculative.py names it), since the tables derive that
model under MTP. A new such architecture in a new release turns the test red until it gets a
reference config or a reason; a reason that no longer applies (the architecture is gone from both
releases, got a config, or the scan no longer sees the kind the reason names) asks to be removed.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from conftest import require_env

from kvproof import envs, facts
from kvproof.inputs.config import models_dir
from kvproof.facts.models import drafters, registered

RELEASES = facts.MANAGED_RELEASES[-2:]
NEWEST = facts.MANAGED_RELEASES[-1]
ROOTS = ("IsHybrid", "IsAttentionFree")
# What a model file reads or builds -> the KV cache kind it stands for (the module docstring's rule).
SIGNALS = {
    "window": re.compile(r"\bper_layer_sliding_window\s*="),
    "chunked": re.compile(r"\bChunkedLocalAttention\b|\battention_chunk_size\b"),
    "indexer": re.compile(r"\bIndexer\b|\bSparseAttnIndexer\b|IndexerCache\b"),
    "spec": re.compile(r"\b(SlidingWindowSpec|ChunkedLocalAttentionSpec|MambaSpec|SlidingWindowMLASpec|"
                       r"CrossAttentionSpec)\("),
    "cross": re.compile(r"\bAttentionType\.ENCODER_DECODER\b"),
}
KIND_WORDS = {"state": "a recurrent state (IsHybrid/IsAttentionFree)", "window": "per-layer sliding windows",
              "chunked": "chunked local attention", "indexer": "MLA beside an indexer (sparse MLA)",
              "spec": "KV cache specs of its own", "cross": "cross-attention over an encoder"}
# MTP drafters the release maps a reference MTP model to (vllm/config/speculative.py hf_config_override)
MTP_HEADS = {"Qwen3NextMTP": "qwen3_next", "DeepSeekV4MTPModel": "deepseek_v4", "Qwen3_5MTP": "qwen3_5",
             "MiMoV2MTPModel": "mimo_v2_flash"}

_WRAPS = "its language model is {}'s (a reference config), under a multimodal, pooling or classification head"
# A grouped reason names the kind the scan sees (test_no_reason_is_stale checks it still does).
_UNSOURCED = "no reference config: its source builds {}"
_NOT_SEARCHED = ("; no published config.json of its checkpoints was sourced (issue 42 searched for the models it names "
                 "only), and its released checkpoints may set one kind only (the rule over-approximates)")
_DRAFT = ("no reference draft config: a {} drafter ({}); no published draft config.json was sourced for it, so the "
          "tables derive it under no target")
# Why a listed architecture or drafter has no reference config of its own.
REASONS = {
    'AfmoeForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ApertusForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'BailingMoeV25MTPModel': _DRAFT.format('MTP', 'bailing_moe_mtp'),
    'BailingMoeV3MTPModel': _DRAFT.format('MTP', 'bailing_moe_v3_mtp'),
    'BailingMoeV3VLForConditionalGeneration': _WRAPS.format('BailingMoeV3ForCausalLM'),
    'ClefFlashForJointSchema': _WRAPS.format('Qwen3_5ForCausalLM'),
    'Cohere2MoeForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'CohereAsrForConditionalGeneration': _UNSOURCED.format(KIND_WORDS['cross']) + _NOT_SEARCHED,
    'CohereCompassForConditionalGeneration': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ColBERTLfm2Model': _WRAPS.format('Lfm2ForCausalLM'),
    'ColQwen3_5': _WRAPS.format('Qwen3_5ForCausalLM'),
    'ColUltraVBertForRetrieval': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'DFlash2BeamDraftModel': _DRAFT.format('DFlash', 'vllm.models.beam'),
    'DFlash2DraftModel': _DRAFT.format('DFlash', 'qwen3_dflash2'),
    'DFlash2RicursiveDraftModel': ("Ricursive's DFlash2 draft (ricursive_dflash2): no published draft config.json was found and vLLM gives it no config class defaults; its target has a reference config (ricursive.json)"),
    'DFlashDraftModel': _DRAFT.format('DFlash', 'qwen3_dflash'),
    'DFlashLagunaForCausalLM': _DRAFT.format('DFlash', 'laguna_dflash'),
    'DFlashMuseGlimmerAssistantModel': _DRAFT.format('DFlash', 'qwen3_dflash'),
    'DFlashQwen3XPressModel': _DRAFT.format('DFlash', 'qwen3_xpress'),
    'DSparkDraftModel': _DRAFT.format('DSpark', 'vllm.models.deepseek_v4'),
    'DSparkMiniMaxDraftModel': _DRAFT.format('DSpark', 'vllm.models.minimax_m3.common.dspark'),
    'DSparkV41DraftModel': _DRAFT.format('DSpark', 'vllm.models.deepseek_v41'),
    'DeepSeekMTPModel': _DRAFT.format('MTP', 'deepseek_mtp'),
    'DeepseekForCausalLM': _UNSOURCED.format(KIND_WORDS['indexer']) + _NOT_SEARCHED,
    'DeepseekV2ForCausalLM': _UNSOURCED.format(KIND_WORDS['indexer']) + _NOT_SEARCHED,
    'DeepseekV32MTPModel': _DRAFT.format('MTP', 'vllm.models.deepseek_v32'),
    'DeepseekV3BidirectionalModel': _UNSOURCED.format(KIND_WORDS['indexer']) + _NOT_SEARCHED,
    'DeepseekV3ForCausalLM': _UNSOURCED.format(KIND_WORDS['indexer']) + _NOT_SEARCHED,
    'DeepseekV4ForConditionalGeneration': _WRAPS.format('DeepseekV4ForCausalLM'),
    'DomynEdgeForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'DoryForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Dots3NoteMTPModel': _DRAFT.format('MTP', 'vllm.models.dots3_note'),
    'Eagle3DeepseekV2ForCausalLM': _DRAFT.format('EAGLE-3', 'deepseek_eagle3'),
    'Eagle3DeepseekV3ForCausalLM': _DRAFT.format('EAGLE-3', 'deepseek_eagle3'),
    'Eagle3Qwen3ForCausalLM': _DRAFT.format('EAGLE-3', 'qwen3_eagle3'),
    'EagleCohereForCausalLM': _DRAFT.format('EAGLE', 'cohere_eagle'),
    'EagleDeepSeekMTPModel': _DRAFT.format('EAGLE', 'deepseek_eagle'),
    'EagleLlama4ForCausalLM': _DRAFT.format('EAGLE', 'llama4_eagle'),
    'EagleLlamaForCausalLM': _DRAFT.format('EAGLE', 'llama_eagle'),
    'EagleMiniCPMForCausalLM': _DRAFT.format('EAGLE', 'minicpm_eagle'),
    'EagleMistralForCausalLM': _DRAFT.format('EAGLE', 'mistral_eagle'),
    'EagleMistralLarge3ForCausalLM': _DRAFT.format('EAGLE', 'mistral_large_3_eagle'),
    'EmbeddingGemma2Model': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Ernie4_5ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ErnieMTPModel': _DRAFT.format('MTP', 'ernie_mtp'),
    'Exaone4ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Exaone4_5_MTP': ("EXAONE-4.5's MTP head (exaone4_5_mtp): transformers 5.19.0 Exaone4_5_Config (checkpoint LGAI-EXAONE/EXAONE-4.5-33B) gives no text-model defaults (its text_config is empty by default), and no published config.json of EXAONE-4.5 was found (code and pages corpora)"),
    'ExaoneMoEForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ExaoneMoeForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ExaoneMoeMTP': _DRAFT.format('MTP', 'exaone_moe_mtp'),
    'ExtractHiddenStatesModel': ('not a draft model: the hidden-state extraction head (method extract_hidden_states) builds a '
                                 'hidden-state cache beside any target; every reference model derives it (MODEL_FLAG_SETS)'),
    'Gemma3TextModel': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Gemma3nForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Gemma4DSparkModel': _DRAFT.format('DSpark', 'gemma4_dspark'),
    'Gemma4ForCausalLM': ("Gemma-4 (google/gemma-4-*): transformers 5.19.0 Gemma4TextConfig documents google/gemma-4-e2b-it, but its defaults (30 layers, hidden 2304) are not that checkpoint's (35 layers, hidden 1536, 20 KV-shared layers, global_head_dim 512 in a third-party KV-capacity test's transcription, which lists only the attention geometry); no whole published config.json was found"),
    'Gemma4MTPModel': ("Gemma-4's assistant drafter (gemma4_assistant -> Gemma4MTPModel, n_predict 1): transformers 5.19.0 Gemma4AssistantConfig has no text_config defaults of its own, and no published assistant config.json was found; its target Gemma4ForCausalLM has no reference config either"),
    'Glm4MoeLiteMTPModel': _DRAFT.format('MTP', 'glm4_moe_lite_mtp'),
    'Glm4MoeMTPModel': _DRAFT.format('MTP', 'glm4_moe_mtp'),
    'Glm5NextForConditionalGeneration': _WRAPS.format('Glm5NextForCausalLM'),
    'Glm5NextMTPModel': _DRAFT.format('MTP', 'vllm.models.glm5next'),
    'GlmOcrMTPModel': _DRAFT.format('MTP', 'glm_ocr_mtp'),
    'GraniteForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'GraniteMoeForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'GraniteSWAForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'HYV3MTPModel': _DRAFT.format('MTP', 'hy_v3_mtp'),
    'HYV4MTPModel': _DRAFT.format('MTP', 'vllm.models.hy_v4'),
    'IQuestCoderForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'InklingForConditionalGeneration': _WRAPS.format('InklingForCausalLM'),
    'InklingMTPModel': ("Inkling's chained MTP heads: the release reads their count from the checkpoint's mtp_config.num_nextn_predict_layers (speculative.py raises 'does not contain MTP weights' below 1); spec/models/inkling.json is InklingTextConfig defaults with no mtp_config, and no published Inkling config.json giving its MTP depth was found"),
    'InternLM3ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    "InternS2MobiusForConditionalGeneration": (
        "no reference config: the registered architecture is multimodal (a nested text_config; spec/models holds "
        "ForCausalLM configs) and its language model, InternS2MobiusForCausalLM (Qwen3.5 GDN hybrid layers whose "
        "routed MoE banks are shared by several decoder layers), is no registered architecture of its own; the only "
        "source found, InternLM/Intern-S2-Mobius's configuration_interns2_mobius.py (code search), is remote code "
        "(model_type interns2_mobius, which neither environment registers) whose class defaults (40 layers, hidden "
        "2048, 16/2 heads of 256, GDN 16/32 heads of 128, 256 experts top-8, num_blocks 4) are not a published "
        "config.json"),
    'InternS2MobiusMTP': _DRAFT.format('MTP', 'interns2_mobius'),
    'InternS2PreviewForConditionalGeneration': _WRAPS.format('Qwen3_5MoeForCausalLM'),
    'JambaForSequenceClassification': _WRAPS.format('JambaForCausalLM'),
    'JinaEmbeddingsV5Model': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'K3DSparkModel': _DRAFT.format('DSpark', 'vllm.models.kimi_k3.nvidia.dspark_mla'),
    'KimiK31ForConditionalGeneration': _WRAPS.format('KimiLinearForCausalLM'),
    'KimiK3ForConditionalGeneration': _WRAPS.format('KimiLinearForCausalLM'),
    'KimiK3MTPModel': _DRAFT.format('MTP', 'vllm.models.kimi_k3'),
    'LLaMAForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'LagunaForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Lfm2VlForConditionalGeneration': _WRAPS.format('Lfm2ForCausalLM'),
    'Lfm3AudioForConditionalGeneration': _WRAPS.format('Lfm3ForCausalLM'),
    'Lfm3VlForConditionalGeneration': _WRAPS.format('Lfm3ForCausalLM'),
    'LiLiCorrDraftModel': _DRAFT.format('DFlash', 'lilicorr'),
    'LlamaBidirectionalForSequenceClassification': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'LlamaBidirectionalModel': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'LlamaForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'LlamaModel': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'LongCatFlashMTPModel': _DRAFT.format('MTP', 'longcat_flash_mtp'),
    'MiMoMTPModel': _DRAFT.format('MTP', 'mimo_mtp'),
    'MiMoV2ForCausalLM': ("MiMo-V2.6 (Pro/Flash, MiMoV2ForCausalLM, model_type mimo_v2): only a third-party test's transcription of a 70-layer MiMo-V2.6-Pro hub config was found (code search); no MiMo-V2.6-Flash config.json was found, and no transformers or vLLM config class gives its defaults"),
    'MiMoV2OmniMTPModel': _DRAFT.format('MTP', 'mimo_v2_mtp'),
    'MingV3ASRForConditionalGeneration': _WRAPS.format('BailingMoeV3ForCausalLM'),
    'MiniCPMOcrForConditionalGeneration': _WRAPS.format('Qwen3_5ForCausalLM'),
    'MiniCPMV4_6ForConditionalGeneration': _WRAPS.format('Qwen3_5ForCausalLM'),
    'MiniCPMV4_7ForConditionalGeneration': _WRAPS.format('Qwen3_5ForCausalLM'),
    'MiniMaxM2ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'MiniMaxM3MTP': _DRAFT.format('MTP', 'vllm.models.minimax_m3'),
    'MiniMaxM3SparseForConditionalGeneration': _UNSOURCED.format(KIND_WORDS['indexer']) + _NOT_SEARCHED,
    'MistralLarge3ForCausalLM': _UNSOURCED.format(KIND_WORDS['indexer']) + _NOT_SEARCHED,
    'MistralLarge4DSparkModel': ("Mistral Large 4's DSpark drafter (sliding-window MLA over sliding_window + k): no published config.json of Mistral Large 4 or its DSpark head was found (transformers 5.19.0 Mistral4Config documents Mistral-Small-4-119B, another model), so neither target nor drafter has a reference config"),
    'MistralModel': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ModernBertForSequenceClassification': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ModernBertForTokenClassification': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ModernBertModel': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'MuseGlimmerAssistantModel': _DRAFT.format('DFlash', 'qwen3_dflash'),
    'MuseGlimmerForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'MuseGlimmerForConditionalGeneration': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'MuseSparkDSparkModel': _DRAFT.format('DSpark', 'vllm.models.muse_spark.common.dspark'),
    'Nemotron3_5TranscribeForConditionalGeneration': _WRAPS.format('NemotronHForCausalLM'),
    'Nemotron3_5TranscribeMTPModel': _DRAFT.format('MTP', 'nemotron3_5_transcribe'),
    'NemotronHMTPModel': _DRAFT.format('MTP', 'nemotron_h_mtp'),
    'NemotronH_Nano_Omni_Reasoning_V3': _WRAPS.format('NemotronHForCausalLM'),
    'NemotronH_Nano_VL_V2': _WRAPS.format('NemotronHForCausalLM'),
    'NemotronH_Omni_Reasoning_V3': _WRAPS.format('NemotronHForCausalLM'),
    'NemotronH_Super_Omni_Reasoning_V3': _WRAPS.format('NemotronHForCausalLM'),
    'OpenAIPrivacyFilterForTokenClassification': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'OpenPanguMTPModel': _DRAFT.format('MTP', 'openpangu_mtp'),
    'PanguEmbeddedForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'PanguProMoEV2ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'PanguUltraMoEForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'ParseAuxMTPModel': _DRAFT.format('MTP', 'nemotron_parse3_5_mtp'),
    'PeagleQwen3ForCausalLM': _DRAFT.format('P-EAGLE', 'qwen3_eagle3'),
    'Phi3ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Plamo3ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Qwen3DSparkModel': _DRAFT.format('DSpark', 'qwen3_dspark'),
    'Qwen3ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Qwen3OmniDSparkModel': _DRAFT.format('DSpark', 'qwen3_dspark'),
    'Qwen3XPressModel': _DRAFT.format('DFlash', 'qwen3_xpress'),
    'Qwen3_5ForConditionalGeneration': _WRAPS.format('Qwen3_5ForCausalLM'),
    'Qwen3_5MoeForConditionalGeneration': _WRAPS.format('Qwen3_5MoeForCausalLM'),
    'Qwen3_5MoeMTP': _DRAFT.format('MTP', 'qwen3_5_mtp'),
    'Qwen4ExpForConditionalGeneration': _WRAPS.format('Qwen4ExpForCausalLM'),
    'Qwen4ExpMTP': _DRAFT.format('MTP', 'vllm.models.qwen4_exp'),
    'Rnj1ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'Step3p5ForCausalLM': ('Step-3.5-Flash (stepfun-ai/Step-3.5-Flash): no whole published config.json was found (code, pages and docs corpora: its layer_types, attention_other_setting, per-layer rope_theta and MoE fields appear only piecewise in third-party fixtures and an architecture page: 45 layers + 3 MTP, hidden 4096, 64/8 heads of 128, sliding 96 heads, window 512, 288 experts top-8), and the config class 0.34 registers for step3p5 (Step3p7TextConfig) documents Step-3.7-Flash, not 3.5'),
    'Step3p5MTP': ("Step-3.5-Flash's MTP layers (step3p5_mtp, n_predict = num_nextn_predict_layers): its target Step3p5ForCausalLM has no reference config (see there)"),
    'Step5ForConditionalGeneration': _WRAPS.format('Step5ForCausalLM'),
    'Step5MTP': _DRAFT.format('MTP', 'vllm.models.step5'),
    'TeleChat2ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'TeleChat3ForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'TeleFLMForCausalLM': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    "Terratorch": (
        "no reference config: not a language model but IBM's geospatial (Prithvi-style) pooling wrapper, chosen with "
        "--model-impl terratorch; it declares IsAttentionFree only to get no KV cache at all (no Mamba state shape, "
        "an IdentityPooler over terratorch.vllm's InferenceRunner), and its config is the terratorch package's "
        "pretrained_cfg, a package installed in neither environment (vllm/model_executor/models/terratorch.py "
        "imports terratorch.vllm at module level)"),
    'UltraVBertModel': _UNSOURCED.format(KIND_WORDS['window']) + _NOT_SEARCHED,
    'UnlimitedOCR2TextForCausalLM': _UNSOURCED.format(KIND_WORDS['indexer']) + _NOT_SEARCHED,
    'WhisperForConditionalGeneration': _UNSOURCED.format(KIND_WORDS['cross']) + _NOT_SEARCHED,
}


def _class_index(vllm: Path) -> dict[str, list[tuple[Path, set[str]]]]:
    """class name -> (defining file, base names) for every class of every model file (a name defined twice: both)."""
    out: dict[str, list[tuple[Path, set[str]]]] = {}
    for root in (vllm / "model_executor" / "models", vllm / "models"):
        for f in sorted(root.rglob("*.py")) if root.is_dir() else ():
            try:
                tree = ast.parse(f.read_text())
            except SyntaxError:
                continue
            for n in ast.walk(tree):
                if isinstance(n, ast.ClassDef):
                    names = set()
                    for b in n.bases:
                        b = b.value if isinstance(b, ast.Subscript) else b
                        if isinstance(b, (ast.Name, ast.Attribute)):
                            names.add(b.id if isinstance(b, ast.Name) else b.attr)
                    out.setdefault(n.name, []).append((f, names))
    return out


def _lineage(index, cls: str) -> set[str]:
    """``cls`` and every base class reached from it by name."""
    seen, todo = set(), [cls]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            todo += [b for _, bases in index.get(c, ()) for b in bases]
    return seen


def _module_files(vllm: Path, module: str) -> list[Path]:
    p = vllm.parent.joinpath(*module.split(".")) if module.startswith("vllm.") else \
        vllm / "model_executor" / "models" / module
    return sorted(p.rglob("*.py")) if p.is_dir() else [f for f in (p.with_suffix(".py"),) if f.exists()]


def kv_kinds(vllm: Path) -> dict[str, set[str]]:
    """Every registered architecture the rule counts -> the kinds its source shows (module docstring)."""
    index, seen = _class_index(vllm), {}

    def signals(f: Path) -> set[str]:
        if f not in seen:
            text = f.read_text()
            seen[f] = {k for k, p in SIGNALS.items() if p.search(text)}
        return seen[f]
    out = {}
    for arch, (module, cls) in registered(vllm).items():
        names = _lineage(index, cls)
        files = set(_module_files(vllm, module)) | {f for c in names for f, _ in index.get(c, ())}
        kinds = set().union(*map(signals, files)) | ({"state"} if names & set(ROOTS) else set())
        if kinds:
            out[arch] = kinds
    return out


def _named(folder: Path) -> dict[str, str]:
    return {a: f.stem for f in sorted(folder.glob("*.json")) for a in json.loads(f.read_text()).get("architectures", [])}


def covered(vllm: Path) -> dict[str, str]:
    """Architecture -> the reference config or draft that covers it in this release (module docstring)."""
    reg = registered(vllm)
    named = {**_named(models_dir()), **_named(models_dir() / "drafts")}
    by_class = {reg[a]: m for a, m in named.items() if a in reg}
    out = {a: named.get(a) or by_class[m] for a, m in reg.items() if a in named or m in by_class}
    speculative = (vllm / "config" / "speculative.py").read_text()
    out.update({a: m for a, m in MTP_HEADS.items()
                if m in facts.MTP_REFERENCE_MODELS and a in reg and f'"{a}"' in speculative})
    return out


def _vllm(release: str) -> Path:
    return envs.site_packages(require_env(release).root) / "vllm"


def _listed(release: str) -> tuple[set[str], dict[str, set[str]], dict[str, str]]:
    vllm = _vllm(release)
    kinds = kv_kinds(vllm)
    return set(kinds) | set(drafters(vllm)), kinds, covered(vllm)


@pytest.mark.parametrize("release", RELEASES)
def test_the_scan_sees_the_kinds_the_reference_set_derives(release):
    """Each signal finds the architectures known to build its kind (so the rule can fail), and a plain
    full-attention model is not listed."""
    kinds = kv_kinds(_vllm(release))
    for arch, kind in {"JambaForCausalLM": "state", "Gemma3ForCausalLM": "window", "GptOssForCausalLM": "window",
                       "Llama4ForCausalLM": "chunked", "DeepseekV32ForCausalLM": "indexer",
                       "DeepseekV4ForCausalLM": "spec", "WhisperForConditionalGeneration": "cross",
                       "InklingForCausalLM": "spec", "Qwen3_5ForCausalLM": "state"}.items():
        assert kind in kinds.get(arch, ()), (release, arch, kinds.get(arch))
    assert not {"Qwen2ForCausalLM", "OPTForCausalLM", "GPT2LMHeadModel"} & set(kinds)
    assert {"Eagle3LlamaForCausalLM", "Qwen3NextMTP", "ExtractHiddenStatesModel"} <= set(drafters(_vllm(release)))


@pytest.mark.parametrize("release", RELEASES)
def test_every_multi_kind_architecture_and_drafter_has_a_config_or_a_reason(release):
    listed, _, cover = _listed(release)
    missing = sorted(a for a in listed if a not in cover and a not in REASONS)
    assert not missing, (f"vLLM {release} registers {len(missing)} architecture(s) or drafter(s) with a multi-kind "
                         f"or non-attention KV cache and neither a reference config (spec/models/) nor a reason "
                         f"here: {missing}")


def test_no_reason_is_stale():
    """A reason names an architecture one of the releases lists, that has no config there, and (for the
    grouped reasons) a kind the scan still sees; a wrapper's reason names a covered language model."""
    views = [_listed(r) for r in RELEASES]
    stale = sorted(a for a in REASONS if not any(a in listed and a not in cover for listed, _, cover in views))
    assert not stale, f"reasons for architectures {RELEASES} no longer list (or that now have a config): {stale}"
    covered_any = set().union(*(set(c) for _, _, c in views))
    for arch, reason in REASONS.items():
        if reason.startswith(("its language model is", "its registry entry is")):
            assert reason.split("is ", 1)[1].split("'s", 1)[0] in covered_any, (arch, reason)
        kind = next((k for k, w in KIND_WORDS.items() if reason.startswith(_UNSOURCED.format(w))), None)
        if kind:
            assert any(kind in kinds.get(arch, ()) for _, kinds, _ in views), (arch, kind)


def test_mtp_heads_name_reference_mtp_models():
    assert set(MTP_HEADS.values()) <= set(facts.MTP_REFERENCE_MODELS)


def test_the_newest_release_families_are_read_from_its_own_package():
    """kvproof.facts.models.families (bench/results/derive_0.33.0.md's second table): 0.33's vllm/models/
    packages and what each registers; the families the issue lists are there, common/ is not."""
    from kvproof.facts.models import families

    fams = families(_vllm(NEWEST))
    assert {"deepseek_v4", "glm5next", "kimi_k3", "qwen4_exp"} <= set(fams) and "common" not in fams, sorted(fams)
    assert "Glm5NextForCausalLM" in fams["glm5next"] and "KimiLinearForCausalLM" in fams["kimi_k3"], fams
