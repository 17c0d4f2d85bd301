"""Config -> Layout through real vLLM (kvproof.bridge.derive) against real engine boots.

The derived Layout must be exactly what a real boot of the same configuration
hands the resolver (read by kvproof.tiers.boot's capture). Boots cost 15-40 s
on these CPUs, so each release boots two recipes, in one process.
"""

from __future__ import annotations

import pytest
from conftest import require_env, worker_for
from kvproof.revisions import revision_for

from kvproof.inputs.config import Config
from kvproof.running.checking import derive_all
from kvproof.derivation import DeriveError, layout_from_boot
from kvproof.inputs.layout import Layout
from kvproof.tiers.boots import boot_many
from kvproof.tiers.families import Recipe

from conftest import CPU_RELEASES as RELEASES  # noqa: E402  (the one release list, src/kvproof/facts/__init__.py)

# Two recipes per release: hidden-state extraction in align mode (the seed's shape,
# page-size unification makes the hidden-state group small), and a model left at
# the release's defaults (no mamba_cache_mode, no block size) with a sliding window.
BOOTED = (
    Recipe(family="nemotron_h", aux_layers=(0, 1, 2), mamba_cache_mode="align"),
    Recipe(family="nemotron_h", sliding_window=64, mamba_cache_mode=None, block_size=None),
)


pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _close_workers(workers):  # the session fixture closes the workers worker_for starts
    yield


@pytest.mark.parametrize("release", RELEASES)
def test_derived_layout_equals_boot_captured_layout(release):
    env = require_env(release)
    revision = revision_for(release)
    configs = [Config.from_recipe(r) for r in BOOTED]
    derived = derive_all(release, configs, worker_for(release))
    boots = boot_many(env, [Recipe.from_config(c) for c in configs], probe=True)
    for config, d, b in zip(configs, derived, boots):
        assert b.groups, f"{release} {config.describe()}: boot captured no layout ({b.error_type}: {b.error_message})"
        booted = Layout.from_dict(layout_from_boot(b, revision))
        assert d.layout is not None, f"{release}: derivation failed: {d.error}"
        assert d.layout == booted, f"{release} {config.describe()}: derived {d.layout.summary()} != boot {booted.summary()}"
        assert (d.scheduler_block_size, d.hash_block_size) == (b.scheduler_block_size, b.hash_block_size)


@pytest.mark.parametrize("release", RELEASES)
def test_real_rejection_is_reported_verbatim(release):
    require_env(release)
    # Every group is 128 tokens here (CPU default block size); a prefix_match_unit of 48
    # divides none of them, which the real resolver refuses with a ValueError.
    d, = derive_all(release, [Config(mamba_cache_mode="align", prefix_match_unit=48)], worker_for(release))
    assert isinstance(d.result, DeriveError)
    assert d.error.stage == "resolver" and d.error.type == "ValueError", d.error
    assert "prefix_match_unit" in d.error.message
    assert d.layout is not None and d.layout.cache.prefix_match_unit == 48


@pytest.mark.parametrize("release", RELEASES)
def test_derivation_is_fast_after_import(release):
    require_env(release)
    w = worker_for(release)
    derive_all(release, [Config(max_model_len=1024)], w)  # warm: lazy imports of the first model build
    configs = [Config(max_model_len=1100 + i, block_size=bs) for i, bs in enumerate((16, 32, 64, None))]
    out = derive_all(release, configs, w)
    assert all(d.layout is not None for d in out), [d.error for d in out]
    per_config = sum(d.seconds for d in out) / len(out)
    assert per_config < 3.0, f"{release}: {per_config:.2f} s per config"
    again = derive_all(release, configs[:1], w)[0]  # memoised per release: the same result, no new derivation
    assert again.raw == out[0].raw
