"""The engine premise: what the engine's own derivation can hand the resolver, per revision.

Each fact was measured through real vLLM's derivation (``kvproof derive``:
config hooks, model specs, page-size unification, KV cache config, the
engine core's update of ``cache_config.block_size``) on 0.27.0, 0.28.0 and
0.32.0, and is checked against the checked-in derivation tables: the tiny
families' (spec/derived/R.json) and the reference architectures' at real
dimensions under common ``vllm serve`` flags (spec/derived/models/R.json,
0.27.0-0.32.0), in tests/integration/test_derivation_table.py. Every fact is a
necessary condition, so the premise over-approximates what users reach:
outside it a witness is ``unreachable`` (the fact that excludes it is named),
inside it a witness is ``reachable`` only with a Config whose real derivation
shows it. The Z3 form encodes the facts the model's inputs can express; the
Python form adds the ones that need spec kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from kvproof import facts

if TYPE_CHECKING:
    from kvproof.inputs.layout import Layout

NONE_MODE = "none"


@dataclass(frozen=True)
class Fact:
    id: str
    statement: str
    where: str  # the vLLM code that makes it so
    check: Callable[["Layout", str], str]  # "" when the layout satisfies it, else the values that break it
    z3: Callable | None = None  # (rev, x) -> list of z3 constraints; None: Python only


def _engine_block_size(lay: "Layout", revision: str) -> str:
    rule = facts.ENGINE_BLOCK_SIZE_OVER[revision]
    want = facts.engine_cache_block_size(rule, [g.block_size for g in lay.groups],
                                         [g.prefix_cacheable is not False for g in lay.groups])
    return "" if lay.cache.block_size == want else f"cache block size {lay.cache.block_size}, the engine sets {want}"


def _one_mamba_block_size(lay: "Layout", revision: str) -> str:
    sizes = sorted({g.block_size for g in lay.groups if g.kind == "mamba"})
    return "" if len(sizes) <= 1 else f"Mamba groups of block sizes {sizes}"


def _caching_picks_mode(lay: "Layout", revision: str) -> str:
    if not lay.has_mamba:
        return ""
    mode, caching = lay.cache.mamba_cache_mode, lay.cache.enable_prefix_caching
    if caching and mode == NONE_MODE:
        return "mamba_cache_mode none with prefix caching on"
    if not caching and mode != NONE_MODE:
        return f"mamba_cache_mode {mode} with prefix caching off"
    return ""


def _none_mode_block(lay: "Layout", revision: str) -> str:
    if lay.cache.mamba_cache_mode != NONE_MODE:
        return ""
    bad = sorted({g.block_size for g in lay.groups if g.kind == "mamba" and g.block_size != lay.max_model_len})
    return f"Mamba block sizes {bad} in mode none, max_model_len {lay.max_model_len}" if bad else ""


def _one_cacheable(lay: "Layout", revision: str) -> str:
    return "" if any(g.prefix_cacheable is not False for g in lay.groups) else "no group is prefix-cacheable"


def _two_specs(lay: "Layout", revision: str) -> str:
    if len(lay.groups) < 2:
        return ""
    return "" if len(set(lay.groups)) >= 2 else f"{len(lay.groups)} groups of one spec"


# --- Z3 forms (x: kvproof.spec.model.Inputs) -------------------------------------------

def _z3_engine_block_size(rev, x) -> list:
    import z3
    if rev.engine_block_size == "all":
        members = [z3.BoolVal(True)] * x.n
    else:  # min over prefix-cacheable groups, all groups if none is
        none = z3.Not(z3.Or(x.pc))
        members = [z3.Or(p, none) for p in x.pc]
    return ([z3.Implies(m, x.cache_bs <= b) for m, b in zip(members, x.bs)]
            + [z3.Or([z3.And(m, x.cache_bs == b) for m, b in zip(members, x.bs)])])


def _z3_one_mamba_block_size(rev, x) -> list:
    import z3
    return [z3.Implies(z3.And(x.mamba[i], x.mamba[j]), x.bs[i] == x.bs[j])
            for i in range(x.n) for j in range(i + 1, x.n)]


def _z3_caching_picks_mode(rev, x) -> list:
    import z3
    none = facts.ALL_MAMBA_MODES.index(NONE_MODE)
    return [z3.Implies(z3.Or(x.mamba), x.caching == (x.mode != none))]


def _z3_none_mode_block(rev, x) -> list:
    import z3
    none = facts.ALL_MAMBA_MODES.index(NONE_MODE)
    return [z3.Implies(z3.And(x.mamba[i], x.mode == none), x.bs[i] == x.max_model_len) for i in range(x.n)]


def _z3_one_cacheable(rev, x) -> list:
    import z3
    return [z3.Or(x.pc)]


FACTS: tuple[Fact, ...] = (
    Fact("engine.cache_block_size",
         "cache_config.block_size is the smallest group block size (over prefix-cacheable groups from 0.31)",
         "vllm/v1/engine/core.py:EngineCore._initialize_kv_caches", _engine_block_size, _z3_engine_block_size),
    Fact("mamba.one_block_size", "every Mamba group has the one mamba_block_size of the model",
         "vllm/model_executor/models/config.py (mamba_block_size) / MambaBase.get_kv_cache_spec",
         _one_mamba_block_size, _z3_one_mamba_block_size),
    Fact("mamba.mode_follows_prefix_caching",
         "with a Mamba group, mamba_cache_mode is none exactly when prefix caching is off (0.27 picks all or "
         "align, 0.28+ align, for none with caching on)",
         "vllm/model_executor/models/config.py:HybridAttentionMambaModelConfig / MambaModelConfig",
         _caching_picks_mode, _z3_caching_picks_mode),
    Fact("mamba.none_block_is_max_model_len", "in mode none every Mamba block holds max_model_len tokens",
         "vllm/model_executor/models/config.py:MambaModelConfig.verify_and_update_config",
         _none_mode_block, _z3_none_mode_block),
    Fact("groups.one_cacheable", "some group takes part in prefix caching (ring buffers only sit beside "
         "cacheable groups: DeepSeek-V4-style compressor caches)",
         "vllm/v1/kv_cache_interface.py:CircularBufferSpec (its only builders add cacheable MLA groups)",
         _one_cacheable, _z3_one_cacheable),
    Fact("groups.two_specs", "several KV cache groups carry at least two distinct specs (one spec is one group)",
         "vllm/v1/core/kv_cache_utils.py:get_kv_cache_groups", _two_specs, None),
)
BY_ID = {f.id: f for f in FACTS}


def violated(layout: "Layout", revision: str) -> list[tuple[Fact, str]]:
    """The facts ``layout`` breaks, with the values that break each ([] = inside the premise)."""
    out = []
    for f in FACTS:
        detail = f.check(layout, revision)
        if detail:
            out.append((f, detail))
    return out


def derivable(layout: "Layout", revision: str) -> str:
    """"" when ``layout`` is inside the engine premise, else one line naming the first broken fact."""
    broken = violated(layout, revision)
    if not broken:
        return ""
    f, detail = broken[0]
    return f"{f.id}: {detail} ({f.statement}; {f.where})"


def engine_premise(rev, x) -> list:
    """The Z3 constraints of every fact the model's inputs can express."""
    out: list = []
    for f in FACTS:
        if f.z3 is not None:
            out += f.z3(rev, x)
    return out
