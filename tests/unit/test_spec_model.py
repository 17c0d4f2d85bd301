"""The Z3 model on concrete inputs, the revision table and the fingerprint (no vLLM)."""

from __future__ import annotations

import pytest

pytest.importorskip("z3")

from kvproof.contracts import FAIL, verdict
from kvproof.layout import Layout
from kvproof.spec import REVISIONS, evaluate, revision_for
from kvproof.spec import fingerprint as fp
from kvproof.spec import revisions as R

SEED = {"groups": [{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}]}
BOOT = {"groups": [{"kind": "mamba", "block_size": 128, "count": 2}, {"kind": "sliding_window", "block_size": 64}]}


def test_seed_bug_is_in_027_only():
    lay = Layout.from_dict(SEED)
    assert lay.cache.block_size == 181  # engine default: smallest group
    o27 = evaluate(lay, "0.27")
    assert (o27.scheduler_block_size, o27.hash_block_size) == (98464, 98464)
    assert o27.source == "model:0.27"
    assert verdict(lay, o27)[0] == FAIL
    for rev in ("0.28", "0.29", "0.31", "0.32"):
        o = evaluate(lay, rev)
        assert (o.scheduler_block_size, o.hash_block_size) == (98464, 1), rev


def test_boot_reproducer_shape():
    lay = Layout.from_dict(BOOT)
    assert evaluate(lay, "0.27").hash_block_size == 128
    assert evaluate(lay, "0.28").hash_block_size == 64


def test_single_group_and_dcp_sharded():
    one = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 16}], "dcp": 2})
    assert evaluate(one, "0.27").hash_block_size == 32  # cache_config.block_size * dcp
    assert evaluate(one, "0.31").hash_block_size == 16  # 0.31: dcp ignored, mamba not dcp_sharded


def test_032_rejects_single_group_pmu():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                            "cache": {"prefix_match_unit": 8}})
    assert evaluate(lay, "0.31").resolver_error is None
    err = evaluate(lay, "0.32").resolver_error
    assert err is not None and err.type == "ValueError"


def test_bad_pmu_is_value_error():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "full_attention", "block_size": 24}],
                            "cache": {"prefix_match_unit": 16}})
    for rev in REVISIONS:
        assert evaluate(lay, rev).resolver_error.type == "ValueError"


def test_tokens_per_state_alignment_029():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "mamba", "block_size": 64, "tokens_per_state": 32}]})
    # hash = gcd = 16; partial mamba hits (64 > 16) -> alignment 16, 16 % 32 != 0
    assert evaluate(lay, "0.29").resolver_error.type == "ValueError"
    assert not evaluate(lay, "0.28").expressible


def test_expressibility_per_revision():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16, "prefix_cacheable": False},
                                       {"kind": "full_attention", "block_size": 32}]})
    assert not evaluate(lay, "0.27").expressible
    assert evaluate(lay, "0.29").hash_block_size == 32  # only the prefix-cacheable group counts
    all_mode = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 16}], "cache": {"mamba_cache_mode": "all"}})
    assert evaluate(all_mode, "0.31").expressible and not evaluate(all_mode, "0.32").expressible
    shard = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16, "dcp_sharded": False}]})
    assert not evaluate(shard, "0.29").expressible and evaluate(shard, "0.31").expressible


def test_revision_for():
    assert revision_for("0.27.0") == "0.27"
    assert revision_for("0.30.1") == "0.29"
    assert revision_for("0.33.0+cpu") == "0.32"
    with pytest.raises(KeyError):
        revision_for("0.26.0")


def test_fingerprint_definition(tmp_path):
    a = "def resolve_kv_cache_block_sizes(x):\n    return 1\n"
    b = "def iter_layer_specs(s):\n    return (s,)\n"
    (tmp_path / "vllm/v1/core").mkdir(parents=True)
    (tmp_path / "vllm/v1/core/kv_cache_utils.py").write_text(
        "from vllm.v1.kv_cache_interface import iter_layer_specs\n\n" + a + "\nX = 1\n")
    (tmp_path / "vllm/v1/kv_cache_interface.py").write_text(b)
    assert fp.of_source_files(tmp_path) == fp.of_sources([a, b])
    import hashlib
    assert fp.of_sources([a, b]) == hashlib.sha256((a + "\n" + b).encode()).hexdigest()[:16]


def test_drift_alarm():
    known = REVISIONS["0.28"].fingerprints[0]
    assert R.drift(known, "0.28.0") is None
    msg = R.drift("0123456789abcdef", "0.34.0")
    assert msg and "model is stale for vLLM 0.34.0" in msg
    assert "stale" in R.drift(known, "0.32.0")  # right code, wrong release
