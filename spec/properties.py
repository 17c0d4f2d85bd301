"""The contract catalogue as Z3 properties over the model.

Each property carries the id of a contract in :mod:`kvproof.judging.contracts` (same
ids, same statements), a *scenario* that narrows the premise (``align``: no
Mamba group or ``mamba_cache_mode == "align"``; ``any``: every mode), and
builds two formulas over the model's inputs and result: the premise (when the
consumer runs) and the violation. A query asks Z3 for inputs satisfying
domain, premise and violation: UNSAT is a proof, SAT a counterexample
(replayed concretely before it is believed).

Group block sizes are the revision's effective sizes, i.e. what
``resolve_dcp_kv_block_size`` / ``SingleTypeKVCacheManager.block_size``
give (attention specs times dcp up to 0.29; ``dcp_sharded`` specs from 0.31).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import z3

from kvproof.judging import contracts as C
from kvproof.spec.lemmas import divides as dv
from kvproof.spec.model import ALIGN, ERR_NONE, Inputs, Resolved

ALIGN_SCENARIO = "align"
ANY_SCENARIO = "any"


@dataclass(frozen=True)
class Property:
    contract: str
    scenario: str
    min_groups: int
    max_groups: int | None
    premise_text: str
    build: Callable[[Inputs, Resolved], tuple]  # -> (premise, violation)

    @property
    def key(self) -> str:
        return f"{self.contract}[{self.scenario}]"

    @property
    def kind(self) -> str:
        return C.BY_ID[self.contract].kind

    @property
    def protects(self) -> str:
        return C.BY_ID[self.contract].protects

    @property
    def statement(self) -> str:
        return C.BY_ID[self.contract].statement

    def applies(self, n: int) -> bool:
        return n >= self.min_groups and (self.max_groups is None or n <= self.max_groups)

    def formulas(self, x: Inputs, r: Resolved) -> tuple:
        premise, violation = self.build(x, r)
        if self.scenario == ALIGN_SCENARIO:
            premise = z3.And(premise, z3.Or(z3.Not(z3.Or(x.mamba)), x.mode == ALIGN))
        return premise, violation


def _any(xs):
    return z3.Or(xs) if xs else z3.BoolVal(False)


def _returned(r):
    return r.err == ERR_NONE


def _sched_hash(x, r):
    return _returned(r), z3.Not(dv(r.H, r.S))


def _sched_group(x, r):
    return _returned(r), _any([z3.Not(dv(e, r.S)) for e in r.eff])


def _hybrid(x, r):
    return z3.And(x.caching, _returned(r)), _any([z3.And(p, z3.Not(dv(r.H, e))) for p, e in zip(x.pc, r.eff)])


def _unitary(x, r):
    return z3.And(x.caching, _returned(r)), r.H != r.unit


def _cacheable_not_multiple(x, r, h):
    # Only prefix-cacheable groups get block hashes (0.29+; before, all are).
    return _any([z3.And(p, z3.Not(dv(h, e))) for p, e in zip(x.pc, r.eff)])


def _block_pool(x, r):
    return z3.And(z3.Or(x.caching, x.connector), _returned(r)), _cacheable_not_multiple(x, r, r.H)


def _connector(x, r):
    return z3.And(x.connector, _returned(r)), z3.Or(z3.Not(dv(r.H, r.S)), _cacheable_not_multiple(x, r, r.H))


def _pmu(x, r):
    # Only when the resolver hashes with the requested unit: the fallbacks
    # ignore prefix_match_unit by design.
    premise = z3.And(x.pmu_set, _returned(r), z3.Or(x.caching, x.connector), z3.Not(r.fallback))
    return premise, _cacheable_not_multiple(x, r, x.pmu)


def _hash_1(x, r):
    return z3.And(z3.Or(x.caching, x.connector), _returned(r)), r.H == 1


def _within_len(x, r):
    return _returned(r), r.S > x.max_model_len


PROPERTIES: tuple[Property, ...] = (
    Property("coordinator.scheduler_multiple_of_hash", ANY_SCENARIO, 1, None, "resolver returned", _sched_hash),
    Property("coordinator.scheduler_multiple_of_group", ANY_SCENARIO, 1, None, "resolver returned", _sched_group),
    Property("hybrid.group_multiple_of_hash", ALIGN_SCENARIO, 2, None,
             "prefix caching on, >1 group, Mamba groups in align mode", _hybrid),
    Property("hybrid.group_multiple_of_hash", ANY_SCENARIO, 2, None, "prefix caching on, >1 group", _hybrid),
    Property("unitary.hash_equals_block_size", ANY_SCENARIO, 1, 1, "prefix caching on, 1 group", _unitary),
    Property("block_pool.target_multiple_of_hash", ALIGN_SCENARIO, 1, None,
             "block hashing active, Mamba groups in align mode", _block_pool),
    Property("block_pool.target_multiple_of_hash", ANY_SCENARIO, 1, None, "block hashing active", _block_pool),
    Property("connector.block_multiple_of_hash", ALIGN_SCENARIO, 1, None,
             "KV connector on, Mamba groups in align mode", _connector),
    Property("connector.block_multiple_of_hash", ANY_SCENARIO, 1, None, "KV connector on", _connector),
    Property("resolver.rejects_bad_prefix_match_unit", ALIGN_SCENARIO, 2, None,
             "prefix_match_unit set, >1 group, Mamba groups in align mode", _pmu),
    Property("resolver.rejects_bad_prefix_match_unit", ANY_SCENARIO, 2, None,
             "prefix_match_unit set, >1 group", _pmu),
    Property("efficiency.hash_block_size_1", ANY_SCENARIO, 1, None, "block hashing active", _hash_1),
    Property("efficiency.scheduler_within_max_model_len", ANY_SCENARIO, 2, None, ">1 group", _within_len),
)

BY_KEY = {p.key: p for p in PROPERTIES}


# --- the same properties over the fold's summary (kvproof.spec.fold) -------------------------------
# "Every group" becomes the summary: "some prefix-cacheable group's size is not a multiple of h"
# is "h does not divide Gp" (Gp: gcd of those sizes), "some group's size does not divide s" is
# "L does not divide s" (L: their lcm). kvproof.spec.induction proves each form implied by the
# bounded form above (transfer) and tests/unit/test_induction.py proves them equal for N <= 8.

def _s_returned(A, d):
    return d.err == ERR_NONE


def _s_not_multiple(A, s, h):
    return A.And(s.anyp, A.Not(A.divides(h, s.Gp)))


_SUMMARY_FORMS: dict = {
    _sched_hash: lambda A, s, c, d: (_s_returned(A, d), A.Not(A.divides(d.H, d.S))),
    _sched_group: lambda A, s, c, d: (_s_returned(A, d), A.Not(A.divides(s.L, d.S))),
    _hybrid: lambda A, s, c, d: (A.And(c.caching, _s_returned(A, d)), _s_not_multiple(A, s, d.H)),
    _unitary: lambda A, s, c, d: (A.And(c.caching, _s_returned(A, d)), d.H != d.unit),
    _block_pool: lambda A, s, c, d: (A.And(A.Or(c.caching, c.connector), _s_returned(A, d)),
                                     _s_not_multiple(A, s, d.H)),
    _connector: lambda A, s, c, d: (A.And(c.connector, _s_returned(A, d)),
                                    A.Or(A.Not(A.divides(d.H, d.S)), _s_not_multiple(A, s, d.H))),
    _pmu: lambda A, s, c, d: (A.And(c.pmu_set, _s_returned(A, d), A.Or(c.caching, c.connector), A.Not(d.fallback)),
                              _s_not_multiple(A, s, c.pmu)),
    _hash_1: lambda A, s, c, d: (A.And(A.Or(c.caching, c.connector), _s_returned(A, d)), d.H == 1),
    _within_len: lambda A, s, c, d: (_s_returned(A, d), d.S > c.max_model_len),
}


def summary_formulas(prop: Property, A, s, c, d, core: bool = False) -> tuple:
    """(premise, violation) of ``prop`` over a fold summary ``s``, config ``c`` and decision ``d``
    (kvproof.spec.fold), in algebra ``A`` (Z3 terms or Python values). The group-count bounds
    and the scenario are read off the summary (``s.one``; ``s.anym``); ``core`` leaves them out."""
    premise, violation = _SUMMARY_FORMS[prop.build](A, s, c, d)
    if core:
        return premise, violation
    if prop.min_groups >= 2:
        premise = A.And(premise, A.Not(s.one))
    if prop.max_groups == 1:
        premise = A.And(premise, s.one)
    if prop.scenario == ALIGN_SCENARIO:
        premise = A.And(premise, A.Or(A.Not(s.anym), c.mode == ALIGN))
    return premise, violation
