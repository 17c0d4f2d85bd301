"""The Layout: the one scenario type. JSON in and out, validated once here.

A Layout describes what ``resolve_kv_cache_block_sizes`` sees: the KV cache
groups (kind, block size, spec flags), the cache config (block size, prefix
caching, prefix_match_unit, Mamba cache mode), the KV connector, the
decode-context-parallel size and max_model_len. Everything downstream
(bridge, Z3 model, fuzzer, corpus) takes a Layout and nothing looser.

One input unit: a Layout with an optional request stream (``Layout.stream``, a typed
:class:`kvproof.inputs.stream.Stream`, what the consumer tier runs). It stays outside the content
hash and equality, as meta does; on disk it rides in the meta object (``"kvproof":
{"stream": ...}``), read once here through ``Stream.from_dict``. Speculation is the Layout's
(``speculative``: method, draft length, MTP modules); the stream says only how drafts are accepted.
A file written before that (its stream's ``spec``) is read once more as it was meant
(:func:`_moved_speculation`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from kvproof.errors import LayoutError
from kvproof.inputs.reading import parse_json_as
from kvproof.facts import ALL_MAMBA_MODES as MAMBA_MODES
from kvproof.facts import KINDS, connectors, default_dcp_sharded, engine_cache_block_size, is_attention
from kvproof.inputs.stream import Stream
MAX_BLOCK_SIZE = 1 << 24  # far above any real block size; keeps JSON sane
META_KEY = "kvproof"  # corpus annotations ride along under this key, outside the hash
STREAM_KEY = "stream"  # the Layout's request stream, under META_KEY on disk (Layout.stream in memory)

_GROUP_KEYS = {"kind", "block_size", "prefix_cacheable", "dcp_sharded", "tokens_per_state",
               "sliding_window", "attention_chunk_size", "mamba_cache_mode", "count", "eagle"}
_SPEC_KEYS = {"method", "num_speculative_tokens", "mtp_modules"}
_CACHE_KEYS = {"block_size", "enable_prefix_caching", "prefix_match_unit", "mamba_cache_mode"}
_TOP_KEYS = {"groups", "cache", "kv_connector", "dcp", "max_model_len", "speculative", META_KEY}


@dataclass(frozen=True)
class Group:
    """One KV cache group. ``None`` flags mean "the release's default"."""

    kind: str
    block_size: int
    prefix_cacheable: bool | None = None
    dcp_sharded: bool | None = None
    tokens_per_state: int | None = None
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    # KVCacheGroupSpec.is_eagle_group (0.27+): the drafter's group, the one the coordinator
    # drops a unit past a hit for under EAGLE (None: not flagged; then every group drops)
    eagle: bool | None = None

    @property
    def is_attention(self) -> bool:
        return is_attention(self.kind)

    @property
    def sharded(self) -> bool:
        """Scaled by dcp: the explicit flag, else the spec class default (facts.default_dcp_sharded)."""
        return self.dcp_sharded if self.dcp_sharded is not None else default_dcp_sharded(self.kind)


@dataclass(frozen=True)
class Cache:
    """The parts of vLLM's CacheConfig the resolver reads."""

    block_size: int
    enable_prefix_caching: bool = True
    prefix_match_unit: int | None = None
    mamba_cache_mode: str = "align"


@dataclass(frozen=True)
class Speculative:
    """The engine's speculative decoding (``SpeculativeConfig.method``, ``num_speculative_tokens``;
    for MTP the target's MTP modules, its ``num_nextn_predict_layers``)."""

    method: str
    num_speculative_tokens: int = 1
    mtp_modules: int = 1

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.mtp_modules > 1:  # absent otherwise: one-module layouts keep their hashes
            d["mtp_modules"] = self.mtp_modules
        return d


# A Layout that does not say how long its requests may be: a long-context deployment (the
# one default every reader of max_model_len takes: the parser, the CLI, the prover, replay).
# The tiny synthetic models of kvproof.inputs.config keep their own short length (Config.max_model_len).
DEFAULT_MAX_MODEL_LEN = 131072


@dataclass(frozen=True)
class Layout:
    groups: tuple[Group, ...]
    cache: Cache
    kv_connector: str | None = None
    dcp: int = 1
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    speculative: Speculative | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # the requests the consumer tier runs (None: its default stream); outside the hash, as meta
    stream: Stream | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        # a stream handed in under meta (a file's form, or an older caller's) is typed here, once:
        # the Layout never holds it twice, and never as an untyped dict
        if STREAM_KEY in self.meta:
            meta = dict(self.meta)
            object.__setattr__(self, "stream", _as_stream(meta.pop(STREAM_KEY)))
            object.__setattr__(self, "meta", meta)

    # --- JSON edge -------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any) -> "Layout":
        return _parse_layout(data)

    @classmethod
    def from_json(cls, text: str, where: str = "layout") -> "Layout":
        return parse_json_as(text, where, _parse_layout)

    def to_dict(self, with_meta: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "groups": [_group_dict(g) for g in self.groups],
            "cache": {
                "block_size": self.cache.block_size,
                "enable_prefix_caching": self.cache.enable_prefix_caching,
                "prefix_match_unit": self.cache.prefix_match_unit,
                "mamba_cache_mode": self.cache.mamba_cache_mode,
            },
            "kv_connector": self.kv_connector,
            "dcp": self.dcp,
            "max_model_len": self.max_model_len,
        }
        if self.speculative is not None:  # absent otherwise: layouts without drafts keep their hashes
            out["speculative"] = self.speculative.to_dict()
        if with_meta and (self.meta or self.stream is not None):
            out[META_KEY] = dict(self.meta)
            if self.stream is not None:
                out[META_KEY][STREAM_KEY] = self.stream.to_dict()
        return out

    def canonical(self) -> str:
        """The canonical JSON text: sorted keys, no spaces, defaults filled."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def content_hash(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    def with_meta(self, **meta: Any) -> "Layout":
        """``meta`` added; a ``stream`` among them (a Stream, its dict, or None) is the Layout's stream."""
        if STREAM_KEY in meta:
            stream = _as_stream(meta.pop(STREAM_KEY))
            return replace(self, meta={**self.meta, **meta}, stream=stream)
        return replace(self, meta={**self.meta, **meta})

    def with_stream(self, stream: Stream | None) -> "Layout":
        """This Layout under ``stream`` (None: the consumer tier's default one)."""
        return replace(self, stream=stream)

    # --- derived facts used by contracts and the model --------------------
    @property
    def hashing_active(self) -> bool:
        return self.cache.enable_prefix_caching or self.kv_connector is not None

    @property
    def largest_block(self) -> int:
        """The largest group block size (what the consumer streams are scaled to)."""
        return max(g.block_size for g in self.groups)

    @property
    def has_mamba(self) -> bool:
        return any(g.kind == "mamba" for g in self.groups)

    def summary(self) -> str:
        """Short human form: ``mamba:544x4,hidden_state:181 cache=181 pc``."""
        flags = [f"cache={self.cache.block_size}"]
        if self.cache.enable_prefix_caching:
            flags.append("pc")
        if self.cache.prefix_match_unit is not None:
            flags.append(f"pmu={self.cache.prefix_match_unit}")
        if self.has_mamba:
            flags.append(f"mamba={self.cache.mamba_cache_mode}")
        if self.kv_connector:
            flags.append(f"conn={self.kv_connector}")
        if self.dcp != 1:
            flags.append(f"dcp={self.dcp}")
        if self.speculative is not None:
            sp = self.speculative
            flags.append(f"spec={sp.method}:{sp.num_speculative_tokens}" + (f"/{sp.mtp_modules}m" if sp.mtp_modules > 1 else ""))
        return groups_summary((g.kind + ("[ring]" if g.prefix_cacheable is False else "")
                               + ("[eagle]" if g.eagle else ""), g.block_size)
                              for g in self.groups) + " " + " ".join(flags)


def groups_summary(groups: Iterable[tuple[str, int]]) -> str:
    """``mamba:544x4,hidden_state:181``: runs of equal (kind, block size) counted
    (a ``[ring]`` kind is a group that opts out of prefix caching)."""
    runs: list[list] = []
    for kind, size in groups:
        if runs and runs[-1][:2] == [kind, size]:
            runs[-1][2] += 1
        else:
            runs.append([kind, size, 1])
    return ",".join(f"{k}:{s}" + (f"x{n}" if n > 1 else "") for k, s, n in runs)


def _group_dict(g: Group) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": g.kind, "block_size": g.block_size}
    for name in ("prefix_cacheable", "dcp_sharded", "tokens_per_state", "sliding_window",
                 "attention_chunk_size", "eagle"):
        value = getattr(g, name)
        if value is not None:
            d[name] = value
    return d


# --- validation -------------------------------------------------------------

def _int(value: Any, name: str, lo: int = 1, hi: int = MAX_BLOCK_SIZE) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutError(f"{name} must be an integer, got {json.dumps(value)}")
    if value < lo:
        raise LayoutError(f"{name} must be >= {lo}, got {value}")
    if value > hi:
        raise LayoutError(f"{name} must be <= {hi}, got {value}")
    return value


def _opt_int(value: Any, name: str, hi: int = MAX_BLOCK_SIZE) -> int | None:
    return None if value is None else _int(value, name, hi=hi)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise LayoutError(f"{name} must be true or false, got {json.dumps(value)}")
    return value


def _opt_bool(value: Any, name: str) -> bool | None:
    return None if value is None else _bool(value, name)


def _object(value: Any, name: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise LayoutError(f"{name} must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise LayoutError(f"{name} has unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    return value


def _mode(value: Any, name: str) -> str:
    if value not in MAMBA_MODES:
        raise LayoutError(f"{name} must be one of {', '.join(MAMBA_MODES)}, got {json.dumps(value)}")
    return value


def _parse_group(raw: Any, i: int) -> tuple[list[Group], str | None]:
    where = f"groups[{i}]"
    obj = _object(raw, where, _GROUP_KEYS)
    kind = obj.get("kind")
    if kind not in KINDS:
        raise LayoutError(f"{where}.kind must be one of {', '.join(KINDS)}, got {json.dumps(kind)}")
    if "block_size" not in obj:
        raise LayoutError(f"{where}.block_size is required")
    mode = obj.get("mamba_cache_mode")
    if mode is not None:
        if kind != "mamba":
            raise LayoutError(f"{where}.mamba_cache_mode is only valid on a mamba group")
        mode = _mode(mode, f"{where}.mamba_cache_mode")
    g = Group(
        kind=kind,
        block_size=_int(obj["block_size"], f"{where}.block_size"),
        prefix_cacheable=_opt_bool(obj.get("prefix_cacheable"), f"{where}.prefix_cacheable"),
        dcp_sharded=_opt_bool(obj.get("dcp_sharded"), f"{where}.dcp_sharded"),
        tokens_per_state=_opt_int(obj.get("tokens_per_state"), f"{where}.tokens_per_state"),
        sliding_window=_opt_int(obj.get("sliding_window"), f"{where}.sliding_window"),
        attention_chunk_size=_opt_int(obj.get("attention_chunk_size"), f"{where}.attention_chunk_size"),
        eagle=_opt_bool(obj.get("eagle"), f"{where}.eagle"),
    )
    if g.sliding_window is not None and kind != "sliding_window":
        raise LayoutError(f"{where}.sliding_window is only valid on a sliding_window group")
    if g.attention_chunk_size is not None and kind != "chunked_local":
        raise LayoutError(f"{where}.attention_chunk_size is only valid on a chunked_local group")
    if g.tokens_per_state is not None and g.prefix_cacheable is False:  # CircularBufferSpec rings hold raw keys
        raise LayoutError(f"{where}.tokens_per_state is not valid on a ring buffer (prefix_cacheable=false)")
    count = _int(obj.get("count", 1), f"{where}.count", hi=64)
    return [g] * count, mode


def _parse_layout(data: Any) -> Layout:
    top = _object(data, "layout", _TOP_KEYS)
    raw_groups = top.get("groups")
    if not isinstance(raw_groups, list):
        raise LayoutError("groups must be a list of group objects")
    groups: list[Group] = []
    group_modes: set[str] = set()
    for i, raw in enumerate(raw_groups):
        parsed, mode = _parse_group(raw, i)
        groups.extend(parsed)
        if mode is not None:
            group_modes.add(mode)
    if not groups:
        raise LayoutError("groups must not be empty")
    if len(groups) > 64:
        raise LayoutError(f"at most 64 groups are supported, got {len(groups)}")
    cache_raw = _object(top.get("cache", {}), "cache", _CACHE_KEYS)
    # vLLM has one Mamba mode per engine (CacheConfig.mamba_cache_mode); a mode
    # written on a group is accepted as shorthand and must agree everywhere.
    modes = set(group_modes)
    if cache_raw.get("mamba_cache_mode") is not None:
        modes.add(_mode(cache_raw["mamba_cache_mode"], "cache.mamba_cache_mode"))
    if len(modes) > 1:
        raise LayoutError(f"conflicting mamba_cache_mode values {sorted(modes)}: vLLM has one per engine")
    block_size = cache_raw.get("block_size")
    # Default as the engine core sets it after KV init (0.31+ rule; before
    # 0.29 every group is prefix-cacheable, so both rules agree there).
    default_bs = engine_cache_block_size("prefix_cacheable", [g.block_size for g in groups],
                                         [g.prefix_cacheable is not False for g in groups])
    cache = Cache(
        block_size=_int(block_size, "cache.block_size") if block_size is not None else default_bs,
        enable_prefix_caching=_bool(cache_raw.get("enable_prefix_caching", True), "cache.enable_prefix_caching"),
        prefix_match_unit=_opt_int(cache_raw.get("prefix_match_unit"), "cache.prefix_match_unit"),
        mamba_cache_mode=modes.pop() if modes else "align",
    )
    connector = top.get("kv_connector")
    if connector is not None and connector not in connectors():
        raise LayoutError(f"kv_connector {json.dumps(connector)[:80]} is not a vLLM connector "
                          f"(registered: {', '.join(connectors())})")
    meta = top.get(META_KEY, {})
    if not isinstance(meta, dict):
        raise LayoutError(f"{META_KEY} must be an object")
    meta = dict(meta)
    speculative = _speculative(top.get("speculative"))
    try:
        raw_stream, speculative = _moved_speculation(meta.pop(STREAM_KEY, None), speculative)
        stream = _as_stream(raw_stream)
    except LayoutError as err:
        raise LayoutError(f"{META_KEY}.{STREAM_KEY}: {err}") from None
    return Layout(
        groups=tuple(groups),
        cache=cache,
        kv_connector=connector,
        dcp=_int(top.get("dcp", 1), "dcp", hi=64),
        max_model_len=_int(top.get("max_model_len", DEFAULT_MAX_MODEL_LEN), "max_model_len", hi=1 << 30),
        speculative=speculative,
        meta=meta,
        stream=stream,
    )


def _as_stream(raw: Any) -> Stream | None:
    """A stream as a Layout holds it: a Stream, parsed from its JSON object (``Stream.from_dict``,
    the one parse function), or None."""
    return raw if raw is None or isinstance(raw, Stream) else Stream.from_dict(raw)


def _moved_speculation(raw: Any, speculative: Speculative | None) -> tuple[Any, Speculative | None]:
    """A stream object written while streams carried speculation (``"spec": {"method", "k",
    "modules", "accept", "p", "seed"}``, before the Layout recorded it once): its method, length
    and modules become the Layout's ``speculative``, its acceptance the stream's ``accept``. A
    file whose Layout already speculates otherwise is refused: which one ran is not known."""
    if not isinstance(raw, dict) or "spec" not in raw:
        return raw, speculative
    raw = dict(raw)
    old = _object(raw.pop("spec"), "spec", {"method", "k", "modules", "accept", "p", "seed"})
    moved = _speculative({"method": old.get("method", "ngram"), "num_speculative_tokens": old.get("k", 1),
                          "mtp_modules": old.get("modules", 1)})
    if speculative is not None and speculative != moved:
        raise LayoutError(f"spec {moved.to_dict()} differs from the layout's speculative {speculative.to_dict()}")
    accept = {"mode": old.get("accept", "all")}
    if accept["mode"] == "seeded":
        accept.update(p=old.get("p", 0.5), seed=old.get("seed", 0))
    if accept["mode"] != "all":
        raw["accept"] = accept
    return raw, moved


def _speculative(raw: Any) -> Speculative | None:
    if raw is None:
        return None
    obj = _object(raw, "speculative", _SPEC_KEYS)
    method = obj.get("method")
    if not isinstance(method, str) or not method.replace("_", "").isalnum() or len(method) > 40:
        raise LayoutError(f"speculative.method must be a vLLM speculative method name, got {json.dumps(method)[:40]}")
    modules = _int(obj.get("mtp_modules", 1), "speculative.mtp_modules", hi=64)
    if modules > 1 and method != "mtp":
        raise LayoutError(f"speculative.mtp_modules is the target's MTP modules: method mtp only, got {method}")
    return Speculative(method, _int(obj.get("num_speculative_tokens", 1), "speculative.num_speculative_tokens", hi=64),
                       modules)


def parse_groups_spec(spec: str) -> list[dict[str, Any]]:
    """Parse the inline form ``mamba:544x4,hidden_state:181`` into group dicts."""
    out: list[dict[str, Any]] = []
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            raise LayoutError(f"--groups {spec!r}: empty entry")
        kind, sep, rest = token.partition(":")
        if not sep:
            raise LayoutError(f"--groups entry {token!r} must look like KIND:BLOCK_SIZE[xCOUNT]")
        size, _, count = rest.partition("x")
        try:
            g: dict[str, Any] = {"kind": kind, "block_size": int(size)}
            if count:
                g["count"] = int(count)
        except ValueError:
            raise LayoutError(f"--groups entry {token!r}: block size and count must be integers") from None
        out.append(g)
    return out
