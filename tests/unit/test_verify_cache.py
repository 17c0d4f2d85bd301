"""kvproof.verify.cache: a cached result is exactly as sound as a fresh one.

A changed task, a changed source file it depends on or another z3 version
misses; an UNKNOWN is never stored; an UNKNOWN entry stays UNKNOWN.
"""

from __future__ import annotations

import json

import pytest

from kvproof.verdicts import ProofStatus
from kvproof.verify import cache as vc
from kvproof.verify.runner import Pool

TASK = {"revision": "0.32", "property": "unitary.hash_equals_block_size[any]", "n": 1, "premise": "free",
        "timeout": 20.0, "max_block": 1 << 20, "dcp_values": [1, 2, 3, 4, 8], "seed": None}


@pytest.fixture
def dep(tmp_path):
    f = tmp_path / "model.py"
    f.write_text("A = 1\n")
    return f


def test_round_trip_and_changed_task_misses(tmp_path, dep):
    c = vc.Cache(tmp_path / "results.json")
    assert c.get("query", TASK) is None
    assert c.put("query", TASK, {"status": ProofStatus.PROVED, "seconds": 0.5}, [str(dep)])
    c.save()
    c2 = vc.Cache(tmp_path / "results.json")
    hit = c2.get("query", TASK)
    assert hit == {"status": "PROVED", "seconds": 0.5, "cached": True}
    for change in ({"n": 2}, {"premise": "engine"}, {"timeout": 10.0}, {"max_block": 1 << 10},
                   {"dcp_values": [1, 2]}, {"seed": {"groups": []}}):
        assert c2.get("query", dict(TASK, **change)) is None, change
    assert c2.get("label", TASK) is None  # another kind


def test_changed_source_or_z3_misses(tmp_path, dep, monkeypatch):
    c = vc.Cache(tmp_path / "results.json")
    c.put("query", TASK, {"status": ProofStatus.COUNTEREXAMPLE, "seconds": 0.1}, [str(dep)])
    c.save()
    monkeypatch.setattr(vc, "_z3_version", lambda: "0.0.0")
    assert vc.Cache(tmp_path / "results.json").get("query", TASK) is None
    monkeypatch.undo()
    dep.write_text("A = 2\n")
    c3 = vc.Cache(tmp_path / "results.json")
    assert c3.get("query", TASK) is None
    c3.dirty = True
    c3.save()  # the stale entry is dropped
    assert json.loads((tmp_path / "results.json").read_text())["entries"] == {}


def test_unknown_is_never_stored(tmp_path, dep):
    c = vc.Cache(tmp_path / "results.json")
    assert not c.put("query", TASK, {"status": ProofStatus.UNKNOWN, "seconds": 20.0, "detail": "timeout"}, [str(dep)])
    assert not c.put("query", TASK, {"status": "UNKNOWN"}, [str(dep)])
    assert not c.put("query", TASK, {"status": ProofStatus.PROVED, "obligations": [
        {"id": "step:x", "status": ProofStatus.PROVED}, {"id": "step:y", "status": ProofStatus.UNKNOWN}]}, [str(dep)])
    assert c.get("query", TASK) is None


def test_cached_unknown_stays_unknown(tmp_path, dep):
    """An UNKNOWN entry (a hand edit, an older writer) comes back UNKNOWN: never PROVED."""
    c = vc.Cache(tmp_path / "results.json")
    c.put("query", TASK, {"status": ProofStatus.PROVED}, [str(dep)])
    key = c.key("query", TASK)
    c.data["entries"][key]["result"] = {"status": "UNKNOWN", "seconds": 20.0, "detail": "planted"}
    from kvproof.verify.report import status
    hits = []
    pool = Pool(1, cache=c)
    try:
        pool.run([(0, dict(TASK))], lambda tid, r: hits.append(r) or [])
    finally:
        pool.close()
    assert pool.started == 0  # answered without a worker
    assert status(hits[0]["status"]) == ProofStatus.UNKNOWN


def test_pool_stores_and_reuses(tmp_path):
    """A worker's definite result is stored with the worker's kvproof sources; the next run reuses it."""
    c = vc.Cache(tmp_path / "results.json")
    first, second = [], []
    pool = Pool(1, cache=c)
    try:
        pool.run([(0, dict(TASK))], lambda tid, r: first.append(r) or [])
    finally:
        pool.close()
    assert pool.started == 1 and c.stored == 1
    deps = next(iter(c.data["deps"].values()))
    assert any(p.endswith("spec/query.py") for p in deps) and any(p.endswith("spec/model.py") for p in deps)
    c.save()
    c2 = vc.Cache(tmp_path / "results.json")
    pool = Pool(1, cache=c2)
    try:
        pool.run([(0, dict(TASK))], lambda tid, r: second.append(r) or [])
    finally:
        pool.close()
    assert pool.started == 0 and c2.hits == 1
    assert str(second[0]["status"]) == ProofStatus(first[0]["status"]).name
    assert second[0]["cached"] is True
