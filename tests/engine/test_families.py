"""Real engine boots of the tiny model families (marker ``engine``; one boot at a time).

Each boot is a fresh subprocess in the release's environment: ~10 s import +
2-30 s boot, ~0.7 GB RSS on 2 CPU cores.
"""

from __future__ import annotations

import pytest

from conftest import require_env
from kvproof.layout import Layout
from kvproof.replay import classify, engine, synth
from kvproof.replay.families import SEED_HIDDEN_STATES, Recipe

pytestmark = pytest.mark.engine

SEED_SW = Recipe(family="nemotron_h", pattern="M*M-", sliding_window=64, kv_cache_dtype="fp8",
                 kv_cache_dtype_skip_layers=("sliding_window",))
COORDINATOR_MSG = "Each KV cache group's real block_size must be divisible by hash_block_size"


@pytest.mark.parametrize("recipe", [Recipe(family="nemotron_h"), Recipe(family="granite_moe_hybrid", pattern="M*M"),
                                    Recipe(family="qwen3_next", pattern="MMM*", head_dim=64)],
                         ids=["nemotron_h", "granite_moe_hybrid", "qwen3_next"])
def test_family_boots_and_generates_on_028(recipe):
    b = engine.boot(require_env("0.28.0"), recipe)
    assert b.ok, f"{b.error_type}: {b.error_message} [{b.error_frame}] {b.log_tail[-3:]}"
    assert b.coordinator == "HybridKVCacheCoordinator"
    assert {g["kind"] for g in b.groups} >= {"mamba", "full_attention"}
    assert len(b.token_ids) == 2 and all(len(t) == recipe.max_tokens for t in b.token_ids)
    assert b.peak_rss_mb and b.peak_rss_mb < 4096


def test_seed_class_sliding_window_fails_on_027_and_generates_on_028():
    bad = engine.boot(require_env("0.27.0"), SEED_SW)
    assert not bad.ok and COORDINATOR_MSG in bad.error_message
    assert "kv_cache_coordinator.py" in bad.error_frame
    assert bad.layout_summary() == "mamba:128x2,sliding_window:64 cache=64"
    assert (bad.scheduler_block_size, bad.hash_block_size) == (128, 128)
    good = engine.boot(require_env("0.28.0"), SEED_SW)
    assert good.ok and good.token_ids, good.error_message
    assert good.layout_summary() == "mamba:128x2,sliding_window:64 cache=64"
    assert (good.scheduler_block_size, good.hash_block_size) == (128, 64)


def test_hidden_state_extraction_reproduces_the_reported_seed_shape_on_027():
    b = engine.boot(require_env("0.27.0"), SEED_HIDDEN_STATES)
    assert not b.ok and "hash_block_size=2688" in b.error_message
    assert [g["kind"] for g in b.groups] == ["mamba", "mamba", "full_attention", "hidden_state"]
    assert b.cache_block_size == 42


def test_synthesiser_finds_a_realistic_seed_class_reproducer_on_027():
    lay = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 128, "count": 2},
                                       {"kind": "sliding_window", "block_size": 64, "sliding_window": 64}],
                            "cache": {"block_size": 64}})
    target = classify.FailureClass("FAIL", ("block_pool.target_multiple_of_hash", "hybrid.group_multiple_of_hash"))
    rep = synth.synthesise(lay, require_env("0.27.0"), target, families=("nemotron_h",))
    assert rep.found and rep.tricks == [], rep.reason
    assert "sliding_window" in rep.live and "mamba" in rep.live


def test_offloading_connector_asserts_its_own_divisibility_on_027():
    """The connector contract checked by a real consumer: OffloadingConnector resolves block sizes itself."""
    b = engine.boot(require_env("0.27.0"), SEED_SW.but(kv_connector="OffloadingConnector"))
    ev = classify.engine_verdict(b)
    assert ev.verdict == "FAIL" and "connector.block_multiple_of_hash" in ev.cls.ids, ev.detail
    assert "tokens_per_block=64 not divisible by tokens_per_hash=128" in b.error_message
    assert "offloading" in b.error_frame
