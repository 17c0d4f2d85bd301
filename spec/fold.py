"""Each revision's ``resolve_kv_cache_block_sizes`` as a fold over the KV cache groups.

vLLM's resolver is a fold: ``math.lcm(*sizes)``, ``math.gcd(*hashing_sizes)``,
"any Mamba group not in align", "which groups are prefix-cacheable", then a
finite decision. Here that is written as three pieces, each branch naming
the release that introduced it (the revision table, kvproof.revisions):

* the per-group map (``Fold.effective``, ``Fold.cacheable_in_gcd``,
  ``Fold.fallback_cond``, ``Fold.partial_size``, ``Fold.tps_cond``): what
  the resolver reads from one spec (dcp scaling, the prefix-cacheable
  filter, the Mamba fallback test, the partial-hit size, the
  tokens_per_state check);
* the summary state (:class:`Summary`): lcm of the effective sizes, gcd over
  all of them and over the prefix-cacheable ones, flags (any prefix-cacheable,
  all prefix-cacheable, any Mamba, Mamba fallback), the largest partial-hit
  size, the lcm of the tokens_per_state values the resolver checks, the
  engine premise's aggregates (smallest raw size over all / over
  prefix-cacheable groups, the Mamba block size and whether it is the only
  one, whether every Mamba block holds max_model_len), and the first group
  (the ``len(groups) <= 1`` branch reads it); ``init`` folds the first group,
  ``step`` every further one;
* the decision (``Fold.decide``): summary + cache config -> (scheduler, hash)
  or a refusal (the ERR_* codes of kvproof.spec.model).

A property that quantifies over every group reads the summary:
"every prefix-cacheable group's size is a multiple of h" is "h divides Gp",
"every group's size divides s" is "L divides s", "some tokens_per_state
breaks the alignment a" is "T does not divide a" (:func:`kvproof.spec.
properties.summary_formulas`).

The same code runs on Z3 terms (``Z3Alg``: gcd and lcm of two integers are
the uninterpreted ``lemmas.GCD2`` / ``lemmas.LCM2`` with their checked
facts) and on Python integers (``PyAlg``: ``math.gcd`` / ``math.lcm``), so
the fold is executable: ``run(layout, revision)`` gives the fold's answer for
a Layout of any length (the integration test compares it with the real
resolver up to 32 groups).

Checked, not trusted. Proved: kvproof.spec.equivalence proves with Z3 that
the fold and kvproof.spec.model give the same (scheduler, hash, error), and
for one group the same unitary block size, on every input of the model's
domain (its dcp set; bounded block sizes or not), per revision and N (tests/unit/test_induction.py: every revision for
N <= 4, the oldest and the newest for N <= 8; ``python -m
kvproof.spec.equivalence`` proves all of them for N <= 8);
kvproof.spec.induction proves the fold's invariants for every N. Checked
concretely only: the summary forms of the property verdicts against the
model's (test_induction.py, generated layouts of up to 8 groups, 0.27 and
0.32), and the fold against the real resolver (the integration test, up to
32 groups).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import z3

from kvproof.spec import lemmas
from kvproof.spec import model as M
from kvproof import revisions as R
from kvproof.spec.premise import NONE_MODE
from kvproof import facts

ALIGN = M.ALIGN
NONE = facts.ALL_MAMBA_MODES.index(NONE_MODE)


# --- the two algebras ------------------------------------------------------------------

class Z3Alg:
    """Z3 terms; gcd/lcm of two integers are uninterpreted (facts: kvproof.spec.lemmas)."""

    symbolic = True

    def __init__(self, dcp_values=M.DCP_VALUES) -> None:
        self.dcp_values = M.dcp_set(dcp_values)
        self.apps: list[tuple[str, Any, Any, Any]] = []  # (gcd|lcm, term, a, b)

    If = staticmethod(z3.If)
    Not = staticmethod(z3.Not)

    @staticmethod
    def And(*xs):
        return z3.And(*xs)

    @staticmethod
    def Or(*xs):
        return z3.Or(*xs)

    @staticmethod
    def val(v):
        return z3.BoolVal(v) if isinstance(v, bool) else z3.IntVal(v)

    def scale(self, v, dcp):
        return M.times(v, dcp, self.dcp_values)

    def gcd(self, a, b):
        t = lemmas.GCD2(a, b)
        self.apps.append(("gcd", t, a, b))
        return t

    def lcm(self, a, b):
        t = lemmas.LCM2(a, b)
        self.apps.append(("lcm", t, a, b))
        return t

    @staticmethod
    def max(a, b):
        return z3.If(a >= b, a, b)

    @staticmethod
    def min(a, b):
        return z3.If(a <= b, a, b)

    divides = staticmethod(lemmas.divides)


class PyAlg:
    """Python integers and booleans (exact gcd/lcm)."""

    symbolic = False

    @staticmethod
    def If(c, a, b):
        return a if c else b

    @staticmethod
    def Not(a):
        return not a

    @staticmethod
    def And(*xs):
        return all(xs)

    @staticmethod
    def Or(*xs):
        return any(xs)

    @staticmethod
    def val(v):
        return v

    @staticmethod
    def scale(v, dcp):
        return v * dcp

    gcd = staticmethod(math.gcd)
    lcm = staticmethod(math.lcm)
    max = staticmethod(max)
    min = staticmethod(min)

    @staticmethod
    def divides(a, b):
        return b == 0 if a == 0 else b % a == 0  # 0 | b only for b = 0 (an unset pmu is 0)


# --- inputs: one group, the cache config --------------------------------------------------

@dataclass
class Group:
    """One KV cache group as the resolver reads its spec (same encoding as model.Inputs)."""

    mamba: Any  # MambaSpec (else an AttentionSpec subclass)
    bs: Any  # spec.block_size
    pc: Any  # spec.prefix_cacheable
    sharded: Any  # spec.dcp_sharded
    tps: Any  # tokens_per_state, 0 = unset

    @classmethod
    def fresh(cls, name: str) -> "Group":
        return cls(z3.Bool(f"{name}.mamba"), z3.Int(f"{name}.bs"), z3.Bool(f"{name}.pc"),
                   z3.Bool(f"{name}.sharded"), z3.Int(f"{name}.tps"))


@dataclass
class Config:
    """What the resolver reads besides the groups (cache_config, connector, dcp)."""

    cache_bs: Any
    caching: Any
    connector: Any
    pmu_set: Any
    pmu: Any
    mode: Any
    dcp: Any
    max_model_len: Any


def groups_of(x: M.Inputs) -> list[Group]:
    return [Group(x.mamba[i], x.bs[i], x.pc[i], x.sharded[i], x.tps[i]) for i in range(x.n)]


def config_of(x: M.Inputs) -> Config:
    return Config(x.cache_bs, x.caching, x.connector, x.pmu_set, x.pmu, x.mode, x.dcp, x.max_model_len)


def fresh_config() -> Config:
    x = M.inputs(0)
    return config_of(x)


def inputs_of(groups: list[Group], c: Config) -> M.Inputs:
    """model.Inputs over these groups (for the model's own domain and per-group terms)."""
    return M.Inputs(len(groups), [g.mamba for g in groups], [g.bs for g in groups], [g.pc for g in groups],
                    [g.sharded for g in groups], [g.tps for g in groups], c.cache_bs, c.caching, c.connector,
                    c.pmu_set, c.pmu, c.mode, c.dcp, c.max_model_len)


def layout_inputs(layout) -> tuple[list[Group], Config]:
    """A Layout as fold inputs (Python values; the same reading as model.layout_values)."""
    gs = []
    for g in layout.groups:
        mamba = g.kind == "mamba"
        gs.append(Group(mamba, g.block_size, g.prefix_cacheable is not False, g.sharded, g.tokens_per_state or 0))
    c = layout.cache
    return gs, Config(c.block_size, c.enable_prefix_caching, layout.kv_connector is not None,
                      c.prefix_match_unit is not None, c.prefix_match_unit or 0,
                      M.MODES.index(c.mamba_cache_mode), layout.dcp, layout.max_model_len)


# --- the summary state -----------------------------------------------------------------------

@dataclass
class Summary:
    one: Any  # exactly one group folded (the len(groups) <= 1 branch)
    first: Group  # the first group
    L: Any  # lcm of the effective sizes
    Ga: Any  # gcd of every effective size
    Gp: Any  # gcd of the prefix-cacheable effective sizes (0: none yet)
    anyp: Any  # some group is prefix-cacheable
    allp: Any  # every group is prefix-cacheable
    anym: Any  # some group is a MambaSpec
    fb: Any  # some Mamba group triggers the hash fallback
    Pmax: Any  # largest partial-hit size over Mamba groups (0: none)
    T: Any  # lcm of the tokens_per_state values the resolver checks (1: none)
    minA: Any  # engine premise: smallest raw size over all groups
    minP: Any  # ... over prefix-cacheable groups (0: none)
    mbs: Any  # the first Mamba group's raw size (0: none)
    muni: Any  # every Mamba group has that size
    mml_ok: Any  # every Mamba group's raw size is max_model_len

    INTS = ("L", "Ga", "Gp", "Pmax", "T", "minA", "minP", "mbs")
    BOOLS = ("one", "anyp", "allp", "anym", "fb", "muni", "mml_ok")

    @classmethod
    def fresh(cls, name: str) -> "Summary":
        vals = {k: z3.Int(f"{name}.{k}") for k in cls.INTS}
        vals.update({k: z3.Bool(f"{name}.{k}") for k in cls.BOOLS})
        return cls(first=Group.fresh(f"{name}.first"), **vals)

    def items(self):
        return [(f.name, getattr(self, f.name)) for f in fields(self) if f.name != "first"]


@dataclass
class Decided:
    S: Any  # scheduler_block_size
    H: Any  # hash_block_size
    err: Any  # ERR_* (model.ERR_NONE: returned)
    unit: Any  # one group: UnitaryKVCacheCoordinator.block_size (0 for several)
    fallback: Any  # hash fell back to the scheduler block size
    H0: Any = None  # requested unit, else the gcd (several groups)
    Gh: Any = None  # gcd over the hashing sizes (several groups)
    alignment: Any = None  # tokens_per_state: the cache-hit alignment (0.29+)


class Fold:
    """One revision's resolver as init/step/decide over ``alg`` (Z3Alg or PyAlg)."""

    def __init__(self, revision: str, alg) -> None:
        self.rev = R.REVISIONS[revision]
        self.A = alg

    # --- the per-group map ---------------------------------------------------------------
    def effective(self, g: Group, c: Config):
        """The group's block size as the resolver and the managers see it."""
        A = self.A
        if self.rev.has(R.DCP_SHARDED):  # 0.31: resolve_dcp_kv_block_size on spec.dcp_sharded
            return A.If(g.sharded, A.scale(g.bs, c.dcp), g.bs)
        # 0.27: isinstance(spec, AttentionSpec) -> block_size * dcp (0.29: the same via iter_layer_specs)
        return A.If(A.Not(g.mamba), A.scale(g.bs, c.dcp), g.bs)

    def cacheable_in_gcd(self, g: Group):
        """Does the group enter the gcd of the prefix-cacheable sizes (the 0.29 filter)?"""
        return g.pc

    def fallback_cond(self, g: Group, c: Config):
        """Does this group send the hash back to the scheduler block size?"""
        A = self.A
        conds = []
        if self.rev.has(R.MAMBA_FALLBACK_BLOCK_SIZE):  # 0.27: spec.block_size != cache_config.block_size
            conds.append(A.And(g.mamba, g.bs != c.cache_bs))
        if self.rev.has(R.MAMBA_FALLBACK_MODE):  # 0.28: mamba_cache_mode != "align"
            conds.append(A.And(g.mamba, c.mode != ALIGN))
        return A.Or(*conds) if conds else A.val(False)

    def partial_size(self, g: Group, c: Config):
        """The size a partial Mamba cache hit is judged on (0.29: dcp-resolved; 0.32: raw spec size)."""
        if self.rev.has(R.PARTIAL_HASH_HITS_FN):  # 0.32: partial_hash_hits_enabled
            return g.bs
        return self.effective(g, c)  # 0.29: has_partial_mamba_group

    def tps_cond(self, g: Group):
        """Does the resolver check this group's tokens_per_state (0.29: any prefix-cacheable spec
        with a per-state compression, AttentionSpec too)?"""
        A = self.A
        if not self.rev.has(R.TOKENS_PER_STATE):
            return A.val(False)
        return A.And(g.pc, g.tps > 1)

    # --- the fold ------------------------------------------------------------------------
    def init(self, g: Group, c: Config) -> Summary:
        A = self.A
        e = self.effective(g, c)
        z, one = A.val(0), A.val(1)
        return Summary(one=A.val(True), first=g, L=e, Ga=e, Gp=A.If(self.cacheable_in_gcd(g), e, z),
                       anyp=g.pc, allp=g.pc, anym=g.mamba, fb=self.fallback_cond(g, c),
                       Pmax=A.If(g.mamba, self.partial_size(g, c), z), T=A.If(self.tps_cond(g), g.tps, one),
                       minA=g.bs, minP=A.If(g.pc, g.bs, z), mbs=A.If(g.mamba, g.bs, z), muni=A.val(True),
                       mml_ok=A.Or(A.Not(g.mamba), g.bs == c.max_model_len))

    def step(self, s: Summary, g: Group, c: Config) -> Summary:
        A = self.A
        e = self.effective(g, c)
        return Summary(
            one=A.val(False), first=s.first,
            L=A.lcm(s.L, e),  # math.lcm(*group_block_sizes)
            Ga=A.gcd(s.Ga, e),
            Gp=A.If(self.cacheable_in_gcd(g), A.If(s.anyp, A.gcd(s.Gp, e), e), s.Gp),
            anyp=A.Or(s.anyp, g.pc), allp=A.And(s.allp, g.pc), anym=A.Or(s.anym, g.mamba),
            fb=A.Or(s.fb, self.fallback_cond(g, c)),
            Pmax=A.If(g.mamba, A.max(s.Pmax, self.partial_size(g, c)), s.Pmax),
            T=A.If(self.tps_cond(g), A.lcm(s.T, g.tps), s.T),
            minA=A.min(s.minA, g.bs),
            minP=A.If(g.pc, A.If(s.anyp, A.min(s.minP, g.bs), g.bs), s.minP),
            mbs=A.If(s.anym, s.mbs, A.If(g.mamba, g.bs, A.val(0))),
            muni=A.And(s.muni, A.Or(A.Not(g.mamba), A.Not(s.anym), g.bs == s.mbs)),
            mml_ok=A.And(s.mml_ok, A.Or(A.Not(g.mamba), g.bs == c.max_model_len)))

    def fold(self, groups: list[Group], c: Config) -> Summary:
        s = self.init(groups[0], c)
        for g in groups[1:]:
            s = self.step(s, g, c)
        return s

    # --- the decision --------------------------------------------------------------------
    def decide(self, s: Summary, c: Config) -> Decided:
        A, rev = self.A, self.rev
        dv = A.divides
        active = A.Or(c.caching, c.connector)  # enable_prefix_caching or a KV connector

        # if len(groups) <= 1: cache_config.block_size * dcp
        f = s.first
        if rev.has(R.DCP_SHARDED):  # 0.31: dcp = 1 when the spec is not dcp_sharded
            bs1 = A.If(f.sharded, A.scale(c.cache_bs, c.dcp), c.cache_bs)
            unit = self.effective(f, c)  # the unitary coordinator follows dcp_sharded
        else:
            bs1 = A.scale(c.cache_bs, c.dcp)
            unit = A.scale(f.bs, c.dcp)  # up to 0.29 it scales every kind
        err1 = A.val(M.ERR_NONE)
        if rev.has(R.SINGLE_GROUP_PMU_REJECT):  # 0.32: a pmu other than the block size is refused
            err1 = A.If(A.And(c.pmu_set, c.pmu != bs1, active), A.val(M.ERR_SINGLE_PMU), A.val(M.ERR_NONE))

        # several groups: scheduler = lcm; hash = pmu or gcd over the hashing sizes
        S = s.L
        if rev.has(R.GCD_PREFIX_CACHEABLE):  # 0.29: prefix-cacheable groups, all if none
            Gh = A.If(s.anyp, s.Gp, s.Ga)
        else:
            Gh = s.Ga
        H0 = A.If(c.pmu_set, c.pmu, Gh)
        err_pmu = A.Not(dv(H0, Gh))  # some hashing size is not a multiple of H0
        err_tps = A.val(False)
        alignment = None
        if rev.has(R.TOKENS_PER_STATE):  # 0.29: cache-hit boundaries must respect each state
            partial = A.And(c.mode == ALIGN, A.If(c.dcp == 1, s.Pmax > H0, s.Pmax >= H0))
            alignment = A.If(partial, H0, S)
            err_tps = A.Not(dv(s.T, alignment))
        fallback = A.Or(A.Not(active), s.fb)
        H = A.If(fallback, S, H0)
        err = A.If(fallback, A.val(M.ERR_NONE),
                   A.If(err_pmu, A.val(M.ERR_PMU), A.If(err_tps, A.val(M.ERR_TPS), A.val(M.ERR_NONE))))
        return Decided(S=A.If(s.one, bs1, S), H=A.If(s.one, bs1, H), err=A.If(s.one, err1, err),
                       unit=A.If(s.one, unit, A.val(0)), fallback=A.If(s.one, A.val(True), fallback),
                       H0=H0, Gh=Gh, alignment=alignment)

    # --- the engine premise's facts that quantify over groups, on the summary -------------
    def engine_premise(self, s: Summary, c: Config) -> list[tuple[str, Any]]:
        """(premise fact id, constraint) for kvproof.spec.premise.FACTS, read off the summary."""
        A = self.A
        if self.rev.engine_block_size == "all":
            want = s.minA
        else:  # min over prefix-cacheable groups, all if none
            want = A.If(s.anyp, s.minP, s.minA)
        return [("engine.cache_block_size", c.cache_bs == want),
                ("mamba.one_block_size", s.muni),
                ("mamba.mode_follows_prefix_caching", A.Or(A.Not(s.anym), c.caching == (c.mode != NONE))),
                ("mamba.none_block_is_max_model_len", A.Or(c.mode != NONE, s.mml_ok)),
                ("groups.one_cacheable", s.anyp)]


def run(layout, revision: str, fold_cls=Fold) -> dict:
    """The fold on a Layout (Python values): S, H, err and the summary."""
    gs, c = layout_inputs(layout)
    f = fold_cls(revision, PyAlg())
    s = f.fold(gs, c)
    d = f.decide(s, c)
    return {"S": d.S, "H": d.H, "err": d.err, "unit": d.unit if s.one else None,
            "summary": {k: v for k, v in s.items()}}


def substitute(s: Summary, pairs) -> Summary:
    """``s`` with z3 substitution ``pairs`` applied to every field (first included)."""
    def sub(t):
        return z3.substitute(t, *pairs) if pairs else t
    vals = {k: sub(v) for k, v in s.items()}
    f = s.first
    return replace(s, first=Group(*(sub(getattr(f, k)) for k in ("mamba", "bs", "pc", "sharded", "tps"))), **vals)
