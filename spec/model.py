"""The Z3 model of ``resolve_kv_cache_block_sizes``, one encoding for every revision.

``resolve(rev, x)`` follows vLLM's function branch for branch; each branch
is guarded by the revision-table entry (:mod:`kvproof.revisions`) that
names the release introducing it. The group count ``n`` is concrete (one
encoding per n), everything else is symbolic: per group the kind (Mamba or
an AttentionSpec subclass), raw block size, prefix_cacheable, dcp_sharded,
tokens_per_state; globally the cache block size, prefix caching, KV
connector, prefix_match_unit, Mamba cache mode, dcp and max_model_len.

gcd and lcm are fresh integers constrained by the divisibility facts of
:mod:`kvproof.spec.lemmas`. dcp ranges over a small concrete set so that
``block_size * dcp`` stays linear: the set is part of the encoding
(``encoding(revision, n, dcp_values)``; :data:`DCP_VALUES` by default, the
query's ``--dcp`` list otherwise), and ``times`` is exact on that set.

Bounds: raw block sizes (and cache block size, prefix_match_unit,
tokens_per_state) range over 1..MAX_BLOCK = 2^20 by default, i.e. effective
sizes up to 2^23 with dcp 8: vLLM block sizes are page-aligned token counts
(16..a few thousand; a Mamba block in "none" mode is max_model_len, 2^17..2^20
in practice). No fact the solver gets depends on the bound (divisibility and
gcd/lcm facts hold for every positive integer), and ``verify --max-block 0``
drops it: the proofs of the default run also come out PROVED unbounded.

Concrete evaluation (``evaluate``) substitutes a Layout's values into the
same expressions and the exact gcd/lcm into the two fresh integers, then
simplifies: the model evaluated on concrete inputs, not a second resolver. A
term evaluated often runs as Python compiled from the term itself
(:mod:`kvproof.spec.termeval`, Z3's semantics; Z3 decides where it cannot).
It uses an encoding whose dcp set holds the Layout's dcp, and ``concrete``
refuses a dcp outside its encoding's set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import z3

from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof import facts
from kvproof.spec import lemmas, termeval
from kvproof import revisions as R

MODES = facts.ALL_MAMBA_MODES  # encoded by index
ALIGN = MODES.index("align")
DCP_VALUES = (1, 2, 3, 4, 8)
MAX_BLOCK = 1 << 20
MAX_MODEL_LEN = 1 << 30

ERR_NONE, ERR_PMU, ERR_SINGLE_PMU, ERR_TPS = 0, 1, 2, 3
ERROR_MESSAGES = {
    ERR_PMU: "Invalid prefix_match_unit={h}; KV cache group block sizes must be divisible by prefix_match_unit",
    ERR_SINGLE_PMU: "Invalid prefix_match_unit={pmu}; with a single KV cache group, prefix-cache hits land on the block size ({bs})",
    ERR_TPS: "Invalid prefix_match_unit={h}; prefix-cache boundaries must align with each spec's per-state compression",
}


@dataclass
class Inputs:
    """The symbolic inputs of one resolver call with ``n`` groups."""

    n: int
    mamba: list  # Bool: MambaSpec (else an AttentionSpec subclass)
    bs: list  # Int: spec.block_size
    pc: list  # Bool: spec.prefix_cacheable
    sharded: list  # Bool: spec.dcp_sharded
    tps: list  # Int: tokens_per_state of a Mamba spec, 0 = unset (-1 in vLLM)
    cache_bs: Any
    caching: Any
    connector: Any
    pmu_set: Any
    pmu: Any
    mode: Any
    dcp: Any
    max_model_len: Any

    def variables(self) -> list:
        return (self.mamba + self.bs + self.pc + self.sharded + self.tps
                + [self.cache_bs, self.caching, self.connector, self.pmu_set, self.pmu, self.mode,
                   self.dcp, self.max_model_len])


def inputs(n: int) -> Inputs:
    def ints(name):
        return [z3.Int(f"{name}_{i}") for i in range(n)]

    def bools(name):
        return [z3.Bool(f"{name}_{i}") for i in range(n)]

    return Inputs(n, bools("mamba"), ints("bs"), bools("pc"), bools("sharded"), ints("tps"),
                  z3.Int("cache_bs"), z3.Bool("caching"), z3.Bool("connector"), z3.Bool("pmu_set"),
                  z3.Int("pmu"), z3.Int("mode"), z3.Int("dcp"), z3.Int("max_model_len"))


def domain(rev: R.Revision, x: Inputs, max_block: int, dcp_values) -> list:
    """What the revision's spec classes and config can hold (dcp: the encoding's set)."""
    c = []
    bound = (lambda v: z3.And(v >= 1, v <= max_block)) if max_block else (lambda v: v >= 1)
    for i in range(x.n):
        c.append(bound(x.bs[i]))
        if R.F_PREFIX_CACHEABLE not in rev.fields:
            c.append(x.pc[i])
        else:  # only attention-type specs (CircularBufferSpec, ...) opt out; no MambaSpec does
            c.append(z3.Or(x.pc[i], z3.Not(x.mamba[i])))
        if R.F_DCP_SHARDED not in rev.fields:
            c.append(x.sharded[i] == z3.Not(x.mamba[i]))
        if R.F_TOKENS_PER_STATE not in rev.fields:
            c.append(x.tps[i] == 0)
        else:
            c.append(z3.If(x.mamba[i], z3.Or(x.tps[i] == 0, bound(x.tps[i])), x.tps[i] == 0))
    c.append(bound(x.cache_bs))
    c.append(z3.If(x.pmu_set, bound(x.pmu), x.pmu == 0))
    c.append(z3.Or([x.mode == MODES.index(m) for m in rev.mamba_modes]))
    c.append(z3.Or([x.dcp == d for d in dcp_values]))
    c.append(z3.And(x.max_model_len >= 1, x.max_model_len <= MAX_MODEL_LEN))
    return c


def dcp_set(values) -> tuple[int, ...]:
    """A dcp set in the one form encodings are keyed by: sorted, distinct, positive."""
    out = tuple(sorted({int(d) for d in values}))
    if not out or out[0] < 1:
        raise ValueError(f"dcp values must be positive integers, got {values!r}")
    return out


def times(v, k, dcp_values):
    """``v * k`` for every k in ``dcp_values`` (the domain's dcp set), kept linear.

    Exact on the set: an ``If`` per value but the last, which is the default
    (the domain constrains k to the set).
    """
    *rest, last = dcp_set(dcp_values)
    out = v * last if last != 1 else v
    for d in rest:
        out = z3.If(k == d, v * d if d != 1 else v, out)
    return out


@dataclass
class Resolved:
    """The resolver's symbolic result plus the intermediate terms properties use."""

    S: Any  # scheduler_block_size
    H: Any  # hash_block_size
    err: Any  # ERR_* code (ValueError kinds); 0 = returned
    eff: list  # per-group block size as the resolver and the managers see it
    L: Any = None  # fresh lcm variable (several groups)
    G: Any = None  # fresh gcd variable (several groups)
    hashing: list = field(default_factory=list)  # Bool: group is in the GCD set
    gcd_lcm_facts: list = field(default_factory=list)  # the gcd/lcm ones (checked on every evaluation)
    fallback: Any = None  # Bool: hash fell back to the scheduler block size
    terms: list = field(default_factory=list)  # Int terms divisibility is asked about
    unit: Any = None  # one group: UnitaryKVCacheCoordinator.block_size
    # every lemma instance the solver gets, built on first use (``facts``): concrete evaluation
    # needs none of them, and the divisibility instances are most of an encoding's build time
    facts_of: Callable[[], list] | None = field(default=None, repr=False, compare=False)
    _facts: list | None = field(default=None, repr=False, compare=False)

    @property
    def facts(self) -> list:
        if self._facts is None:
            self._facts = self.facts_of() if self.facts_of is not None else []
        return self._facts


def _or(xs):
    return z3.Or(xs) if xs else z3.BoolVal(False)


def resolve(rev: R.Revision, x: Inputs, dcp_values) -> Resolved:
    """``resolve_kv_cache_block_sizes`` for revision ``rev``, branch for branch,
    exact for dcp in ``dcp_values``.

    ``dv(a, b)`` (a divides b) is the uninterpreted ``lemmas.D``; ``a % b``
    never appears with a variable divisor.
    """
    dv = lemmas.divides
    n, dcp = x.n, x.dcp

    def scaled(v):
        return times(v, dcp, dcp_values)

    is_attn = [z3.Not(m) for m in x.mamba]
    hashing_active = z3.Or(x.caching, x.connector)

    # --- dcp resolution of one spec's block size --------------------------
    def dcp_block(i):
        if rev.has(R.DCP_SHARDED):  # 0.31: resolve_dcp_kv_block_size on spec.dcp_sharded
            return z3.If(x.sharded[i], scaled(x.bs[i]), x.bs[i])
        # 0.27: isinstance(spec, AttentionSpec); 0.29 helper: all layer specs AttentionSpec
        return z3.If(is_attn[i], scaled(x.bs[i]), x.bs[i])

    eff = [dcp_block(i) for i in range(n)]

    # --- if len(groups) <= 1 ------------------------------------------------
    if n == 1:
        if rev.has(R.DCP_SHARDED):  # 0.31: dcp = 1 when the spec is not dcp_sharded
            bs = z3.If(x.sharded[0], scaled(x.cache_bs), x.cache_bs)
        else:
            bs = scaled(x.cache_bs)
        err = z3.IntVal(ERR_NONE)
        if rev.has(R.SINGLE_GROUP_PMU_REJECT):  # 0.32: reject a pmu other than bs
            err = z3.If(z3.And(x.pmu_set, x.pmu != bs, hashing_active), ERR_SINGLE_PMU, ERR_NONE)
        terms = [bs, eff[0], x.cache_bs, x.bs[0]]
        # D5: a | a * k (bs is cache_bs times 1 or dcp; eff[0] is bs[0] times 1 or dcp)
        def facts() -> list:
            return [dv(x.cache_bs, bs), dv(x.bs[0], eff[0])] + lemmas.divisibility_axioms(terms)
        # The unitary coordinator's own block size: up to 0.29 it scales the
        # spec's block size by dcp for every kind (MambaManager undoes that
        # only for its own manager); from 0.31 it follows dcp_sharded.
        unit = eff[0] if rev.has(R.DCP_SHARDED) else scaled(x.bs[0])
        return Resolved(S=bs, H=bs, err=err, eff=eff, fallback=z3.BoolVal(True), facts_of=facts,
                        terms=terms + [x.pmu], unit=unit)

    # --- group_block_sizes, scheduler_block_size = lcm --------------------
    L = z3.Int("lcm")
    facts = lemmas.lcm_facts(L, eff)
    S = L

    # --- not (enable_prefix_caching or connector) -> (S, S) ----------------
    inactive = z3.Not(hashing_active)

    # --- Mamba fallback ------------------------------------------------------
    conds = []
    if rev.has(R.MAMBA_FALLBACK_BLOCK_SIZE):  # 0.27: spec.block_size != cache_config.block_size
        conds += [z3.And(x.mamba[i], x.bs[i] != x.cache_bs) for i in range(n)]
    if rev.has(R.MAMBA_FALLBACK_MODE):  # 0.28: spec.mamba_cache_mode != "align"
        conds += [z3.And(x.mamba[i], x.mode != ALIGN) for i in range(n)]
    mamba_fallback = _or(conds)

    # --- hashing sizes and the GCD ---------------------------------------------
    if rev.has(R.GCD_PREFIX_CACHEABLE):  # 0.29: prefix-cacheable groups, or all if none
        none = z3.Not(z3.Or(x.pc))
        hashing = [z3.Or(p, none) for p in x.pc]
    else:
        hashing = [z3.BoolVal(True)] * n
    G = z3.Int("gcd")
    facts += lemmas.gcd_facts(G, eff, hashing) + lemmas.link_facts(G, L)
    H0 = z3.If(x.pmu_set, x.pmu, G)  # requested if requested is not None else gcd
    err_pmu = _or([z3.And(m, z3.Not(dv(H0, e))) for m, e in zip(hashing, eff)])

    # --- tokens_per_state alignment (0.29) ------------------------------------
    err_tps = z3.BoolVal(False)
    if rev.has(R.TOKENS_PER_STATE):
        if rev.has(R.PARTIAL_HASH_HITS_FN):  # 0.32: partial_hash_hits_enabled, raw spec sizes
            sizes = x.bs
        else:  # 0.29: has_partial_mamba_group over the dcp-resolved group sizes
            sizes = eff
        partial = _or([z3.And(x.mamba[i], x.mode == ALIGN,
                              z3.Or(z3.And(dcp == 1, sizes[i] > H0), z3.And(dcp > 1, sizes[i] >= H0)))
                       for i in range(n)])
        alignment = z3.If(partial, H0, S)
        # any prefix-cacheable spec with tokens_per_state > 1 (AttentionSpec too: MLA compression;
        # the domain keeps tps on Mamba, concrete evaluation binds it on any kind)
        err_tps = _or([z3.And(x.pc[i], x.tps[i] > 1, z3.Not(dv(x.tps[i], alignment)))
                       for i in range(n)])

    fallback = z3.Or(inactive, mamba_fallback)
    H = z3.If(fallback, S, H0)
    # true facts about divisibility on the terms the branches and properties use
    terms = eff + [L, G, H0, x.pmu]
    divisors = [G, H0, x.pmu]

    def div_facts() -> list:
        out = [dv(x.bs[i], eff[i]) for i in range(n)]  # D5: a | a * k
        return facts + out + lemmas.divisibility_axioms(terms, [z3.BoolVal(True)] * (n + 3) + [x.pmu_set],
                                                        chains=[(divisors, eff + [G], eff + [L])])
    err = z3.If(fallback, ERR_NONE, z3.If(err_pmu, ERR_PMU, z3.If(err_tps, ERR_TPS, ERR_NONE)))
    return Resolved(S=S, H=H, err=err, eff=eff, L=L, G=G, hashing=hashing, facts_of=div_facts,
                    gcd_lcm_facts=facts, fallback=fallback,
                    terms=terms + list(x.tps) + [S, H] + ([alignment] if rev.has(R.TOKENS_PER_STATE) else []))


# --- concrete evaluation ---------------------------------------------------------

@dataclass
class Encoding:
    """One revision's resolver over ``n`` groups, exact for dcp in ``dcp_values``."""

    rev: R.Revision
    x: Inputs
    r: Resolved
    dcp_values: tuple[int, ...]
    compiled: dict = field(default_factory=dict)  # filled once by _compiled


@lru_cache(maxsize=None)
def _encoding(revision: str, n: int, dcp_values: tuple[int, ...]) -> Encoding:
    rev = R.REVISIONS[revision]
    x = inputs(n)
    return Encoding(rev, x, resolve(rev, x, dcp_values), dcp_values)


def encoding(revision: str, n: int, dcp_values=DCP_VALUES) -> Encoding:
    """The shared encoding (per process: same variables, same terms) for one dcp set."""
    return _encoding(revision, n, dcp_set(dcp_values))


def clear_encodings() -> None:
    """Drop the cached encodings (after a change to the revision table, e.g. a mutation test)."""
    _encoding.cache_clear()


def dcp_values_for(dcp: int) -> tuple[int, ...]:
    """The dcp set of the encoding that evaluates a Layout with this dcp."""
    return DCP_VALUES if dcp in DCP_VALUES else dcp_set(DCP_VALUES + (dcp,))


def layout_inputs(layout: Layout, x: Inputs) -> list[tuple]:
    """(variable, Python value) pairs binding ``x`` to ``layout``: the one reading of a Layout."""
    pairs = []
    for i, g in enumerate(layout.groups):
        pairs += [(x.mamba[i], g.kind == "mamba"), (x.bs[i], g.block_size), (x.pc[i], g.prefix_cacheable is not False),
                  (x.sharded[i], bool(g.sharded)), (x.tps[i], g.tokens_per_state or 0)]
    c = layout.cache
    pairs += [(x.cache_bs, c.block_size), (x.caching, bool(c.enable_prefix_caching)),
              (x.connector, layout.kv_connector is not None), (x.pmu_set, c.prefix_match_unit is not None),
              (x.pmu, c.prefix_match_unit or 0), (x.mode, MODES.index(c.mamba_cache_mode)),
              (x.dcp, layout.dcp), (x.max_model_len, layout.max_model_len)]
    return pairs


def layout_values(layout: Layout, x: Inputs) -> list[tuple]:
    """(variable, Z3 value) pairs binding ``x`` to ``layout``."""
    return [(v, _z3val(p)) for v, p in layout_inputs(layout, x)]


_CONSTS: dict = {}


def _z3val(p):
    """A Python int or bool as a Z3 value (memoised: block sizes and flags repeat)."""
    key = (type(p), p)  # True == 1: the type keeps Bool and Int apart
    if key not in _CONSTS:
        _CONSTS[key] = z3.BoolVal(p) if isinstance(p, bool) else z3.IntVal(p)
    return _CONSTS[key]


def _py(v):
    """A Z3 value (an Int or Bool constant) as a Python int or bool; ValueError for anything else."""
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_true(v) or z3.is_false(v):
        return z3.is_true(v)
    raise ValueError(f"model term did not reduce to a constant: {v}")


_VECS: dict = {}


def _VEC(*terms):
    """Pack Int terms into one datatype value so one simplify evaluates them all."""
    n = len(terms)
    if n not in _VECS:
        dt = z3.Datatype(f"Vec{n}")
        dt.declare("vec", *[(f"f{i}", z3.IntSort()) for i in range(n)])
        _VECS[n] = dt.create().vec
    return _VECS[n](*terms)


def value(term, subs) -> Any:
    """One model term (Int or Bool) at concrete inputs ``subs``, as a Python int or bool."""
    term = lemmas.arithmetic(term)
    return _py(z3.simplify(z3.substitute(term, *subs)) if subs else z3.simplify(term))


def _compiled(enc: Encoding) -> dict:
    """The encoding's terms with D replaced by arithmetic and the inputs (then L, G)
    replaced by de Bruijn variables, so one evaluation is one ``substitute_vars``.

    The output vector is (S, H, err, unit, eff...): ``unit`` is ``r.unit`` for
    one group (the unitary coordinator's block size) and 0 for several.
    """
    c = enc.compiled
    if not c:
        r = enc.r
        xs = enc.x.variables()
        allv = xs + ([r.L, r.G] if r.L is not None else [])
        to_var = [(v, z3.Var(i, v.sort())) for i, v in enumerate(allv)]

        def comp(term):
            return z3.substitute(lemmas.arithmetic(term), *to_var)

        unit = r.unit if r.unit is not None else z3.IntVal(0)
        c.update(names=[str(v) for v in xs], ids=[v.get_id() for v in xs], pyids=[id(v) for v in xs],
                 dcp_index=xs.index(enc.x.dcp), comp=comp, formulas={}, fast={}, asked={}, nodes={})
        c["formulas"]["out"] = comp(_VEC(r.S, r.H, r.err, unit, *r.eff))
        if r.L is not None:
            c["formulas"]["pre"] = comp(_VEC(*r.eff, *[z3.If(m, 1, 0) for m in r.hashing]))
            c["formulas"]["facts"] = comp(z3.And(r.gcd_lcm_facts))
    return c


# A compiled term (kvproof.spec.termeval) costs a few ms once and saves ~80 us per evaluation
# over substitute_vars + simplify: terms asked this often are compiled, the rest stay with Z3.
COMPILE_AFTER = 16


def _at(c: dict, key: str, vals: list):
    """Compiled term ``key`` at Python values ``vals``: an int, a bool, or a list of ints (a _VEC)."""
    fast = c["fast"].get(key)
    if fast is None and key not in c["fast"]:
        c["asked"][key] = c["asked"].get(key, 0) + 1
        if c["asked"][key] >= COMPILE_AFTER:
            fast = c["fast"][key] = termeval.try_compile(c["formulas"][key], c["nodes"])
    if fast is not None:
        try:
            out = fast(vals)
            return list(out) if type(out) is tuple else out
        except termeval.Undefined:
            pass  # a division by zero on the way: Z3 says what the term is
    v = z3.simplify(z3.substitute_vars(c["formulas"][key], *[_z3val(p) for p in vals]))
    if z3.is_app(v) and v.decl().kind() == z3.Z3_OP_DT_CONSTRUCTOR:
        text = v.sexpr()  # "(vec 16 16 0 ...)": one call, not two per field
        if text.count("(") == 1:
            return [int(t) for t in text.strip("()").split()[1:]]
        return [_py(v.arg(i)) for i in range(v.num_args())]  # a negative field prints as (- k)
    try:
        return _py(v)
    except ValueError:
        return None  # not a constant: no formula is true there


def concrete(enc: Encoding, subs: list[tuple], check_facts: bool = True) -> tuple[dict, list[tuple]]:
    """Evaluate the encoding on concrete inputs; returns (values, full substitution).

    ``subs`` binds every input variable to a Z3 value; its dcp must be in the
    encoding's dcp set (``times`` is exact only there). The exact gcd/lcm
    replace the fresh variables, and the gcd/lcm lemma facts are evaluated at
    them: a fact that is False here is an unsound lemma. Values: S, H, err,
    eff, unit (one group: the unitary coordinator's block size; None for
    several), members (several groups: which groups the GCD ranges over).
    """
    c = _compiled(enc)
    by_id = {k.get_id(): v for k, v in subs}  # the same variables (str() of each costs ~0.1 ms)
    try:
        vals = [by_id[i] for i in c["ids"]]
    except KeyError:  # bound by other terms of the same names (a solver model's constants)
        by_name = {str(k): v for k, v in subs}
        vals = [by_name[nm] for nm in c["names"]]
    out = _point(enc, [_py(v) for v in vals], check_facts)
    subs = list(subs)
    if enc.r.L is not None:
        subs += [(enc.r.L, z3.IntVal(out["_vals"][-2])), (enc.r.G, z3.IntVal(out["_vals"][-1]))]
    return out, subs


def concrete_layout(enc: Encoding, layout: Layout, check_facts: bool = True) -> dict:
    """:func:`concrete` at a Layout's values (read with :func:`layout_inputs`, no Z3 value built)."""
    c = _compiled(enc)
    by_id = {id(v): p for v, p in layout_inputs(layout, enc.x)}
    return _point(enc, [by_id[i] for i in c["pyids"]], check_facts)


def _point(enc: Encoding, vals: list, check_facts: bool) -> dict:
    r = enc.r
    c = _compiled(enc)
    dcp = vals[c["dcp_index"]]
    if dcp not in enc.dcp_values:
        raise ValueError(f"dcp={dcp} is outside this encoding's dcp set {enc.dcp_values}")
    members = None
    if r.L is not None:
        pre = _at(c, "pre", vals + [1, 1])
        eff, members = pre[:enc.x.n], [bool(m) for m in pre[enc.x.n:]]
        chosen = [e for e, m in zip(eff, members) if m]
        vals = vals + [math.lcm(*eff), math.gcd(*chosen)]
        if check_facts and _at(c, "facts", vals) is not True:
            subs = [(v, _z3val(p)) for v, p in zip(enc.x.variables() + [r.L, r.G], vals)]
            bad = [f for f in r.gcd_lcm_facts if value(f, subs) is not True]
            raise AssertionError(f"lemma instance false at eff={eff} members={members}: {bad[:3]}")
    out_vals = _at(c, "out", vals)
    return {"S": out_vals[0], "H": out_vals[1], "err": out_vals[2],
            "unit": out_vals[3] if r.unit is not None else None, "eff": out_vals[4:], "members": members,
            "_vals": vals}


def holds(enc: Encoding, formula_key: str, formula, subs: list[tuple]) -> bool:
    """Truth of a Bool ``formula`` over the encoding's terms at concrete inputs (compiled once per key)."""
    out, _ = concrete(enc, subs, check_facts=False)
    return holds_at(enc, formula_key, formula, out["_vals"])


def holds_at(enc: Encoding, formula_key: str, formula, vals: list) -> bool:
    """:func:`holds` at the evaluated inputs ``concrete(...)[0]["_vals"]`` (one evaluation, many formulas)."""
    c = _compiled(enc)
    if formula_key not in c["formulas"]:
        c["formulas"][formula_key] = c["comp"](formula)
    return _at(c, formula_key, vals) is True


def evaluate(layout: Layout, revision: str) -> Outcome:
    """The model's Outcome for ``layout`` under ``revision`` (source ``model:<revision>``).

    With one group and prefix caching on (the ``UnitaryKVCacheCoordinator``),
    ``extra["unitary_block_size"]`` is the coordinator's block size ``r.unit``,
    as the bridge records it from the real manager.
    """
    rev = R.REVISIONS[revision]
    base = dict(layout_hash=layout.content_hash(), vllm_version=rev.releases[0],
                source=f"model:{revision}", fingerprint=rev.fingerprints[0] if rev.fingerprints else "")
    why = R.not_expressible(layout, revision)
    if why:
        return Outcome(**base, expressible=False, not_expressible=why)
    enc = encoding(revision, len(layout.groups), dcp_values_for(layout.dcp))
    vals = concrete_layout(enc, layout)
    base["group_block_sizes"] = vals["eff"]
    if vals["err"] != ERR_NONE:
        bs = vals["S"]
        msg = ERROR_MESSAGES[vals["err"]].format(h=layout.cache.prefix_match_unit, pmu=layout.cache.prefix_match_unit,
                                                 bs=bs)
        return Outcome(**base, resolver_error=StageError("ValueError", msg, "model"),
                       extra={"error_kind": vals["err"]})
    unitary = vals["unit"] is not None and layout.cache.enable_prefix_caching
    extra = {"unitary_block_size": vals["unit"]} if unitary else {}
    return Outcome(**base, scheduler_block_size=vals["S"], hash_block_size=vals["H"], extra=extra)
