"""The seeded-mutant catalogue: well-formed, and (when 0.32.0 is installed) every anchor applies once."""

import ast

import pytest
from conftest import require_env

from kvproof import envs
from kvproof.errors import KvproofError
from kvproof.selftest import mutants as M


def test_catalogue_shape():
    assert len(M.CATALOGUE) >= 15
    assert len(M.BY_NAME) == len(M.CATALOGUE)
    assert {m.klass for m in M.CATALOGUE} == set(M.CLASSES)
    for m in M.CATALOGUE:
        assert m.anchor != m.replacement and m.description and m.survivor


def test_select():
    assert [m.name for m in M.select("lcm_to_gcd,hash_is_one")] == ["lcm_to_gcd", "hash_is_one"]
    with pytest.raises(KvproofError):
        M.select("nope")


def test_anchors_apply_to_installed_source():
    env = require_env(M.RELEASE)  # skips without the environment, fails under KVPROOF_REQUIRE_ENVS=1
    sp = envs.site_packages(env.root)
    for m in M.CATALOGUE:
        if not m.since:  # written against RELEASE (a later release's mutant is absent there)
            ast.parse(m.source(sp))  # anchor found exactly once, result still Python


def test_anchors_once_or_absent_on_every_installed_release():
    """Every managed release whose environment is here: each mutant's anchor is in its file at most
    once (absent: ``kvproof selftest`` skips it there) and the edit still parses. On the release the
    anchors are written for every behavioural one applies. Skips when no environment is installed."""
    from kvproof import facts

    found = []
    for release in facts.MANAGED_RELEASES:
        try:
            env = envs.find(release)
        except KvproofError:
            continue
        sp = envs.site_packages(env.root)
        applied = []
        for m in M.CATALOGUE:
            if m.applies_to(sp):  # raises when the anchor is there twice
                ast.parse(m.source(sp))
                applied.append(m.name)
        found.append((release, applied))
        if release == M.RELEASE:  # every mutant written against it applies; a later release's are absent
            assert set(applied) == {m.name for m in M.CATALOGUE if not m.since}, set(M.BY_NAME) - set(applied)
        for m in M.CATALOGUE:
            if m.since == release:
                assert m.name in applied, f"{m.name} is written against {release}'s code"
    if not found:
        pytest.skip("no managed vLLM environment installed")
