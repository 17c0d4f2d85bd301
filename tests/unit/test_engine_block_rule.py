"""The engine's cache-block-size rule (EngineCore._initialize_kv_caches: the smallest block
size over all groups, or over the prefix-cacheable ones from 0.31) has one definition,
``facts.engine_cache_block_size``. Its two encodings must agree with it on every small input:
the premise's Z3 form (spec/premise.py, the proof run's engine premise) and the fold's form
(spec/fold.py, evaluated concretely with PyAlg), for every revision's rule."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

z3 = pytest.importorskip("z3")

from kvproof import facts
from kvproof.spec import premise  # noqa: E402
from kvproof.spec import fold as F  # noqa: E402
from kvproof.revisions import REVISIONS  # noqa: E402

SIZES = (1, 2, 5)
CASES = [(bs, pc) for n in (1, 2, 3) for bs in itertools.product(SIZES, repeat=n)
         for pc in itertools.product((False, True), repeat=n)]


@pytest.mark.parametrize("revision", sorted(REVISIONS))
def test_the_premise_z3_form_admits_exactly_the_python_rule(revision):
    rev = REVISIONS[revision]
    for bs, pc in CASES:
        want = facts.engine_cache_block_size(facts.ENGINE_BLOCK_SIZE_OVER[revision], bs, pc)
        cache_bs = z3.Int("cache_bs")
        x = SimpleNamespace(n=len(bs), bs=[z3.IntVal(b) for b in bs], pc=[z3.BoolVal(p) for p in pc],
                            cache_bs=cache_bs)
        s = z3.Solver()
        s.add(premise._z3_engine_block_size(rev, x))
        assert s.check() == z3.sat, (revision, bs, pc)
        assert s.model()[cache_bs].as_long() == want, (revision, bs, pc)
        s.add(cache_bs != want)
        assert s.check() == z3.unsat, (revision, bs, pc)  # and nothing else


@pytest.mark.parametrize("revision", sorted(REVISIONS))
def test_the_fold_form_is_the_python_rule(revision):
    fold = F.Fold(revision, F.PyAlg())
    for bs, pc in CASES:
        want = facts.engine_cache_block_size(facts.ENGINE_BLOCK_SIZE_OVER[revision], bs, pc)
        groups = [F.Group(False, b, p, True, 0) for b, p in zip(bs, pc)]
        for cache_bs in set(SIZES) | {want}:
            c = F.Config(cache_bs, True, False, False, 0, 0, 1, 4096)
            facts_of = dict(fold.engine_premise(fold.fold(groups, c), c))
            assert facts_of["engine.cache_block_size"] == (cache_bs == want), (revision, bs, pc, cache_bs)


def test_the_revisions_read_the_one_record():
    """src/kvproof/revisions.py's table and facts' per-fact views are the RevisionFacts records."""
    assert set(REVISIONS) == set(facts.REVISION_FACTS)
    for name, rev in REVISIONS.items():
        rec = facts.REVISION_FACTS[name]
        assert (rev.releases, rev.fingerprints, rev.branches, rev.fields, rev.mamba_modes, rev.engine_block_size) == \
            (rec.releases, rec.fingerprints, rec.branches, rec.fields, rec.mamba_modes, rec.engine_block_size_over)
        assert (name in facts.PREFIX_MATCH_UNIT_REVISIONS) is rec.prefix_match_unit
        assert facts.HYBRID_NEEDS[name] == rec.hybrid_needs and facts.MAMBA_MODES[name] == rec.mamba_modes
    minors = [m for rec in facts.REVISION_FACTS.values() for m in rec.releases]
    assert len(minors) == len(set(minors))
    assert {".".join(r.split(".")[:2]) for r in facts.MANAGED_RELEASES} <= set(minors)
