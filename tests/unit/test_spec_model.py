"""The Z3 model on concrete inputs, the revision table and the fingerprint (no vLLM)."""

from __future__ import annotations

import pytest

import z3

from kvproof.judging import contracts as C
from kvproof.inputs.layout import Layout
from kvproof.spec import REVISIONS, evaluate, lemmas, revision_for
from kvproof.spec import fingerprint as fp
from kvproof.spec import model as M
from kvproof import revisions as R
from kvproof.spec.properties import BY_KEY, PROPERTIES
from kvproof.spec.query import concrete_holds

SEED = {"groups": [{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}]}
BOOT = {"groups": [{"kind": "mamba", "block_size": 128, "count": 2}, {"kind": "sliding_window", "block_size": 64}]}


def test_seed_bug_is_in_027_only():
    lay = Layout.from_dict(SEED)
    assert lay.cache.block_size == 181  # engine default: smallest group
    o27 = evaluate(lay, "0.27")
    assert (o27.scheduler_block_size, o27.hash_block_size) == (98464, 98464)
    assert o27.source == "model:0.27"
    assert "hybrid.group_multiple_of_hash" in {v.contract.id for v in C.check(lay, o27)}
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


# --- dcp outside the default set (the encoding is exact for the query's dcp set) ---

ODD_DCP = (1, 6, 16)
DCP_LAYOUTS = [
    {"groups": [{"kind": "full_attention", "block_size": 16}], "dcp": 6},
    {"groups": [{"kind": "full_attention", "block_size": 16}], "dcp": 16, "cache": {"prefix_match_unit": 16}},
    {"groups": [{"kind": "mamba", "block_size": 16}], "dcp": 6},
    {"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "mamba", "block_size": 96}], "dcp": 6},
    {"groups": [{"kind": "mamba", "block_size": 64}, {"kind": "sliding_window", "block_size": 24}],
     "dcp": 16, "kv_connector": "ExampleConnector", "cache": {"enable_prefix_caching": False}},
    {"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "mla", "block_size": 24}],
     "dcp": 6, "cache": {"prefix_match_unit": 48}},
]


def test_dcp_outside_default_set_scales_concretely():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}], "dcp": 6})
    assert 6 not in M.DCP_VALUES
    for rev in REVISIONS:
        o = evaluate(lay, rev)
        assert (o.scheduler_block_size, o.hash_block_size, o.group_block_sizes) == (96, 96, [96]), rev
    two = Layout.from_dict(DCP_LAYOUTS[3])
    assert evaluate(two, "0.28").group_block_sizes == [96, 96]
    assert evaluate(two, "0.28").scheduler_block_size == 96


def test_concrete_refuses_dcp_outside_its_encoding():
    lay = Layout.from_dict(DCP_LAYOUTS[0])
    enc = M.encoding("0.32", 1)  # the default set has no 6
    with pytest.raises(ValueError, match="outside this encoding's dcp set"):
        M.concrete(enc, M.layout_values(lay, enc.x))


def _pinned(enc, lay, vals):
    """The encoding's inputs fixed to ``lay``, plus the exact gcd/lcm there (true point facts)."""
    x, r = enc.x, enc.r
    cons = [v == val for v, val in M.layout_values(lay, x)]
    if r.L is not None:
        cons += [lemmas.point_lcm(r.L, r.eff, vals["eff"]),
                 lemmas.point_gcd(r.G, r.eff, r.hashing, vals["eff"], vals["members"])]
    return cons


def test_z3_over_dcp_1_6_finds_a_dcp_6_witness():
    """Z3 finds inputs only dcp 6 explains (scheduler = 6 * cache block size), and the witness
    evaluates concretely to that value. Before the fix this query was UNSAT."""
    for rev in REVISIONS:
        enc = M.encoding(rev, 1, (1, 6))
        x, r = enc.x, enc.r
        s = z3.Solver()
        s.add(*M.domain(enc.rev, x, 64, (1, 6)), *r.facts, x.cache_bs == 16, r.S == 96)
        assert s.check() == z3.sat, rev
        m = s.model()
        subs = [(v, m.eval(v, model_completion=True)) for v in x.variables()]
        assert m.eval(x.dcp).as_long() == 6
        out, _ = M.concrete(enc, subs)
        assert out["S"] == 96, rev


@pytest.mark.parametrize("rev", list(REVISIONS))
def test_z3_over_odd_dcp_set_proves_what_concrete_evaluation_says(rev):
    """On layouts with dcp 6 and 16, Z3 (inputs pinned to the layout) proves the concrete
    results, and every property's violation is SAT exactly when the concrete replay says so."""
    for d in DCP_LAYOUTS:
        lay = Layout.from_dict(d)
        if R.not_expressible(lay, rev):
            continue
        enc = M.encoding(rev, len(lay.groups), ODD_DCP)
        vals, _ = M.concrete(enc, M.layout_values(lay, enc.x))
        x, r = enc.x, enc.r
        base = M.domain(enc.rev, x, M.MAX_BLOCK, ODD_DCP) + r.facts + _pinned(enc, lay, vals)
        s = z3.Solver()
        s.add(*base)
        assert s.check() == z3.sat, (rev, d)
        differs = z3.Or([r.S != vals["S"], r.H != vals["H"], r.err != vals["err"]]
                        + [e != v for e, v in zip(r.eff, vals["eff"])])
        assert s.check(differs) == z3.unsat, (rev, d)
        for prop in PROPERTIES:
            if not prop.applies(len(lay.groups)):
                continue
            pre, viol = prop.formulas(x, r)
            z3_says = s.check(pre, viol) == z3.sat
            assert z3_says == concrete_holds(lay, rev, prop, "free", M.MAX_BLOCK, ODD_DCP), (rev, prop.key, d)


# --- the unitary coordinator's block size (one group) ---------------------------------

@pytest.mark.parametrize("rev", list(REVISIONS))
@pytest.mark.parametrize("dcp", (2, 4, 8))
def test_unitary_block_size_agrees_with_z3_property(rev, dcp):
    """One Mamba group, dcp > 1: the Outcome reports r.unit, and the Python contract on that
    Outcome flags unitary.hash_equals_block_size exactly when the Z3 property is violated."""
    prop = BY_KEY["unitary.hash_equals_block_size[any]"]
    for cache_bs in (16, 32):
        lay = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 16}], "dcp": dcp,
                                "cache": {"block_size": cache_bs}})
        out = evaluate(lay, rev)
        enc = M.encoding(rev, 1)
        unit = M.value(enc.r.unit, M.layout_values(lay, enc.x))
        assert out.extra["unitary_block_size"] == unit
        # up to 0.29 the coordinator scales every spec by dcp; from 0.31 only dcp_sharded ones
        assert unit == (16 if R.DCP_SHARDED in R.REVISIONS[rev].branches else 16 * dcp)
        flagged = "unitary.hash_equals_block_size" in {v.contract.id for v in C.check(lay, out)}
        assert flagged == concrete_holds(lay, rev, prop, "free") == (out.hash_block_size != unit), (rev, cache_bs)


def test_unitary_block_size_only_with_the_unitary_coordinator():
    off = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 16}], "dcp": 2,
                            "cache": {"enable_prefix_caching": False}})
    assert "unitary_block_size" not in evaluate(off, "0.27").extra  # KVCacheCoordinatorNoPrefixCache
    two = Layout.from_dict(BOOT)
    assert "unitary_block_size" not in evaluate(two, "0.27").extra
