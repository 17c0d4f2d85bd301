"""Consumer fingerprints (kvproof.spec.consumer_fingerprint) and their drift alarm, without vLLM.

Small synthetic source trees in tmp_path stand in for releases; a fake
environment home (KVPROOF_ENV_HOME) stands in for installed environments.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from kvproof import facts
from kvproof.spec import consumer_fingerprint as cf
from kvproof.verify import consumer_drift as cd

COORD = "vllm/v1/core/kv_cache_coordinator.py"
OFF = "vllm/distributed/kv_transfer/kv_connector/v1/"
SIMPLE = "vllm/v1/simple_kv_offload/manager.py"

HYBRID = '''\
import functools


class HybridKVCacheCoordinator:
    """doc"""

    @functools.cache
    def find_longest_cache_hit(self, hashes, n):
        return n


def get_kv_cache_coordinator(cfg):
    return cfg
'''


def tree(root, files: dict[str, str], version: str | None = None):
    (root / "vllm").mkdir(parents=True, exist_ok=True)
    (root / "vllm/__init__.py").write_text("")
    if version:
        (root / "vllm/_version.py").write_text(f"__version__ = version = '{version}'\n")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def test_a_method_is_its_def_text_decorators_included(tmp_path):
    fps = cf.fingerprints(tree(tmp_path, {COORD: HYBRID}))
    method = HYBRID[HYBRID.index("    @functools"):HYBRID.index("\n\n\ndef ")] + "\n"
    assert fps[f"{COORD}:HybridKVCacheCoordinator.find_longest_cache_hit"] == sha(method)
    assert fps[f"{COORD}:get_kv_cache_coordinator"] == sha("def get_kv_cache_coordinator(cfg):\n    return cfg\n")


def test_absent_names_and_files_are_none(tmp_path):
    fps = cf.fingerprints(tree(tmp_path, {COORD: HYBRID}))
    assert fps[f"{COORD}:KVCacheCoordinator.__init__"] is None  # class absent
    assert fps[f"{COORD}:replay_boundaries"] is None  # module function absent
    assert fps["vllm/v1/request.py:Request.__init__"] is None  # file absent
    assert fps[f"{SIMPLE}:SimpleCPUOffloadScheduler.*"] is None  # a wildcard's class absent
    assert set(k for k, v in fps.items() if v) == {f"{COORD}:HybridKVCacheCoordinator.find_longest_cache_hit",
                                                   f"{COORD}:get_kv_cache_coordinator"}


def test_a_wildcard_is_every_def_of_the_class_and_overloads_join(tmp_path):
    src = ("class SimpleCPUOffloadScheduler:\n    x: int = 1\n\n    def a(self):\n        pass\n\n"
           "    def b(self):\n        pass\n\n    def b(self, y):\n        pass\n")
    fps = cf.fingerprints(tree(tmp_path, {SIMPLE: src}))
    mine = {k.split(":")[1]: v for k, v in fps.items() if k.startswith(SIMPLE)}
    assert set(mine) == {"SimpleCPUOffloadScheduler.x", "SimpleCPUOffloadScheduler.a", "SimpleCPUOffloadScheduler.b"}
    assert mine["SimpleCPUOffloadScheduler.x"] == sha("    x: int = 1\n")
    assert mine["SimpleCPUOffloadScheduler.b"] == sha("    def b(self):\n        pass\n\n    def b(self, y):\n        pass\n")
    assert cf.consumer_of(f"{SIMPLE}:SimpleCPUOffloadScheduler.a").name == "SimpleCPUOffloadScheduler.*"


def test_a_moved_file_keeps_its_key_and_fingerprint(tmp_path):
    cls = "class OffloadingConnectorScheduler:\n    def _lookup(self, k):\n        return k\n"
    here = cf.fingerprints(tree(tmp_path / "a", {OFF + "offloading/scheduler.py": cls}))
    moved = cf.fingerprints(tree(tmp_path / "b", {OFF + "offloading_connector.py": "import os\n\n\n" + cls}))
    key = f"{OFF}offloading/scheduler.py:OffloadingConnectorScheduler._lookup"
    assert here[key] is not None and here[key] == moved[key]
    assert cf.diff(here, moved) == []


def test_diff_names_area_kind_and_note_in_catalogue_order(tmp_path):
    old = cf.fingerprints(tree(tmp_path / "a", {COORD: HYBRID}))
    new_src = HYBRID.replace("return n", "return n - 1") + "\n\ndef replay_boundaries(r):\n    return r\n"
    new = cf.fingerprints(tree(tmp_path / "b", {COORD: new_src.replace("def get_kv_cache_coordinator", "def _g")}))
    rows = cf.diff(old, new)
    assert [(a, k.split(":")[1], o is None, n is None) for a, k, o, n, _ in rows] == [
        ("coordinator", "replay_boundaries", True, False),  # appeared
        ("coordinator", "get_kv_cache_coordinator", False, True),  # vanished
        ("coordinator", "HybridKVCacheCoordinator.find_longest_cache_hit", False, False)]  # changed
    assert all(note for *_, note in rows)


def test_the_catalogue_is_well_formed():
    keys = [c.key for c in cf.CONSUMERS]
    assert len(keys) == len(set(keys))
    assert all(c.note and c.area and c.paths and ":" not in c.name for c in cf.CONSUMERS)


def test_write_rule_keeps_unchanged_and_leaves_changed_at_the_previous_release():
    rec = {"releases": {}}
    a, b = f"{COORD}:get_kv_cache_coordinator", f"{COORD}:replay_boundaries"
    cf.merge(rec, "0.33.0", {a: "1", b: None}, "t", reviewed=True)
    assert {k: v["modelled_as"] for k, v in rec["releases"]["0.33.0"]["functions"].items()} == {a: "0.33.0", b: "0.33.0"}
    changed = cf.merge(rec, "0.34.0", {a: "1", b: "2", "x.py:new": "3"}, "t")
    assert sorted(changed) == sorted([a, b, "x.py:new"])  # all new to 0.34.0's record
    f = rec["releases"]["0.34.0"]["functions"]
    assert f[a]["modelled_as"] == f[b]["modelled_as"] == f["x.py:new"]["modelled_as"] == "0.33.0"
    cf.merge(rec, "0.34.0", {a: "1", b: "2", "x.py:new": "3"}, "t", reviewed=True)  # caught up
    assert cf.merge(rec, "0.34.0", {a: "1", b: "9", "x.py:new": "3"}, "t") == [b]  # a later rewrite
    f = rec["releases"]["0.34.0"]["functions"]
    assert (f[a]["modelled_as"], f[b]["modelled_as"]) == ("0.34.0", "0.33.0")  # kept / not caught up
    assert json.loads(cf.dump(rec))["releases"] == rec["releases"]


def test_the_record_is_the_writers_and_covers_every_managed_release():
    text = cf.RECORD.read_text()
    rec = cf.load()
    assert cf.dump(rec) == text, "hand-edited: write it with python -m kvproof.verify.consumer_drift --write"
    plain = {c.key for c in cf.CONSUMERS if not c.name.endswith(".*")}
    for r in facts.MANAGED_RELEASES:
        assert r in rec["releases"], f"{r}: no reviewed consumer record"
        funcs = rec["releases"][r]["functions"]
        assert plain <= set(funcs)
        assert {v["modelled_as"] for v in funcs.values()} <= set(rec["releases"])


@pytest.fixture
def world(tmp_path, monkeypatch):
    """Two fake installed releases (0.98.0, 0.99.0) and an empty record."""
    home = tmp_path / "envs"
    for v, src in (("0.98.0", HYBRID), ("0.99.0", HYBRID.replace("return n", "return 0"))):
        root = home / f"vllm-{v}"
        tree(root / "lib/python3.11/site-packages", {COORD: src}, v)
        (root / "kvproof-manifest.json").write_text(json.dumps({"vllm": v}))
    monkeypatch.setenv("KVPROOF_ENV_HOME", str(home))
    return tmp_path / "record.json"


def test_cli_write_check_and_report(world, capsys):
    assert cd.main(["--record", str(world), "--write", "--release", "0.98.0", "--reviewed"]) == 0
    assert cd.main(["--record", str(world), "--release", "0.98.0"]) == 0
    assert cd.main(["--record", str(world), "--release", "0.99.0"]) == 1  # no reviewed record
    assert cd.main(["--record", str(world), "--write", "--release", "0.99.0"]) == 0
    capsys.readouterr()
    assert cd.main(["--record", str(world), "--from", "0.98.0", "--to", "0.99.0"]) == 0
    out = capsys.readouterr().out
    assert "1 of" in out and "coordinator\n  changed" in out
    assert "HybridKVCacheCoordinator.find_longest_cache_hit  (modelled as 0.98.0)" in out
    rec = json.loads(world.read_text())
    assert rec["releases"]["0.99.0"]["modelled_as"] == "0.98.0"


def test_cli_check_fails_on_unrecorded_drift(world, tmp_path, capsys):
    cd.main(["--record", str(world), "--write", "--release", "0.98.0", "--reviewed"])
    changed = tree(tmp_path / "patched", {COORD: HYBRID.replace("return cfg", "return None")}, "0.98.0")
    assert cd.main(["--record", str(world), "--release", "0.98.0", "--root", str(changed)]) == 1
    assert "changed   vllm/v1/core/kv_cache_coordinator.py:get_kv_cache_coordinator" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    [], ["--from", "0.98.0"], ["--release", "banana"], ["--reviewed", "--release", "0.98.0"],
    ["--from", "0.98.0", "--to", "0.97.0"],  # 0.97.0: neither installed nor recorded
    ["--release", "0.98.0", "--root", "/nonexistent"], ["--write", "--from", "0.98.0", "--to", "0.99.0"],
    ["--write", "--root", "ROOT"], ["--write", "--release", "0.97.0", "--root", "ROOT"],  # ROOT holds 0.98.0
    ["--bogus"],
])
def test_cli_bad_input_is_one_line_and_exit_2(world, tmp_path, capsys, argv):
    root = str(tree(tmp_path / "root", {COORD: HYBRID}, "0.98.0"))
    before = world.exists()
    assert cd.main(["--record", str(world)] + [root if a == "ROOT" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(cd.PROG) and "Traceback" not in err
    assert world.exists() == before  # nothing written


def test_an_unreadable_record_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text("[1]")
    assert cd.main(["--record", str(bad), "--from", "0.98.0", "--to", "0.99.0"]) == 2
    assert "not a consumer fingerprint record" in capsys.readouterr().err
