"""The fuzzer's oracle, its per-class counters and store, and the runner's report (no vLLM)."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from kvproof.fuzz import run as fuzz_run
import pytest

from kvproof.corpus import publish
from kvproof.fuzz.harness import Stats
from kvproof.fuzz.oracle import judge
from kvproof.fuzz.store import FindingStore
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof.verdicts import Verdict

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
    assert f.crash and f.contract == "hybrid.group_multiple_of_hash" and f.classed


def test_real_exception_in_non_align_mamba_fallback_is_never_waived():
    # The old ``mamba_fallback`` waiver dropped this although the REAL manager raised.
    x = L({"groups": [{"kind": "mamba", "block_size": 544}, {"kind": "full_attention", "block_size": 16}],
           "cache": {"block_size": 16, "mamba_cache_mode": "all"}, "kv_connector": "OffloadingConnector"})
    o = out(x, 544, 544, manager_error=StageError("AssertionError", HYBRID_MSG))
    f = judge(x, o)
    assert f.crash


def test_unsupported_by_design_is_not_a_crash():
    x = L({"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "sliding_window", "block_size": 48}],
           "dcp": 2})
    o = out(x, 96, 96, sizes=[32, 96],
            manager_error=StageError("AssertionError", "DCP with hybrid KV cache layouts only supports ..."))
    f = judge(x, o)
    assert not f.crash and f.judgement.by_design and f.judgement.verdict == Verdict.UNSUPPORTED


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


def test_the_class_ignores_the_numbers_in_the_message():
    """One root cause, one class: the seed's assertion with other numbers is the same class."""
    other = L({"groups": [{"kind": "mamba", "block_size": 128, "count": 3}, {"kind": "hidden_state", "block_size": 42}],
               "cache": {"block_size": 42, "mamba_cache_mode": "align"}})
    msg = HYBRID_MSG.replace("544", "128").replace("181", "42").replace("98464", "2688")
    a = judge(SEED, out(SEED, 98464, 98464, manager_error=StageError("AssertionError", HYBRID_MSG)))
    b = judge(other, out(other, 2688, 2688, manager_error=StageError("AssertionError", msg)))
    assert a.key == b.key and a.key.id == b.key.id


class FakeLedger:
    def __init__(self, entries=None):
        self.entries = entries or {}

    def get(self, key):
        return self.entries.get(key.id)


class FakeEntry:
    def __init__(self, status, title="t", reachability="reachable", upstream="unreported"):
        from kvproof.findings.ledger import Status

        self.status, self.title, self.reachability, self.upstream = Status(status), title, reachability, upstream


def _seed_fail():
    return judge(SEED, out(SEED, 98464, 98464, manager_error=StageError("AssertionError", HYBRID_MSG)))


def test_stats_count_every_hit_and_store_only_a_new_class_once(tmp_path):
    f = _seed_fail()
    stats = Stats(tmp_path, "contracts", "0.27.0")
    stats._ledger = FakeLedger()
    stats.store = FindingStore(tmp_path / "findings", tmp_path / "seen", "0.27.0")
    assert stats.meet(f.judgement, f.key, SEED, b"a", f.detail) is True
    assert stats.meet(f.judgement, f.key, SEED, b"b", f.detail) is False
    rec = stats.data["classes"][f.key.id]
    assert rec["count"] == 2 and rec["status"] == "new" and rec["verdict"] == "FAIL"
    assert stats.data["new"] == 1 and stats.data["known"] == 0
    stored = list((tmp_path / "findings").glob("*.json"))
    assert [Path(rec["path"])] == stored
    meta = json.loads(stored[0].read_text())["kvproof"]
    assert meta["class_id"] == f.key.id and meta["class"] == str(f.key) and meta["vllm"] == "0.27.0"
    assert meta["input_sha1"] == __import__("hashlib").sha1(b"a").hexdigest()
    # A second worker of the same campaign meets it: counted, not stored again, not new.
    other = Stats(tmp_path, "contracts", "0.27.0")
    other._ledger = FakeLedger()
    other.store = FindingStore(tmp_path / "findings", tmp_path / "seen", "0.27.0")
    other.meet(f.judgement, f.key, SEED, b"c", f.detail)
    assert len(list((tmp_path / "findings").glob("*.json"))) == 1


def test_a_class_the_ledger_knows_is_counted_and_never_stored(tmp_path):
    f = _seed_fail()
    stats = Stats(tmp_path, "contracts", "0.27.0")
    stats._ledger = FakeLedger({f.key.id: FakeEntry("fixed")})
    stats.store = FindingStore(tmp_path / "findings", tmp_path / "seen", "0.27.0")
    for _ in range(3):
        assert stats.meet(f.judgement, f.key, SEED, b"a", f.detail) is False
    assert stats.data["known"] == 3 and stats.data["new"] == 0
    assert stats.data["classes"][f.key.id]["status"] == "fixed"
    assert not (tmp_path / "findings").exists() or not list((tmp_path / "findings").iterdir())


def test_a_harness_error_is_error_with_its_cause():
    stats = Stats(None, "contracts", "0.27.0")
    try:
        {}["missing"]
    except KeyError as err:
        stats.harness_error(err)
    assert stats.data["verdicts"] == {"ERROR": 1}
    (cause, n), = stats.data["errors"].items()
    assert n == 1 and cause.startswith("KeyError at ") and "test_a_harness_error_is_error_with_its_cause" in cause


def _write_stats(folder: Path, i: int, d: dict) -> None:
    (folder / "stats").mkdir(exist_ok=True)
    (folder / "stats" / f"contracts-{i}.json").write_text(json.dumps(d))


def _rec(key, verdict, status, count, first_s, path=""):
    return {"id": key.id, "key": str(key), "tier": key.tier, "check": key.check, "exc_type": key.exc_type,
            "frame": key.frame, "verdict": verdict, "status": status, "count": count, "first_s": first_s,
            "layout": "x", "detail": "d", "premise": "reachable", "path": path}


def test_read_stats_and_classes_sum_the_processes(tmp_path):
    f = _seed_fail()
    _write_stats(tmp_path, 0, {"execs": 100, "new": 1, "known": 0, "verdicts": {"OK": 99, "FAIL": 1},
                               "errors": {"KeyError at kvproof/x.py:f": 2},
                               "classes": {f.key.id: _rec(f.key, "FAIL", "new", 1, 3.0, "/p")}})
    _write_stats(tmp_path, 1, {"execs": 250, "new": 0, "known": 0, "verdicts": {"OK": 245, "FAIL": 5},
                               "classes": {f.key.id: _rec(f.key, "FAIL", "new", 5, 1.5)}})
    (tmp_path / "stats" / "broken.json").write_text("{")
    s = fuzz_run.read_stats(tmp_path)
    assert s["execs"] == 350 and s["new"] == 1 and s["processes"] == 2
    assert s["verdicts"] == {"OK": 344, "FAIL": 6} and s["errors"] == {"KeyError at kvproof/x.py:f": 2}
    merged = fuzz_run.merged_classes(tmp_path)[f.key.id]
    assert merged["count"] == 6 and merged["first_s"] == 1.5 and merged["path"] == "/p"
    (c,) = fuzz_run.read_classes(tmp_path)
    assert c["contract"] == f.key.check and c["seconds"] == 1.5


def test_report_lists_new_classes_first_then_known_bugs_then_counts(tmp_path):
    from kvproof.judging.classkey import ClassKey

    new = _seed_fail().key
    bug = ClassKey("consumer", "oracle:kv_event", "", "vllm/x.py:f")
    by_design = ClassKey("manager", "hybrid.dcp_full_attention_or_mamba", "AssertionError", "vllm/y.py:g")
    refusal = ClassKey("consumer", "by-design:dcp not support", "AssertionError", "vllm/z.py:h")
    _write_stats(tmp_path, 0, {"execs": 13, "verdicts": {"FAIL": 8, "UNSUPPORTED": 5},
                               "classes": {new.id: _rec(new, "FAIL", "new", 1, 2.0, "/p"),
                                           bug.id: _rec(bug, "FAIL", "bug", 7, 0.5),
                                           by_design.id: _rec(by_design, "UNSUPPORTED", "new", 2, 0.1),
                                           refusal.id: _rec(refusal, "UNSUPPORTED", "new", 3, 0.2)}})
    ledger = FakeLedger({bug.id: FakeEntry("bug", title="SimpleCPU KV events"),
                         by_design.id: FakeEntry("by-design")})
    text, n_new = fuzz_run.report(tmp_path, ledger)
    lines = text.splitlines()
    assert n_new == 1 and lines[0] == "NEW classes: 1" and lines[1].startswith("NEW (manager)")
    assert "[reachable]" in lines[1] and new.id in lines[1]
    i_bug = next(i for i, ln in enumerate(lines) if ln.startswith("Known bugs seen"))
    assert "SimpleCPU KV events" in lines[i_bug + 1] and "7 hits" in lines[i_bug + 1]
    assert "by-design" not in "\n".join(lines[i_bug:i_bug + 2])
    assert any(ln.startswith("Classes by ledger status:") and "by-design 1 (2 hits)" in ln and "bug 1 (7 hits)" in ln
               and "new 1 (1 hits)" in ln and "not in the ledger 1 (3 hits)" in ln for ln in lines)
    assert lines[-1] == "Verdicts: UNSUPPORTED 5, FAIL 8"
    # Once the ledger holds the class, the same campaign folder reports nothing new.
    ledger.entries[new.id] = FakeEntry("bug")
    text, n_new = fuzz_run.report(tmp_path, ledger)
    assert n_new == 0 and text.splitlines()[0].startswith("No new class")


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
    from kvproof.fuzz.libfuzzer import DICT, SEEDS
    assert "-seed=3" in cmd and f"-dict={DICT}" in cmd and str(SEEDS) in cmd
    env = c.env_vars()
    assert env["KVPROOF_FUZZ_CORPUS_OUT"] == str(tmp_path / "c") and env["KVPROOF_FUZZ_PREMISE"] == "engine"


def test_runner_paths_are_absolute_and_findings_stay_in_the_campaign_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KVPROOF_OUT", raising=False)
    monkeypatch.delenv("KVPROOF_CORPUS", raising=False)
    args = fuzz_run.parse(["--python", sys.executable, "--workdir", "rel/w"])
    assert args.workdir == str(tmp_path / "rel" / "w")
    c = fuzz_run.Campaign(args)
    assert c.workdir == tmp_path / "rel" / "w" and c.crash_dir == c.workdir / "findings"
    plain = fuzz_run.Campaign(fuzz_run.parse(["--python", sys.executable]))
    assert plain.workdir.is_absolute() and plain.crash_dir.is_relative_to(plain.workdir)


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
    from kvproof.errors import UsageError

    with pytest.raises(UsageError):
        fuzz_run.parse(["--seconds", "0"])


def test_a_time_boxed_run_starts_its_own_counters_and_a_continuous_one_resumes(tmp_path):
    _write_stats(tmp_path, 0, {"execs": 7, "new": 1, "classes": {}})
    (tmp_path / "seen").mkdir()
    (tmp_path / "seen" / "abc").write_text("")
    c = fuzz_run.Campaign(fuzz_run.parse(["--python", sys.executable, "--continuous", "--workdir", str(tmp_path)]))
    c.prepare()
    assert c.base_execs == 7 and fuzz_run.read_stats(tmp_path)["new"] == 1 and (tmp_path / "seen" / "abc").exists()
    c = fuzz_run.Campaign(fuzz_run.parse(["--python", sys.executable, "--workdir", str(tmp_path)]))
    c.prepare()
    assert c.base_execs == 0 and fuzz_run.read_stats(tmp_path)["new"] == 0 and not (tmp_path / "seen").exists()


def test_a_fixed_class_is_a_known_bug_before_its_fix_and_a_regression_after(tmp_path):
    from kvproof.findings.ledger import Entry, Ledger, Status

    f = _seed_fail()
    _write_stats(tmp_path, 0, {"execs": 5, "verdicts": {"FAIL": 5},
                               "classes": {f.key.id: _rec(f.key, "FAIL", "fixed", 5, 1.0)}})
    book = Ledger.load(tmp_path / "ledger")
    book.add(Entry(key=f.key, status=Status.FIXED, title="the seed", why="w", fixed_in="0.28.0"))
    # before the fix: a known bug; on the fix release: the fix is gone, a NEW regression
    text, n_new = fuzz_run.report(tmp_path, Ledger.load(tmp_path / "ledger"), "0.27.0")
    assert n_new == 0 and "Known bugs seen" in text and "the seed" in text, text
    assert "fixed 1 (5 hits)" in text
    text, n_new = fuzz_run.report(tmp_path, Ledger.load(tmp_path / "ledger"), "0.28.0")
    assert n_new == 1 and "REGRESSION of 'the seed'" in text and "Known bugs seen" not in text, text
