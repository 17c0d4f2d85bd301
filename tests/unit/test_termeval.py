"""kvproof.spec.termeval: a compiled term answers what Z3's substitute + simplify answers.

Checked on every term the model evaluates concretely (the resolver's output
vector, the gcd/lcm pre-vector and facts, every property's parts) at the
layouts of the checked-in derivation tables, and on small synthetic terms
that reach Z3's corner cases: Euclidean mod and div of negatives, division
by zero (undefined, absorbed by and/or/ite as the simplifier absorbs it).
"""

from __future__ import annotations

import itertools
import random

import pytest
import z3

from kvproof import revisions as R
from kvproof.derivation import tables_for
from kvproof.spec import model as M
from kvproof.spec import query as Q
from kvproof.spec import termeval as T
from kvproof.spec.properties import BY_KEY


def _z3(term, vals):
    """What the model asked Z3 before: substitute the values, simplify; None when not a constant."""
    v = z3.simplify(z3.substitute_vars(term, *[M._z3val(p) for p in vals]))
    if z3.is_true(v) or z3.is_false(v):
        return z3.is_true(v)
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_app(v) and v.decl().kind() == z3.Z3_OP_DT_CONSTRUCTOR:
        return tuple(v.arg(i).as_long() for i in range(v.num_args()))
    return None


def _compiled(term, vals):
    return _run(T.compile_term(term), vals)


def _run(fn, vals):
    try:
        return fn(vals)
    except T.Undefined:
        return None


@pytest.mark.parametrize("revision", ["0.27", "0.29", "0.32"])
def test_model_terms_agree_with_z3_on_table_layouts(revision):
    layouts = sorted({r.layout for r in tables_for(revision) if r.layout is not None
                      and not R.not_expressible(r.layout, revision)}, key=lambda lay: lay.content_hash())
    assert layouts, "no checked-in table layouts for this revision"
    rng = random.Random(0)
    checked = 0
    functions: dict = {}
    nodes: dict = {}
    for n in sorted({len(lay.groups) for lay in layouts}):
        sample = [lay for lay in layouts if len(lay.groups) == n]
        sample = rng.sample(sample, min(6, len(sample)))
        for lay in sample:
            enc = M.encoding(revision, n, M.dcp_values_for(lay.dcp))
            c = M._compiled(enc)
            for key in BY_KEY:
                for part, formula in Q._parts(enc, key, "engine", M.MAX_BLOCK):
                    c["formulas"].setdefault(part, c["comp"](formula))
            vals = M.concrete_layout(enc, lay, check_facts=False)["_vals"]
            for part, term in c["formulas"].items():
                point = vals + [1, 1] if part == "pre" else vals
                key = (id(enc), part)
                if key not in functions:
                    functions[key] = T.compile_term(term, nodes.setdefault(id(enc), {}))
                got = _run(functions[key], point)
                assert got == _z3(term, point), (revision, lay.summary(), part)
                checked += got is not None
    assert checked > 50


def test_concrete_layout_matches_the_z3_bound_evaluation():
    """concrete_layout (Python values) and concrete (Z3 values) give the same point and outcome."""
    lay = next(r.layout for r in tables_for("0.32") if r.layout is not None and len(r.layout.groups) > 2)
    enc = M.encoding("0.32", len(lay.groups), M.dcp_values_for(lay.dcp))
    fast = M.concrete_layout(enc, lay)
    slow, _ = M.concrete(enc, M.layout_values(lay, enc.x))
    assert fast == slow


X, Y = z3.Var(0, z3.IntSort()), z3.Var(1, z3.IntSort())
P = z3.Var(2, z3.BoolSort())
SYNTHETIC = [
    X % Y, X / Y, -X + Y * 3 - 2, X % Y == 0,
    z3.And(P, X % Y == 1), z3.Or(P, X / Y > 2), z3.If(P, X % Y, 7), z3.If(X > Y, X, Y % X),
    z3.Implies(P, X % Y == 0), z3.Implies(X % Y == 0, P), z3.Not(X % Y == 0), z3.Distinct(X, Y, X % Y),
    z3.And(X <= Y, X < Y + 1, X >= -5, X > -9), z3.Not(P) == (X == Y),
]


@pytest.mark.parametrize("term", SYNTHETIC, ids=[str(t)[:40] for t in SYNTHETIC])
def test_synthetic_terms_keep_z3_semantics(term):
    """Negative operands, zero divisors, undefined values under and/or/ite/implies."""
    for x, y, p in itertools.product([-7, -3, -1, 0, 1, 2, 5, 9], [-4, -2, 0, 1, 3], [True, False]):
        vals = [x, y, p]
        assert _compiled(term, vals) == _z3(term, vals), (str(term), vals)


def test_an_operator_it_does_not_know_stays_with_z3():
    f = z3.Function("f", z3.IntSort(), z3.IntSort())
    assert T.try_compile(f(X) + 1) is None
    with pytest.raises(T.Unsupported):
        T.compile_term(z3.Int("free") + X)
