"""Real ``SpeculativeConfig``s for a consumer run, built offline from local draft configs. In a vLLM env.

The scheduler reads from ``vllm_config.speculative_config`` what speculation
changes in the KV cache: ``num_speculative_tokens`` (draft slots),
``num_lookahead_tokens`` and ``use_eagle()`` (the managers' EAGLE block
drop), and, in 0.33, ``VllmConfig.num_hash_lookahead_tokens``. Each method is
built the way ``EngineArgs.create_speculative_config`` builds it from a
``--speculative-config`` JSON, with draft models read from ``config.json``
files kvproof writes (no weights, no hub). A method the release lacks (its
``SpeculativeMethod`` literal) or refuses is NOT_EXPRESSIBLE with vLLM's message.
DSpark runs on Model Runner V2 (``model_runner``), as the engine requires.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import os
import typing
from typing import Any, Iterator

from vllm.config import SpeculativeConfig

from kvproof.bridge.compat import kwargs_for
from kvproof.consumer.drafts import Drafts
from kvproof.errors import NotExpressible
from kvproof import facts

# The consumer tier's target model: Llama-shaped, one KV head (MQA, so tp = dcp > 1 validates),
# 64 attention heads (tp = dcp up to 64 divides them). Its KV cache specs come from the Layout.
TARGET_HF_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
                    "intermediate_size": 256, "num_attention_heads": 64, "num_key_value_heads": 1,
                    "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 1 << 20,
                    "torch_dtype": "float16"}


# MTP drafts with the target's own next-token module (SpeculativeConfig takes the target's
# path as the draft model and maps its model_type to the MTP one, glm4_moe -> glm4_moe_mtp):
# a target with MTP layers (num_nextn_predict_layers), GLM-4.5-shaped and scaled down. Every
# release 0.27-0.33 builds it; a Llama target is refused ("Unsupported speculative method").
# Not an MLA target (DeepSeek-V3): on CPU the platform hook (vllm/platforms/cpu.py
# check_and_update_config) turns chunked prefill and prefix caching off for any MLA model, which
# no GPU engine does, so the scheduler would hold every prompt longer than the batch forever.
MTP_TARGET_HF_CONFIG = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 1024,
                        "intermediate_size": 256, "moe_intermediate_size": 64, "num_attention_heads": 64,
                        "num_key_value_heads": 1, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 32000,
                        "max_position_embeddings": 1 << 20, "torch_dtype": "float16", "num_nextn_predict_layers": 1,
                        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                        "first_k_dense_replace": 2, "n_group": 1, "topk_group": 1, "partial_rotary_factor": 0.5}
TARGETS = {"llama": TARGET_HF_CONFIG, "mtp": MTP_TARGET_HF_CONFIG}


def target_for(drafts: Drafts | None) -> str:
    """Which target model (``target_hf_config``) the drafter needs: ``mtp-M`` for M MTP modules."""
    if drafts is None or drafts.method != "mtp":
        return "llama"
    return "mtp" if drafts.modules == 1 else f"mtp-{drafts.modules}"


def target_hf_config(target: str) -> dict[str, Any]:
    """The target's ``config.json``: ``TARGETS``, and for ``mtp-M`` the MTP target with M MTP
    modules (``num_nextn_predict_layers``), as multi-module MTP models ship it."""
    name, _, modules = target.partition("-")
    if not modules:
        return TARGETS[name]
    return dict(TARGETS[name], num_nextn_predict_layers=int(modules))


def hidden_states(model_config: Any, parallel: Any) -> Any:
    """``extract_hidden_states`` as ``EngineArgs`` builds it from ``{"method": ...,
    "draft_model_config": {"hf_config": {aux layer ids}}}``."""
    return SpeculativeConfig(**kwargs_for(
        SpeculativeConfig, method="extract_hidden_states", num_speculative_tokens=1,
        draft_model_config={"hf_config": {"eagle_aux_hidden_state_layer_ids": [1]}},
        target_model_config=model_config, target_parallel_config=parallel))


@contextlib.contextmanager
def model_runner(drafts: Drafts | None) -> Iterator[None]:
    """Model Runner V2 for the whole run of a method the V1 runner refuses
    (``facts.V2_RUNNER_SPEC_METHODS``): the engine that serves it runs V2, as a GPU engine does by
    default; on this CPU machine vLLM picks V1 for want of Triton. ``VllmConfig.use_v2_model_runner``
    reads ``VLLM_USE_V2_MODEL_RUNNER`` on every access, so it stays set until the run ends.

    0.27-0.32 also refuse V2 without Triton (``_validate_v2_model_runner``: "Model Runner V2 requires
    Triton.", the machine's limit, not the configuration's): their ``vllm.config.vllm.HAS_TRITON``
    reads True for the run, as on the GPU machine that serves DSpark. It gates only the runner choice
    and that check there; the consumer tier runs no kernels. 0.34 removed V1 (no
    ``VllmConfig.use_v2_model_runner``): nothing to choose there."""
    from vllm.config import VllmConfig
    if drafts is None or drafts.method not in facts.V2_RUNNER_SPEC_METHODS \
            or not hasattr(VllmConfig, "use_v2_model_runner"):
        yield
        return
    key = "VLLM_USE_V2_MODEL_RUNNER"
    before = os.environ.get(key)
    os.environ[key] = "1"
    cfg_mod = importlib.import_module("vllm.config.vllm")
    had_triton = getattr(cfg_mod, "HAS_TRITON", None)
    if had_triton is False:
        cfg_mod.HAS_TRITON = True
    try:
        yield
    finally:
        if had_triton is False:
            cfg_mod.HAS_TRITON = False
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def release_methods() -> frozenset[str]:
    """The speculative methods this release's ``SpeculativeConfig`` names: its ``SpeculativeMethod``
    literal (vllm/config/speculative.py), nested literals flattened."""
    from vllm.config import speculative

    def flat(t: Any) -> set[str]:
        args = typing.get_args(t)
        return {t} if isinstance(t, str) else set().union(*(flat(a) for a in args)) if args else set()
    return frozenset(flat(getattr(speculative, "SpeculativeMethod", None)))


# (method, k, target config, its max_model_len, tp, dcp, model dir) -> the SpeculativeConfig built
# for them (never handed out itself: each use gets a copy) or the NotExpressible vLLM's refusal became
_BUILT: dict[tuple, Any] = {}
_BUILT_MAX = 256


def build(drafts: Drafts, model_config: Any, parallel: Any, model_dir: str) -> Any:
    """The release's own ``SpeculativeConfig`` for ``drafts``; NOT_EXPRESSIBLE where the release has no
    such method (its ``SpeculativeMethod`` literal) or refuses it.

    A drafter's config is vLLM reading the draft model's ``config.json`` (~5 ms, the largest part of
    a speculative input's set-up in a campaign); what it builds depends on the key's values only
    (the target's ModelConfig is one object per target, only its max_model_len varies; the parallel
    config is built from tp and dcp), so a key seen before gets a deep copy of the first build
    (~0.5 ms) with the caller's own target and parallel configs in it, or the same refusal."""
    if drafts.method not in release_methods():
        raise NotExpressible(f"speculative method {drafts.method}: this release has no such method (not in its "
                             f"SpeculativeMethod: {', '.join(sorted(release_methods()))})")
    key = (drafts.method, drafts.k, id(model_config), model_config.max_model_len,
           parallel.tensor_parallel_size, parallel.decode_context_parallel_size, model_dir)
    first = _BUILT.get(key)
    if first is None:
        try:
            first = _build(drafts, model_config, parallel, model_dir)
        except NotExpressible as err:
            first = err
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        _BUILT[key] = first
    if isinstance(first, NotExpressible):
        raise NotExpressible(str(first))
    mine = {id(getattr(first, name)): live for name, live in (("target_model_config", model_config),
                                                               ("target_parallel_config", parallel))
            if getattr(first, name, None) is not None}
    return copy.deepcopy(first, mine)


def _build(drafts: Drafts, model_config: Any, parallel: Any, model_dir: str) -> Any:
    """``build`` without the memo: vLLM's own construction."""
    kw: dict[str, Any] = dict(method=drafts.method, num_speculative_tokens=drafts.k,
                              target_model_config=model_config, target_parallel_config=parallel)
    if drafts.method == "ngram":
        kw.update(prompt_lookup_max=3, prompt_lookup_min=1)
    elif drafts.method != "mtp":  # mtp: the target's own path
        kw["model"] = draft_dir(drafts.method, model_dir)
    try:
        return SpeculativeConfig(**kwargs_for(SpeculativeConfig, **kw))
    except (ValueError, TypeError, NotImplementedError, AssertionError) as err:
        msg = " ".join(str(err).split())[:300]
        raise NotExpressible(f"speculative method {drafts.method}: vLLM refuses it here ({type(err).__name__}: "
                             f"{msg})") from None


def draft_dir(method: str, model_dir: str) -> str:
    """A folder with the draft model's ``config.json`` for ``method`` (written once)."""
    path = os.path.join(model_dir, f"draft-{method}")
    if not os.path.exists(os.path.join(path, "config.json")):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(DRAFT_HF_CONFIGS[method], f)
    return path


_HEAD = {k: TARGET_HF_CONFIG[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                          "num_key_value_heads", "vocab_size", "max_position_embeddings",
                                          "torch_dtype")}
DRAFT_HF_CONFIGS = {
    # EAGLE-1 head for a Llama target (yuhuili/EAGLE-LLaMA3-Instruct-8B's shape, scaled down)
    "eagle": dict(_HEAD, architectures=["EagleLlamaForCausalLM"], model_type="llama", num_hidden_layers=1),
    # EAGLE-3 head for a Llama target (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's shape, scaled down)
    "eagle3": dict(_HEAD, architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
                   draft_vocab_size=32000),
    # a separate small draft model of the target's family
    "draft_model": dict(_HEAD, architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=1),
    # DSpark: a standalone Qwen3 block drafter (deepseek-ai/dspark_qwen3_8b_block7's shape, scaled
    # down) reading the target's hidden states at dspark_target_layer_ids. It samples from the
    # anchor (sample_from_anchor absent: the default), so the scheduler reserves k lookahead slots
    # (facts.SPEC_LOOKAHEAD_EXTRA). No block_size: the drafted width is num_speculative_tokens, so
    # 0.27's "num_speculative_tokens >= dspark_block_size" check never applies to k in 1..8.
    "dspark": dict(_HEAD, architectures=["Qwen3DSparkModel"], model_type="qwen3", num_hidden_layers=1, head_dim=16,
                   rms_norm_eps=1e-6, dspark_target_layer_ids=[0], markov_rank=8),
    # DFlash: a Qwen3 in-fill drafter (qwen3_dflash's DFlashDraftModel, scaled down): one bonus
    # query plus k mask queries, k + 1 lookahead slots; SpeculativeConfig wraps it in EAGLEConfig
    "dflash": dict(_HEAD, architectures=["DFlashDraftModel"], model_type="qwen3", num_hidden_layers=1, head_dim=16,
                   rms_norm_eps=1e-6, dflash_config={"target_layer_ids": [0], "mask_token_id": 0}),
}
