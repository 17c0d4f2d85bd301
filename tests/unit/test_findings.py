"""Finding identity (kvproof.findings.key) and the ledger (no vLLM)."""

from __future__ import annotations

import json

import pytest

from kvproof.errors import UsageError
from kvproof.findings import cli as findings_cli
from kvproof.findings.key import ClassKey, class_key, frame_key, stem
from kvproof.findings.ledger import Entry, Ledger, Status
from kvproof.judge import judge, judge_consumer
from kvproof.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof.verdicts import Verdict

MSG = "Each KV cache group's real block_size must be divisible by hash_block_size. block_sizes={}, hash_block_size={}"
FRAME = "vllm/v1/core/kv_cache_coordinator.py:{} in __init__"


def mamba(sizes, cache, mode):
    return Layout.from_dict({"groups": [{"kind": "mamba", "block_size": s} for s in sizes[:-1]]
                            + [{"kind": "hidden_state", "block_size": sizes[-1]}],
                            "cache": {"block_size": cache, "mamba_cache_mode": mode}})


def seed_judgement(sizes, h, line, mode="align"):
    lay = mamba(sizes, sizes[-1], mode)
    o = Outcome(layout_hash=lay.content_hash(), vllm_version="0.27.0", scheduler_block_size=h, hash_block_size=h,
                group_block_sizes=list(sizes), manager_attempted=True,
                manager_error=StageError("AssertionError", MSG.format(list(sizes), h), FRAME.format(line)))
    return lay, judge(lay, o)


def test_numbers_and_line_numbers_never_split_a_class():
    a = class_key(*reversed(seed_judgement([544, 544, 181], 98464, 97)))
    b = class_key(*reversed(seed_judgement([128, 128, 128, 42], 2688, 131)))
    assert a == b and a.id == b.id and len(a.id) == 12
    assert a == ClassKey("manager", "hybrid.group_multiple_of_hash[align]", "AssertionError",
                         "vllm/v1/core/kv_cache_coordinator.py:__init__")
    assert "98464" not in str(a) and "97" not in str(a)


def test_the_mamba_mode_separates_the_seed_from_the_mode_all_crash():
    lay, j = seed_judgement([128, 128, 42], 2688, 97, mode="all")
    assert class_key(j, lay).check == "hybrid.group_multiple_of_hash[not-align]"
    lay, j = seed_judgement([128, 128, 42], 2688, 97, mode="align")
    assert class_key(j, lay).check == "hybrid.group_multiple_of_hash[align]"


def test_an_unexplained_exception_is_keyed_by_its_stem_and_frame():
    assert stem("DCP with hybrid KV cache layouts only supports FullAttentionSpec") == "dcp with hybrid kv cache layouts"
    assert stem("'req-3'") == "" and stem("x must be 16, got 32") == "x must be"
    assert frame_key("/a/site-packages/vllm/v1/x.py:12 in f") == "vllm/v1/x.py:f"
    assert frame_key("vllm/v1/x.py:12 in f") == "vllm/v1/x.py:f"


def test_consumer_oracle_observations_are_keyed_by_the_oracle():
    from kvproof.consumer.oracles import Observation
    from kvproof.consumer.result import ConsumerResult, Efficiency

    r = ConsumerResult("x", "t", [Observation("kv_event", 3, "BlockStored(...): hash #0 names 12 tokens")],
                       {"kv_event": 1}, Efficiency(100, 50, 50, 0, 2), scheduler_block_size=16, hash_block_size=16)
    j = judge_consumer(r)
    assert class_key(j) == ClassKey("consumer", "oracle:kv_event")


def test_ledger_round_trip_and_lookup(tmp_path):
    lay, j = seed_judgement([544, 544, 181], 98464, 97)
    key = class_key(j, lay)
    led = Ledger.load(tmp_path)
    assert key not in led and len(led) == 0
    path = led.add(Entry(key, Status.FIXED, "seed", "why", fixed_in="0.28.0", releases={"0.27.0": "FAIL"},
                         layout=lay.to_dict()))
    assert path.name == f"{key.id}.json" and json.loads(path.read_text())["key"]["tier"] == "manager"
    again = Ledger.load(tmp_path)
    e = again.get(key)
    assert e is not None and e.status == Status.FIXED and again.find(key.id[:6]) is e
    assert e.bug_on("0.27.1") and not e.bug_on("0.28.0") and not e.bug_on("0.32.0")
    with pytest.raises(UsageError):
        again.find("zzzz")


def test_bad_ledger_entry_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"key": {}}')
    assert findings_cli.main(["--ledger", str(tmp_path), "list"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_checked_in_ledger_loads_and_every_file_is_named_by_its_key():
    led = Ledger.load()
    for e in led.entries():
        assert (led.folder / f"{e.id}.json").exists(), e.title
        assert e.status != Status.FIXED or e.fixed_in, e.title
        assert e.status != Status.UNREACHABLE or e.premise_fact, e.title
        assert Layout.from_dict(e.layout)
        if e.witness_config is not None:
            from kvproof.config import Config
            assert Config.from_dict(e.witness_config), e.title


def test_a_fixed_class_met_on_its_fix_release_is_a_regression(tmp_path):
    """The seed class (fixed in 0.28.0) met by a 0.27.0 campaign is a known bug; met by a
    0.28.0 campaign (an overlay with the fix reverted) it is a NEW regression: exit 1."""
    from kvproof.findings.key import ClassKey
    from kvproof.findings.ledger import Entry, Ledger, Status
    from kvproof.fuzz.run import report

    key = ClassKey("manager", "hybrid.group_multiple_of_hash[align]", "AssertionError",
                   "vllm/v1/core/kv_cache_coordinator.py:__init__")
    (tmp_path / "ledger").mkdir()
    book = Ledger.load(tmp_path / "ledger")
    book.add(Entry(key=key, status=Status.FIXED, title="the seed bug", why="t", fixed_in="0.28.0"))
    rec = {"tier": key.tier, "check": key.check, "exc_type": key.exc_type, "frame": key.frame, "key": str(key),
           "id": key.id, "verdict": "FAIL", "count": 3, "first_s": 0.5, "layout": "mamba:544x4,hidden_state:181",
           "detail": "d", "premise": "reachable"}
    (tmp_path / "work" / "stats").mkdir(parents=True)
    (tmp_path / "work" / "stats" / "contracts-1.json").write_text(json.dumps({"execs": 9, "classes": {key.id: rec}}))
    ledger = Ledger.load(tmp_path / "ledger")
    old, n_old = report(tmp_path / "work", ledger, "0.27.0")
    assert n_old == 0 and "Known bugs seen" in old and "REGRESSION" not in old
    text, n_new = report(tmp_path / "work", ledger, "0.28.0")
    assert n_new == 1 and text.splitlines()[0] == "NEW classes: 1"
    assert "REGRESSION of 'the seed bug' (ledger: fixed in 0.28.0)" in text.splitlines()[1]
