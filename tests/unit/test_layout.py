import json

import pytest

from kvproof.errors import LayoutError
from kvproof.inputs.layout import Layout, parse_groups_spec

SEED = {"groups": [{"kind": "mamba", "block_size": 544, "mamba_cache_mode": "align"},
                   {"kind": "full_attention", "block_size": 544},
                   {"kind": "hidden_state", "block_size": 181}],
        "cache": {"block_size": 181, "enable_prefix_caching": True, "prefix_match_unit": None},
        "kv_connector": None, "dcp": 1, "max_model_len": 131072}


def test_issue_example_round_trips_through_canonical_form():
    layout = Layout.from_dict(SEED)
    again = Layout.from_json(layout.canonical())
    assert again == layout
    assert again.canonical() == layout.canonical()
    assert layout.cache.mamba_cache_mode == "align"  # moved from the group to the engine-wide setting


def test_content_hash_ignores_key_order_and_meta_but_not_content():
    a = Layout.from_dict(SEED)
    shuffled = json.loads(json.dumps(SEED))
    shuffled["cache"] = dict(reversed(list(shuffled["cache"].items())))
    shuffled["kvproof"] = {"found_by": "z3"}
    assert Layout.from_dict(shuffled).content_hash() == a.content_hash()
    changed = json.loads(json.dumps(SEED))
    changed["groups"][2]["block_size"] = 182
    assert Layout.from_dict(changed).content_hash() != a.content_hash()


def test_count_expands_and_cache_block_size_defaults_to_smallest_group():
    layout = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 544, "count": 4},
                                          {"kind": "hidden_state", "block_size": 181}]})
    assert [g.block_size for g in layout.groups] == [544] * 4 + [181]
    assert layout.cache.block_size == 181
    assert layout.summary().startswith("mamba:544x4,hidden_state:181")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["groups"][0].update(kind="linear"), "groups[0].kind must be one of"),
    (lambda d: d["groups"][1].update(block_size=0), "groups[1].block_size must be >= 1"),
    (lambda d: d["groups"][1].update(block_size="16"), "groups[1].block_size must be an integer"),
    (lambda d: d["groups"][1].update(block_size=True), "groups[1].block_size must be an integer"),
    (lambda d: d["cache"].update(prefix_match_unit=0), "cache.prefix_match_unit must be >= 1"),
    (lambda d: d.update(dcp=0), "dcp must be >= 1"),
    (lambda d: d.update(groups=[]), "groups must not be empty"),
    (lambda d: d.update(groups={}), "groups must be a list"),
    (lambda d: d["cache"].update(enable_prefix_caching="yes"), "cache.enable_prefix_caching must be true or false"),
    (lambda d: d.update(colour="red"), "unknown field 'colour'"),
    (lambda d: d["groups"][1].update(mamba_cache_mode="align"), "only valid on a mamba group"),
    (lambda d: d["cache"].update(mamba_cache_mode="all"), "conflicting mamba_cache_mode"),
])
def test_malformed_layouts_get_one_line_errors(mutate, message):
    data = json.loads(json.dumps(SEED))
    mutate(data)
    with pytest.raises(LayoutError) as info:
        Layout.from_dict(data)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_not_json_is_a_layout_error_naming_the_file():
    with pytest.raises(LayoutError, match=r"^x\.json: not JSON"):
        Layout.from_json("{", where="x.json")


def test_inline_groups_spec():
    assert parse_groups_spec("mamba:544x4,hidden_state:181") == [
        {"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}]
    with pytest.raises(LayoutError):
        parse_groups_spec("mamba")
    with pytest.raises(LayoutError):
        parse_groups_spec("mamba:abc")
