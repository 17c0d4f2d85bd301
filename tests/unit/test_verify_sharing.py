"""What the proof run shares between obligations is shared by exact content, never by name.

kvproof.spec.induction memoises, per process, the term walks and the ground axiom
instances (keyed by Z3 AST ids: Z3 hash-conses terms, so one id is one content) and a
revision's hypotheses (per Context). The obligations a worker proves must be the very
formulas a fresh build gives, whatever it proved before: another revision's (whose
formulas differ), the same revision's, or nothing. The reachability labels computed in
the workers during the run (kvproof.verify.cli) are used only for the witness they were
computed for.
"""

from __future__ import annotations

import json

import z3
from kvproof.spec import induction as I
from kvproof.verify import cli
from kvproof.verify.runner import run_label

# a handful of each kind; the whole list per revision takes ~10 s fresh
IDS = ["base:gp_between", "step:g_greatest", "transfer:hybrid.group_multiple_of_hash[align]",
       "conclusion:coordinator.scheduler_multiple_of_hash[any]:engine"]


def _query(ctx: I.Context, oid: str) -> list:
    kind, _, rest = oid.partition(":")
    if kind in ("base", "step", "transfer"):
        hyps, goal = getattr(ctx, kind)(rest)
    else:
        key, _, premise = rest.rpartition(":")
        hyps, goal = ctx.conclusion(key, premise)
    return hyps + [z3.Not(goal)]


_FRESH: dict[tuple, list[str]] = {}


def _fresh(revision: str, oid: str) -> list[str]:
    """The obligation's full assertion list built with no memo at all (a new Context, memoise off)."""
    if (revision, oid) not in _FRESH:
        _FRESH[(revision, oid)] = _build_fresh(revision, oid)
    return _FRESH[(revision, oid)]


def _build_fresh(revision: str, oid: str) -> list[str]:
    ctx = I.Context(revision)
    q = _query(ctx, oid)
    return [a.sexpr() for a in I.ground_axioms(q, ctx.hubs(), memoise=False) + q]


def test_memoised_obligations_are_the_fresh_formulas_across_revisions():
    # 0.32 after 0.27 in one process: the memo holds 0.27's instances when 0.32 asks
    seen: dict[str, list[str]] = {}
    for rev in ("0.27", "0.32"):
        ctx = I.Context(rev)
        for oid in IDS + IDS:  # twice: the second time every instance comes from the memo
            q = _query(ctx, oid)
            got = [a.sexpr() for a in I.ground_axioms(q, ctx.hubs()) + q]
            assert got == _fresh(rev, oid), f"{rev} {oid}: the memoised formula differs from a fresh build"
            seen.setdefault(oid, []).append("\n".join(got))
    # the two revisions' formulas differ for these obligations, and neither took the other's
    for oid, texts in seen.items():
        assert texts[0] == texts[1] and texts[2] == texts[3], oid
        assert texts[0] != texts[2], f"{oid}: 0.27 and 0.32 gave one formula (the test would show nothing)"


def test_a_memoised_unknown_stays_unknown(monkeypatch):
    # the memo holds formula pieces, never answers: a solver that gives up (planted: z3 answers
    # unknown) is UNKNOWN with the memo cold and warm; the same obligation really solved is PROVED
    ctx = I.Context("0.31")
    with monkeypatch.context() as m:
        m.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
        for _ in range(2):
            r = I.prove(ctx, "step:gp_between", timeout=5)
            assert str(r["status"]) == "UNKNOWN", r
    assert str(I.prove(ctx, "step:gp_between", timeout=20)["status"]) == "PROVED"


def _args():
    return cli._parse(["--no-cache", "--no-drift", "--quiet"])


def test_a_worker_label_is_used_only_for_its_own_witness(monkeypatch):
    args = _args()
    args.cache = None
    layout = {"groups": [{"kind": "full_attention", "block_size": 1}, {"kind": "mamba", "block_size": 2}],
              "cache": {"block_size": 1}}
    entry = {"revision": "0.27", "property": "hybrid.group_multiple_of_hash[align]", "verdict": cli.CEX,
             "witness": {"layout": layout, "premise": "engine", "engine_status": cli.CEX, "n": 2}}
    task = cli.label_task(entry, args)
    real = run_label(task)
    assert real["status"] == "LABELLED" and real["label"] in ("REACHABLE", "FREE", "UNREACHABLE")
    planted = dict(real, label="UNREACHABLE" if real["label"] != "UNREACHABLE" else "FREE", reason="planted")
    monkeypatch.setattr(cli.report, "summarise", lambda result: [dict(entry)])
    # the worker's label for this very witness is taken as it is (here: planted, to see it used)
    args.labels_done = {("0.27", entry["property"]): (task, planted)}
    assert cli.label({"rows": []}, args)[0]["reason"] == "planted"
    # a label computed for another witness is not: the parent labels this one itself
    other = dict(task, layout=dict(layout, cache={"block_size": 2}))
    args.labels_done = {("0.27", entry["property"]): (other, planted)}
    got = cli.label({"rows": []}, args)[0]
    assert got["reason"] == real["reason"] and got["reachability"].name == real["label"]
    json.dumps(real)  # what a worker sends back and the cache stores is plain JSON


def test_each_obligation_on_its_kinds_solver_is_its_own_query_exactly():
    # an obligation is checked on one solver per kind that holds the kind's common part, with the
    # rest of the query pushed on top: what it holds must be part of every query of its kind (an
    # extra hypothesis could prove a false obligation), and the answer must be a fresh solver's
    for rev in ("0.27", "0.32"):
        ctx = I.Context(rev)
        for oid in IDS + ["step:positive", "base:l_least"]:
            kind = oid.partition(":")[0]
            q = _query(ctx, oid)
            whole = I.ground_axioms(q, ctx.hubs()) + q
            solver, held = ctx.solver_for(kind)
            assert held <= {f.get_id() for f in whole}, f"{rev} {oid}: the shared solver holds more than the query"
            assert {f.get_id() for f in solver.assertions()} == held
            fresh = z3.Solver()
            fresh.add(*whole)
            got = I.prove(ctx, oid, timeout=20)
            res = fresh.check()
            assert str(got["status"]) == ("PROVED" if res == z3.unsat else "COUNTEREXAMPLE"), (rev, oid, res)
            assert solver.num_scopes() == 0 and {f.get_id() for f in solver.assertions()} == held, oid


def test_a_bounded_query_leaves_the_shared_solver_as_it_found_it():
    # the bounded queries of one encoding share a solver holding the domain and lemma facts; each
    # pushes its premise and violation (and refinements) and pops them: nothing leaks into the next
    from kvproof.spec import model as M
    from kvproof.spec.properties import BY_KEY
    from kvproof.spec.query import Query, _base, _shared
    a = Query("0.27", BY_KEY["hybrid.group_multiple_of_hash[align]"], 2, "engine")
    b = Query("0.27", BY_KEY["coordinator.scheduler_multiple_of_hash[any]"], 2, "free")
    shared = _shared(a.enc, a.max_block)
    assert a.solver is shared["solver"] and b.solver is not shared["solver"]  # held: b gets its own
    base = len(_base(a.enc, shared))
    assert len(b.solver.assertions()) == len(a.solver.assertions()) - len(shared["engine"])
    a.release()
    b.release()
    assert shared["holder"] is None and shared["solver"].num_scopes() == 0
    assert len(shared["solver"].assertions()) == base
    first = [Query("0.27", BY_KEY[k], 2, p).run(30).status for k, p in
             (("hybrid.group_multiple_of_hash[align]", "engine"), ("coordinator.scheduler_multiple_of_hash[any]", "free"))]
    assert shared["solver"].num_scopes() == 0 and len(shared["solver"].assertions()) == base
    M.clear_encodings()  # a new encoding: a new solver that held nothing before
    again = Query("0.27", BY_KEY["coordinator.scheduler_multiple_of_hash[any]"], 2, "free").run(30).status
    assert [str(s) for s in first] == ["COUNTEREXAMPLE", "PROVED"] and str(again) == "PROVED"
