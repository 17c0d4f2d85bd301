"""Config: what a user actually sets. Stdlib only; JSON in and out, validated once here.

A user never writes a Layout: they pick a model (here one of the tiny hybrid
families of :mod:`kvproof.replay.families`, with its shape knobs) and engine
settings (block size, Mamba cache mode, prefix caching, a KV connector,
hidden-state extraction, ``kv_cache_dtype`` and its skip layers,
``prefix_match_unit``, ``max_model_len``, decode-context parallelism). Real
vLLM derives the Layout from that (:mod:`kvproof.bridge.derive`).

A Config is the :class:`~kvproof.replay.families.Knobs` a boot
:class:`~kvproof.replay.families.Recipe` also has (declared once there: the
same knobs render the same ``config.json`` and ``vllm.LLM`` arguments that an
engine boot uses, so derivation and boot see one configuration) plus ``dcp``.
Every vLLM fact used to validate (Mamba modes, connector names, dtypes) comes
from :mod:`kvproof.spec.facts`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kvproof.errors import LayoutError
from kvproof.inputs import parse_json_as
from kvproof.replay.families import FAMILIES, KNOBS, Knobs, Recipe
from kvproof.spec import facts

MAX_INT = 1 << 30

_PATTERN_CHARS = {"nemotron_h": "M*-", "granite_moe_hybrid": "M*-", "qwen3_next": "M*-"}


@dataclass(frozen=True)
class Config(Knobs):
    """One user configuration: the knobs (model shape, engine settings) and dcp.

    ``None`` means "left to the release's default" (so ``mamba_cache_mode``
    defaults to None here, where a boot Recipe pins "align").
    """

    dcp: int = 1  # decode_context_parallel_size

    # --- composition with the boot recipe ----------------------------------
    def recipe(self) -> Recipe:
        """The engine-boot recipe with exactly these settings (dcp is not a Recipe knob)."""
        return Recipe(**{name: getattr(self, name) for name in KNOBS})

    @classmethod
    def from_recipe(cls, recipe: Recipe, dcp: int = 1) -> Config:
        return cls(**{name: getattr(recipe, name) for name in KNOBS}, dcp=dcp)

    def llm_kwargs(self, model_dir: str, storage_dir: str) -> dict[str, Any]:
        kw = self.recipe().llm_kwargs(model_dir, storage_dir)
        if self.dcp != 1:
            kw["decode_context_parallel_size"] = self.dcp
        return kw

    @property
    def connector_name(self) -> str | None:
        return self.recipe().connector_name

    def describe(self) -> str:
        text = self.recipe().describe()
        return text + (f" dcp={self.dcp}" if self.dcp != 1 else "")

    # --- JSON edge ---------------------------------------------------------
    def to_dict(self, minimal: bool = False) -> dict[str, Any]:
        """All fields (``minimal``: only those that differ from the defaults)."""
        d = super().to_dict()
        if minimal:
            base = Config().to_dict()
            d = {k: v for k, v in d.items() if v != base[k] or k == "family"}
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


def _parse(data: Any, revision: str | None) -> Config:
    if not isinstance(data, Mapping):
        raise LayoutError(f"a config must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_NAMES))
    if unknown:
        raise LayoutError(f"unknown config field {unknown[0]!r} (allowed: {', '.join(_NAMES)})")
    if revision is not None and revision not in facts.MAMBA_MODES:
        raise LayoutError(f"unknown revision {revision!r} (known: {', '.join(facts.MAMBA_MODES)})")
    rev_note = f" in vLLM {revision}" if revision else ""
    d = {**Config().to_dict(), **data}
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
    return Config(**out)
