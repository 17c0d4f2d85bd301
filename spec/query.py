"""One proof query: (revision, property, group count, premise) -> verdict.

Verdicts (:class:`kvproof.verdicts.ProofStatus`, ordered PROVED < WARNING <
COUNTEREXAMPLE < UNKNOWN): PROVED (UNSAT over the whole domain),
COUNTEREXAMPLE (SAT, and the witness replayed through the concrete model
with exact gcd/lcm still violates), WARNING (an efficiency property's
witness, same replay), UNKNOWN (Z3 gave up, the time ran out, or the
gcd/lcm refinement did not converge; never a proof). ``Result.status`` and
the ``status`` of ``run_query``'s dict are ProofStatus members; JSON writers
write ``str(status)`` (the name).

The domain's dcp set is the query's ``dcp_values`` and the encoding is built
for exactly that set (``model.encoding(revision, n, dcp_values)``).

Premises: ``free`` lets ``cache_config.block_size`` be any value (a direct
caller of the function); ``engine`` ties it to what EngineCore derives (the
minimum group block size, per revision).

Search order: a satisfiable query is tried first with every size bounded by
:data:`SMALL_BOUNDS` (small witnesses come fast and are nearly minimal; an
UNSAT there proves nothing), then over the full domain. A *seed* (a witness
found at a smaller group count, padded by duplicating one of its groups,
which leaves every gcd, lcm and branch condition unchanged) is replayed
concretely first and accepted only if it still violates.

Minimisation (``shrink``) is iterative tightening on the concrete model:
fewest groups, then default flags, then the smallest block sizes, every
step replayed concretely.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import z3

from kvproof.judging import contracts as C
from kvproof.inputs.layout import DEFAULT_MAX_MODEL_LEN, Cache, Group, Layout
from kvproof.judging.shrinking import shrink as greedy
from kvproof import facts
from kvproof.spec import lemmas
from kvproof.spec.premise import engine_premise
from kvproof.spec import model as M
from kvproof import revisions as R
from kvproof.spec.properties import BY_KEY, Property
from kvproof.verdicts import ProofStatus

PROVED, COUNTEREXAMPLE, WARNING, UNKNOWN = (ProofStatus.PROVED, ProofStatus.COUNTEREXAMPLE, ProofStatus.WARNING,
                                            ProofStatus.UNKNOWN)
MAX_REFINEMENTS = 40
SMALL_BOUNDS = (16,)


@dataclass
class Result:
    status: ProofStatus
    seconds: float
    layout: dict | None = None  # the witness as Layout JSON
    outcome: dict | None = None  # the model's concrete outcome for the witness
    detail: str = ""
    refinements: int = 0
    how: str = ""  # "z3", "z3 (bounded)", "seed"
    contracts_py: list[str] = field(default_factory=list)  # ids contracts.check flags on the witness

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class Query:
    def __init__(self, revision: str, prop: Property, n: int, premise: str = "free",
                 max_block: int = M.MAX_BLOCK, dcp_values=M.DCP_VALUES) -> None:
        self.t_created = time.monotonic()
        self.rev = R.REVISIONS[revision]
        self.prop, self.n, self.premise = prop, n, premise
        self.max_block, self.dcp_values = max_block, M.dcp_set(dcp_values)
        # shared per process (same variables, same terms), exact for this dcp set
        self.enc = M.encoding(revision, n, self.dcp_values)
        self.x, self.r = self.enc.x, self.enc.r
        self._solver: z3.Solver | None = None
        self.refinements = 0

    @property
    def solver(self) -> z3.Solver:
        """The encoding's shared solver (domain and lemma facts asserted once per process) with this
        query's premise and violation pushed on it; a solver of its own while another query holds
        it. ``release`` pops what this query added (refinements included)."""
        if self._solver is None:
            self.pre, self.viol = self.prop.formulas(self.x, self.r)
            shared = _shared(self.enc, self.max_block)
            mine = [self.pre, self.viol] + (shared["engine"] if self.premise == "engine" else [])
            if shared["holder"] is None:
                if shared["solver"] is None:  # built on the first query (concrete replay needs none)
                    shared["solver"] = z3.Solver()
                    lemmas.assert_all(shared["solver"], _base(self.enc, shared))
                shared["holder"] = self
                self._solver = shared["solver"]
                self._solver.push()
            else:
                self._solver = z3.Solver()
                lemmas.assert_all(self._solver, _base(self.enc, shared))
            lemmas.assert_all(self._solver, mine)
        return self._solver

    def release(self) -> None:
        shared = _shared(self.enc, self.max_block)
        if shared["holder"] is self:
            shared["solver"].pop()
            shared["holder"] = None
        self._solver = None

    # --- solving with counterexample validation (CEGAR on gcd/lcm and D) --
    def _check(self, deadline: float, extra=()) -> tuple[Any, Any]:
        """("sat", inputs) | ("unsat", None) | (UNKNOWN, reason)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0.01:
                return UNKNOWN, "timeout"
            self.solver.set(timeout=max(1, int(left * 1000)))
            res = self.solver.check(*extra)
            if res == z3.unsat:
                return "unsat", None
            if res == z3.unknown:
                return UNKNOWN, self.solver.reason_unknown()
            m = self.solver.model()
            subs = [(v, m.eval(v, model_completion=True)) for v in self.x.variables()]
            if concrete_violation(self.rev.name, self.prop, self.premise, self.max_block, self.dcp_values,
                                  self.n, subs):
                return "sat", subs
            if self.refinements >= MAX_REFINEMENTS:
                return UNKNOWN, f"gcd/lcm refinement did not converge after {self.refinements} points"
            self.refinements += 1
            self._refine(m, subs)

    def _refine(self, m, subs) -> None:
        vals = sorted({m.eval(t, model_completion=True).as_long() for t in self.r.terms})
        self.solver.add(*lemmas.point_divides([(a, b) for a in vals for b in vals]))
        if self.r.L is not None:
            out, _ = M.concrete(self.enc, subs, check_facts=False)
            self.solver.add(lemmas.point_lcm(self.r.L, self.r.eff, out["eff"]),
                            lemmas.point_gcd(self.r.G, self.r.eff, self.r.hashing, out["eff"], out["members"]))

    def _bounded(self, bound: int) -> list:
        x = self.x
        return [v <= bound for v in x.bs + x.tps + [x.cache_bs, x.pmu]]

    def run(self, timeout: float, minimise: bool = True, seed: dict | None = None) -> Result:
        try:
            return self._run(timeout, minimise, seed)
        finally:
            self.release()

    def _run(self, timeout: float, minimise: bool, seed: dict | None) -> Result:
        t0 = self.t_created  # setup (building the solver) counts
        if seed is not None:
            layout = Layout.from_dict(seed)
            if len(layout.groups) == self.n and self.holds_on(layout):
                return self._witness(layout, t0, "seed")
        self.solver  # build it before the clock for the search starts
        deadline = time.monotonic() + timeout
        how = "z3"
        # 1) the whole domain, a third of the budget: proofs end here in milliseconds
        status, subs = self._check(min(deadline, time.monotonic() + timeout / 3))
        if status == UNKNOWN:
            # 2) small sizes (witnesses come fast and small; UNSAT here proves nothing)
            for bound in SMALL_BOUNDS:
                if bound >= self.max_block > 0:
                    break
                self.refinements = 0
                st, s2 = self._check(min(deadline, time.monotonic() + timeout / 3), self._bounded(bound))
                if st == "sat":
                    status, subs, how = "sat", s2, f"z3 (sizes <= {bound})"
                    break
        if status == UNKNOWN:
            # 3) the whole domain again with what is left (refinements learnt so far stay)
            self.refinements = 0
            status, subs = self._check(deadline)
        if status == UNKNOWN:
            return Result(UNKNOWN, time.monotonic() - t0, detail=str(subs), refinements=self.refinements)
        if status == "unsat":
            return Result(PROVED, time.monotonic() - t0, refinements=self.refinements)
        layout = to_layout(self.x, subs)
        if not self.holds_on(layout):  # the Layout round trip must keep the violation
            return Result(UNKNOWN, time.monotonic() - t0, detail="witness lost in the Layout round trip",
                          layout=layout.to_dict(), refinements=self.refinements)
        if minimise:
            # engine premise: every move is also tried with the cache block size re-derived, so a
            # smaller minimum group stays engine-shaped (else the sizes only step down)
            layout = shrink(layout, self.holds_on, keep_groups=True, deadline=deadline + timeout,
                            revision=self.rev.name if self.premise == "engine" else None)
        return self._witness(layout, t0, how)

    def holds_on(self, layout: Layout) -> bool:
        """Does ``layout`` satisfy domain, premise and violation of this query (concretely)?"""
        return concrete_holds(layout, self.rev.name, self.prop, self.premise, self.max_block, self.dcp_values)

    def _witness(self, layout: Layout, t0: float, how: str) -> Result:
        out = M.evaluate(layout, self.rev.name)
        verdict = COUNTEREXAMPLE if self.prop.kind == C.SAFETY else WARNING
        flagged = [v.contract.id for v in (C.check(layout, out) if self.prop.kind == C.SAFETY
                                           else C.warnings(layout, out))]
        return Result(verdict, time.monotonic() - t0, layout=layout.to_dict(), outcome=out.to_dict(),
                      detail=layout.summary(), refinements=self.refinements, how=how, contracts_py=flagged)


def _shared(enc, max_block: int) -> dict:
    """The parts of every query over one encoding that do not depend on the property, built once
    per process (Z3 hash-conses terms: the very terms a rebuild gives): ``domain_list`` (the
    domain), ``engine`` (the engine premise), ``domain`` and ``engine_f`` (their conjunctions,
    for concrete evaluation), ``solver`` (:func:`_base` asserted, built by the
    first ``Query``; the one ``holder`` names has its own part pushed on it)."""
    memo = M._compiled(enc).setdefault("shared", {})
    if max_block not in memo:
        domain, engine = M.domain(enc.rev, enc.x, max_block, enc.dcp_values), engine_premise(enc.rev, enc.x)
        memo[max_block] = {"domain_list": domain, "engine": engine, "solver": None, "holder": None,
                           "domain": z3.And(*domain), "engine_f": z3.And(*engine)}
    return memo[max_block]


# --- concrete replay of a query on a Layout ----------------------------------------

def _base(enc, shared: dict) -> list:
    """Domain and the resolver's lemma facts: what every query's solver holds (the facts are built
    on the first query of the encoding; concrete replay needs none)."""
    return shared["domain_list"] + enc.r.facts


def _parts(enc, key: str, premise: str, max_block: int) -> list[tuple[str, Any]]:
    """A query's formula as (compile key, Bool term) conjuncts, true at a point iff the whole
    query's formula is: the domain and the engine premise are shared by every property over the
    encoding (each compiled once), the property's premise and violation are its own."""
    sh = _shared(enc, max_block)
    props = M._compiled(enc).setdefault("properties", {})
    if key not in props:
        props[key] = z3.And(*BY_KEY[key].formulas(enc.x, enc.r))
    out = [(f"domain:{max_block}", sh["domain"]), (f"property:{key}", props[key])]
    if premise == "engine":
        out.append((f"engine:{max_block}", sh["engine_f"]))
    return out


def _holds(enc, key: str, premise: str, max_block: int, vals: list) -> bool:
    return all(M.holds_at(enc, k, f, vals) for k, f in _parts(enc, key, premise, max_block))


def concrete_violation(revision, prop, premise, max_block, dcp_values, n, subs) -> bool:
    """Replay a solver model's inputs (``subs``, matched by variable name) concretely."""
    enc = M.encoding(revision, n, M.dcp_set(dcp_values))
    out, _ = M.concrete(enc, subs, check_facts=False)
    return _holds(enc, prop.key, premise, max_block, out["_vals"])


def concrete_holds(layout: Layout, revision: str, prop: Property, premise: str,
                   max_block: int = M.MAX_BLOCK, dcp_values=M.DCP_VALUES) -> bool:
    dcps = M.dcp_set(dcp_values)
    if not prop.applies(len(layout.groups)) or R.not_expressible(layout, revision) or layout.dcp not in dcps:
        return False  # outside the query's domain (the dcp set is part of it)
    enc = M.encoding(revision, len(layout.groups), dcps)
    return _holds(enc, prop.key, premise, max_block, _evaluated(enc, layout))


def _evaluated(enc, layout: Layout) -> list:
    """The encoding evaluated at ``layout``, memoised on the encoding (the reachability search asks
    every measured Config once per property; the evaluation does not depend on the property)."""
    memo = M._compiled(enc).setdefault("evaluated", {})
    try:
        k = layout
        hash(k)
    except TypeError:
        k = layout.content_hash()
    vals = memo.get(k)
    if vals is None:
        vals = memo[k] = M.concrete_layout(enc, layout, check_facts=False)["_vals"]
    return vals


def pad(layout: dict, n: int) -> dict:
    """A witness with ``n`` groups from a smaller one: repeat its last group."""
    lay = Layout.from_dict(layout)
    groups = list(lay.groups)
    while len(groups) < n:
        groups.append(groups[-1])
    return replace(lay, groups=tuple(groups)).to_dict()


# --- minimisation -----------------------------------------------------------------

def _size_key(lay: Layout) -> tuple:
    sizes = [g.block_size for g in lay.groups] + [lay.cache.block_size]
    extras = [lay.cache.prefix_match_unit or 0] + [g.tokens_per_state or 0 for g in lay.groups]
    flags = sum([lay.dcp != 1, lay.cache.prefix_match_unit is not None, lay.kv_connector is not None,
                 not lay.cache.enable_prefix_caching, lay.cache.mamba_cache_mode != "align",
                 lay.max_model_len != DEFAULT_MAX_MODEL_LEN]
                + [g.prefix_cacheable is not None or g.dcp_sharded is not None or g.tokens_per_state is not None
                   for g in lay.groups])
    return (len(lay.groups), flags, max(sizes + extras), sum(sizes) + sum(extras))


def _candidates(lay: Layout, keep_groups: bool):
    c = lay.cache
    if not keep_groups and len(lay.groups) > 1:
        for i in range(len(lay.groups)):
            yield replace(lay, groups=lay.groups[:i] + lay.groups[i + 1:])
    yield replace(lay, dcp=1)
    yield replace(lay, cache=replace(c, prefix_match_unit=None))
    yield replace(lay, kv_connector=None)
    yield replace(lay, cache=replace(c, enable_prefix_caching=True))
    yield replace(lay, cache=replace(c, mamba_cache_mode="align"))
    yield replace(lay, max_model_len=DEFAULT_MAX_MODEL_LEN)
    for i, g in enumerate(lay.groups):
        for g2 in (replace(g, prefix_cacheable=None), replace(g, dcp_sharded=None),
                   replace(g, tokens_per_state=None), replace(g, kind="full_attention"), replace(g, kind="mamba")):
            if g2 != g:
                yield replace(lay, groups=lay.groups[:i] + (g2,) + lay.groups[i + 1:])

    def smaller(v):
        # v - v/2, v - v/4, ..., v - 1: a threshold (a size just over max_model_len) is reached
        # in logarithmically many rounds, not by stepping down one at a time
        out = {1, 2} | {v - (v >> k) for k in range(1, v.bit_length() + 1)}
        for k in (2, 3, 5, 7):
            if v % k == 0:
                out.add(v // k)
        out |= {g.block_size for g in lay.groups if g.block_size < v}
        return sorted(o for o in out if 1 <= o < v)

    for i, g in enumerate(lay.groups):
        for v in smaller(g.block_size):
            g2 = replace(g, block_size=v)
            yield replace(lay, groups=lay.groups[:i] + (g2,) + lay.groups[i + 1:])
        if g.tokens_per_state:
            for v in smaller(g.tokens_per_state):
                g2 = replace(g, tokens_per_state=v)
                yield replace(lay, groups=lay.groups[:i] + (g2,) + lay.groups[i + 1:])
    for v in smaller(c.block_size):
        yield replace(lay, cache=replace(c, block_size=v))
    # one value everywhere at once (keeps equalities such as cache == min group size)
    values = sorted({g.block_size for g in lay.groups} | {c.block_size}, reverse=True)
    for v in values:
        for w in smaller(v):
            def sub(t, v=v, w=w):
                return w if t == v else t
            yield replace(lay, groups=tuple(replace(g, block_size=sub(g.block_size)) for g in lay.groups),
                          cache=replace(c, block_size=sub(c.block_size)))
    if c.prefix_match_unit:
        for v in smaller(c.prefix_match_unit):
            yield replace(lay, cache=replace(c, prefix_match_unit=v))


def _engine_fix(lay: Layout, revision: str) -> Layout:
    """Re-derive cache.block_size as EngineCore would (keeps engine witnesses engine-shaped)."""
    size = facts.engine_cache_block_size_of(lay.groups, R.REVISIONS[revision].engine_block_size)
    return replace(lay, cache=replace(lay.cache, block_size=size))


def shrink(layout: Layout, holds, keep_groups: bool = True, deadline: float | None = None,
           revision: str | None = None) -> Layout:
    """Greedy tightening: accept the first candidate that still violates and is smaller.

    With ``revision``, each candidate is also tried with the cache block size an
    engine would derive (``_engine_fix``). The loop is the one shrinker,
    ``kvproof.judging.shrinking.shrink``; ``holds`` is asked lazily, one candidate at a time.
    """
    def candidates(lay: Layout):
        for cand in _candidates(lay, keep_groups):
            yield cand
            if revision:
                yield _engine_fix(cand, revision)

    return greedy(layout, candidates, _size_key, lambda cands: (holds(c) for c in cands), deadline=deadline)


def minimise_corpus(layout: dict, revision: str, key: str, premise: str, max_block: int = M.MAX_BLOCK,
                    dcp_values=M.DCP_VALUES, seconds: float = 20.0) -> Layout:
    """Fewest groups, then simplest flags, then smallest sizes (for the corpus copy)."""
    prop = BY_KEY[key]

    def holds(lay: Layout) -> bool:
        return concrete_holds(lay, revision, prop, premise, max_block, dcp_values)

    return shrink(Layout.from_dict(layout), holds, keep_groups=False, deadline=time.monotonic() + seconds,
                  revision=revision if premise == "engine" else None)


def to_layout(x: M.Inputs, subs) -> Layout:
    d = {str(k): v for k, v in subs}

    def get(v):
        t = d[str(v)]
        return t.as_long() if z3.is_int_value(t) else z3.is_true(t)

    groups = []
    for i in range(x.n):
        mamba = get(x.mamba[i])
        kind = "mamba" if mamba else "full_attention"
        sharded = get(x.sharded[i])
        groups.append(Group(kind=kind, block_size=get(x.bs[i]),
                            prefix_cacheable=None if get(x.pc[i]) else False,
                            dcp_sharded=None if sharded == facts.default_dcp_sharded(kind) else sharded,
                            tokens_per_state=(get(x.tps[i]) or None) if mamba else None))
    mode = M.MODES[get(x.mode)]
    cache = Cache(block_size=get(x.cache_bs), enable_prefix_caching=get(x.caching),
                  prefix_match_unit=get(x.pmu) if get(x.pmu_set) else None,
                  mamba_cache_mode=mode if any(g.kind == "mamba" for g in groups) else "align")
    return Layout(groups=tuple(groups), cache=cache,
                  kv_connector=facts.DEFAULT_CONNECTOR if get(x.connector) else None,
                  dcp=get(x.dcp), max_model_len=get(x.max_model_len))


def run_query(spec: dict) -> dict:
    """Entry point for verify's worker processes: a JSON-able spec in, a JSON-able result out."""
    if "obligations" in spec:  # the inductive proof's obligations (kvproof.spec.induction)
        from kvproof.spec.induction import run_obligations
        return run_obligations(spec)
    prop = BY_KEY[spec["property"]]
    q = Query(spec["revision"], prop, spec["n"], spec.get("premise", "free"),
              spec.get("max_block", M.MAX_BLOCK), tuple(spec.get("dcp_values", M.DCP_VALUES)))
    return q.run(spec["timeout"], spec.get("minimise", True), spec.get("seed")).to_dict()
