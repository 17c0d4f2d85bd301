"""Finding identity (kvproof.judging.classkey) and the ledger (no vLLM)."""

from __future__ import annotations

import json

import pytest

from kvproof.errors import UsageError
from kvproof.findings import cli as findings_cli
from kvproof import frames
from kvproof.judging.classkey import ClassKey, class_key, stem
from kvproof.findings.ledger import Entry, Ledger, Status, known, known_dict
from kvproof.judging.judge import judge, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof.result import Result
from kvproof.verdicts import Tier, Verdict

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
    assert frames.key("/a/site-packages/vllm/v1/x.py:12 in f") == "vllm/v1/x.py:f"
    assert frames.key("vllm/v1/x.py:12 in f") == "vllm/v1/x.py:f"


def test_consumer_oracle_observations_are_keyed_by_the_oracle_and_its_cause():
    from kvproof.consumer.oracles import Observation
    from kvproof.consumer.result import ConsumerResult, Efficiency

    def key(cause):
        r = ConsumerResult("x", "t", [Observation("kv_event", 3, "BlockStored(...): hash #0 names 12 tokens", cause)],
                           {"kv_event": 1}, Efficiency(100, 50, 50, 0, 2), scheduler_block_size=16,
                           hash_block_size=16)
        return class_key(judge_consumer(r))

    assert key("") == ClassKey("consumer", "oracle:kv_event")
    assert key("hash-vs-tokens|BlockPool (BlockStored[GPU])") == ClassKey(
        "consumer", "oracle:kv_event", "", "BlockPool (BlockStored[GPU])")
    assert key("token-count|BlockPool (BlockStored[GPU])") == key("hash-vs-tokens|BlockPool (BlockStored[GPU])")
    assert key("hash-vs-tokens|BlockPool (BlockStored[GPU])") != key("hash-vs-tokens|X (BlockStored[CPU])")


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


def test_a_refined_class_is_still_found_by_its_former_id(tmp_path):
    old = ClassKey("consumer", "oracle:kv_event")
    new = ClassKey("consumer", "oracle:kv_event", "", "SimpleCPUOffloadConnector (BlockStored[CPU])")
    Ledger.load(tmp_path).add(Entry(new, Status.BUG, "t", "w", was=(old.id,)))
    led = Ledger.load(tmp_path)
    assert led.find(old.id).key == new and led.find(new.id).key == new and old not in led


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
            from kvproof.inputs.config import Config
            assert Config.from_dict(e.witness_config), e.title
        # a report that names the real model a user serves names the witness the ledger records
        if e.status == Status.BUG and (e.report or {}).get("model"):
            assert e.reachability == "reachable", (e.id, e.reachability)
            assert (e.witness_config or {}).get("model") == e.report["model"], (e.id, e.witness_config)


def test_the_witness_search_asks_for_the_found_layouts_settings_and_scales_its_stream():
    from kvproof.consumer.stream import Req, Stream
    from kvproof.findings import witness

    found = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                         {"kind": "sliding_window", "block_size": 16, "sliding_window": 32},
                                         {"kind": "mamba", "block_size": 16}],
                              "cache": {"block_size": 16, "enable_prefix_caching": True, "mamba_cache_mode": "align"},
                              "kv_connector": "SimpleCPUOffloadConnector"})
    flags = witness.serve_flags(found)
    assert flags[:3] == ("--enable-prefix-caching", "--mamba-cache-mode", "align")
    assert flags[3] == "--kv-transfer-config" and '"kv_connector":"SimpleCPUOffloadConnector"' in flags[4]
    real = Layout.from_dict({"groups": [{"kind": "sliding_window", "block_size": 128, "sliding_window": 128},
                                        {"kind": "full_attention", "block_size": 128},
                                        {"kind": "mamba", "block_size": 128}],
                             "cache": {"block_size": 128, "enable_prefix_caching": True},
                             "kv_connector": "SimpleCPUOffloadConnector"})
    assert witness.same_shape(found, real)
    assert not witness.same_shape(found, Layout.from_dict({**real.to_dict(), "kv_connector": None}))
    assert not witness.same_shape(found, Layout.from_dict({**real.to_dict(), "groups": real.to_dict()["groups"][:2]}))
    assert witness.scales(found, real) == [4, 8]  # the window ratio 128/32, the block ratio 128/16
    s = witness.scale(Stream(prefixes=(256,), requests=(Req(prefix_len=256, suffix_len=1),), num_blocks=40,
                             max_num_batched_tokens=512), 8, 16, 128)
    assert (s.prefixes, s.requests[0].prefix_len, s.requests[0].suffix_len, s.num_blocks,
            s.max_num_batched_tokens) == ((2048,), 2048, 8, 40, 4096)


def test_a_fixed_class_met_on_its_fix_release_is_a_regression(tmp_path):
    """The seed class (fixed in 0.28.0) met by a 0.27.0 campaign is a known bug; met by a
    0.28.0 campaign (an overlay with the fix reverted) it is a NEW regression: exit 1."""
    from kvproof.judging.classkey import ClassKey
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


def test_check_names_the_known_class_of_a_result():
    """issue 25 item 0: a check row whose class is in the ledger says which it is."""
    from kvproof.running.checking import Row
    from kvproof.consumer.oracles import Observation
    from kvproof.consumer.result import ConsumerResult
    from kvproof.outcome import Outcome

    lay = Layout.from_dict({"groups": [{"kind": "sliding_window", "block_size": 16, "sliding_window": 4096}],
                            "cache": {"block_size": 16, "enable_prefix_caching": True},
                            "kv_connector": "SimpleCPUOffloadConnector"})
    frame = "/env/lib/python3.12/site-packages/vllm/v1/simple_kv_offload/manager.py:88 in __init__"
    # a bare assert: its condition and caller, as the worker reads them (issue 44)
    cause = ("assert 0 <= self.fa_gidx < len(self.cpu_kv_cache_config.kv_cache_groups) <- vllm/distributed/"
             "kv_transfer/kv_connector/v1/simple_cpu_offload_connector.py:120 in __init__")
    r = ConsumerResult("x", "0.33.0", [Observation("exception", 0, f"AssertionError:  @ {frame}", cause)],
                       {"exception": 1})
    j = judge_consumer(r, lay)
    row = Row("mistral", lay, "vllm-0.33.0", Result(Tier.MANAGER, Outcome(lay.content_hash(), "0.33.0")), j)
    k = known(row)
    assert k is not None and k.id == "f2216f93e1a4"
    line = k.known_line()
    assert line.startswith("known class f2216f93e1a4 (bug, upstream ") and k.title in line
    assert "report: kvproof findings report f2216f93e1a4" in line
    ok = Row("mistral", lay, "vllm-0.33.0", Result(Tier.MANAGER, Outcome(lay.content_hash(), "0.33.0")),
             judge_consumer(ConsumerResult("x", "0.33.0"), lay))
    assert known(ok) is None and known_dict(row)["id"] == "f2216f93e1a4" and "known" not in row.to_dict()


def test_a_regression_class_needs_two_releases_one_line_exit_2(tmp_path, capsys):
    """``findings add --regression`` keys the input by compare's diff along the releases: with one
    release there is nothing to compare (one line, exit 2, before any vLLM runs)."""
    f = tmp_path / "lay.json"
    f.write_text(json.dumps({"groups": [{"kind": "full_attention", "block_size": 16}]}))
    assert findings_cli.main(["key", "--regression", "--vllm", "0.32.0", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at least two releases" in err[0], err


def test_no_standalone_reproducer_for_a_drafting_layout():
    """A report whose reproducer cannot show the bug is not written: the consumer template has
    no drafter, so a finding whose layout drafts (91d8cf758c83, EAGLE-3) gets one line instead."""
    from kvproof.findings.ledger import Ledger
    from kvproof.findings.reproducers import script
    entry = Ledger.load().find("91d8cf758c83")
    assert entry.layout.get("speculative")
    with pytest.raises(UsageError, match="no drafter"):
        script(entry)


def test_cause_goes_with_regression(capsys, tmp_path):
    """--cause picks one of an input's hit-regression classes; without --regression it is bad input:
    one line, exit 2, nothing measured."""
    from kvproof.findings.cli import main
    f = tmp_path / "lay.json"
    f.write_text('{"groups": [{"kind": "full_attention", "block_size": 16}], "cache": {"block_size": 16}}')
    assert main(["key", str(f), "--cause", "mtp:full_attention", "--vllm", "0.32.0"]) == 2
    err = capsys.readouterr().err
    assert "--cause" in err and "--regression" in err and len(err.strip().splitlines()) == 1
