"""The proof run: the 0.27 counterexample, 0.32 proofs, UNKNOWN and usage exit codes.

Baseline comparison, reachability labels and "nothing outside out/" are in
test_verify_baseline.py.
"""

from __future__ import annotations

import json

import pytest

import z3  # noqa: F401 -- the dev extra installs it: missing fails, not skips

from kvproof.spec import evaluate
from kvproof.spec.properties import BY_KEY
from kvproof.spec.query import COUNTEREXAMPLE, PROVED, UNKNOWN, Query
from kvproof.verify.cli import main
from kvproof.verify.drift import check_fingerprint
from kvproof.verify.runner import run_one

from kvproof import corpus as corpus_io
from kvproof.inputs.layout import Layout

HYBRID_ALIGN = "hybrid.group_multiple_of_hash[align]"


def test_027_counterexample_seed_shape():
    r = Query("0.27", BY_KEY[HYBRID_ALIGN], 2, "engine").run(30)
    assert r.status == COUNTEREXAMPLE
    lay = Layout.from_dict(r.layout)
    mamba = [g for g in lay.groups if g.kind == "mamba"]
    assert any(g.block_size != lay.cache.block_size for g in mamba)  # the seed's shape
    assert lay.cache.mamba_cache_mode == "align" and lay.cache.enable_prefix_caching
    out = evaluate(lay, "0.27")
    assert out.hash_block_size == out.scheduler_block_size
    assert "hybrid.group_multiple_of_hash" in r.contracts_py  # contracts.py agrees


@pytest.mark.parametrize("n", [2, 3, 4])
def test_032_proves_hybrid_align(n):
    assert Query("0.32", BY_KEY[HYBRID_ALIGN], n, "free").run(30).status == PROVED


def test_028_proves_scheduler_multiple_of_hash():
    assert Query("0.28", BY_KEY["coordinator.scheduler_multiple_of_hash[any]"], 3, "free").run(30).status == PROVED


def test_killable_query_and_unknown():
    spec = {"revision": "0.32", "property": HYBRID_ALIGN, "n": 8, "premise": "free", "timeout": 0.001}
    out = run_one(spec)
    assert out["status"] in (UNKNOWN, PROVED)  # 1 ms: z3 may still finish a trivial query
    assert out["status"] != COUNTEREXAMPLE


def test_tiny_timeout_exits_3(tmp_path):
    code = main(["--revisions", "0.32", "--properties", "efficiency.hash_block_size_1", "--min-groups", "8",
                 "--max-groups", "8", "--timeout", "0.0001", "--out", str(tmp_path / "out"), "--no-corpus",
                 "--no-drift", "--quiet", "--jobs", "1"])
    assert code == 3
    rep = json.loads((tmp_path / "out" / "verify.json").read_text())
    assert {r["engine"]["status"] for r in rep["rows"]} == {str(UNKNOWN)}
    assert (tmp_path / "out" / "junit.xml").exists() and (tmp_path / "out" / "verify.md").exists()


@pytest.mark.parametrize("argv", [["--revisions", "0.99"], ["--max-groups", "0"], ["--bogus"],
                                  ["--timeout", "-1"], ["--properties", "nothing-matches"], ["--jobs", "0"],
                                  ["--baseline", "/nonexistent/baseline.json"],
                                  ["--no-baseline", "--update-baseline"], ["--record", "--no-corpus"],
                                  ["--no-baseline", "--baseline", "x.json"]])
def test_usage_error_exits_2(argv, tmp_path, capsys):
    assert main(argv + ["--out", str(tmp_path), "--no-drift"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvproof verify") and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # refused before running anything


def test_run_finds_027_and_records_corpus(tmp_path):
    code = main(["--revisions", "0.27,0.32", "--properties", HYBRID_ALIGN, "--max-groups", "3", "--no-baseline",
                 "--out", str(tmp_path / "out"), "--corpus", str(tmp_path / "corpus"), "--record", "--no-drift",
                 "--quiet"])
    assert code == 1  # --no-baseline: the old gate, any safety counterexample
    rep = json.loads((tmp_path / "out" / "verify.json").read_text())
    verdicts = {(r["revision"], r["n"]): r["engine"]["status"] for r in rep["rows"]}
    assert verdicts[("0.27", 2)] == str(COUNTEREXAMPLE) and verdicts[("0.27", 3)] == str(COUNTEREXAMPLE)
    assert verdicts[("0.32", 2)] == str(PROVED) and verdicts[("0.32", 3)] == str(PROVED)
    files = list((tmp_path / "corpus").glob("*.json"))
    assert len(files) == 1
    assert [f.name for f in (tmp_path / "out" / "counterexamples").glob("*.json")] == [files[0].name]
    data = json.loads(files[0].read_text())
    assert data["kvproof"]["revision"] == "0.27" and data["kvproof"]["premise"] == "engine"
    assert data["kvproof"]["contract"] == "hybrid.group_multiple_of_hash" and data["kvproof"]["found_by"] == "z3"
    lay = Layout.from_dict(data)
    assert files[0].name == f"{lay.content_hash()}.json" and len(lay.groups) == 2


def test_corpus_never_overwrites(tmp_path):
    lay = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 2}, {"kind": "full_attention", "block_size": 1}]})
    p, new = corpus_io.publish(lay.with_meta(revision="0.27"), tmp_path)
    assert new
    p2, new2 = corpus_io.publish(lay.with_meta(revision="other"), tmp_path)
    assert p2 == p and not new2
    assert json.loads(p.read_text())["kvproof"]["revision"] == "0.27"
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".tmp")]


def test_drift_check():
    assert check_fingerprint("469eaaf1263a0d92", "0.27.0")["stale"] is False
    d = check_fingerprint("ffffffffffffffff", "0.40.0")
    assert d["stale"] and "model is stale for vLLM 0.40.0" in d["message"]


def test_workers_minimise_the_corpus_copies_as_the_parent_would(tmp_path):
    """Each chain's first witnesses are minimised on a worker (worker_seconds["corpus"]); the files
    published are the ones minimise_corpus gives in this process for the same first witnesses."""
    from types import SimpleNamespace

    from kvproof.spec.model import DCP_VALUES, MAX_BLOCK
    from kvproof.spec.query import minimise_corpus
    from kvproof.verify.cli import CORPUS_SECONDS, first_witnesses

    assert main(["--revisions", "0.27", "--properties", HYBRID_ALIGN, "--max-groups", "3", "--no-baseline",
                 "--out", str(tmp_path / "out"), "--no-drift", "--quiet", "--no-cache"]) == 1
    rep = json.loads((tmp_path / "out" / "verify.json").read_text())
    assert rep["worker_seconds"]["corpus"] > 0
    firsts = first_witnesses(rep["rows"])
    assert firsts and all(rev == "0.27" for rev, _, _ in firsts)
    args = SimpleNamespace(max_block=MAX_BLOCK, dcp_values=DCP_VALUES)
    want = {minimise_corpus(w["layout"], rev, key, premise, args.max_block, args.dcp_values,
                            seconds=CORPUS_SECONDS).content_hash() for (rev, key, premise), w in firsts.items()}
    got = {f.stem for f in (tmp_path / "out" / "counterexamples").glob("*.json")}
    assert got == want


def test_a_corpus_task_minimises_as_the_parent_and_write_corpus_takes_it():
    """run_corpus (the worker's side) gives minimise_corpus's layout for a witness padded to 4 groups;
    write_corpus publishes a worker's minimisation of the same task as it is, without redoing it."""
    from types import SimpleNamespace

    from kvproof.spec.model import DCP_VALUES, MAX_BLOCK
    from kvproof.spec.query import minimise_corpus, pad
    from kvproof.verify.cli import CORPUS_SECONDS, corpus_task, write_corpus
    from kvproof.verify.runner import run_corpus

    r = Query("0.27", BY_KEY[HYBRID_ALIGN], 2, "engine").run(30)
    assert r.status == COUNTEREXAMPLE
    padded = pad(r.layout, 4)
    args = SimpleNamespace(max_block=MAX_BLOCK, dcp_values=DCP_VALUES)
    task = corpus_task("0.27", HYBRID_ALIGN, "engine", padded, args)
    got = Layout.from_dict(run_corpus(task)["layout"])
    want = minimise_corpus(padded, "0.27", HYBRID_ALIGN, "engine", MAX_BLOCK, DCP_VALUES, seconds=CORPUS_SECONDS)
    assert got.content_hash() == want.content_hash() and len(got.groups) < 4

    row = {"kind": "safety", "revision": "0.27", "property": HYBRID_ALIGN, "n": 4,
           "engine": {"status": str(COUNTEREXAMPLE), "layout": padded}}
    marker = Layout.from_dict(padded)  # what "the worker" returned (unshrunk): published as it is
    args.corpus_done = {("0.27", HYBRID_ALIGN, "engine"): (task, marker.to_dict())}
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        written = write_corpus({"rows": [row]}, [Path(d)], args)
        assert [Path(w["path"]).stem for w in written] == [marker.with_meta(
            revision="0.27", contract="hybrid.group_multiple_of_hash", premise="engine", found_by="z3",
            property=HYBRID_ALIGN, scenario="align").content_hash()]
