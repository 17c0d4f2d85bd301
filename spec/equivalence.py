"""Z3 proof that the fold (kvproof.spec.fold) equals the bounded model (kvproof.spec.model).

For one revision and a group count N both encodings read the same symbolic inputs
(``model.inputs(N)``): the *bounded model* ``model.encoding(rev, N)`` (n-ary lcm/gcd as
the fresh integers L, G with the facts L1, L2, G1, G2, LG) and the *fold*
``Fold(rev, Z3Alg())`` ``fold``/``decide`` over the same groups (binary gcd/lcm as the
uninterpreted ``GCD2``/``LCM2`` with B1-B4). ``prove`` asks Z3 for an input in
``model.domain`` (dcp in the encoding's set; block sizes up to ``max_block``, none with 0)
where (S, H, err) differ (or, N = 1, the unitary coordinator's block size): UNSAT is PROVED. It first proves three lemmas
on few facts each (L = the folded lcm, G = the folded gcd, the folded tokens_per_state lcm
divides any a >= 1 exactly when every checked tokens_per_state does) and assumes them in
the answer query; if one is not proved, the direct query decides.

Soundness: every fact the queries hold is true of the real gcd and lcm (L1-LG, B1-B4,
D1-D5: kvproof.spec.lemmas; L3/G3 below, ``check_nary``), so the real values are among the
solutions the solver rules out. L2/G2 alone do not make L least nor G greatest, so L3 (L
divides every common multiple) and G3 (every common divisor divides G) are instantiated on
the fold's lcm/gcd terms; L = the folded lcm follows by mutual divisibility and D3. A sat
answer is replayed on exact integers (``PyAlg``, ``model.concrete``): COUNTEREXAMPLE when the
two really differ there, else UNKNOWN (the facts too weak); unknown, a timeout or
unsatisfiable hypotheses are UNKNOWN, never PROVED.
"""

from __future__ import annotations

import math
import time

import z3

from kvproof.spec import fold as FD
from kvproof.spec import induction as I
from kvproof.spec import lemmas
from kvproof.spec import model as M
from kvproof import revisions as R
from kvproof.verdicts import ProofStatus

D = lemmas.D


def nary_facts(L, G, eff, members, multiples, divisors) -> list:
    """L3: L divides every common multiple m of ``eff``; G3: every common divisor d of the
    members divides G (both true of lcm/gcd of positive integers; ``check_nary``)."""
    out = [z3.Implies(z3.And(m >= 1, *[D(e, m) for e in eff]), D(L, m)) for m in multiples]
    out += [z3.Implies(z3.And(d >= 1, *[z3.Implies(k, D(d, e)) for e, k in zip(eff, members)]), D(d, G))
            for d in divisors]
    return out


def check_nary(max_n: int = 3, max_value: int = 12) -> int:
    """L3 and G3 on every vector of up to ``max_n`` values in 1..max_value, every non-empty
    member mask, every m in 1..3 lcm and d in 1..max; raises on failure, returns the number of cases."""
    import itertools
    cases = 0
    for n in range(1, max_n + 1):
        for xs in itertools.product(range(1, max_value + 1), repeat=n):
            lc = math.lcm(*xs)
            for m in range(1, 3 * lc + 1):
                cases += 1
                if all(m % x == 0 for x in xs) and m % lc:
                    raise AssertionError(f"L3 fails at {xs}, m={m}")
            for mask in itertools.product((False, True), repeat=n):
                chosen = [x for x, k in zip(xs, mask) if k]
                if not chosen:
                    continue
                g = math.gcd(*chosen)
                for d in range(1, max(chosen) + 1):
                    cases += 1
                    if all(x % d == 0 for x in chosen) and g % d:
                        raise AssertionError(f"G3 fails at {xs}, {mask}, d={d}")
    return cases


def _uniq(terms) -> list:
    return list({t.get_id(): t for t in terms if t is not None}.values())


def ground(query, eff, tps, hubs=(), multiples=()) -> list:
    """D1, D3, D4 on every term divisibility is asked about in ``query``, B1-B4 on its
    GCD2/LCM2 applications, and D2 only along the folds: gcd application | its argument |
    group size (the folded gcd divides each size), and size or tokens_per_state | lcm argument
    or ``hubs`` | lcm application or ``multiples`` (each divides the folded lcm, and what it
    divides)."""
    terms, found = I._collect(query)
    leaf = {t.get_id() for t in list(eff) + list(tps)}

    def inner(kind):
        apps = [t for t in found if t.decl().eq(kind)]
        return apps, _uniq(apps + [a for t in apps for a in t.children() if a.get_id() not in leaf])

    gapps, gmid = inner(lemmas.GCD2)
    lapps, lmid = inner(lemmas.LCM2)
    chains = [(gapps, gmid, eff), (list(eff) + list(tps), _uniq(lmid + list(hubs)), _uniq(lapps + list(multiples)))]
    out = lemmas.divisibility_axioms(terms, [t >= 1 for t in terms], chains=chains)
    for t in found:
        a, b = t.children()
        out += (lemmas.gcd2_facts if t.decl().eq(lemmas.GCD2) else lemmas.lcm2_facts)(t, a, b, terms)
    return out


def _py(v):
    return v.as_long() if z3.is_int_value(v) else z3.is_true(v)


def _replay(rev: str, enc: M.Encoding, model, fold_cls) -> tuple[bool, str]:
    """(the two really differ at the solver's inputs, the inputs and both answers (S, H, err, unit))."""
    x = enc.x
    subs = [(v, model.eval(v, model_completion=True)) for v in x.variables()]
    got, _ = M.concrete(enc, subs)
    py = M.Inputs(x.n, *[[_py(model.eval(v, model_completion=True)) for v in vs]
                         for vs in (x.mamba, x.bs, x.pc, x.sharded, x.tps)],
                  *[_py(model.eval(v, model_completion=True)) for v in x.variables()[5 * x.n:]])
    f = fold_cls(rev, FD.PyAlg())
    c = FD.config_of(py)
    d = f.decide(f.fold(FD.groups_of(py), c), c)
    want, have = (got["S"], got["H"], got["err"], got["unit"]), (d.S, d.H, d.err, d.unit if x.n == 1 else None)
    text = " ".join(f"{v}={val}" for v, val in subs) + f" model={want} fold={have}"
    return want != have, text[:600]


SPURIOUS_RETRIES = 12  # spurious models blocked before the answer stays UNKNOWN


def _solve(hyps, goal, timeout, ground_args=None):
    """One query: the hypotheses, their ground facts and not ``goal``; the solver, its answer."""
    query = hyps + [z3.Not(goal)]
    solver = z3.Solver()
    solver.set(timeout=max(1, int(timeout * 1000)))
    if ground_args is not None:
        solver.add(*ground(query, *ground_args))
    solver.add(*query)
    return solver, solver.check()


def prove(revision: str, n: int, timeout: float = 60.0, fold_cls=FD.Fold, max_block: int = M.MAX_BLOCK,
          dcp_values=M.DCP_VALUES) -> dict:
    """Is the fold's (S, H, err) the bounded model's (and the unitary block size, N = 1) for
    every input of ``n`` groups?
    {"status": ProofStatus, "seconds", "detail"}; ``timeout`` (seconds) bounds each lemma and the answer query; the direct query gets what is left."""
    t0 = time.monotonic()
    dcp_values = M.dcp_set(dcp_values)
    rev = R.REVISIONS[revision]
    enc = M.encoding(revision, n, dcp_values)
    x, r = enc.x, enc.r
    A = FD.Z3Alg(dcp_values)
    F = fold_cls(revision, A)
    c, gs = FD.config_of(x), FD.groups_of(x)
    s = F.fold(gs, c)
    d = F.decide(s, c)
    dom = M.domain(rev, x, max_block, dcp_values)
    base = dom + list(r.facts)
    stages = []  # (name, hypotheses, goal, instance): each lemma is proved on few facts
    if r.L is not None:
        lcms = [s.L] + [t for k, t, _, _ in A.apps if k == "lcm"]
        # the fold's gcd terms, and both hash units (the model's H0 is this If): err_pmu needs G3 at them
        gcds = [s.Ga, s.Gp, d.Gh, d.H0, r.G, z3.If(x.pmu_set, x.pmu, r.G)]
        gcds += [t for k, t, _, _ in A.apps if k == "gcd"]
        l3 = nary_facts(r.L, r.G, r.eff, r.hashing, lcms, [])
        g3 = nary_facts(r.L, r.G, r.eff, r.hashing, [], gcds)
        base += l3 + g3
        stages += [("lcm", dom + lemmas.lcm_facts(r.L, r.eff) + l3, r.L == s.L, None),
                   ("gcd", dom + lemmas.gcd_facts(r.G, r.eff, r.hashing) + g3, r.G == d.Gh, None)]
        if d.alignment is not None:
            a = z3.Int("eq_a")
            checked = z3.And([z3.Implies(F.tps_cond(g), D(g.tps, a)) for g in gs])
            stages.append(("tps", dom, z3.Implies(a >= 1, D(s.T, a) == checked), (a, d.alignment)))
    gargs = (r.eff, x.tps, [s.L, s.T], [d.alignment, z3.Int("eq_a")])
    answer = z3.And(d.S == r.S, d.H == r.H, d.err == r.err, d.unit == r.unit if n == 1 else True)
    proved, why = [], ""
    for name, hyps, goal, inst in stages:
        res = _solve(hyps, goal, timeout, gargs)[1]
        if res != z3.unsat:
            why = f"lemma {name}: {res}; "
            break
        proved.append(z3.substitute(goal, inst) if inst else goal)
    else:
        res = _solve(base + proved, answer, timeout)[1]
        if res == z3.unsat:
            # not vacuous: the hypotheses alone have a model (else some fact is false)
            vac = _solve(base + proved, z3.BoolVal(False), timeout)[1]
            status = ProofStatus.PROVED if vac == z3.sat else ProofStatus.UNKNOWN
            return {"status": status, "seconds": time.monotonic() - t0,
                    "detail": "" if vac == z3.sat else f"the hypotheses alone: {vac}"}
        why = f"answer from the lemmas: {res}; "
    left = max(0.001, timeout - (time.monotonic() - t0))
    solver, res = _solve(base, answer, left, gargs)  # the direct query, no lemma
    status, detail = ProofStatus.UNKNOWN, why + f"direct query: {res}"
    if res == z3.unsat:
        status = ProofStatus.PROVED
    elif res == z3.sat:
        # A model the partial gcd/lcm facts allow but exact arithmetic refutes is blocked (its
        # inputs excluded) and the search goes on: a real disagreement elsewhere is still found.
        for _ in range(SPURIOUS_RETRIES):
            m = solver.model()
            real, text = _replay(revision, enc, m, fold_cls)
            if real or time.monotonic() - t0 >= timeout:
                break
            solver.add(z3.Or([v != m.eval(v, model_completion=True) for v in enc.x.variables()]))
            solver.set(timeout=max(1, int(max(0.001, timeout - (time.monotonic() - t0)) * 1000)))
            if solver.check() != z3.sat:
                break
        status = ProofStatus.COUNTEREXAMPLE if real else ProofStatus.UNKNOWN
        detail = ("" if real else "spurious (the facts allow it, exact gcd/lcm do not): ") + text
    return {"status": status, "seconds": time.monotonic() - t0, "detail": detail}


def equivalence(revisions=None, max_n: int = 8, timeout: float = 60.0, fold_cls=FD.Fold) -> dict:
    """(revision, N) -> ProofStatus for every revision (default: all) and N in 1..max_n."""
    return {(rev, n): prove(rev, n, timeout, fold_cls)["status"]
            for rev in (revisions or list(R.REVISIONS)) for n in range(1, max_n + 1)}


def main(argv=None) -> int:
    """``python -m kvproof.spec.equivalence [MAX_N [REVISION...]]``: one line per (revision, N)
    with its status and wall seconds; exit 0 when every one is PROVED, 3 otherwise."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    max_n = int(args.pop(0)) if args and args[0].isdigit() else 8
    revs = args or list(R.REVISIONS)
    bad = [a for a in revs if a not in R.REVISIONS]
    if bad or max_n < 1:
        print(f"usage: python -m kvproof.spec.equivalence [MAX_N [REVISION...]] (bad: {bad or max_n})",
              file=sys.stderr)
        return 2
    ok = True
    for rev in revs:
        for n in range(1, max_n + 1):
            res = prove(rev, n)
            ok &= res["status"] == ProofStatus.PROVED
            print(f"{rev} N={n} {res['status']} {res['seconds']:.2f}s {res['detail'][:200]}".rstrip(), flush=True)
    return 0 if ok else 3


__all__ = ["check_nary", "equivalence", "main", "nary_facts", "prove"]

if __name__ == "__main__":
    raise SystemExit(main())
