"""Conformance: the Z3 model, evaluated concretely, against the real resolver.

For every installed vLLM release, thousands of Hypothesis-generated Layouts go
through the bridge (the real ``resolve_kv_cache_block_sizes``) and through
``kvproof.spec.evaluate`` for the release's revision; any disagreement fails
with the layout. The drift alarm is checked first: a release whose resolver
fingerprint matches no modelled revision fails here instead of comparing
against the wrong model.
"""

from __future__ import annotations

import json

import pytest

import hypothesis  # noqa: F401 -- the dev extra installs z3 and hypothesis: a missing one fails, not skips
from hypothesis import HealthCheck, given, settings

from kvproof.spec import drift, evaluate, revision_for
from layout_strategies import layouts
from kvproof.bridge import client
from kvproof.tiers.client import outcomes
from conftest import require_env

pytestmark = pytest.mark.integration

from conftest import CPU_RELEASES as RELEASES  # noqa: E402  (the one release list, src/kvproof/facts/__init__.py)


@pytest.fixture(scope="module", params=RELEASES)
def worker(request):
    env = require_env(request.param)
    with client.Worker(env) as w:
        yield request.param, w


def _key(o):
    if not o.expressible:
        return ("not expressible",)
    sizes = tuple(getattr(o, "group_block_sizes", ()) or ())
    if o.resolver_error is not None:
        return ("error", o.resolver_error.type, sizes)
    return ("ok", o.scheduler_block_size, o.hash_block_size, sizes)


def compare(release, real_outcomes, layouts_):
    """(disagreements, layouts not compared, layouts compared): a layout is compared when both
    sides express it (then their results must match); one neither side expresses, or that the
    bridge cannot build, is not compared, so every caller asserts how many were."""
    rev = revision_for(release)
    real_outcomes = list(real_outcomes)
    assert len(real_outcomes) == len(layouts_), (len(real_outcomes), len(layouts_))
    bad, skipped, compared = [], 0, 0
    for lay, real in zip(layouts_, real_outcomes):
        model = evaluate(lay, rev)
        if not model.expressible:
            if real.expressible:
                bad.append((lay, real, model, "model says not expressible, vLLM expresses it"))
            else:
                skipped += 1  # neither side has the setting: agreement, but nothing resolved to compare
            continue
        if not real.expressible:
            skipped += 1  # the bridge cannot build it (e.g. no spec class for that kind)
            continue
        compared += 1
        if _key(real) != _key(model):
            bad.append((lay, real, model, "different result"))
    return bad, skipped, compared


def _fail(release, bad):
    lay, real, model, why = bad[0]
    pytest.fail(f"model {revision_for(release)} disagrees with vLLM {release} on {len(bad)} layout(s); "
                f"first ({why}): {json.dumps(lay.to_dict())}\n  vLLM:  {_key(real)} {real.resolver_error}\n"
                f"  model: {_key(model)} {model.resolver_error}")


def test_fingerprint_is_modelled(worker):
    """The drift alarm: the installed resolver is a modelled revision (same definition as the bridge)."""
    release, w = worker
    fp = w.info.get("fingerprint")
    assert fp, w.info
    assert drift(fp, release) is None, drift(fp, release)


N_LAYOUTS = 2000


def generated_layouts(n: int = N_LAYOUTS) -> list:
    """``n`` Hypothesis-generated layouts (deterministic), collected once."""
    from hypothesis import Phase
    out = []

    @settings(max_examples=n, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(layouts())
    def collect(lay):
        out.append(lay)

    collect()
    return out


@pytest.fixture(scope="module")
def corpus_of_layouts():
    return generated_layouts()


def test_model_agrees_with_vllm(worker, corpus_of_layouts):
    release, w = worker
    batch = corpus_of_layouts
    real = outcomes(w, batch, manager=False)
    bad, skipped, compared = compare(release, real, batch)
    if bad:
        _fail(release, bad)
    assert len(batch) >= N_LAYOUTS // 2
    assert compared > len(batch) / 2, f"only {compared} of {len(batch)} layouts compared ({skipped} not expressible)"


def test_seed_layout_agrees(worker):
    from kvproof.inputs.layout import Layout
    release, w = worker
    seed = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544, "count": 4},
                                        {"kind": "hidden_state", "block_size": 181}]})
    real = outcomes(w, [seed], manager=False)
    bad, _, compared = compare(release, real, [seed])
    if bad:
        _fail(release, bad)
    assert compared == 1, "the seed layout was not compared (not expressible on one side)"


ODD_DCP = (6, 16)  # outside the default DCP_VALUES: `verify --dcp 1,6,16` proves over these


def odd_dcp_layouts(n: int = 300) -> list:
    """Hand-picked and generated layouts with dcp 6 or 16."""
    from hypothesis import Phase

    from kvproof.inputs.layout import Layout
    from kvproof.spec import model as M
    assert not set(ODD_DCP) & set(M.DCP_VALUES)
    out = [Layout.from_dict(d) for d in (
        {"groups": [{"kind": "full_attention", "block_size": 16}], "dcp": 6},
        {"groups": [{"kind": "full_attention", "block_size": 16}], "dcp": 16},
        {"groups": [{"kind": "mamba", "block_size": 16}], "dcp": 6},
        {"groups": [{"kind": "mamba", "block_size": 96}, {"kind": "full_attention", "block_size": 16}], "dcp": 6},
        {"groups": [{"kind": "mamba", "block_size": 544, "count": 2}, {"kind": "sliding_window", "block_size": 181}],
         "dcp": 16},
        {"groups": [{"kind": "mamba", "block_size": 64}, {"kind": "mla", "block_size": 24}], "dcp": 6,
         "cache": {"prefix_match_unit": 48}},
    )]

    @settings(max_examples=n, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(layouts(max_groups=4, dcps=ODD_DCP))
    def collect(lay):
        out.append(lay)

    collect()
    return out


def test_model_agrees_with_vllm_on_dcp_outside_default_set(worker):
    """dcp 6 and 16 (not in DCP_VALUES): the model scales by the real dcp, as vLLM does."""
    release, w = worker
    batch = odd_dcp_layouts()
    real = outcomes(w, batch, manager=False)
    bad, skipped, compared = compare(release, real, batch)
    if bad:
        _fail(release, bad)
    assert compared > len(batch) / 2, f"only {compared} of {len(batch)} dcp 6/16 layouts compared ({skipped} not)"
    scaled = [o for lay, o in zip(batch, real) if o.expressible and o.resolver_error is None
              and any(k != "mamba" for k in (g.kind for g in lay.groups))]
    assert scaled, "no dcp 6/16 layout with an attention group resolved"


def test_unitary_block_size_agrees_with_vllm(worker):
    """One group with prefix caching on: the model's extra["unitary_block_size"] is the real
    UnitaryKVCacheCoordinator.block_size, and the coordinator's assertion fires exactly when
    the model's hash differs from it."""
    from kvproof.inputs.layout import Layout
    release, w = worker
    rev = revision_for(release)
    batch = [Layout.from_dict({"groups": [{"kind": kind, "block_size": 16}], "dcp": dcp,
                               "cache": {"block_size": cache_bs}})
             for kind in ("mamba", "full_attention") for dcp in (1, 2, 4, 8, 6) for cache_bs in (16, 32)]
    real = outcomes(w, batch, manager=True)
    assert len(real) == len(batch), (len(real), len(batch))
    checked = 0
    for lay, r in zip(batch, real):
        m = evaluate(lay, rev)
        assert _key(m) == _key(r), (lay.summary(), _key(m), _key(r))
        unit = m.extra["unitary_block_size"]
        if r.manager_error is None:
            assert r.coordinator == "UnitaryKVCacheCoordinator", r
            assert r.extra.get("unitary_block_size") == unit, (lay.summary(), r.extra, unit)
            assert m.hash_block_size == unit, (lay.summary(), m.hash_block_size, unit)
            checked += 1
        else:
            assert "hash_block_size == block_size" in r.manager_error.message, r.manager_error
            assert m.hash_block_size != unit, (lay.summary(), m.hash_block_size, unit)
    assert checked, "no unitary coordinator was built"


def test_wrong_model_edit_is_caught(worker, corpus_of_layouts, monkeypatch):
    """Mutation check: give a revision the other Mamba-fallback branch; the comparison must fail."""
    import dataclasses

    from kvproof.spec import model as M
    from kvproof import revisions as R
    release, w = worker
    rev = R.REVISIONS[revision_for(release)]
    swap = ({R.MAMBA_FALLBACK_MODE}, {R.MAMBA_FALLBACK_BLOCK_SIZE})
    if R.MAMBA_FALLBACK_BLOCK_SIZE in rev.branches:
        swap = swap[::-1]
    wrong = dataclasses.replace(rev, branches=(rev.branches - swap[0]) | swap[1])
    batch = corpus_of_layouts[:600]
    real = outcomes(w, batch, manager=False)
    monkeypatch.setitem(R.REVISIONS, rev.name, wrong)
    M.clear_encodings()
    try:
        bad, _, compared = compare(release, real, batch)
    finally:
        monkeypatch.undo()
        M.clear_encodings()
    assert compared, "the mutation check compared no layout"
    assert bad, "a model with the wrong Mamba fallback branch still agreed with vLLM"


def test_z3_counterexample_replays_as_real_assertion(worker):
    """The 0.27 counterexample Z3 finds is a real startup AssertionError in 0.27 only."""
    from kvproof.inputs.layout import Layout
    from kvproof.spec.properties import BY_KEY
    from kvproof.spec.query import COUNTEREXAMPLE, Query
    release, w = worker
    r = Query("0.27", BY_KEY["hybrid.group_multiple_of_hash[align]"], 2, "engine").run(30)
    assert r.status == COUNTEREXAMPLE
    out = outcomes(w, [Layout.from_dict(r.layout)], manager=True)[0]
    if revision_for(release) == "0.27":
        assert out.manager_error is not None and out.manager_error.type == "AssertionError", out
        assert "divisible by hash_block_size" in out.manager_error.message
    else:
        assert out.manager_error is None, out.manager_error
