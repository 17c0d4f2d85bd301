"""The one Layout generator (fuzzer bytes or Hypothesis draws -> Layout), and back (for seeds).

Pure Python: no vLLM, no atheris. ``decode(src, caps, premise)`` reads a
Layout from a source of choices with atheris' ``FuzzedDataProvider`` API
(``ConsumeIntInRange``, ``ConsumeBool``): the real provider in a harness,
``PyFDP`` elsewhere, ``HypothesisSource`` (tests/layout_strategies.py) for the
Hypothesis strategy ``layouts()``.
``encode(layout, caps, premise)`` writes bytes that decode to that Layout
(round trip checked by tests/unit/test_fuzz_decode.py).

What the bytes choose:

- 1..4 distinct group specs, each repeated 1..8 times (at most 16 groups):
  real models have runs of identical groups (``mamba:544x4``);
- per spec: kind (every kind the release can express), block size from one of
  six families (small 1..64, powers of two up to 2^20, odd values up to 2^20,
  multiples of 16 up to 4096 as page alignment produces, a multiple of an
  earlier group's size, a divisor-ish of one), and the flags the release has
  (ring-buffer ``prefix_cacheable=false``, ``dcp_sharded``, ``tokens_per_state``,
  sliding window / chunk sizes). Per-state compression (``tokens_per_state``)
  follows the premise: ``engine`` puts it only on the kinds whose in-tree specs
  carry it (facts.COMPRESSED_KINDS: MLA, as DeepSeek-V4 / GLM-5-next indexers /
  QSA do), at a real compress ratio (facts.COMPRESS_RATIOS) and on a block of whole states,
  never on Mamba; ``free`` puts any value on any kind whose spec class has the
  field;
- prefix caching on/off, a KV connector on/off, dcp in 1/2/4/8,
  ``prefix_match_unit`` none or a value (a group size, a power of two, any),
  max_model_len;
- the Mamba cache mode and ``cache.block_size`` by *premise*:
  ``engine`` (default) derives them the way a real engine does before the
  resolver runs (mode "none" when prefix caching is off, "align" or the
  release's other caching mode when on; cache block size = the smallest
  prefix-cacheable group's block size, all groups if none, by the release's
  rule ``Caps.engine_block_size_over``) and applies the engine premise's
  group facts (``engine_groups``: one Mamba block size, max_model_len in
  mode none, a cacheable group beside ring buffers, one spec one group,
  chunked-local promoted beside other kinds), so a violation is reachable by
  an engine boot; ``free`` lets the bytes choose both, as a
  direct caller of ``resolve_kv_cache_block_sizes`` could. Without a Mamba
  group the mode is irrelevant and always "align" (the Layout default), so
  equivalent inputs share one content hash.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd
from typing import Any, Iterable

from kvproof.fuzz.provider import as_source
from kvproof.inputs.layout import Cache, Group, Layout
from kvproof import facts
from kvproof.facts import KINDS

# Kinds whose bytes carry a dcp_sharded choice. The byte format predates
# hidden-state caches, which keep the AttentionSpec default (seeds stay valid).
_DCP_FLAG_KINDS = tuple(k for k in facts.ATTENTION_KINDS if k != "hidden_state")

MAX_SPECS = 4
MAX_COUNT = 8
MAX_GROUPS = 16
DCP_SIZES = (1, 2, 4, 8)
MAX_MODEL_LENS = (2048, 8192, 32768, 131072, 1 << 20)
TOKENS_PER_STATE = (1, 2, 4, 8, 16, 32, 64, 128)
CONNECTOR = facts.DEFAULT_CONNECTOR  # the resolver only asks "is one configured"
PREMISES = ("engine", "free")
BS_MAX = 1 << 20

# Block-size families (selector values).
BS_SMALL, BS_POW2, BS_ODD, BS_PAGE, BS_MULT, BS_DIV = range(6)


@dataclass(frozen=True)
class Caps:
    """What a release can express, and the per-kind facts of its engine premise.

    The fuzz harness fills it at start-up by introspecting the release's own spec
    classes (``kvproof.fuzz.harness.release_caps``): which kinds exist, which spec
    classes carry ``tokens_per_state`` / ``dcp_sharded`` fields, whether ring buffers
    (CircularBufferSpec) exist, the Mamba modes, and the engine's block-size rule.
    """

    kinds: tuple[str, ...] = KINDS
    modes: tuple[str, ...] = facts.ALL_MAMBA_MODES
    ring_buffer: bool = True  # CircularBufferSpec: prefix_cacheable=false on attention
    dcp_sharded_attention: bool = True
    dcp_sharded_mamba: bool = True
    # kinds whose spec class has a tokens_per_state field (MambaSpec, AttentionSpec: 0.29+)
    tokens_per_state_kinds: tuple[str, ...] = KINDS
    # of those, the kinds whose in-tree builders set tokens_per_state > 1 (facts.COMPRESSED_KINDS)
    compressed_kinds: tuple[str, ...] = facts.COMPRESSED_KINDS
    prefix_match_unit: bool = True
    engine_block_size_over: str = "prefix_cacheable"  # facts.ENGINE_BLOCK_SIZE_OVER of the release

    @property
    def caching_modes(self) -> tuple[str, ...]:
        """Modes an engine runs Mamba in with prefix caching on ("none" is switched away)."""
        return tuple(m for m in self.modes if m != "none") or ("align",)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Caps":
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()})


FULL = Caps()
FULL_CACHING_MODES = FULL.caching_modes


# --- decoding ------------------------------------------------------------------
#
# The one Layout generator. It reads its choices from a *source*: anything with
# ``ConsumeIntInRange(lo, hi)`` and ``ConsumeBool()`` (atheris'
# FuzzedDataProvider names). Three implement it: atheris' provider (the
# harness), ``kvproof.fuzz.provider.PyFDP`` (same byte semantics, pure Python)
# and ``HypothesisSource`` (tests/layout_strategies.py) (each choice one
# ``st.integers(lo, hi)`` / ``st.booleans()`` draw, so Hypothesis shrinks the
# choices towards ``lo`` / False). The helpers take the source's bound methods
# (``i`` = ConsumeIntInRange, ``b`` = ConsumeBool): this is the fuzzer's hot path.


def _block_size(i: Any, prev: list[int]) -> int:
    sel = i(0, 5)
    if sel == BS_SMALL:
        return i(1, 64)
    if sel == BS_POW2:
        return 1 << i(0, 20)
    if sel == BS_ODD:
        return 2 * i(0, BS_MAX // 2 - 1) + 1
    if sel == BS_PAGE:
        return 16 * i(1, 256)
    base = prev[i(0, len(prev) - 1)] if prev else 16
    k = i(1, 8)
    if sel == BS_MULT:
        return min(base * k, BS_MAX)
    return max(1, base // k)


_DCP_CHOICES = (None, True, False)


def _spec(i: Any, b: Any, caps: Caps, prev: list[int], premise: str) -> tuple[Group, int]:
    # The bytes are read by the full schema whatever the release, so one input
    # (a seed, a corpus entry) means the same layout everywhere it can; what
    # the release lacks is then dropped (flags) or mapped (kind, mode).
    kind = KINDS[i(0, len(KINDS) - 1)]
    bs = _block_size(i, prev)
    prefix_cacheable = dcp_sharded = tokens_per_state = sliding_window = chunk = None
    attention = kind in _DCP_FLAG_KINDS
    mamba = kind == "mamba"
    if kind in facts.RING_BUFFER_KINDS and b() and caps.ring_buffer:
        prefix_cacheable = False
    if attention or mamba:
        dcp_sharded = _DCP_CHOICES[i(0, 2)]
        if mamba and dcp_sharded is False:
            dcp_sharded = None  # False is MambaSpec's default: one spelling only
        if not (caps.dcp_sharded_attention if attention else caps.dcp_sharded_mamba):
            dcp_sharded = None
        if premise == "engine" and dcp_sharded and kind in facts.UNSHARDED_KINDS:
            dcp_sharded = None  # no in-tree model shards a Mamba group (facts.UNSHARDED_KINDS)
    # Per-state compression. Engine premise: only on the kinds whose in-tree specs carry it
    # (facts.COMPRESSED_KINDS: MLA), at a real compress ratio, on a block of whole states.
    # Free premise: any value on any kind whose spec class has the field (Mamba included).
    if premise == "engine":
        if kind in facts.COMPRESSED_KINDS and b():
            tokens_per_state = facts.COMPRESS_RATIOS[i(0, len(facts.COMPRESS_RATIOS) - 1)]
            if kind in caps.compressed_kinds and kind in caps.tokens_per_state_kinds:
                bs = facts.compressed_block_size(bs, tokens_per_state)
            else:
                tokens_per_state = None
    elif b():
        tokens_per_state = TOKENS_PER_STATE[i(0, len(TOKENS_PER_STATE) - 1)]
        if kind not in caps.tokens_per_state_kinds or prefix_cacheable is False:
            tokens_per_state = None
    if kind == "sliding_window" and b():
        sliding_window = i(1, 1 << 17)
    if kind == "chunked_local" and b():
        chunk = i(1, 1 << 17)
    count = i(1, MAX_COUNT)
    if kind not in caps.kinds:  # e.g. no HiddenStateCacheSpec: the nearest plain attention group
        return Group("full_attention", bs, prefix_cacheable, dcp_sharded), count
    return Group(kind, bs, prefix_cacheable, dcp_sharded, tokens_per_state, sliding_window, chunk), count


def engine_groups(groups: Iterable[Group], mode: str, max_model_len: int) -> tuple[Group, ...]:
    """The groups as the engine's own derivation hands them to the resolver
    (spec/premise.py's facts, applied in place of rejecting the input):

    - a chunked-local layer beside another kind is promoted to full attention
      (facts.CHUNKED_LOCAL_PROMOTED_TO: the hybrid KV cache manager is off by default);
    - every Mamba group has the model's one mamba_block_size, which is
      max_model_len in mode none (premise mamba.one_block_size, mamba.none_block_is_max_model_len);
    - some group is prefix-cacheable (groups.one_cacheable: ring buffers sit beside cacheable groups);
    - one spec is one group (groups.two_specs).
    """
    out = list(groups)
    kinds = {g.kind for g in out}
    if "chunked_local" in kinds and len(kinds) > 1:
        out = [Group(facts.CHUNKED_LOCAL_PROMOTED_TO, g.block_size, g.prefix_cacheable, g.dcp_sharded,
                     g.tokens_per_state) if g.kind == "chunked_local" else g for g in out]
    mamba = [g for g in out if g.kind == "mamba"]
    if mamba:
        size = max_model_len if mode == "none" else mamba[0].block_size
        out = [replace(g, block_size=size) if g.kind == "mamba" else g for g in out]
    if not any(g.prefix_cacheable is not False for g in out):
        out[0] = replace(out[0], prefix_cacheable=None)
    if len(out) > 1 and len(set(out)) == 1:
        out = out[:1]
    return tuple(out)


def _pmu(i: Any, sizes: list[int]) -> int:
    sel = i(0, 3)
    if sel == 0:
        return sizes[i(0, len(sizes) - 1)]
    if sel == 1:
        return max(1, gcd(*sizes) // i(1, 4))
    if sel == 2:
        return 1 << i(0, 12)
    return i(1, 4096)


def decode(fdp: Any, caps: Caps = FULL, premise: str = "engine", *, dcps: tuple[int, ...] = DCP_SIZES,
           max_groups: int = MAX_GROUPS) -> Layout:
    """The Layout the source's choices make (see the module docstring).

    ``dcps`` and ``max_groups`` narrow the image without changing what the
    bytes mean (the defaults are the fuzzer's; Hypothesis tests pass others).
    """
    src = as_source(fdp)
    i = src.ConsumeIntInRange
    b = src.ConsumeBool
    # Exhausted or zero bytes decode to two specs with prefix caching on: short
    # inputs, which libFuzzer tries first, then already reach the hybrid paths.
    n_specs = 1 + (i(0, MAX_SPECS - 1) + 1) % MAX_SPECS
    groups: list[Group] = []
    sizes: list[int] = []
    has_mamba = False
    for _ in range(n_specs):
        g, count = _spec(i, b, caps, sizes, premise)
        sizes.append(g.block_size)
        has_mamba = has_mamba or g.kind == "mamba"
        groups.extend([g] * min(count, max_groups - len(groups)))
        if len(groups) >= max_groups:
            break
    pc = not b()
    connector = CONNECTOR if b() else None
    dcp = dcps[i(0, len(dcps) - 1)]
    pmu = _pmu(i, sizes) if b() else None
    if not caps.prefix_match_unit:
        pmu = None
    max_model_len = MAX_MODEL_LENS[i(0, len(MAX_MODEL_LENS) - 1)]
    if premise == "engine":
        if has_mamba:
            mode = FULL_CACHING_MODES[i(0, len(FULL_CACHING_MODES) - 1)] if pc else "none"
        else:
            mode = "align"
    else:
        mode = FULL.modes[i(0, len(FULL.modes) - 1)] if has_mamba else "align"
    if mode not in caps.modes:
        mode = "align"  # 0.32 has no "all": the engine runs such a model in align mode
    if premise == "engine":
        groups = list(engine_groups(groups, mode, max_model_len))
        cache_bs = facts.engine_cache_block_size_of(groups, caps.engine_block_size_over)
    else:
        sel = i(0, 2)
        if sel == 0:
            cache_bs = facts.engine_cache_block_size_of(groups, caps.engine_block_size_over)
        elif sel == 1:
            cache_bs = sizes[i(0, len(sizes) - 1)]
        else:
            cache_bs = i(1, BS_MAX)
    return Layout(groups=tuple(groups), cache=Cache(cache_bs, pc, pmu, mode), kv_connector=connector,
                  dcp=dcp, max_model_len=max_model_len)


# --- encoding (seeds) ------------------------------------------------------------

class NotEncodable(ValueError):
    """The Layout is outside what the decoder can produce."""


def _runs(groups: tuple[Group, ...]) -> list[tuple[Group, int]]:
    runs: list[tuple[Group, int]] = []
    for g in groups:
        if runs and runs[-1][0] == g and runs[-1][1] < MAX_COUNT:
            runs[-1] = (g, runs[-1][1] + 1)
        else:
            runs.append((g, 1))
    return runs


def _encode_block_size(enc: Any, bs: int) -> None:
    if 1 <= bs <= 64:
        enc.int(0, 5, BS_SMALL)
        enc.int(1, 64, bs)
    elif bs & (bs - 1) == 0 and bs <= BS_MAX:
        enc.int(0, 5, BS_POW2)
        enc.int(0, 20, bs.bit_length() - 1)
    elif bs % 2 == 1 and bs < BS_MAX:
        enc.int(0, 5, BS_ODD)
        enc.int(0, BS_MAX // 2 - 1, bs // 2)
    elif bs % 16 == 0 and bs <= 16 * 256:
        enc.int(0, 5, BS_PAGE)
        enc.int(1, 256, bs // 16)
    else:
        raise NotEncodable(f"block size {bs} is in no decoder family")


def encode(layout: Layout, premise: str = "engine") -> bytes:
    """Bytes that ``decode`` (full caps) turns back into ``layout`` (raises NotEncodable).

    On a release with fewer caps the same bytes decode to the nearest layout
    it can express (see ``_spec``).
    """
    from kvproof.fuzz.provider import Encoder

    enc = Encoder()
    runs = _runs(layout.groups)
    if len(runs) > MAX_SPECS or len(layout.groups) > MAX_GROUPS:
        raise NotEncodable(f"{len(runs)} runs / {len(layout.groups)} groups is more than the decoder makes")
    enc.int(0, MAX_SPECS - 1, (len(runs) - 2) % MAX_SPECS)
    for g, count in runs:
        enc.pick(KINDS, g.kind)
        _encode_block_size(enc, g.block_size)
        attention = g.kind in _DCP_FLAG_KINDS
        if g.kind in facts.RING_BUFFER_KINDS:
            enc.bool(g.prefix_cacheable is False)
        elif g.prefix_cacheable is False:
            raise NotEncodable("prefix_cacheable=false outside a ring-buffer kind")
        if attention or g.kind == "mamba":
            if premise == "engine" and g.dcp_sharded and g.kind in facts.UNSHARDED_KINDS:
                raise NotEncodable(f"dcp_sharded on {g.kind} (no in-tree model shards it: facts.UNSHARDED_KINDS)")
            enc.pick((None, True, False), g.dcp_sharded)
        elif g.dcp_sharded is not None:
            raise NotEncodable("dcp_sharded not expressible")
        if premise == "engine":
            if g.kind in facts.COMPRESSED_KINDS:
                enc.bool(g.tokens_per_state is not None)
                if g.tokens_per_state is not None:
                    enc.pick(facts.COMPRESS_RATIOS, g.tokens_per_state)
            elif g.tokens_per_state is not None:
                raise NotEncodable(f"tokens_per_state on {g.kind} (the engine premise compresses only "
                                   f"{', '.join(facts.COMPRESSED_KINDS)})")
        else:
            enc.bool(g.tokens_per_state is not None)
            if g.tokens_per_state is not None:
                enc.pick(TOKENS_PER_STATE, g.tokens_per_state)
        if g.kind == "sliding_window":
            enc.bool(g.sliding_window is not None)
            if g.sliding_window is not None:
                enc.int(1, 1 << 17, g.sliding_window)
        if g.kind == "chunked_local":
            enc.bool(g.attention_chunk_size is not None)
            if g.attention_chunk_size is not None:
                enc.int(1, 1 << 17, g.attention_chunk_size)
        enc.int(1, MAX_COUNT, count)
    c = layout.cache
    enc.bool(not c.enable_prefix_caching)
    enc.bool(layout.kv_connector is not None)
    if layout.kv_connector not in (None, CONNECTOR):
        raise NotEncodable(f"connector {layout.kv_connector} (the decoder names {CONNECTOR})")
    enc.pick(DCP_SIZES, layout.dcp)
    enc.bool(c.prefix_match_unit is not None)
    if c.prefix_match_unit is not None:
        if c.prefix_match_unit > 4096:
            raise NotEncodable("prefix_match_unit above 4096")
        enc.int(0, 3, 3)
        enc.int(1, 4096, c.prefix_match_unit)
    enc.pick(MAX_MODEL_LENS, layout.max_model_len)
    if premise == "engine":
        if c.enable_prefix_caching and layout.has_mamba:
            enc.pick(FULL.caching_modes, c.mamba_cache_mode)
    else:
        if layout.has_mamba:
            enc.pick(FULL.modes, c.mamba_cache_mode)
        enc.int(0, 2, 2)
        enc.int(1, BS_MAX, c.block_size)
    data = enc.data()
    from kvproof.fuzz.provider import PyFDP

    back = decode(PyFDP(data), FULL, premise)
    if back != layout:
        raise NotEncodable(f"layout is not in the {premise} premise's image (decodes to {back.summary()})")
    return data
