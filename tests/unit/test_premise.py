"""The engine premise: its Python and Z3 forms agree, fact by fact, on generated layouts."""

from __future__ import annotations

import pytest

import z3  # the dev extra installs it: missing fails, not skips

from hypothesis import given, settings  # noqa: E402

from kvproof.inputs.layout import Layout  # noqa: E402
from kvproof.spec import model as M  # noqa: E402
from kvproof.spec import premise  # noqa: E402
from kvproof import revisions as R  # noqa: E402
from layout_strategies import layouts  # noqa: E402


def _z3_holds(fact, layout: Layout, revision: str) -> bool:
    enc = M.encoding(revision, len(layout.groups), M.dcp_values_for(layout.dcp))
    formula = z3.And(*fact.z3(enc.rev, enc.x)) if fact.z3(enc.rev, enc.x) else z3.BoolVal(True)
    return z3.is_true(z3.simplify(z3.substitute(formula, *M.layout_values(layout, enc.x))))


@settings(max_examples=150, deadline=None)
@given(layouts(max_groups=4))
def test_python_and_z3_forms_agree(layout):
    for revision in R.REVISIONS:
        if R.not_expressible(layout, revision):
            continue
        for fact in premise.FACTS:
            if fact.z3 is None:
                continue
            assert (fact.check(layout, revision) == "") == _z3_holds(fact, layout, revision), (fact.id, layout)


def _l(groups, **cache):
    return Layout.from_dict({"groups": [{"kind": k, "block_size": b} for k, b in groups], "cache": cache,
                             "max_model_len": 2048})


@pytest.mark.parametrize("layout, fact", [
    (_l([("mamba", 64), ("mamba", 128), ("full_attention", 64)]), "mamba.one_block_size"),
    (_l([("mamba", 64), ("full_attention", 64)], mamba_cache_mode="none"), "mamba.mode_follows_prefix_caching"),
    (_l([("mamba", 64), ("full_attention", 64)], enable_prefix_caching=False, mamba_cache_mode="none"),
     "mamba.none_block_is_max_model_len"),
    (_l([("full_attention", 16), ("full_attention", 16)]), "groups.two_specs"),
    (_l([("mamba", 64), ("full_attention", 32)], block_size=64), "engine.cache_block_size"),
])
def test_each_fact_names_what_excludes_a_layout(layout, fact):
    why = premise.derivable(layout, "0.32")
    assert why.startswith(fact + ":"), why


def test_an_engine_shaped_layout_is_inside():
    assert premise.derivable(_l([("mamba", 544), ("mamba", 544), ("hidden_state", 181)]), "0.27") == ""
