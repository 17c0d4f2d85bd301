"""Hypothesis strategies for Layouts: a thin adapter over the fuzzer's one generator.

The Layout generator is ``kvproof.fuzz.decode.decode``: it reads every choice
from a *source* (``ConsumeIntInRange(lo, hi)``, ``ConsumeBool()``). The fuzzer
hands it bytes (atheris' provider or ``PyFDP``); here ``HypothesisSource``
answers each choice with one ``st.integers(lo, hi)`` / ``st.booleans()`` draw,
so Hypothesis generates and shrinks the same choices (towards ``lo`` and
False: fewer, smaller groups, no flags, prefix caching on).

``layouts()`` therefore covers what the fuzzer covers: 1..max_groups groups
of every kind in runs of identical groups, block sizes from the decoder's
families (small, powers of two, odd, page multiples, multiples and divisors
of an earlier size), the spec flags, prefix caching, a KV connector,
prefix_match_unit, the Mamba mode, dcp and max_model_len. The default
premise is ``free`` (the cache block size is the engine's choice, a group's
size or any value; any Mamba mode), as a direct caller of the resolver could
pass.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from kvproof.fuzz.decode import MAX_GROUPS, Caps, decode
from kvproof.inputs.layout import Layout
from kvproof import facts

DCPS = (1, 1, 1, 2, 3, 4, 8)  # dcp 3 too (the model's DCP_VALUES), 1 most often

# What ``flags=False`` and two layouts in three express: no 0.29+ spec fields
# (prefix_cacheable, dcp_sharded, tokens_per_state), so the 0.27/0.28 models
# see as many layouts as the newer ones.
_NO_FLAGS = {"ring_buffer": False, "dcp_sharded_attention": False, "dcp_sharded_mamba": False,
             "tokens_per_state_kinds": (), "compressed_kinds": ()}


class HypothesisSource:
    """The decoder's source, answered by Hypothesis draws."""

    __slots__ = ("_draw",)

    def __init__(self, draw) -> None:
        self._draw = draw

    def ConsumeIntInRange(self, lo: int, hi: int) -> int:  # noqa: N802 (the FuzzedDataProvider name)
        return self._draw(st.integers(lo, hi))

    def ConsumeBool(self) -> bool:  # noqa: N802
        return self._draw(st.booleans())

    def PickValueInList(self, values):  # noqa: N802
        return values[self.ConsumeIntInRange(0, len(values) - 1)]


@st.composite
def layouts(draw, max_groups: int = 8, flags: bool = True, modes=facts.ALL_MAMBA_MODES, dcps=DCPS,
            premise: str = "free", caps: Caps | None = None):
    """A valid Layout (round-trips through JSON), from ``decode`` on Hypothesis draws.

    ``caps`` (default: every kind and flag, ``modes``) says what to express;
    ``flags`` (default) lets a third of the layouts use the 0.29+ spec fields,
    ``flags=False`` none.
    """
    if not 1 <= max_groups <= MAX_GROUPS:
        raise ValueError(f"max_groups must be in 1..{MAX_GROUPS}")
    base = caps or Caps(modes=tuple(modes))
    if not (flags and draw(st.integers(0, 2)) == 0):
        base = replace(base, **_NO_FLAGS)
    layout = decode(HypothesisSource(draw), base, premise, dcps=tuple(dcps), max_groups=max_groups)
    return Layout.from_dict(layout.to_dict())  # validated
