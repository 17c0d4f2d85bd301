"""gcd and lcm characterised by divisibility facts, and the checks of those facts.

Why: Z3 has no gcd/lcm, and the exact Euclid chain (``gcd(a, b) =
gcd(b, a % b)`` unrolled) is a nonlinear tower that times out at every group
count. The model instead introduces a fresh integer ``L`` for
``lcm(x_1..x_n)`` and ``G`` for ``gcd`` of the *member* x_i (the
prefix-cacheable groups, or all of them), and asserts only facts that are
true of the real functions:

  L1  L >= 1, and x_i | L and x_i <= L for every i            (L is a common multiple)
  L2  if x_j is a multiple of every x_i, then L == x_j         (lcm is the least one)
  G1  G >= 1, and G | x_i and G <= x_i for every member i      (G is a common divisor)
  G2  if member x_j divides every member x_i, then G == x_j    (gcd is the greatest one)
  LG  G | L                                                    (G | x_k | L for a member k)
  P   point instances ``x == v -> L == lcm(v)`` (and for G), added on
      demand (CEGAR, below).

Divisibility itself is the uninterpreted predicate ``D(a, b)`` ("a | b"), so
a query is linear integer arithmetic plus booleans and uninterpreted
functions, never ``%`` with a variable divisor (nonlinear: Z3 answers
``unknown`` on the resolver's own ``x % h`` at N=2). ``D`` gets the true
facts D1-D4 of ``divisibility_axioms`` instantiated on the model's terms,
plus ground truths ``D(3, 4) == False`` at the points a spurious
counterexample used (``point_divides``).

Soundness of a proof: every fact holds for the true (gcd, lcm), so the true
resolver behaviour is one of the behaviours the solver explores; UNSAT over
the over-approximation is UNSAT for the real functions. A counterexample may
be spurious (the solver may pick a common multiple that is not the least);
every counterexample is therefore replayed through the concrete evaluation
(exact gcd/lcm) and, when spurious, the exact value at that point is added as
a point instance (``x == v -> L == lcm(v)``, also a true fact) and the query
re-solved. Concrete evaluation asserts nothing: it substitutes the exact
values and evaluates every fact above to True, so a wrong lemma would fail
every conformance run (``check_instance``).

How the facts are checked (``check_all``, run by the unit tests; the verify
report lists ``LEMMAS`` with how each was checked): exhaustively for n <= 3
values in 1..24 and every membership mask (n = 4 on 1..12), and by Z3 for
the lemmas stated over unbounded integers (D2-D4: transitivity of
divisibility behind LG, ``a | b and b | c -> a | c`` for positive a, b, c).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

import z3


D = z3.Function("divides", z3.IntSort(), z3.IntSort(), z3.BoolSort())
"""``D(a, b)``: a divides b. Uninterpreted while proving (so every query is
linear arithmetic plus booleans); replaced by ``b % a == 0`` when the model
is evaluated on concrete inputs (``arithmetic``)."""


def divides(d, x):
    """``d | x`` as the uninterpreted atom (Z3 terms) or plain truth (ints)."""
    if isinstance(d, int) and isinstance(x, int):
        return x % d == 0
    return D(d, x)


def arithmetic(term):
    """``term`` with every ``D(a, b)`` replaced by ``b % a == 0``."""
    body = (z3.Var(1, z3.IntSort()) % z3.Var(0, z3.IntSort())) == 0
    return z3.substitute_funs(term, (D, body))


def divisibility_axioms(terms: Sequence, positive: Sequence | None = None,
                        chains: Sequence[tuple[Sequence, Sequence, Sequence]] = (),
                        memo: dict | None = None) -> list:
    """True facts about divisibility of positive integers, instantiated on ``terms``.

      D1  a | a                                   (reflexive)
      D2  a | b and b | c -> a | c                (transitive; the triples in ``chains``)
      D3  a | b -> a <= b                         (b >= 1)
      D4  a == 1 -> a | b
    ``positive[i]`` (default True) guards terms that may be 0 (an unset pmu).
    ``chains`` lists (A, B, C) term sets; D2 is instantiated for a in A, b in
    B, c in C (the model asks for divisor -> group size -> lcm chains only;
    fewer instances keep satisfiable queries fast, and a missing instance can
    only make a query weaker, never unsound).
    ``memo`` (a dict the caller keeps across calls) reuses each instance built before for the
    same terms and guards (keyed by Z3 AST ids: hash-consed, so the same content); the list
    returned is the one a call without it returns.
    """
    terms = list(terms)
    pos = list(positive) if positive is not None else [z3.BoolVal(True)] * len(terms)
    guard = {id(t): p for t, p in zip(terms, pos)}
    atoms: dict[tuple[int, int], Any] = {}
    keep = memo.setdefault("terms", []) if memo is not None else None  # keyed ASTs stay alive: no id reuse
    tid = [t.get_id() for t in terms]  # one C call per term, not one per key
    pid = [p.get_id() for p in pos]

    def d(a, b):  # one D(a, b) term per pair: building z3 terms in Python dominates large instances
        k = (id(a), id(b))
        if k not in atoms:
            atoms[k] = _app2(D, a, b)
        return atoms[k]

    def cached(k, xs, build):
        """``build()``, or the instance built before for the same AST ids ``k`` (those of ``xs``)."""
        if memo is None:
            return build()
        got = memo.get(k)
        if got is None:
            keep.extend(xs)
            got = memo[k] = build()
        return got

    out = []
    for a, pa, ia, ipa in zip(terms, pos, tid, pid):
        out.append(cached((ipa, ia), (pa, a), lambda a=a, pa=pa: _implies(pa, d(a, a))))
        one = []
        for b, pb, ib, ipb in zip(terms, pos, tid, pid):
            if a is b:
                continue

            def pair(a=a, b=b, pa=pa, pb=pb, one=one):
                if not one:
                    one.append(a == 1)
                return _implies(_and(pa, pb, d(a, b)), _le(a, b)), _implies(_and(pb, one[0]), d(a, b))
            out.extend(cached((ipa, ia, ipb, ib), (pa, a, pb, b), pair))
    t = z3.BoolVal(True)
    it = t.get_id()
    ids = {id(x): i for x, i in zip(terms + pos, tid + pid)}
    gid = {id(x): ids[id(p)] for x, p in zip(terms, pos)}  # a term's guard's AST id

    def ast_id(x):
        return ids[id(x)] if id(x) in ids else x.get_id()
    for A, B, C in chains:
        Bi = [(b, ast_id(b), guard.get(id(b), t), gid.get(id(b), it)) for b in B]
        Ci = [(c, ast_id(c), guard.get(id(c), t), gid.get(id(c), it)) for c in C]
        for a in A:
            ga, ia, iga = guard.get(id(a), t), ast_id(a), gid.get(id(a), it)
            for b, ib, gb, igb in Bi:
                if a is b:
                    continue
                ab = []
                for c, ic, gc, igc in Ci:
                    if b is c or a is c:
                        continue

                    def chain(a=a, b=b, c=c, gc=gc, ga=ga, gb=gb, ab=ab):
                        if not ab:
                            ab.append(_and(ga, gb, d(a, b)))
                        return _implies(_and(ab[0], gc, d(b, c)), d(a, c))
                    # keys of 2, 4 and 7 ASTs: the three kinds of instance never share one
                    out.append(cached((iga, ia, igb, ib, igc, ic, it), (ga, a, gb, b, gc, c, t), chain))
    return out


def _app2(f, a, b):
    """``f(a, b)`` for a declared function of two Int terms, without z3py's coercion."""
    arr = (z3.Ast * 2)(a.as_ast(), b.as_ast())
    return z3.BoolRef(z3.Z3_mk_app(a.ctx_ref(), f.ast, 2, arr), a.ctx)


def _le(a, b):
    """``a <= b`` of two Int terms without z3py's coercion (the same term)."""
    return z3.BoolRef(z3.Z3_mk_le(a.ctx_ref(), a.as_ast(), b.as_ast()), a.ctx)


def _implies(a, b):
    """``z3.Implies`` without z3py's per-call coercion (the same term, several times faster)."""
    return z3.BoolRef(z3.Z3_mk_implies(a.ctx_ref(), a.as_ast(), b.as_ast()), a.ctx)


def _and(*xs):
    """``z3.And`` of Bool terms without z3py's coercion (flat: And(And(a, b), c) is And(a, b, c))."""
    ctx = xs[0].ctx
    ref = ctx.ref()
    args = []
    for x in xs:  # raw ASTs: the children live while x does (z3.is_and/children wrap each one)
        a = x.as_ast()
        if z3.Z3_is_app(ref, a) and z3.Z3_get_decl_kind(ref, z3.Z3_get_app_decl(ref, a)) == z3.Z3_OP_AND:
            args.extend(z3.Z3_get_app_arg(ref, a, i) for i in range(z3.Z3_get_app_num_args(ref, a)))
        else:
            args.append(a)
    arr = (z3.Ast * len(args))(*args)
    return z3.BoolRef(z3.Z3_mk_and(ref, len(args), arr), ctx)


def assert_all(solver, exprs) -> None:
    """``solver.add(*exprs)`` without z3py's per-term cast (a sort check through the C API per
    term: most of a large query's set-up). The same assertions in the same order; anything that
    is not already a Bool term goes through ``add`` as before."""
    ctx, native = solver.ctx.ref(), solver.solver
    for e in exprs:
        if isinstance(e, z3.BoolRef):
            z3.Z3_solver_assert(ctx, native, e.as_ast())
        else:
            solver.add(e)


def point_divides(pairs: Sequence[tuple[int, int]]) -> list:
    """Ground truth of D at concrete points (CEGAR refinement; true by computation)."""
    return [D(z3.IntVal(a), z3.IntVal(b)) == (b % a == 0) for a, b in pairs if a >= 1]


def lcm_facts(L, xs: Sequence) -> list:
    facts = [L >= 1]
    for x in xs:
        facts += [divides(x, L), x <= L]
    for xj in xs:  # L2
        facts.append(z3.Implies(z3.And([divides(xi, xj) for xi in xs]), L == xj))
    return facts


def gcd_facts(G, xs: Sequence, members: Sequence) -> list:
    facts = [G >= 1]
    for x, m in zip(xs, members):
        facts += [z3.Implies(m, divides(G, x)), z3.Implies(m, G <= x)]
    for xj, mj in zip(xs, members):  # G2
        facts.append(z3.Implies(z3.And(mj, *[z3.Implies(mi, divides(xj, xi)) for xi, mi in zip(xs, members)]),
                                G == xj))
    return facts


def link_facts(G, L) -> list:
    return [divides(G, L)]  # LG (needs at least one member; members are never empty)


def point_lcm(L, xs: Sequence, values: Sequence[int]):
    return z3.Implies(z3.And([x == v for x, v in zip(xs, values)]), L == math.lcm(*values))


def point_gcd(G, xs: Sequence, members: Sequence, values: Sequence[int], mask: Sequence[bool]):
    chosen = [v for v, m in zip(values, mask) if m]
    cond = z3.And([x == v for x, v in zip(xs, values)] + [m if b else z3.Not(m) for m, b in zip(members, mask)])
    return z3.Implies(cond, G == math.gcd(*chosen))


# --- checks -----------------------------------------------------------------

def _holds(facts: list) -> bool:
    return all(z3.is_true(z3.simplify(arithmetic(f))) for f in facts)


def check_instance(values: Sequence[int], mask: Sequence[bool]) -> bool:
    """All facts, evaluated at exact gcd/lcm for one concrete vector."""
    chosen = [v for v, m in zip(values, mask) if m]
    L = z3.IntVal(math.lcm(*values))
    G = z3.IntVal(math.gcd(*chosen))
    xs = [z3.IntVal(v) for v in values]
    ms = [z3.BoolVal(m) for m in mask]
    return _holds(lcm_facts(L, xs) + gcd_facts(G, xs, ms) + link_facts(G, L))


def _check_instance_py(values: Sequence[int], mask: Sequence[bool]) -> bool:
    """The same facts in plain Python (fast, for the exhaustive sweep)."""
    chosen = [v for v, m in zip(values, mask) if m]
    L, G = math.lcm(*values), math.gcd(*chosen)
    if L < 1 or G < 1 or L % G:
        return False
    for x in values:
        if L % x or x > L:
            return False
    for xj in values:
        if all(xj % xi == 0 for xi in values) and L != xj:
            return False
    for x, m in zip(values, mask):
        if m and (x % G or G > x):
            return False
    for xj, mj in zip(values, mask):
        if mj and all(not mi or xi % xj == 0 for xi, mi in zip(values, mask)) and G != xj:
            return False
    return True


def check_exhaustive(max_n: int = 3, max_value: int = 24, n4_max_value: int = 12) -> int:
    """Check every fact on a bounded range; returns the number of cases, raises on failure."""
    cases = 0
    for n in range(1, max_n + 2):
        hi = max_value if n <= max_n else n4_max_value
        masks = [m for m in itertools.product((False, True), repeat=n) if any(m)]
        for values in itertools.product(range(1, hi + 1), repeat=n):
            for mask in masks:
                cases += 1
                if not _check_instance_py(values, mask):
                    raise AssertionError(f"lemma fails at values={values} members={mask}")
    # the Z3 form of the facts agrees with the Python form on a sample
    for values in itertools.product((1, 2, 3, 4, 6, 12), repeat=2):
        for mask in ((True, True), (True, False), (False, True)):
            if not check_instance(values, mask):
                raise AssertionError(f"Z3 lemma form fails at values={values} members={mask}")
    return cases


def check_transitivity(timeout_ms: int = 10000) -> str:
    """Prove D2-D4 over unbounded integers with Z3.

    D2 ``a | b and b | c -> a | c`` for positive integers.

    Z3 does not find it in one query (nonlinear, ``unknown``), so it is two
    proofs that compose: (i) b = a*k1 and c = b*k2 give c = a*(k1*k2)
    (polynomial identity); (ii) (a*m) mod a = 0 for every a >= 1 and integer m.
    """
    a, b, c, k1, k2, m = z3.Ints("a b c k1 k2 m")
    steps = [[b == a * k1, c == b * k2, c != a * (k1 * k2)],  # D2 (i)
             [a >= 1, (a * m) % a != 0],  # D2 (ii)
             [a >= 1, b >= 1, b == a * k1, a > b],  # D3: a | b, b >= 1 -> a <= b
             [b % 1 != 0]]  # D4
    for cons in steps:
        s = z3.Solver()
        s.set(timeout=timeout_ms)
        s.add(*cons)
        r = s.check()
        if r != z3.unsat:
            return "refuted" if r == z3.sat else "unknown"
    return "proved"


LEMMAS = (
    ("D1", "a | a", "Z3 (trivial: a mod a = 0) and exhaustive"),
    ("D2", "a | b and b | c -> a | c", "Z3 over unbounded integers (two composing proofs)"),
    ("D3", "a | b and b >= 1 -> a <= b", "Z3 over unbounded integers"),
    ("D4", "1 | b", "Z3"),
    ("D5", "a | a*k (a block size divides itself times dcp)", "Z3 (same query as D2 (ii))"),
    ("L1", "lcm is a common multiple: x_i | L, x_i <= L", "exhaustive n<=3 on 1..24, n=4 on 1..12"),
    ("L2", "if x_j is a multiple of every x_i then L == x_j", "exhaustive n<=3 on 1..24, n=4 on 1..12"),
    ("G1", "gcd of members divides each member, G <= member", "exhaustive, every membership mask"),
    ("G2", "if member x_j divides every member then G == x_j", "exhaustive, every membership mask"),
    ("LG", "G | L (gcd of a non-empty subset divides the lcm)", "exhaustive + Z3: a|b, b|c -> a|c"),
    ("P", "point instances x == v -> L == lcm(v), G == gcd(v)", "true by computation (math.gcd/lcm)"),
    ("B1", "gcd(a, b) >= 1 divides a and b, gcd(a, b) <= a, b", "exhaustive a, b in 1..48"),
    ("B2", "a common divisor of a and b divides gcd(a, b)", "exhaustive a, b, d in 1..48 (Bezout)"),
    ("B3", "lcm(a, b) is a common multiple of a and b, >= both", "exhaustive a, b in 1..48"),
    ("B4", "lcm(a, b) divides every common multiple of a and b", "exhaustive a, b, m in 1..48"),
    ("F", "gcd/lcm of a list is the binary fold (associativity)", "exhaustive a, b in 1..48, c in 1..12"),
)


# --- binary gcd/lcm (the fold of kvproof.spec.fold and its induction) --------------------------

GCD2 = z3.Function("gcd2", z3.IntSort(), z3.IntSort(), z3.IntSort())
"""``gcd(a, b)`` of two integers, uninterpreted while proving (facts: ``gcd2_facts``)."""
LCM2 = z3.Function("lcm2", z3.IntSort(), z3.IntSort(), z3.IntSort())
"""``lcm(a, b)`` of two integers, uninterpreted while proving (facts: ``lcm2_facts``)."""


def _memo_list(memo: dict | None, kind: str, t, xs: Sequence, build) -> list:
    """``[build(x) for x in xs]``, each instance reused from ``memo`` (keyed by AST ids)."""
    if memo is None:
        return [build(x) for x in xs]
    keep = memo.setdefault("terms", [])
    out = []
    for x in xs:
        k = (kind, t.get_id(), x.get_id())
        got = memo.get(k)
        if got is None:
            keep.extend((t, x))
            got = memo[k] = build(x)
        out.append(got)
    return out


def gcd2_facts(t, a, b, divisors: Sequence = (), memo: dict | None = None) -> list:
    """B1 (t = gcd(a, b), a, b >= 1): t >= 1, t | a, t | b, t <= a, t <= b;
    B2: every common divisor d of a and b divides t (instantiated on ``divisors``).
    ``memo``: as in :func:`divisibility_axioms` (t fixes a and b)."""
    pos = z3.And(a >= 1, b >= 1)
    out = _memo_list(memo, "gcd2", t, [t], lambda _: z3.Implies(pos, z3.And(t >= 1, t <= a, t <= b, D(t, a), D(t, b))))
    out += _memo_list(memo, "gcd2-d", t, [d for d in divisors if d is not t],
                      lambda d: z3.Implies(z3.And(pos, d >= 1, D(d, a), D(d, b)), D(d, t)))
    return out


def lcm2_facts(t, a, b, multiples: Sequence = (), memo: dict | None = None) -> list:
    """B3 (t = lcm(a, b), a, b >= 1): t >= 1, a | t, b | t, a <= t, b <= t;
    B4: t divides every common multiple m of a and b (instantiated on ``multiples``).
    ``memo``: as in :func:`divisibility_axioms` (t fixes a and b)."""
    pos = z3.And(a >= 1, b >= 1)
    out = _memo_list(memo, "lcm2", t, [t], lambda _: z3.Implies(pos, z3.And(t >= 1, t >= a, t >= b, D(a, t), D(b, t))))
    out += _memo_list(memo, "lcm2-m", t, [m for m in multiples if m is not t],
                      lambda m: z3.Implies(z3.And(pos, m >= 1, D(a, m), D(b, m)), D(t, m)))
    return out


def check_binary(max_value: int = 48) -> int:
    """B1-B4 and the fold identities F1/F2 on every a, b, c/d/m in 1..max_value; raises on failure."""
    cases = 0
    r = range(1, max_value + 1)
    for a in r:
        for b in r:
            g, lc = math.gcd(a, b), math.lcm(a, b)
            if not (g >= 1 and a % g == 0 and b % g == 0 and g <= min(a, b)):
                raise AssertionError(f"B1 fails at {a}, {b}")
            if not (lc >= max(a, b) and lc % a == 0 and lc % b == 0):
                raise AssertionError(f"B3 fails at {a}, {b}")
            for d in r:
                cases += 1
                if a % d == 0 and b % d == 0 and g % d:
                    raise AssertionError(f"B2 fails at {a}, {b}, {d}")
                if d % a == 0 and d % b == 0 and d % lc:
                    raise AssertionError(f"B4 fails at {a}, {b}, {d}")
            for c in range(1, 13):  # F1/F2: the n-ary gcd/lcm is the binary fold
                if math.gcd(a, b, c) != math.gcd(math.gcd(a, b), c) or math.lcm(a, b, c) != math.lcm(lc, c):
                    raise AssertionError(f"fold identity fails at {a}, {b}, {c}")
    return cases


def check_all() -> dict:
    cases = check_exhaustive()
    trans = check_transitivity()
    if trans != "proved":
        raise AssertionError(f"divisibility facts D2-D4: {trans}")
    binary = check_binary()
    return {"exhaustive_cases": cases, "transitivity": trans, "binary_cases": binary,
            "lemmas": [{"id": i, "statement": s, "checked": how} for i, s, how in LEMMAS]}
