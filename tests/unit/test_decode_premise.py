"""The decoder's engine premise: per-kind facts (per-state compression on MLA only, at real
compress ratios), the premise's group facts, and the availability judgement of a
prefix_match_unit the resolver rightly refuses (no vLLM)."""

from __future__ import annotations

import random

from kvproof.fuzz.decode import FULL, Caps, decode, engine_groups
from kvproof.fuzz.provider import PyFDP
from kvproof.judging.judge import judge, resolver_rejects_user_error
from kvproof.inputs.layout import Group, Layout
from kvproof.outcome import Outcome, StageError
from kvproof import facts
from kvproof.spec import premise
from kvproof.verdicts import Verdict

NEW = Caps(modes=("align", "none"))  # what 0.32's spec classes give (release_caps)
OLD = Caps(modes=("align", "all", "none"), ring_buffer=False, dcp_sharded_attention=False, dcp_sharded_mamba=False,
           tokens_per_state_kinds=(), compressed_kinds=(), engine_block_size_over="all")


def _layouts(caps: Caps, prem: str, n: int = 6000, seed: int = 11) -> list[Layout]:
    rng = random.Random(seed)
    return [decode(PyFDP(rng.randbytes(rng.randint(0, 160))), caps, prem) for _ in range(n)]


def test_engine_premise_compresses_only_mla_at_real_ratios():
    lays = _layouts(NEW, "engine")
    compressed = [g for x in lays for g in x.groups if g.tokens_per_state is not None]
    assert {g.kind for g in compressed} == set(facts.COMPRESSED_KINDS)
    assert {g.tokens_per_state for g in compressed} == set(facts.COMPRESS_RATIOS)
    assert all(g.block_size % g.tokens_per_state == 0 for g in compressed)
    assert not any(g.tokens_per_state for x in lays for g in x.groups if g.kind == "mamba")
    # and beside Mamba (Qwen4-exp style: GDN with compressed QSA keys share a model)
    assert any(x.has_mamba and any(g.tokens_per_state for g in x.groups) for x in lays)


def test_engine_premise_layouts_are_inside_the_premise():
    for rev, caps in (("0.32", NEW), ("0.27", OLD)):
        for x in _layouts(caps, "engine", 4000, seed=12):
            assert premise.violated(x, rev) == [], (rev, x.summary(), premise.violated(x, rev))


def test_engine_premise_never_shards_a_mamba_group_the_free_premise_does():
    """No in-tree model builds a dcp_sharded MambaSpec (facts.UNSHARDED_KINDS); the free
    premise keeps it for direct callers (MambaManager's "DCP not support mamba now")."""
    def sharded(prem):
        return [g for x in _layouts(NEW, prem, seed=14) for g in x.groups if g.kind == "mamba" and g.dcp_sharded]
    assert sharded("engine") == []
    assert sharded("free")
    assert any(g.dcp_sharded for x in _layouts(NEW, "engine", seed=14) for g in x.groups if g.kind != "mamba")


def test_engine_premise_never_shares_chunked_local_with_another_kind():
    for x in _layouts(NEW, "engine", seed=13):
        kinds = {g.kind for g in x.groups}
        assert "chunked_local" not in kinds or kinds == {"chunked_local"}, x.summary()


def test_a_release_without_the_field_reads_the_same_bytes_uncompressed():
    rng = random.Random(14)
    for _ in range(3000):
        data = rng.randbytes(rng.randint(0, 120))
        x = decode(PyFDP(data), OLD, "engine")
        assert not any(g.tokens_per_state for g in x.groups)
        assert [g.kind for g in x.groups] == [g.kind for g in decode(PyFDP(data), OLD, "engine").groups]


def test_free_premise_puts_any_value_on_any_kind_with_the_field():
    lays = _layouts(FULL, "free", seed=15)
    kinds = {g.kind for x in lays for g in x.groups if g.tokens_per_state}
    assert kinds == set(facts.KINDS)
    none = _layouts(Caps(tokens_per_state_kinds=("mamba",)), "free", 2000, seed=15)
    assert {g.kind for x in none for g in x.groups if g.tokens_per_state} == {"mamba"}


def test_engine_groups_apply_the_premise_facts():
    g = engine_groups([Group("mamba", 64), Group("mamba", 128), Group("full_attention", 16)], "none", 2048)
    assert [x.block_size for x in g if x.kind == "mamba"] == [2048, 2048]  # runs of one Mamba spec stay
    g = engine_groups([Group("full_attention", 8, prefix_cacheable=False)] * 2, "align", 2048)
    assert g == (Group("full_attention", 8), Group("full_attention", 8, prefix_cacheable=False))
    g = engine_groups([Group("chunked_local", 64), Group("sliding_window", 32)], "align", 2048)
    assert [x.kind for x in g] == ["full_attention", "sliding_window"]


def _refused(layout: Layout, message: str) -> Outcome:
    return Outcome(layout.content_hash(), "0.32.0", resolver_error=StageError("ValueError", message, "vllm"))


def test_a_unit_that_does_not_divide_the_hashed_groups_is_rejected_when_none_is_cacheable():
    # 0.32 hashes over every group when none is prefix-cacheable (hashing_sizes = [...] or group_block_sizes)
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16, "prefix_cacheable": False},
                                       {"kind": "sliding_window", "block_size": 16, "prefix_cacheable": False}],
                            "cache": {"prefix_match_unit": 32}})
    err = "Invalid prefix_match_unit=32; prefix-cacheable KV cache group block sizes must be divisible"
    assert resolver_rejects_user_error(lay, StageError("ValueError", err, "vllm"))
    assert judge(lay, _refused(lay, err)).verdict == Verdict.REJECTED
    ok = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 64, "prefix_cacheable": False},
                                      {"kind": "sliding_window", "block_size": 64, "prefix_cacheable": False}],
                           "cache": {"prefix_match_unit": 32}})
    assert judge(ok, _refused(ok, err)).verdict == Verdict.FAIL  # it divides: an availability failure


def test_compression_on_a_ring_buffer_is_not_a_reason():
    lay = Layout.from_dict({"groups": [{"kind": "mla", "block_size": 64},
                                       {"kind": "full_attention", "block_size": 64, "prefix_cacheable": False}],
                            "cache": {"prefix_match_unit": 32}})
    err = "Invalid prefix_match_unit=32; prefix-cache boundaries must align"
    assert not resolver_rejects_user_error(lay, StageError("ValueError", err, "vllm"))
    comp = Layout.from_dict({"groups": [{"kind": "mla", "block_size": 256, "tokens_per_state": 128},
                                        {"kind": "full_attention", "block_size": 64}],
                             "cache": {"prefix_match_unit": 32}})
    assert resolver_rejects_user_error(comp, StageError("ValueError", err, "vllm"))
