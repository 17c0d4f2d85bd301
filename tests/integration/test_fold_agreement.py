"""The fold abstraction (kvproof.spec.fold) against the REAL resolver, up to 32 groups (integration).

For every installed vLLM release, layouts of 2..32 groups (two fuzz-decoded layouts of up to
16 groups each, their groups joined) go through the bridge (the real
``resolve_kv_cache_block_sizes``) and through the fold of the release's revision, evaluated on
Python integers; (scheduler, hash) or the refusal must agree. The bounded model stops at
N = 8 in verify; this is the check that the fold, which the induction reasons about, is the
resolver at sizes the bounded search never sees.
"""

from __future__ import annotations

import pytest

import z3  # noqa: F401 -- the dev extra installs z3: a missing one fails, not skips

from kvproof import envs, facts
from kvproof.inputs.layout import Layout
from kvproof.spec import fold as FD
from kvproof.spec import revision_for
from kvproof.tiers.client import outcomes
from kvproof import revisions as R
from conftest import RELEASES, require_env

pytestmark = pytest.mark.integration

N_LAYOUTS = 400


def _installed() -> list[str]:
    """The releases under test, and one installed release of each revision they leave out: every
    revision's real resolver is checked once (the drift check, make verify, ties the rest of a
    revision's releases to the same code)."""
    out, seen = [], set()
    rows = [row["vllm"] for row in envs.installed() if row["status"] == "ready"]
    for release in sorted(set(rows), key=lambda r: (r not in RELEASES, facts.release_key(r))):
        try:
            rev = revision_for(release)
        except KeyError:
            continue  # not a modelled release: the drift alarm's business
        if release in RELEASES or rev not in seen:
            out.append(release)
            seen.add(rev)
    return out or ["0.32.0"]  # none installed: require_env skips (or fails under make test)


def long_layouts(n: int = N_LAYOUTS, seed: int = 18) -> list[Layout]:
    """Deterministic layouts of up to 32 groups: pairs of fuzz-decoded ones (random bytes, both
    premises, up to 16 groups each), groups joined."""
    import random

    from dataclasses import replace

    from kvproof.fuzz.decode import FULL, decode
    from kvproof.fuzz.provider import PyFDP
    from layout_strategies import _NO_FLAGS
    plain = replace(FULL, **_NO_FLAGS)  # every release expresses these (no 0.29+ spec fields)
    rng = random.Random(seed)
    out: list[Layout] = []
    while len(out) < n:
        premise = "engine" if len(out) % 2 else "free"
        caps = FULL if len(out) % 3 == 0 else plain
        a, b = (decode(PyFDP(rng.randbytes(rng.randint(8, 120))), caps, premise) for _ in range(2))
        d = a.to_dict()
        d["groups"] = a.to_dict()["groups"] + b.to_dict()["groups"]
        try:
            out.append(Layout.from_dict(d))
        except Exception:  # noqa: BLE001 -- a joined pair the Layout validator refuses
            continue
    return out


@pytest.fixture(scope="module")
def batch():
    return long_layouts()


def _real_key(o):
    if o.resolver_error is not None:
        return ("error", o.resolver_error.type)
    return ("ok", o.scheduler_block_size, o.hash_block_size)


def _fold_key(lay, rev):
    got = FD.run(lay, rev)
    if got["err"]:
        return ("error", "ValueError")
    return ("ok", got["S"], got["H"])


@pytest.mark.parametrize("release", _installed())
def test_fold_agrees_with_the_real_resolver_up_to_32_groups(release, batch, workers):
    w = workers(release) if require_env(release) else None
    rev = revision_for(release)
    todo = [lay for lay in batch if not R.not_expressible(lay, rev)]
    real = outcomes(w, todo, manager=False)
    bad, compared, longest = [], 0, 0
    for lay, o in zip(todo, real):
        if not o.expressible:
            continue  # the bridge cannot build it on this release
        compared += 1
        longest = max(longest, len(lay.groups))
        if _real_key(o) != _fold_key(lay, rev):
            bad.append((lay, _real_key(o), _fold_key(lay, rev)))
    assert not bad, (f"fold {rev} disagrees with vLLM {release} on {len(bad)} layout(s); first: "
                     f"{bad[0][0].to_dict()}\n  vLLM: {bad[0][1]}\n  fold: {bad[0][2]}")
    assert compared >= len(batch) // 4, f"only {compared} of {len(batch)} layouts compared"
    assert longest > 16, f"no layout above 16 groups reached the resolver (longest {longest})"
