"""CrossHair contracts on the model's concrete evaluation: ``crosshair check tests/crosshair_model.py``.

Each function builds a Layout from small bounded integers (the revision is
one of them: an index into the revision table), evaluates the model
concretely (``kvproof.spec.model.evaluate``) and returns the Outcome; the
``post:`` conditions are contracts the resolver must keep on every revision.
tests/unit/test_spec_crosshair.py runs the check and also shows that
CrossHair does report a violated contract through this path (the 0.27 seed
bug), so a silent run is not a vacuous one.

Why the inputs are realized: CrossHair cannot run the model on symbolic
integers. ``z3.IntVal`` formats its argument with ``str()``, which on a
CrossHair symbolic int is a symbolic string ("proxy intolerance"), and
CrossHair then drops the path and reports nothing at all for the function:
a silent "no counterexample". So each harness realizes its arguments
(CrossHair forks one path per concrete value) and evaluates the model with
CrossHair's tracing off (milliseconds per call instead of about a second).
CrossHair is a bounded enumerator of these contracts, not a prover; the
proofs are verify's Z3 queries over the same model.
"""

from __future__ import annotations

from crosshair import NoTracing, deep_realize

from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof import facts
from kvproof.spec.model import DCP_VALUES, evaluate
from kvproof.revisions import REVISIONS

REVS = tuple(REVISIONS)
MAX = 48  # block sizes range over 1..MAX


def model(rev_i: int, kinds: tuple, sizes: tuple, cache_bs: int, dcp_i: int, caching: bool = True,
          connector: bool = False, pmu: int = 0, mode_i: int = 0) -> Outcome:
    """The model's Outcome for a Layout given as small integers (realized, then evaluated untraced).

    ``kinds``: indices into ``facts.KINDS``; ``dcp_i``: into ``DCP_VALUES``;
    ``mode_i``: into the revision's Mamba modes; ``pmu`` 0 means unset.
    """
    args = deep_realize((rev_i, kinds, sizes, cache_bs, dcp_i, caching, connector, pmu, mode_i))
    with NoTracing():
        rev_i, kinds, sizes, cache_bs, dcp_i, caching, connector, pmu, mode_i = args
        rev = REVS[rev_i]
        layout = Layout.from_dict({
            "groups": [{"kind": facts.KINDS[k], "block_size": s} for k, s in zip(kinds, sizes)],
            "cache": {"block_size": cache_bs, "enable_prefix_caching": caching, "prefix_match_unit": pmu or None,
                      "mamba_cache_mode": facts.MAMBA_MODES[rev][mode_i % len(facts.MAMBA_MODES[rev])]},
            "kv_connector": facts.DEFAULT_CONNECTOR if connector else None,
            "dcp": DCP_VALUES[dcp_i]})
        return evaluate(layout, rev)


def returned(o: Outcome) -> bool:
    return o.expressible and o.resolver_error is None


def coordinator_ok(o: Outcome, hashing: bool) -> bool:
    """KVCacheCoordinator's assertions (scheduler a multiple of every group and of the hash),
    and the hash is the scheduler block size when block hashing is off."""
    s, h = o.scheduler_block_size, o.hash_block_size
    return all(s % g == 0 for g in o.group_block_sizes) and s % h == 0 and (hashing or h == s)


def two_groups(rev_i: int, k1: int, k2: int, a: int, b: int, cache_bs: int, dcp_i: int, caching: bool,
               connector: bool, mode_i: int) -> Outcome:
    """Coordinator contracts, every mode, free cache block size (one condition: CrossHair
    spends the per-condition budget on each ``post:`` line).

    pre: 0 <= rev_i < len(REVS)
    pre: 0 <= k1 < len(facts.KINDS) and 0 <= k2 < len(facts.KINDS)
    pre: 1 <= a <= MAX and 1 <= b <= MAX and 1 <= cache_bs <= MAX
    pre: 0 <= dcp_i < len(DCP_VALUES)
    pre: 0 <= mode_i < 3
    post: not returned(__return__) or coordinator_ok(__return__, caching or connector)
    """
    return model(rev_i, (k1, k2), (a, b), cache_bs, dcp_i, caching, connector, 0, mode_i)


def prefix_match_unit(rev_i: int, k1: int, k2: int, a: int, b: int, pmu: int, dcp_i: int) -> Outcome:
    """A requested unit is honoured or refused: the hash is the unit (or the scheduler
    block size when the resolver falls back), never something else.

    pre: 0 <= rev_i < len(REVS)
    pre: 0 <= k1 < len(facts.KINDS) and 0 <= k2 < len(facts.KINDS)
    pre: 1 <= a <= MAX and 1 <= b <= MAX and 1 <= pmu <= MAX
    pre: 0 <= dcp_i < len(DCP_VALUES)
    post: not returned(__return__) or __return__.hash_block_size in (pmu, __return__.scheduler_block_size)
    """
    return model(rev_i, (k1, k2), (a, b), min(a, b), dcp_i, True, False, pmu)


def hybrid_align_engine(rev_i: int, m: int, a: int, dcp_i: int) -> Outcome:
    """The seed contract from 0.28 on: Mamba in align mode, the engine's cache block size
    (the smallest group), prefix caching on: every group is a multiple of the hash.

    pre: 1 <= rev_i < len(REVS)
    pre: 1 <= m <= MAX and 1 <= a <= MAX
    pre: 0 <= dcp_i < len(DCP_VALUES)
    post: not returned(__return__) or all(g % __return__.hash_block_size == 0 for g in __return__.group_block_sizes)
    """
    return model(rev_i, (facts.KINDS.index("mamba"), facts.KINDS.index("full_attention")), (m, a), min(m, a), dcp_i)


def unitary(rev_i: int, k: int, bs: int, dcp_i: int) -> Outcome:
    """One group, prefix caching on, the engine's cache block size (the group's): the
    unitary coordinator's block size is the hash (UnitaryKVCacheCoordinator's assertion).

    pre: 0 <= rev_i < len(REVS)
    pre: 0 <= k < len(facts.KINDS)
    pre: 1 <= bs <= MAX
    pre: 0 <= dcp_i < len(DCP_VALUES)
    post: __return__.extra["unitary_block_size"] == __return__.hash_block_size
    """
    return model(rev_i, (k,), (bs,), bs, dcp_i)
