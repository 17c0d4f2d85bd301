"""Config: what a user actually sets. Stdlib only; JSON in and out, validated once here.

The bottom of the input layers: it imports only errors, reading and the vLLM
facts (``kvproof.facts``); everything that builds, boots or derives
(bridge, replay, derivation) imports it, never the other way round.

A user never writes a Layout. They name a model and the engine settings:

* a real model: ``model`` is an HF ``config.json`` (a file, a folder holding
  one, or the name of a reference configuration shipped as data under
  ``spec/models/``: :func:`reference_models`), and ``flags`` are the flags of
  a ``vllm serve`` command line, parsed inside the release by its own
  ``EngineArgs`` argument parser (:mod:`kvproof.bridge.derive`), so every flag
  means what that release means by it;
* or one of the tiny hybrid families (:data:`FAMILIES`, data here: their
  shape knobs and their ``config.json`` rendering, :func:`render_tiny`) with
  the engine knobs of :class:`Knobs` (block size, Mamba cache mode, prefix
  caching, a KV connector, hidden-state extraction, ``kv_cache_dtype`` and its
  skip layers, ``prefix_match_unit``, ``max_model_len``) plus ``dcp``. Engine
  boots (:class:`kvproof.tiers.families.Recipe`) are the same knobs.

Real vLLM derives the Layout from either (:mod:`kvproof.bridge.derive`).
Every vLLM fact used to validate (Mamba modes, connector names, dtypes) comes
from :mod:`kvproof.facts`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from kvproof.errors import LayoutError
from kvproof.inputs.reading import parse_json_as
from kvproof import facts

FAMILIES = ("nemotron_h", "granite_moe_hybrid", "qwen3_next")
VOCAB = 512
# The tiny families' Mamba/GDN SSM state dtype, passed to vLLM explicitly so every CPU builds the
# same layout (why: kvproof.tiers.families, next to the boots it matters most to).
SSM_STATE_DTYPE = "float32"
SOURCE_KEY = "_kvproof_source"  # where a reference config.json's values come from (stripped before vLLM reads it)


@functools.lru_cache(maxsize=None)
def models_dir() -> Path:
    """``spec/models/``: one HF ``config.json`` per reference architecture (package data of kvproof.spec).

    Found, not imported: ``find_spec`` locates kvproof.spec without running its ``__init__`` (the
    Z3 model's package), so the input types stay on the ground floor."""
    spec = importlib.util.find_spec("kvproof.spec")
    assert spec is not None and spec.submodule_search_locations, "kvproof.spec is not installed"
    return Path(list(spec.submodule_search_locations)[0]).resolve() / "models"


def reference_models() -> tuple[str, ...]:
    """Names of the reference configurations (``spec/models/<name>.json``)."""
    return tuple(sorted(p.stem for p in models_dir().glob("*.json")))


def reference_drafts() -> tuple[str, ...]:
    """Names of the reference draft models (``spec/models/drafts/<name>.json``): what a
    ``--speculative-config`` ``"model"`` may name instead of a hub id (no hub here)."""
    return tuple(sorted(p.stem for p in (models_dir() / "drafts").glob("*.json")))


def load_draft_config(name: str) -> dict[str, Any]:
    """The HF config dict of the reference draft ``name`` (its ``_kvproof_source`` note removed)."""
    return load_model_config(str(models_dir() / "drafts" / f"{name}.json"))


def model_config_path(model: str) -> Path:
    """The ``config.json`` a Config's ``model`` names: a reference name, a file, or a folder with one."""
    ref = models_dir() / f"{model}.json"
    if "/" not in model and ref.is_file():
        return ref
    path = Path(model).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if path.is_file():
        return path
    raise LayoutError(f"model {model!r} is neither a reference configuration ({', '.join(reference_models())}) "
                      f"nor a config.json file or a folder holding one")


def load_model_config(model: str) -> dict[str, Any]:
    """The HF config dict of ``model`` (its ``_kvproof_source`` note removed)."""
    from kvproof.inputs.reading import parse_json, read_text
    path = model_config_path(model)
    data = parse_json(read_text(path), str(path), LayoutError)
    if not isinstance(data, Mapping):
        raise LayoutError(f"{path}: a config.json must be a JSON object")
    data = dict(data)
    data.pop(SOURCE_KEY, None)
    if not isinstance(data.get("architectures"), list) or not data["architectures"]:
        raise LayoutError(f"{path}: config.json names no architectures")
    return data


_K = TypeVar("_K", bound="Knobs")


@dataclass(frozen=True)
class Knobs:
    """What a user sets: one tiny model's shape knobs and the engine settings.

    Declared once: ``Recipe`` (a boot) and ``kvproof.inputs.config.Config`` (a user's
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

    # --- what a person reads ---------------------------------------------
    def _extra_model_bits(self) -> list[str]:
        return []

    def _ssm_state_dtype(self) -> str:
        """The SSM state dtype a derivation or boot passes (a Recipe can leave it to the release)."""
        return SSM_STATE_DTYPE

    def describe(self) -> str:
        bits = [self.family, f"pattern={self.pattern}", f"h={self.hidden_size}",
                f"attn={self.num_heads}x{self.head_dim}/kv{self.num_kv_heads}",
                f"mamba={self.mamba_heads}x{self.mamba_head_dim} state={self.ssm_state}", self.dtype]
        bits.extend(self._extra_model_bits())
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

    # --- rendering ---------------------------------------------------------
    def hf_config(self) -> dict[str, Any]:
        """The tiny family's HF ``config.json``."""
        return render_tiny(self)

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
        if self._ssm_state_dtype() != "auto":
            kw["mamba_ssm_cache_dtype"] = self._ssm_state_dtype()
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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aux_layers"] = list(self.aux_layers)
        d["kv_cache_dtype_skip_layers"] = list(self.kv_cache_dtype_skip_layers)
        return d

    def but(self: _K, **kw: Any) -> _K:
        return replace(self, **kw)


KNOBS = tuple(f.name for f in fields(Knobs))


def _common(r: Knobs, arch: str, model_type: str) -> dict[str, Any]:
    return {"architectures": [arch], "model_type": model_type, "vocab_size": VOCAB,
            "hidden_size": r.hidden_size, "num_attention_heads": r.num_heads,
            "num_key_value_heads": r.num_kv_heads, "max_position_embeddings": max(r.max_model_len, 4096),
            "torch_dtype": r.dtype, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 0}


def _nemotron_h(r: Knobs) -> dict[str, Any]:
    cfg = _common(r, "NemotronHForCausalLM", "nemotron_h")
    cfg.update(num_hidden_layers=len(r.pattern), hybrid_override_pattern=r.pattern, head_dim=r.head_dim,
               intermediate_size=2 * r.hidden_size, mamba_num_heads=r.mamba_heads, mamba_head_dim=r.mamba_head_dim,
               ssm_state_size=r.ssm_state, mamba_n_groups=1, n_groups=1, mamba_d_conv=4, mamba_expand=2,
               mamba_chunk_size=64, conv_kernel=4, chunk_size=64, expand=2, mlp_hidden_act="relu2",
               layer_norm_epsilon=1e-5, residual_in_fp32=False, use_mamba_kernels=False,
               sliding_window=r.sliding_window, rescale_prenorm_residual=True, num_logits_to_keep=1)
    return cfg


def _granite(r: Knobs) -> dict[str, Any]:
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


def _qwen3_next(r: Knobs) -> dict[str, Any]:
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


def render_tiny(knobs: Knobs) -> dict[str, Any]:
    """A tiny family's HF ``config.json`` from its knobs."""
    return _RENDER[knobs.family](knobs)



MAX_INT = 1 << 30

_PATTERN_CHARS = {"nemotron_h": "M*-", "granite_moe_hybrid": "M*-", "qwen3_next": "M*-"}


@dataclass(frozen=True)
class Config(Knobs):
    """One user configuration: the knobs (model shape, engine settings) and dcp, or a real model.

    ``None`` means "left to the release's default" (so ``mamba_cache_mode``
    defaults to None here, where a boot Recipe pins "align"). With ``model``
    set, the model is that ``config.json`` and the engine settings are
    ``flags`` (``vllm serve`` flags, e.g. ``("--mamba-cache-mode", "align")``);
    the tiny-family knobs are then unused and must stay at their defaults.
    """

    dcp: int = 1  # decode_context_parallel_size
    model: str | None = None  # a reference name (spec/models/), a config.json, or a folder holding one
    flags: tuple[str, ...] = ()  # vllm serve flags, parsed by the release's own EngineArgs parser

    @classmethod
    def from_recipe(cls, recipe: Knobs, dcp: int = 1) -> Config:
        return cls(**{name: getattr(recipe, name) for name in KNOBS}, dcp=dcp)

    def llm_kwargs(self, model_dir: str, storage_dir: str) -> dict[str, Any]:
        kw = super().llm_kwargs(model_dir, storage_dir)
        if self.dcp != 1:
            kw["decode_context_parallel_size"] = self.dcp
        return kw

    def describe(self) -> str:
        if self.model is not None:
            return " ".join((self.model,) + self.flags)
        text = super().describe()
        return text + (f" dcp={self.dcp}" if self.dcp != 1 else "")

    # --- JSON edge ---------------------------------------------------------
    def to_dict(self, minimal: bool = False) -> dict[str, Any]:
        """All fields (``minimal``: only those that differ from the defaults)."""
        d = super().to_dict()
        d["flags"] = list(self.flags)
        if minimal:
            base = Config().to_dict()
            d = {k: v for k, v in d.items() if v != base[k] or (k == "family" and self.model is None)}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(minimal=True), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any, revision: str | None = None) -> Config:
        """Validate ``data``; ``revision`` (``0.27`` ...) checks release-specific values too."""
        return _parse(data, revision)

    @classmethod
    def from_json(cls, text: str, revision: str | None = None, where: str = "config") -> Config:
        return parse_json_as(text, where, lambda data: _parse(data, revision))

    def check(self, revision: str) -> Config:
        """Raise LayoutError when ``revision`` does not accept these values; returns self."""
        _parse(self.to_dict(), revision)
        return self


# --- validation ----------------------------------------------------------------

_NAMES = tuple(f.name for f in fields(Config))


def _int(value: Any, name: str, lo: int = 1, hi: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutError(f"{name} must be an integer, got {json.dumps(value)}")
    if not lo <= value <= hi:
        raise LayoutError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _opt_int(value: Any, name: str, lo: int = 1) -> int | None:
    return None if value is None else _int(value, name, lo)


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise LayoutError(f"{name} must be a non-empty string, got {json.dumps(value)}")
    return value


def _choice(value: Any, name: str, accepted: tuple[str, ...], where: str = "") -> str:
    if value not in accepted:
        raise LayoutError(f"{name} must be one of {', '.join(accepted)}{where}, got {json.dumps(value)}")
    return value


def _list(value: Any, name: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise LayoutError(f"{name} must be a list, got {json.dumps(value)}")
    return list(value)


@functools.lru_cache(maxsize=None)
def _default_fields() -> tuple:
    return tuple(Config().to_dict().items())


def _defaults() -> dict[str, Any]:
    """The default Config's fields (a fresh dict: callers may merge into it)."""
    return dict(_default_fields())


def _parse(data: Any, revision: str | None) -> Config:
    if not isinstance(data, Mapping):
        raise LayoutError(f"a config must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_NAMES))
    if unknown:
        raise LayoutError(f"unknown config field {unknown[0]!r} (allowed: {', '.join(_NAMES)})")
    if revision is not None and revision not in facts.MAMBA_MODES:
        raise LayoutError(f"unknown revision {revision!r} (known: {', '.join(facts.MAMBA_MODES)})")
    rev_note = f" in vLLM {revision}" if revision else ""
    if data.get("model") is not None:
        return _parse_model(data)
    d = {**_defaults(), **data}
    family = _choice(d["family"], "family", FAMILIES)
    pattern = _str(d["pattern"], "pattern")
    bad = sorted(set(pattern) - set(_PATTERN_CHARS[family]))
    if bad:
        raise LayoutError(f"pattern {pattern!r} has {bad[0]!r}: use M (mamba), * (attention), - (MLP)")
    layers = pattern if family == "nemotron_h" else pattern.replace("-", "")
    if "M" not in layers or "*" not in layers:
        raise LayoutError(f"pattern {pattern!r} must have at least one M (mamba) and one * (attention) layer")
    out: dict[str, Any] = {"family": family, "pattern": pattern}
    for name in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "mamba_heads", "mamba_head_dim",
                 "ssm_state", "max_model_len", "kv_cache_memory_bytes"):
        out[name] = _int(d[name], name, hi=(1 << 40) if name == "kv_cache_memory_bytes" else MAX_INT)
    if out["num_heads"] % out["num_kv_heads"]:
        raise LayoutError(f"num_heads ({out['num_heads']}) must be a multiple of num_kv_heads ({out['num_kv_heads']})")
    out["dcp"] = _int(d["dcp"], "dcp", hi=64)
    for name in ("sliding_window", "block_size", "prefix_match_unit"):
        out[name] = _opt_int(d[name], name)
    if out["sliding_window"] is not None and family != "nemotron_h":
        raise LayoutError(f"sliding_window is a nemotron_h knob (family {family} has none)")
    aux = _list(d["aux_layers"], "aux_layers")
    for i, layer in enumerate(aux):
        _int(layer, f"aux_layers[{i}]", lo=0, hi=len(layers) - 1)
    out["aux_layers"] = tuple(aux)
    out["dtype"] = _choice(d["dtype"], "dtype", facts.MODEL_DTYPES)
    if not isinstance(d["enable_prefix_caching"], bool):
        raise LayoutError(f"enable_prefix_caching must be true or false, got {json.dumps(d['enable_prefix_caching'])}")
    out["enable_prefix_caching"] = d["enable_prefix_caching"]
    modes = facts.MAMBA_MODES[revision] if revision else facts.ALL_MAMBA_MODES
    mode = d["mamba_cache_mode"]
    out["mamba_cache_mode"] = None if mode is None else _choice(mode, "mamba_cache_mode", modes, rev_note)
    connector = d["kv_connector"]
    if connector is not None:
        connector = _choice(connector, "kv_connector", facts.connectors(revision), rev_note)
        if aux and connector != facts.HIDDEN_STATES_CONNECTOR:
            raise LayoutError(f"aux_layers (hidden-state extraction) uses {facts.HIDDEN_STATES_CONNECTOR}; "
                              f"kv_connector {connector!r} cannot be set with it")
    if connector == facts.HIDDEN_STATES_CONNECTOR and not aux:
        raise LayoutError(f"kv_connector {connector} needs aux_layers (hidden-state extraction)")
    out["kv_connector"] = None if aux else connector  # extraction always brings its own connector
    out["kv_cache_dtype"] = _str(d["kv_cache_dtype"], "kv_cache_dtype")
    skip = _list(d["kv_cache_dtype_skip_layers"], "kv_cache_dtype_skip_layers")
    out["kv_cache_dtype_skip_layers"] = tuple(_str(s, f"kv_cache_dtype_skip_layers[{i}]") for i, s in enumerate(skip))
    if revision is not None and out["prefix_match_unit"] is not None \
            and revision not in facts.PREFIX_MATCH_UNIT_REVISIONS:
        raise LayoutError(f"prefix_match_unit is not a setting in vLLM {revision}")
    if d["flags"]:
        raise LayoutError("flags (vllm serve flags) go with model (a config.json); a tiny family takes knobs")
    return Config(**out)


def _parse_model(data: Mapping[str, Any]) -> Config:
    """A real model: ``model`` and ``flags`` only (the engine settings are the flags)."""
    defaults = _defaults()
    extra = sorted(k for k, v in data.items() if k not in ("model", "flags") and v != defaults[k])
    if extra:
        raise LayoutError(f"{extra[0]} is a tiny-family knob; with model, give engine settings as vllm serve "
                          f"flags (e.g. \"flags\": [\"--block-size\", \"64\"])")
    model = _str(data["model"], "model")
    path = model_config_path(model)  # exists (one line otherwise)
    if path.parent != models_dir():  # a user's file: absolute, so a worker in another folder finds it
        model = str(Path(model).expanduser().resolve())
    flags = _list(data.get("flags", []), "flags")
    return Config(model=model, flags=tuple(_str(f, f"flags[{i}]") for i, f in enumerate(flags)))
