"""The fuzzer's byte decoder, its inverse and the seed files (no vLLM, no atheris)."""

from __future__ import annotations

import random

import pytest

from kvproof.fuzz import seeds
from kvproof.fuzz.decode import CONNECTOR, DCP_SIZES, FULL, MAX_GROUPS, Caps, NotEncodable, decode, encode
from kvproof.facts import engine_cache_block_size_of as engine_cache_block_size
from kvproof.fuzz.provider import Encoder, PyFDP, int_chunk
from kvproof.inputs.layout import KINDS, Layout


def _random_inputs(n: int, seed: int = 0, max_len: int = 120) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(0, max_len)) for _ in range(n)]


# Vectors measured on atheris 3.0.0's FuzzedDataProvider (integers from the end,
# most significant byte first, modulo the range; booleans from the front).
@pytest.mark.parametrize("data, calls, expected", [
    (b"\x01\x02\x03\x04", [("int", 0, 255)] * 2, [4, 3]),
    (b"\x01\x02\x03\x04", [("int", 0, 65535)], [1027]),
    (b"\x01\x02\x03\x04", [("int", 0, 9)] * 4, [4, 3, 2, 1]),
    (b"\xff\x02\x03\x04", [("int", 5, 9)] * 4, [9, 8, 7, 5]),
    (b"\x01\x02\x03\x04", [("bool",)] * 4, [True, False, True, False]),
    (b"\x01\x02\x03\x04", [("pick", (10, 20, 30))] * 4, [20, 10, 30, 20]),
    (b"\x01\x02", [("int", 0, 65535)] * 2, [513, 0]),
    (b"\x01\x02\x03", [("int", 0, 300)] * 2, [168, 1]),
    (b"", [("int", 3, 300), ("bool",)], [3, False]),
    (bytes(range(1, 10)), [("int", 0, 1 << 20)] * 3, [591879, 394500, 197121]),
])
def test_pyfdp_matches_atheris_vectors(data, calls, expected):
    fdp = PyFDP(data)
    got = []
    for call in calls:
        if call[0] == "int":
            got.append(fdp.ConsumeIntInRange(call[1], call[2]))
        elif call[0] == "bool":
            got.append(fdp.ConsumeBool())
        else:
            got.append(fdp.PickValueInList(list(call[1])))
    assert got == expected


def test_encoder_inverts_provider():
    rng = random.Random(1)
    for _ in range(500):
        script = []
        enc = Encoder()
        for _ in range(rng.randint(0, 12)):
            if rng.random() < 0.3:
                v = rng.random() < 0.5
                enc.bool(v)
                script.append(("bool", v))
            else:
                lo = rng.randint(0, 100)
                hi = lo + rng.choice([0, 1, 5, 255, 256, 65535, 1 << 20, 1 << 40])
                v = rng.randint(lo, hi)
                enc.int(lo, hi, v)
                script.append(("int", lo, hi, v))
        fdp = PyFDP(enc.data())
        for step in script:
            if step[0] == "bool":
                assert fdp.ConsumeBool() == step[1]
            else:
                assert fdp.ConsumeIntInRange(step[1], step[2]) == step[3]
        assert fdp.remaining_bytes() == 0


@pytest.mark.parametrize("premise", ["engine", "free"])
def test_decoded_layouts_are_valid_json_round_trips(premise):
    for data in _random_inputs(3000, seed=2):
        layout = decode(PyFDP(data), FULL, premise)
        assert 1 <= len(layout.groups) <= MAX_GROUPS
        again = Layout.from_json(layout.canonical())
        assert again == layout
        assert again.content_hash() == layout.content_hash()


@pytest.mark.parametrize("premise", ["engine", "free"])
def test_encode_decode_round_trip(premise):
    encoded = 0
    for data in _random_inputs(3000, seed=3):
        layout = decode(PyFDP(data), FULL, premise)
        try:
            out = encode(layout, premise)
        except NotEncodable:
            continue  # a size made from an earlier group's (a family encode does not use)
        encoded += 1
        assert decode(PyFDP(out), FULL, premise) == layout
    assert encoded > 2000


def test_decoder_reaches_every_dimension():
    layouts = [decode(PyFDP(d), FULL, "free") for d in _random_inputs(20000, seed=4, max_len=200)]
    layouts += [decode(PyFDP(d), FULL, "engine") for d in _random_inputs(20000, seed=5, max_len=200)]
    sizes = {g.block_size for x in layouts for g in x.groups}
    assert {g.kind for x in layouts for g in x.groups} == set(KINDS)
    assert {len(x.groups) for x in layouts} == set(range(1, MAX_GROUPS + 1))
    assert any(s <= 16 for s in sizes)  # small
    assert {1 << k for k in range(0, 21)} <= sizes | {1}  # every power of two up to 2^20
    assert any(s % 2 and s > 1 << 18 for s in sizes)  # large odd
    assert max(sizes) <= 1 << 20
    assert {x.cache.enable_prefix_caching for x in layouts} == {True, False}
    assert {x.kv_connector for x in layouts} == {None, CONNECTOR}
    assert {x.dcp for x in layouts} == set(DCP_SIZES)
    assert None in {x.cache.prefix_match_unit for x in layouts}
    assert len({x.cache.prefix_match_unit for x in layouts}) > 100
    assert {x.cache.mamba_cache_mode for x in layouts if x.has_mamba} == {"align", "all", "none"}
    groups = [g for x in layouts for g in x.groups]
    assert {g.prefix_cacheable for g in groups} == {None, False}
    assert {g.dcp_sharded for g in groups} == {None, True, False}
    assert any(g.tokens_per_state for g in groups)
    assert any(g.sliding_window for g in groups) and any(g.attention_chunk_size for g in groups)
    assert len({x.max_model_len for x in layouts}) >= 5


def test_engine_premise_derives_cache_block_size_and_mode():
    for data in _random_inputs(5000, seed=6):
        x = decode(PyFDP(data), FULL, "engine")
        assert x.cache.block_size == engine_cache_block_size(x.groups)
        if x.has_mamba:
            if x.cache.enable_prefix_caching:
                assert x.cache.mamba_cache_mode in ("align", "all")
            else:
                assert x.cache.mamba_cache_mode == "none"
        else:
            assert x.cache.mamba_cache_mode == "align"


def test_engine_cache_block_size_skips_ring_buffers():
    x = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 8, "prefix_cacheable": False},
                                     {"kind": "mamba", "block_size": 64}]})
    assert engine_cache_block_size(x.groups) == 64
    only_rings = Layout.from_dict({"groups": [{"kind": "sliding_window", "block_size": 8, "prefix_cacheable": False},
                                              {"kind": "sliding_window", "block_size": 4, "prefix_cacheable": False}]})
    assert engine_cache_block_size(only_rings.groups) == 4


def test_restricted_caps_read_the_same_bytes():
    """A release without a field reads the same input as the nearest layout it can express."""
    old = Caps(modes=("all", "align", "none"), ring_buffer=False, dcp_sharded_attention=False,
               dcp_sharded_mamba=False, tokens_per_state_kinds=(), compressed_kinds=(), prefix_match_unit=False)
    new = Caps(modes=("align", "none"))
    for data in _random_inputs(3000, seed=7):  # free premise: no engine facts reshape the groups
        full = decode(PyFDP(data), FULL, "free")
        a = decode(PyFDP(data), old, "free")
        b = decode(PyFDP(data), new, "free")
        assert [g.block_size for g in a.groups] == [g.block_size for g in full.groups]
        assert all(g.prefix_cacheable is None and g.dcp_sharded is None and g.tokens_per_state is None
                   for g in a.groups)
        assert a.cache.prefix_match_unit is None
        assert b.cache.mamba_cache_mode in ("align", "none")
        assert [g.kind for g in b.groups] == [g.kind for g in full.groups]
    no_hidden = Caps(kinds=tuple(k for k in KINDS if k != "hidden_state"))
    x = decode(PyFDP(encode(seeds.SEED_LAYOUTS["seed-shape"])), no_hidden)
    assert [g.kind for g in x.groups] == ["mamba"] * 4 + ["full_attention"]


def test_seed_layouts_encode_exactly():
    for name, layout in seeds.SEED_LAYOUTS.items():
        assert decode(PyFDP(encode(layout)), FULL) == layout, name


def test_checked_in_seeds_and_dictionary_are_current():
    assert seeds.main(["--check"]) == 0, "run: python -m kvproof.fuzz.seeds --write"


def test_dictionary_entries_are_block_sizes_as_read():
    for comment, chunk in seeds.dict_entries():
        family, value = comment.split()
        fdp = PyFDP(chunk)
        from kvproof.fuzz.decode import _block_size

        assert _block_size(fdp.ConsumeIntInRange, []) == int(value), comment
    assert int_chunk(1, 64, 16) == b"\x0f"
