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
        ast.parse(m.source(sp))  # anchor found exactly once, result still Python
