"""The inductive proof that a property holds for every number of KV cache groups.

The resolver is a fold (kvproof.spec.fold): ``init`` on the first group,
``step`` on each further one, ``decide`` on the summary. Per revision the
obligations are Z3 queries (UNSAT = the obligation holds):

* base (``base:<inv>``): the summary of one group satisfies invariant <inv>;
* step (``step:<inv>``): from any summary satisfying every invariant, adding
  any group (any kind, size, prefix_cacheable, dcp_sharded, tokens_per_state;
  the cache config, dcp and mode fixed across the fold) keeps <inv>;
* transfer (``transfer:<property>``): the property's violation over "some
  group" (the bounded model's own formula, kvproof.spec.properties, on one
  arbitrary folded group) implies its violation over the summary ("h does
  not divide Gp", ...): the summary forms lose nothing;
* conclusion (``conclusion:<property>:<premise>``): no summary satisfying
  the invariants, the property's premise and (premise ``engine``) the engine
  premise's group facts over the summary makes the decision violate it.

Invariants (``INVARIANTS``): of the summary alone (g | l, g | gp | l,
positivity, flags consistent, one group = init of the first); of every
group folded so far, named by an arbitrary folded group x (its size as the
model sees it divides l, g divides it, gp divides it when it is
prefix-cacheable, flags monotone: x's flags are in the summary, the engine
aggregates bound it); and the universal ones that make l the least and g,
gp the greatest (a common multiple m of every folded size is a multiple of
l, a common divisor d divides g). "Every size" is the size as
kvproof.spec.model computes it (the bounded model's per-group term), not the
fold's own map: a fold that forgets the dcp scaling fails the step.

gcd/lcm of two integers are the uninterpreted ``lemmas.GCD2``/``LCM2`` and
divisibility the uninterpreted ``lemmas.D``; the solver gets the facts B1-B4
and D1-D4 of kvproof.spec.lemmas (each checked there) as quantified axioms.
Every obligation is one query under a timeout, run in verify's killable
workers (``run_obligations``); unknown or a timeout is UNKNOWN, never PROVED.
The obligations of one kind share their hypotheses: a worker asserts them (and
their axiom instances) once on the kind's solver and pushes each obligation's
own rest on top (``Context.solver_for``), never more than the query itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import z3

from kvproof.spec import fold as FD
from kvproof.spec import lemmas
from kvproof.spec import model as M
from kvproof import revisions as R
from kvproof.spec.properties import BY_KEY, PROPERTIES, summary_formulas
from kvproof.verdicts import ProofStatus

PROVED, REFUTED, UNKNOWN = ProofStatus.PROVED, ProofStatus.COUNTEREXAMPLE, ProofStatus.UNKNOWN
PREMISES = ("engine", "free")
D = lemmas.D


@dataclass(frozen=True)
class Invariant:
    id: str
    kind: str  # "summary" (of s alone), "member" (of s and a folded group x), "universal"
    text: str


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("positive", "summary", "l, g, t, the smallest size >= 1; the partial-hit size >= 0"),
    Invariant("g_divides_l", "summary", "g divides l"),
    Invariant("gp_between", "summary", "some group prefix-cacheable: gp >= 1, g | gp, gp | l; none: gp = 0"),
    Invariant("all_cacheable", "summary", "every group prefix-cacheable: gp = g"),
    Invariant("flags_consistent", "summary", "the Mamba fallback implies a Mamba group; a Mamba group has a size"),
    Invariant("one_group", "summary", "one group folded: the summary is that group's"),
    Invariant("size_divides_l", "member", "every size seen divides l"),
    Invariant("g_divides_size", "member", "g divides every size seen"),
    Invariant("gp_divides_cacheable", "member", "gp divides every prefix-cacheable size seen"),
    Invariant("flags_monotone", "member", "a group's flags (prefix-cacheable, Mamba, fallback) stay in the summary"),
    Invariant("partial_max", "member", "every Mamba partial-hit size seen <= the largest"),
    Invariant("tps_divides_t", "member", "every checked tokens_per_state divides t"),
    Invariant("engine_bounds", "member", "the engine aggregates: smallest sizes, the one Mamba size"),
    Invariant("l_least", "universal", "a common multiple of every size seen is a multiple of l"),
    Invariant("g_greatest", "universal", "a common divisor of every size seen divides g"),
    Invariant("gp_greatest", "universal", "a common divisor of every prefix-cacheable size divides gp"),
    Invariant("t_least", "universal", "a common multiple of the checked tokens_per_state is a multiple of t"),
)
INV_BY_ID = {i.id: i for i in INVARIANTS}


def axioms() -> list:
    """D1-D4 and B1-B4 of kvproof.spec.lemmas as quantified facts (each checked there)."""
    a, b, c, d = z3.Ints("ax_a ax_b ax_c ax_d")
    G2, L2 = lemmas.GCD2, lemmas.LCM2
    return [
        z3.ForAll([a], D(a, a), patterns=[D(a, a)]),  # D1
        z3.ForAll([a, b, c], z3.Implies(z3.And(D(a, b), D(b, c)), D(a, c)),  # D2
                  patterns=[z3.MultiPattern(D(a, b), D(b, c))]),
        z3.ForAll([a, b], z3.Implies(z3.And(a >= 1, b >= 1, D(a, b)), a <= b), patterns=[D(a, b)]),  # D3
        z3.ForAll([b], D(1, b), patterns=[D(1, b)]),  # D4
        z3.ForAll([a, b], z3.Implies(z3.And(a >= 1, b >= 1),  # B1
                                     z3.And(G2(a, b) >= 1, G2(a, b) <= a, G2(a, b) <= b,
                                            D(G2(a, b), a), D(G2(a, b), b))), patterns=[G2(a, b)]),
        z3.ForAll([a, b, d], z3.Implies(z3.And(a >= 1, b >= 1, D(d, a), D(d, b)), D(d, G2(a, b))),  # B2
                  patterns=[z3.MultiPattern(D(d, a), G2(a, b)), z3.MultiPattern(D(d, b), G2(a, b))]),
        z3.ForAll([a, b], z3.Implies(z3.And(a >= 1, b >= 1),  # B3
                                     z3.And(L2(a, b) >= a, L2(a, b) >= b, D(a, L2(a, b)), D(b, L2(a, b)))),
                  patterns=[L2(a, b)]),
        z3.ForAll([a, b, d], z3.Implies(z3.And(a >= 1, b >= 1, d >= 1, D(a, d), D(b, d)), D(L2(a, b), d)),  # B4
                  patterns=[z3.MultiPattern(D(a, d), L2(a, b)), z3.MultiPattern(D(b, d), L2(a, b))]),
    ]


def _collect_one(f) -> tuple[list, list]:
    """``_collect`` of one formula: the D terms and GCD2/LCM2 applications in first-seen order."""
    seen: set = set()
    dterms: dict = {}
    apps: dict = {}
    todo = [f]
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_app(t):
            f = t.decl()
            if f.eq(D):
                for a in t.children():
                    dterms.setdefault(a.get_id(), a)
            elif f.eq(lemmas.GCD2) or f.eq(lemmas.LCM2):
                apps.setdefault(t.get_id(), t)
                dterms.setdefault(t.get_id(), t)
                for a in t.children():
                    dterms.setdefault(a.get_id(), a)
            todo.extend(t.children())
    return list(dterms.items()), list(apps.items())


# Per-process memos keyed by Z3 AST ids. Z3 hash-conses terms, so one id is one term's exact
# content; the memo holds a reference to every keyed term, so no id is freed and reused.
_COLLECTED: dict[int, tuple[Any, list, list]] = {}


def _collect(formulas, memoise: bool = True) -> tuple[list, list]:
    """The Int terms divisibility is asked about (arguments of D) and the GCD2/LCM2 applications.

    One depth-first walk over ``formulas`` from the last: each formula's own walk is memoised
    (the obligations of a revision share most hypotheses) and the union keeps the order one
    walk over the whole list gives (a term seen in a later formula's walk has its whole subtree
    seen, so filtering a formula's own order by what is already seen is that walk's order)."""
    dterms: dict = {}
    apps: dict = {}
    for f in reversed(list(formulas)):
        hit = _COLLECTED.get(f.get_id()) if memoise else None
        if hit is None:
            hit = (f,) + _collect_one(f)
            if memoise:
                _COLLECTED[f.get_id()] = hit
        for k, t in hit[1]:
            dterms.setdefault(k, t)
        for k, t in hit[2]:
            apps.setdefault(k, t)
    return list(dterms.values()), list(apps.values())


def ground_axioms(formulas, hubs=None, memoise: bool = True) -> list:
    """D1-D4 and B1-B4 instantiated on the terms of ``formulas`` (quantifier-free: Z3 decides
    the query; a missing instance can only make a proof fail, never make one up). Transitivity
    a | b | c is instantiated with b among ``hubs`` (the summary's and the decision's terms and
    the gcd/lcm applications; every term when None). ``memoise``: reuse the instances (and
    term walks) this process built for earlier obligations; the list is the same either way."""
    terms, apps = _collect(formulas, memoise)
    if hubs is None:
        mid = terms
    else:
        ids = {h.get_id() for h in hubs} | {t.get_id() for t in apps}
        mid = [t for t in terms if t.get_id() in ids]
    memo = _AXIOMS if memoise else None
    out = lemmas.divisibility_axioms(terms, [_positive(t) for t in terms], chains=[(terms, mid, terms)], memo=memo)
    for t in apps:
        a, b = t.children()
        if t.decl().eq(lemmas.GCD2):
            out += lemmas.gcd2_facts(t, a, b, terms, memo=memo)
        else:
            out += lemmas.lcm2_facts(t, a, b, terms, memo=memo)
    return out


_AXIOMS: dict = {}  # the instances built so far in this process (lemmas' memo: same terms, same AST)
_POSITIVE: dict[int, tuple] = {}


def _positive(t):
    """``t >= 1``, built once per term and process."""
    hit = _POSITIVE.get(t.get_id())
    if hit is None:
        hit = _POSITIVE[t.get_id()] = (t, t >= 1)
    return hit[1]


class Context:
    """The terms of one revision's obligations: a summary s, a folded group x, the new group g."""

    def __init__(self, revision: str, max_block: int = M.MAX_BLOCK, dcp_values=M.DCP_VALUES,
                 fold_cls=FD.Fold) -> None:
        self.revision = revision
        self.rev = R.REVISIONS[revision]
        self.max_block, self.dcp_values = max_block, M.dcp_set(dcp_values)
        self.A = FD.Z3Alg(self.dcp_values)
        self.F = fold_cls(revision, self.A)
        self.c = FD.fresh_config()
        self.s = FD.Summary.fresh("s")
        self.g, self.x = FD.Group.fresh("g"), FD.Group.fresh("x")
        self.d, self.m = z3.Int("d"), z3.Int("m")
        self.s0 = self.F.init(self.g, self.c)
        self.s1 = self.F.step(self.s, self.g, self.c)
        self._memo: dict[tuple, Any] = {}
        self._solvers: dict[str, tuple[z3.Solver, set[int]]] = {}

    def _once(self, name: str, args: tuple, build: Callable[[], Any]) -> Any:
        """``build()`` once per method and arguments (this context's own summaries and groups, keyed
        by identity): the obligations of a revision share their hypotheses, and Z3 hash-conses
        the terms, so a reused list is the very formula a rebuilt one would be."""
        k = (name,) + tuple(id(a) for a in args)
        if k not in self._memo:
            self._memo[k] = (args, build())  # args kept: their ids stay theirs
        return self._memo[k][1]

    def hubs(self) -> list:
        """The middle terms of transitivity instances: the summaries' and the decisions' terms."""
        out = []
        for sm in (self.s, self.s0, self.s1):
            out += [v for k, v in sm.items() if k in FD.Summary.INTS]
        for sm in (self.s, self.s0):
            dd = self.decided(sm)
            out += [t for t in (dd.S, dd.H, dd.H0, dd.Gh, dd.alignment) if t is not None]
        return out

    # the bounded model's view of one group (its per-group term), the reference for "every size"
    def ref(self, grp: FD.Group):
        return self._once("ref", (grp,), lambda: M.resolve(self.rev, FD.inputs_of([grp], self.c),
                                                          self.dcp_values).eff[0])

    def domain(self, *groups: FD.Group) -> list:
        """The model's domain for each group (and the config), plus D5 (a | a * dcp) on their sizes."""
        return list(self._once("domain", groups, lambda: self._domain(*groups)))

    def _domain(self, *groups: FD.Group) -> list:
        c, A = self.c, self.A
        out = [D(c.cache_bs, A.scale(c.cache_bs, c.dcp))]
        for grp in groups:
            out += M.domain(self.rev, FD.inputs_of([grp], c), self.max_block, self.dcp_values)
            out += [D(grp.bs, A.scale(grp.bs, c.dcp)), D(grp.bs, self.ref(grp))]
        return out

    # --- the invariants ----------------------------------------------------------------------
    def summary_inv(self, s: FD.Summary, inv: str):
        A, F, c = self.A, self.F, self.c
        if inv == "positive":
            return z3.And(s.L >= 1, s.Ga >= 1, s.T >= 1, s.minA >= 1, s.Pmax >= 0)
        if inv == "g_divides_l":
            return D(s.Ga, s.L)
        if inv == "gp_between":
            return z3.If(s.anyp, z3.And(s.Gp >= 1, s.minP >= 1, D(s.Ga, s.Gp), D(s.Gp, s.L)), s.Gp == 0)
        if inv == "all_cacheable":
            return z3.Implies(s.allp, z3.And(s.anyp, s.Gp == s.Ga))
        if inv == "flags_consistent":
            fb = z3.Implies(s.fb, s.anym)
            if self.rev.has(R.MAMBA_FALLBACK_MODE) and not self.rev.has(R.MAMBA_FALLBACK_BLOCK_SIZE):
                fb = s.fb == z3.And(s.anym, c.mode != FD.ALIGN)  # 0.28: the mode is one per engine
            return z3.And(fb, s.anym == (s.mbs >= 1), s.anym == (s.Pmax >= 1))
        if inv == "one_group":
            i0 = F.init(s.first, c)
            return z3.Implies(s.one, z3.And([v == getattr(i0, k) for k, v in s.items()]))
        raise KeyError(inv)

    def member_inv(self, s: FD.Summary, x: FD.Group, inv: str):
        F, c = self.F, self.c
        e = self.ref(x)
        if inv == "size_divides_l":
            return D(e, s.L)
        if inv == "g_divides_size":
            return D(s.Ga, e)
        if inv == "gp_divides_cacheable":
            return z3.Implies(x.pc, z3.And(s.anyp, D(s.Gp, e)))
        if inv == "flags_monotone":
            return z3.And(z3.Implies(z3.Not(x.pc), z3.Not(s.allp)), z3.Implies(x.mamba, s.anym),
                          z3.Implies(F.fallback_cond(x, c), s.fb))
        if inv == "partial_max":
            return z3.Implies(x.mamba, F.partial_size(x, c) <= s.Pmax)
        if inv == "tps_divides_t":
            return z3.Implies(F.tps_cond(x), D(x.tps, s.T))
        if inv == "engine_bounds":
            return z3.And(x.bs >= s.minA, z3.Implies(x.pc, x.bs >= s.minP),
                          z3.Implies(z3.And(x.mamba, s.muni), x.bs == s.mbs),
                          z3.Implies(z3.And(x.mamba, s.mml_ok), x.bs == c.max_model_len))
        raise KeyError(inv)

    def universal(self, inv: str, before: FD.Summary | None, after: FD.Summary):
        """(hypothesis, goal) of a universal invariant for adding g to ``before`` (None: the base)."""
        g, d, m, F = self.g, self.d, self.m, self.F
        e = self.ref(g)
        if inv == "l_least":
            hyp = z3.And(m >= 1, D(e, m), D(before.L, m) if before else True)
            return hyp, D(after.L, m)
        if inv == "g_greatest":
            hyp = z3.And(d >= 1, D(d, e), D(d, before.Ga) if before else True)
            return hyp, D(d, after.Ga)
        if inv == "gp_greatest":
            hyp = z3.And(d >= 1, z3.Implies(g.pc, D(d, e)),
                         z3.Implies(before.anyp, D(d, before.Gp)) if before else True)
            return hyp, z3.Implies(after.anyp, D(d, after.Gp))
        if inv == "t_least":
            hyp = z3.And(m >= 1, z3.Implies(F.tps_cond(g), D(g.tps, m)), D(before.T, m) if before else True)
            return hyp, D(after.T, m)
        raise KeyError(inv)

    def invariant_hyps(self, s: FD.Summary, x: FD.Group | None) -> list:
        return list(self._once("hyps", (s, x), lambda: self._invariant_hyps(s, x)))

    def _invariant_hyps(self, s: FD.Summary, x: FD.Group | None) -> list:
        out = [self.summary_inv(s, i.id) for i in INVARIANTS if i.kind == "summary"]
        if x is not None:
            out += [self.member_inv(s, x, i.id) for i in INVARIANTS if i.kind == "member"]
        return out

    # --- the obligations ---------------------------------------------------------------------
    def shared(self, kind: str) -> list:
        """The hypotheses every obligation of ``kind`` starts with (its own follow them)."""
        if kind == "base":
            return self.domain(self.g)
        if kind in ("step", "transfer"):
            first = (self.g, self.x, self.s.first) if kind == "step" else (self.x, self.s.first)
            return self.domain(*first) + self.invariant_hyps(self.s, self.x)
        return self.domain(self.s.first) + self.invariant_hyps(self.s, None)

    def solver_for(self, kind: str) -> tuple[z3.Solver, set[int]]:
        """One solver per obligation kind with ``shared(kind)`` and its axiom instances asserted,
        and the AST ids of what it holds: each obligation adds the rest of its own query inside
        a push (kvproof.spec.induction.prove), so the common part is asserted once per process."""
        if kind not in self._solvers:
            shared = self.shared(kind)
            held = ground_axioms(shared, self.hubs()) + shared
            solver = z3.Solver()
            lemmas.assert_all(solver, held)
            self._solvers[kind] = solver, {f.get_id() for f in held}
        return self._solvers[kind]

    def base(self, inv: str) -> tuple[list, Any]:
        i = INV_BY_ID[inv]
        hyps = self.domain(self.g)
        if i.kind == "summary":
            return hyps, self.summary_inv(self.s0, inv)
        if i.kind == "member":
            return hyps, self.member_inv(self.s0, self.g, inv)
        hyp, goal = self.universal(inv, None, self.s0)
        return hyps + [hyp], goal

    def step(self, inv: str) -> tuple[list, Any]:
        i = INV_BY_ID[inv]
        hyps = self.domain(self.g, self.x, self.s.first) + self.invariant_hyps(self.s, self.x)
        if i.kind == "summary":
            return hyps, self.summary_inv(self.s1, inv)
        if i.kind == "member":
            return hyps, z3.And(self.member_inv(self.s1, self.x, inv), self.member_inv(self.s1, self.g, inv))
        hyp, goal = self.universal(inv, self.s, self.s1)
        return hyps + [hyp], goal

    def decided(self, s: FD.Summary):
        return self._once("decided", (s,), lambda: self.F.decide(s, self.c))

    def transfer(self, key: str) -> tuple[list, Any]:
        prop = BY_KEY[key]
        s, x = self.s, self.x
        dd = self.decided(s)
        r1 = M.Resolved(S=dd.S, H=dd.H, err=dd.err, eff=[self.ref(x)], fallback=dd.fallback, unit=dd.unit)
        pre_m, viol_m = prop.build(FD.inputs_of([x], self.c), r1)
        # the group-count bounds and the scenario are the same on both sides (one <=> N = 1,
        # anym <=> some Mamba group: the fold's own flags); the rest of the premise and the
        # violation must follow from the bounded form on an arbitrary folded group x
        pre_s, viol_s = summary_formulas(prop, self.A, s, self.c, dd, core=True)
        hyps = self.domain(x, s.first) + self.invariant_hyps(s, x) + [pre_m, viol_m]
        return hyps, z3.And(pre_s, viol_s)

    def conclusion(self, key: str, premise: str) -> tuple[list, Any]:
        prop = BY_KEY[key]
        s = self.s
        dd = self.decided(s)
        pre, viol = summary_formulas(prop, self.A, s, self.c, dd)
        hyps = self.domain(s.first) + self.invariant_hyps(s, None) + [pre]
        if premise == "engine":
            hyps += [f for _, f in self.F.engine_premise(s, self.c)]
        return hyps, z3.Not(viol)  # the goal: no violation


def obligation_ids(revision: str, properties=None) -> list[str]:
    props = [p.key for p in (properties if properties is not None else PROPERTIES)]
    out = [f"base:{i.id}" for i in INVARIANTS] + [f"step:{i.id}" for i in INVARIANTS]
    out += [f"transfer:{k}" for k in props]
    out += [f"conclusion:{k}:{p}" for k in props for p in PREMISES]
    return out


@lru_cache(maxsize=None)
def _context(revision: str, max_block: int, dcp_values: tuple) -> Context:
    return Context(revision, max_block, dcp_values)


def prove(ctx: Context, oid: str, timeout: float = 10.0, refute: bool = False) -> dict:
    """One obligation as one Z3 query: PROVED (UNSAT), COUNTEREXAMPLE (the obligation fails:
    a state the invariants allow breaks it; only with ``refute``, which asks the ground query when
    the quantified one finds no proof), UNKNOWN (no proof: Z3 gave up or ran out of time)."""
    t0 = time.monotonic()
    kind, _, rest = oid.partition(":")
    if kind == "base":
        hyps, goal = ctx.base(rest)
    elif kind == "step":
        hyps, goal = ctx.step(rest)
    elif kind == "transfer":
        hyps, goal = ctx.transfer(rest)
    elif kind == "conclusion":
        key, _, premise = rest.rpartition(":")
        hyps, goal = ctx.conclusion(key, premise)
    else:
        raise ValueError(f"unknown obligation {oid!r}")
    query = hyps + [z3.Not(goal)]
    deadline = t0 + timeout
    # 1) ground instances of the axioms through the summary's terms (decidable, fast)
    whole = ground_axioms(query, ctx.hubs()) + query
    s, held = ctx.solver_for(kind)
    ids = [f.get_id() for f in whole]
    pushed = held <= set(ids)  # the kind's solver holds only what this query asserts: add the rest
    if pushed:
        s.push()
        lemmas.assert_all(s, [f for f, i in zip(whole, ids) if i not in held])
    else:  # (never expected) a query without its kind's common part: a solver of its own
        s = z3.Solver()
        lemmas.assert_all(s, whole)
    s.set(timeout=max(1, int(timeout * 1000)))
    try:
        res = s.check()
        why = s.reason_unknown() if res == z3.unknown else ""
        text = _model_text(ctx, s.model()) if res == z3.sat else ""
    finally:
        if pushed:
            s.pop()
    if res != z3.unsat and refute and time.monotonic() < deadline:
        # 2) the quantified axioms (E-matching): a proof the ground instances missed
        s2 = z3.Solver()
        s2.set(timeout=max(1, int((deadline - time.monotonic()) * 1000)), **{"smt.mbqi": False})
        s2.add(*axioms())
        s2.add(*query)
        if s2.check() == z3.unsat:
            res = z3.unsat
    secs = time.monotonic() - t0
    if res == z3.unsat:
        return {"id": oid, "status": PROVED, "seconds": secs, "detail": ""}
    if res == z3.sat:
        return {"id": oid, "status": REFUTED, "seconds": secs, "detail": text}
    return {"id": oid, "status": UNKNOWN, "seconds": secs, "detail": f"not proved (z3: {why})"}


def _model_text(ctx: Context, m) -> str:
    """The summary and config of a refuting state (for the report), shortened."""
    parts = []
    for k, v in ctx.s.items():
        parts.append(f"{k}={m.eval(v, model_completion=True)}")
    for k in ("cache_bs", "caching", "connector", "pmu_set", "pmu", "mode", "dcp"):
        parts.append(f"{k}={m.eval(getattr(ctx.c, k), model_completion=True)}")
    return " ".join(parts)[:400]


def run_obligations(spec: dict) -> dict:
    """verify's worker entry: {"revision", "obligations": [ids], "timeout", "max_block", "dcp_values"}.

    Each obligation is its own query with its own timeout; the worker process
    around them is killed at the hard deadline (kvproof.verify.runner).
    """
    t0 = time.monotonic()
    ctx = _context(spec["revision"], spec.get("max_block", M.MAX_BLOCK),
                   M.dcp_set(spec.get("dcp_values", M.DCP_VALUES)))
    out = []
    for oid in spec["obligations"]:
        try:
            out.append(prove(ctx, oid, spec["timeout"]))
        except Exception as err:  # noqa: BLE001 -- an encoding bug is UNKNOWN with the reason, never PROVED
            out.append({"id": oid, "status": UNKNOWN, "seconds": 0.0, "detail": f"{type(err).__name__}: {err}"})
    return {"status": max((o["status"] for o in out), default=PROVED), "seconds": time.monotonic() - t0,
            "obligations": out}


def prove_all(revision: str, timeout: float = 10.0, fold_cls=FD.Fold, properties=None,
              max_block: int = M.MAX_BLOCK, dcp_values=M.DCP_VALUES, refute: bool = False,
              ids=None) -> dict[str, dict]:
    """Every obligation (or ``ids``) of one revision in this process (tests, mutants): id -> result."""
    ctx = Context(revision, max_block, dcp_values, fold_cls)
    return {oid: prove(ctx, oid, timeout, refute) for oid in (ids or obligation_ids(revision, properties))}


def invariants_hold(results: dict[str, dict]) -> tuple[bool, list[str]]:
    """(every base and step obligation PROVED, the ones that are not)."""
    bad = [oid for oid, r in results.items() if oid.split(":")[0] in ("base", "step") and r["status"] != PROVED]
    return not bad, bad


def unbounded(results: dict[str, dict], key: str, premise: str) -> tuple[ProofStatus, str]:
    """The inductive verdict of one property and premise from the obligations' results alone:
    PROVED only when every base, step, the transfer and the conclusion are PROVED."""
    ok, bad = invariants_hold(results)
    tr = results.get(f"transfer:{key}", {}).get("status")
    co = results.get(f"conclusion:{key}:{premise}", {}).get("status")
    if ok and tr == PROVED and co == PROVED:
        return PROVED, "base, step, transfer and conclusion proved"
    if not ok:
        return UNKNOWN, "invariant not inductive: " + ", ".join(bad[:4])
    if tr != PROVED:
        return UNKNOWN, f"transfer:{key} {tr}"
    return (REFUTED if co == REFUTED else UNKNOWN), f"conclusion {co}"


__all__ = ["INVARIANTS", "Context", "obligation_ids", "prove", "prove_all", "run_obligations", "unbounded"]
