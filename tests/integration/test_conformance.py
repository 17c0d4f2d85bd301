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

pytest.importorskip("z3")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvproof.spec import drift, evaluate, revision_for
from kvproof.spec.strategies import layouts

pytestmark = pytest.mark.integration

RELEASES = ("0.27.0", "0.28.0", "0.32.0")
BATCH = 250
BATCHES = 8  # 2000 layouts per release


def _env(release):
    from kvproof import envs
    from kvproof.errors import EnvError
    try:
        return envs.find(release)
    except EnvError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module", params=RELEASES)
def worker(request):
    client = pytest.importorskip("kvproof.bridge.client")
    env = _env(request.param)
    with client.Worker(env) as w:
        yield request.param, w


def _key(o):
    if not o.expressible:
        return ("not expressible",)
    if o.resolver_error is not None:
        return ("error", o.resolver_error.type)
    return ("ok", o.scheduler_block_size, o.hash_block_size)


def compare(release, real_outcomes, layouts_):
    rev = revision_for(release)
    bad, skipped = [], 0
    for lay, real in zip(layouts_, real_outcomes):
        model = evaluate(lay, rev)
        if not model.expressible:
            if real.expressible:
                bad.append((lay, real, model, "model says not expressible, vLLM expresses it"))
            continue
        if not real.expressible:
            skipped += 1  # the bridge cannot build it (e.g. no spec class for that kind)
            continue
        if _key(real) != _key(model):
            bad.append((lay, real, model, "different result"))
    return bad, skipped


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


SEEN = {}


@settings(max_examples=BATCHES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(batch=st.lists(layouts(), min_size=BATCH, max_size=BATCH))
def _check_batch(worker, batch):
    release, w = worker
    real = w.run(batch, manager=False)
    bad, skipped = compare(release, real, batch)
    SEEN.setdefault(release, [0, 0])
    SEEN[release][0] += len(batch)
    SEEN[release][1] += skipped
    if bad:
        _fail(release, bad)


def test_model_agrees_with_vllm(worker):
    _check_batch(worker)
    release = worker[0]
    total, skipped = SEEN.get(release, [0, 0])
    assert total >= BATCH * min(BATCHES, 2)
    assert skipped < total / 2, f"{skipped} of {total} layouts were not expressible through the bridge"


def test_seed_layout_agrees(worker):
    from kvproof.layout import Layout
    release, w = worker
    seed = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544, "count": 4},
                                        {"kind": "hidden_state", "block_size": 181}]})
    real = w.run([seed], manager=False)
    bad, _ = compare(release, real, [seed])
    if bad:
        _fail(release, bad)
