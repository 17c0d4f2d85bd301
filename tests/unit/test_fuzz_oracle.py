"""The fuzzer's oracle (waivers), crash store and runner plumbing (no vLLM)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from kvproof.fuzz import run as fuzz_run
from kvproof.fuzz.oracle import dedup_key, judge, shape
from kvproof.corpus import publish
from kvproof.fuzz.store import CrashStore, corpus_index
from kvproof.layout import Layout
from kvproof.outcome import Outcome, StageError

HYBRID_MSG = ("Each KV cache group's real block_size must be divisible by hash_block_size. "
              "block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464")


def L(d: dict) -> Layout:
    return Layout.from_dict(d)


def out(layout: Layout, s, h, sizes=None, manager_error=None, **kw) -> Outcome:
    return Outcome(layout_hash=layout.content_hash(), vllm_version="0.27.0", scheduler_block_size=s,
                   hash_block_size=h, group_block_sizes=sizes or [g.block_size for g in layout.groups],
                   manager_attempted=True, manager_error=manager_error, **kw)


SEED = L({"groups": [{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}],
          "cache": {"block_size": 181, "mamba_cache_mode": "align"}})


def test_seed_bug_is_a_crash():
    o = out(SEED, 98464, 98464, manager_error=StageError("AssertionError", HYBRID_MSG))
    f = judge(SEED, o)
    assert f.crash and f.contract == "hybrid.group_multiple_of_hash"
    assert f.signature.startswith("FAIL:manager:AssertionError:Each KV cache group") and "98464" not in f.signature


def test_real_exception_in_non_align_mamba_fallback_is_never_waived():
    # The old ``mamba_fallback`` waiver dropped this although the REAL manager raised.
    x = L({"groups": [{"kind": "mamba", "block_size": 544}, {"kind": "full_attention", "block_size": 16}],
           "cache": {"block_size": 16, "mamba_cache_mode": "all"}, "kv_connector": "OffloadingConnector"})
    o = out(x, 544, 544, manager_error=StageError("AssertionError", HYBRID_MSG))
    f = judge(x, o)
    assert f.crash and judge(x, o, strict=True).crash


def test_unsupported_by_design_is_a_crash_marked_by_design():
    x = L({"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "sliding_window", "block_size": 48}],
           "dcp": 2})
    o = out(x, 96, 96, sizes=[32, 96],
            manager_error=StageError("AssertionError", "DCP with hybrid KV cache layouts only supports ..."))
    f = judge(x, o)
    assert f.crash and f.judgement.by_design


def test_ring_buffer_groups_are_outside_the_hash_contracts():
    x = L({"groups": [{"kind": "full_attention", "block_size": 16384, "prefix_cacheable": False},
                      {"kind": "mla", "block_size": 278135}], "kv_connector": "OffloadingConnector",
           "cache": {"enable_prefix_caching": False}})
    assert not judge(x, out(x, 16384 * 278135, 278135)).latent
    o_bad = out(x, 16384 * 278135, 7)  # the cacheable MLA group is not a multiple of 7
    f = judge(x, o_bad)
    assert f.latent and not f.crash  # nothing real raised: LATENT, not a crash


def test_pmu_with_hashing_inactive_is_not_a_violation():
    x = L({"groups": [{"kind": "full_attention", "block_size": 128}, {"kind": "sliding_window", "block_size": 48}],
           "cache": {"enable_prefix_caching": False, "prefix_match_unit": 128}})
    f = judge(x, out(x, 384, 384))
    assert not f.crash and not f.latent


def test_single_mamba_with_dcp_accepted_by_the_real_manager_is_latent():
    # The manager builds (no crash), but MambaManager resolves hashes at its own 32 against hash 64:
    # real 0.27/0.28 assert "DCP not support mamba now." at the first lookup (consumer tier;
    # corpus/33c4006700b5c115.json), so the contract flags it: LATENT, never a crash here.
    x = L({"groups": [{"kind": "mamba", "block_size": 32}], "dcp": 2})
    f = judge(x, out(x, 64, 64, coordinator="UnitaryKVCacheCoordinator", extra={"unitary_block_size": 64}))
    assert not f.crash and f.latent


def test_divisibility_violation_without_a_real_exception_is_latent():
    x = L({"groups": [{"kind": "full_attention", "block_size": 64}, {"kind": "full_attention", "block_size": 96}],
           "kv_connector": "OffloadingConnector"})
    o = Outcome(layout_hash="", vllm_version="x", scheduler_block_size=192, hash_block_size=64,
                group_block_sizes=[64, 96])
    f = judge(x, o)
    assert f.latent and not f.crash and f.contract == "hybrid.group_multiple_of_hash"


def test_shape_is_coarse():
    a = SEED
    b = L({"groups": [{"kind": "mamba", "block_size": 128, "count": 3}, {"kind": "hidden_state", "block_size": 42}],
           "cache": {"mamba_cache_mode": "align"}})
    assert shape(a) == shape(b)
    assert dedup_key("0.27.0", "hybrid.group_multiple_of_hash", a) == dedup_key("0.27.0", "hybrid.group_multiple_of_hash", b)
    assert dedup_key("0.27.0", "hybrid.group_multiple_of_hash", a) != dedup_key("0.28.0", "hybrid.group_multiple_of_hash", a)
    assert dedup_key("0.27.0", "m", a, "FAIL:manager:AssertionError:x") != dedup_key("0.27.0", "m", a, "FAIL:manager:KeyError:x")


def test_write_layout_is_canonical_atomic_and_never_overwrites(tmp_path):
    x = SEED.with_meta(vllm="0.27.0", contract="hybrid.group_multiple_of_hash", found_by="atheris")
    path, written = publish(x, tmp_path)
    assert written and path.name == f"{SEED.content_hash()}.json"
    back = Layout.from_json(path.read_text())
    assert back == SEED and back.meta["contract"] == "hybrid.group_multiple_of_hash"
    before = path.read_text()
    path2, written2 = publish(SEED.with_meta(vllm="other", contract="x"), tmp_path)
    assert path2 == path and not written2 and path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary files left


def test_concurrent_writers_publish_one_file(tmp_path):
    results = []

    def go(i):
        results.append(publish(SEED.with_meta(vllm="0.27.0", contract="c", writer=i), tmp_path)[1])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 1 and len(list(tmp_path.glob("*.json"))) == 1
    assert not list(tmp_path.glob(".*"))


def test_crash_store_dedups_by_contract_and_shape(tmp_path):
    corpus, seen = tmp_path / "corpus", tmp_path / "seen"
    store = CrashStore(corpus, seen, "0.27.0")
    p1, new1 = store.record(SEED, "hybrid.group_multiple_of_hash", "detail", b"abc")
    assert new1 and p1.exists()
    meta = json.loads(p1.read_text())["kvproof"]
    assert meta["vllm"] == "0.27.0" and meta["found_by"] == "atheris" and meta["contract"] == "hybrid.group_multiple_of_hash"
    assert len(meta["input_sha1"]) == 40
    same_shape = L({"groups": [{"kind": "mamba", "block_size": 128, "count": 3}, {"kind": "hidden_state", "block_size": 42}],
                    "cache": {"mamba_cache_mode": "align"}})
    p2, new2 = store.record(same_shape, "hybrid.group_multiple_of_hash", "detail", b"def")
    assert not new2 and p2 == p1 and len(list(corpus.glob("*.json"))) == 1
    # A second process (another fork-mode worker) shares the seen/ markers.
    other = CrashStore(corpus, seen, "0.27.0")
    assert other.record(same_shape, "hybrid.group_multiple_of_hash", "d", b"x")[1] is False
    # A new campaign against the same corpus: new for the campaign, but no second file.
    fresh = CrashStore(corpus, tmp_path / "seen2", "0.27.0")
    p3, new3 = fresh.record(same_shape, "hybrid.group_multiple_of_hash", "d", b"x")
    assert new3 and p3 == p1 and len(list(corpus.glob("*.json"))) == 1
    assert list(corpus_index(corpus).values()) == [p1]
    # A signature (the real exception's class) is part of the key and of the meta.
    p4, new4 = fresh.record(same_shape, "hybrid.group_multiple_of_hash", "d", b"y", "FAIL:manager:AssertionError:m",
                            verdict="FAIL", tier="manager")
    assert new4 and p4 != p1
    meta4 = json.loads(p4.read_text())["kvproof"]
    assert meta4["signature"] == "FAIL:manager:AssertionError:m" and meta4["tier"] == "manager"
    assert p4 in corpus_index(corpus).values()


def test_read_stats_sums_processes(tmp_path):
    (tmp_path / "stats").mkdir()
    for i, (execs, crashes) in enumerate([(100, 0), (250, 1)]):
        (tmp_path / "stats" / f"contracts-{i}.json").write_text(json.dumps(
            {"execs": execs, "crashes": crashes, "known": 2, "waived": {"a:b": 3}, "verdicts": {"OK": execs}}))
    (tmp_path / "stats" / "broken.json").write_text("{")
    s = fuzz_run.read_stats(tmp_path)
    assert s["execs"] == 350 and s["crashes"] == 1 and s["known"] == 4 and s["waived"] == 6
    assert s["verdicts"] == {"OK": 350} and s["processes"] == 2


def test_runner_builds_a_wrapper_and_command(tmp_path):
    args = fuzz_run.parse(["--python", sys.executable, "--seconds", "5", "--workdir", str(tmp_path / "w"),
                           "--crash-dir", str(tmp_path / "c"), "--seed", "3"])
    c = fuzz_run.Campaign(args)
    c.prepare()
    cmd = c.command(["-max_total_time=5"], [c.corpus] + c.seed_dirs())
    wrapper = Path(cmd[0])
    assert os.access(wrapper, os.X_OK)
    text = wrapper.read_text()
    assert "kvproof.fuzz.harness contracts" in text and 'KVPROOF_FUZZ_ARGV0="$0"' in text
    assert "-seed=3" in cmd and f"-dict={fuzz_run.DICT}" in cmd and str(fuzz_run.SEEDS) in cmd
    env = c.env_vars()
    assert env["KVPROOF_FUZZ_CORPUS_OUT"] == str(tmp_path / "c") and env["KVPROOF_FUZZ_PREMISE"] == "engine"


def test_runner_recovers_an_interrupted_merge(tmp_path):
    args = fuzz_run.parse(["--python", sys.executable, "--continuous", "--workdir", str(tmp_path)])
    c = fuzz_run.Campaign(args)
    old = tmp_path / "corpus.old"
    old.mkdir(parents=True)
    (old / "x").write_text("1")
    (tmp_path / "corpus.new").mkdir()
    c.prepare()
    assert (tmp_path / "corpus" / "x").exists() and not old.exists() and not (tmp_path / "corpus.new").exists()


def test_runner_rejects_zero_seconds_outside_continuous():
    import pytest

    from kvproof.errors import UsageError

    with pytest.raises(UsageError):
        fuzz_run.parse(["--seconds", "0"])
