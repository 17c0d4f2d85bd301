"""kvproof.differential.chain without vLLM: the release differential pair by pair with each finding's
input, its classes with the ledger's word, the runs per release, the regressions rerun, the
drafts' share. The results are built by hand (the fields a worker fills: hits, observations,
scheduler block); the real worker runs in tests/consumer/test_compare_real.py and bench_differential."""

from __future__ import annotations

from dataclasses import replace

from kvproof.commands import compare
from kvproof import differential
from kvproof.judging.classkey import ClassKey
from kvproof.consumer.oracles import Observation
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Req, Stream
from kvproof.differential import Found, Input
from kvproof.findings.ledger import Entry, Ledger, Status
from kvproof.inputs.layout import Layout, Speculative

LAY = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]})
LAY2 = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 32}]})


def _res(second_hit: int, block: int = 16, fail: bool = False) -> ConsumerResult:
    """Request 0 hits nothing, request 1 (a resend of the same prompt) hits ``second_hit`` of 71."""
    r = ConsumerResult("x", "v", scheduler_block_size=block)
    r.hits = [{"step": 0, "req": 0, "hit": 0, "external": 0, "truth": 71},
              {"step": 1, "req": 1, "hit": second_hit, "external": 0, "truth": 71}]
    if fail:  # a hard oracle: the judge's FAIL
        r.observations.append(Observation("kv_event", 1, "BlockStored(...): hash #0 names other tokens"))
        r.counts["kv_event"] = 1
    return r


STREAM = Stream((71,), (Req(0, 71, 1), Req(0, 71, 1, 3)))


def _drafting(lay: Layout, method: str | None, modules: int = 1) -> Layout:
    """``lay`` speculating with ``method`` (two draft tokens), or not at all."""
    return replace(lay, speculative=Speculative(method, 2, modules) if method else None)


def _chain():
    """Three inputs on 0.28.0 -> 0.29.0 -> 0.30.0: on 0.29.0 "a" (eagle) and "b" (mtp) hit less, "c"
    (no drafts) newly FAILs; on 0.30.0 "a" hits back, "b" stays low, "c" cannot be expressed."""
    inputs = [Input("a", _drafting(LAY, "eagle"), STREAM), Input("b", _drafting(LAY2, "mtp"), STREAM),
              Input("c", LAY, STREAM)]
    refused = ConsumerResult("x", "v", not_expressible="not on this release")
    runs = {"0.28.0": [_res(64), _res(64), _res(64)],
            "0.29.0": [_res(48), _res(32), _res(64, fail=True)],
            "0.30.0": [_res(64), _res(32), refused]}
    return inputs, runs


def test_pairs_keep_each_finding_with_its_input_and_sum_to_the_whole_chain():
    inputs, runs = _chain()
    pairs = differential.pairs(inputs, runs, margin=0)
    assert [(p.previous, p.release) for p in pairs] == [("0.28.0", "0.29.0"), ("0.29.0", "0.30.0")]
    first, second = pairs
    assert [(f.name, f.regression.before, f.regression.after) for f in first.found] == [("a", 64, 48), ("b", 64, 32)]
    assert [(f.key, f.name, f.release, f.previous) for f in first.failing] == [
        ("consumer|oracle:kv_event||", "c", "0.29.0", "0.28.0")]
    assert "kv_event" in first.failing[0].line
    assert first.inputs_compared == 3 and second.inputs_compared == 2  # "c" not expressible on 0.30.0
    assert second.found == [] and second.report.gains == {"0.30.0": [1, 16]}
    whole = differential.diff([(lay, st) for _, lay, st in inputs], runs, margin=0)
    assert whole.requests_compared == sum(p.report.requests_compared for p in pairs) == 10
    assert [r.class_key for r in whole.regressions] == [f.regression.class_key for p in pairs for f in p.found]
    assert len(whole.newly_failing) == sum(len(p.report.newly_failing) for p in pairs) == 1
    assert not differential.pairs(inputs, runs, margin=32)[0].found  # the margin holds per input too


def test_regression_classes_group_by_key_with_the_worst_admission_and_the_ledgers_word(tmp_path):
    inputs, runs = _chain()
    found = differential.pairs(inputs, runs, margin=0)[0].found
    extra = [Found(replace(found[0].regression, before=71, request=0), "a2", _drafting(LAY, "eagle"), STREAM),
             found[0]._replace(regression=replace(found[0].regression, admission=1))]  # "a" again
    ledger = Ledger(tmp_path, {})
    ledger.add(Entry(ClassKey.parse("consumer|regression:hits@0.29.0[mtp]||"), Status.BY_DESIGN, "t", "w"))
    ledger = Ledger.load(tmp_path)
    eagle, mtp = differential.regression_classes([*found, *extra], ledger)
    assert (eagle.key, eagle.release, eagle.previous) == ("consumer|regression:hits@0.29.0[eagle]||", "0.29.0", "0.28.0")
    assert eagle.admissions == 3 and eagle.inputs == 2 and eagle.worst.name == "a2"  # lost 71 - 48 > 64 - 48
    assert eagle.ledger == "NEW" and not eagle.known and eagle.reproduced is None
    entry = ledger.get(ClassKey.parse(mtp.key))
    assert mtp.known and mtp.ledger == f"{entry.id} (by-design)" and mtp.worst.name == "b"
    assert differential.regression_classes(found, None)[1].ledger == "NEW"  # no ledger: everything NEW


def test_failing_classes_group_per_pair_and_class_in_the_order_met():
    inputs, runs = _chain()
    runs["0.28.0"][0], runs["0.29.0"][0] = _res(64), _res(64, fail=True)  # "a" newly fails too
    failing = [f for p in differential.pairs(inputs, runs, margin=0) for f in p.failing]
    assert [f.name for f in failing] == ["a", "c"]
    (cls,) = differential.failing_classes(failing, None)
    assert (cls.key, cls.release, cls.previous, cls.inputs, cls.first.name, cls.ledger) == (
        "consumer|oracle:kv_event||", "0.29.0", "0.28.0", 2, "a", "NEW")
    later = failing[1]._replace(release="0.30.0", previous="0.29.0")
    assert [(c.release, c.inputs) for c in differential.failing_classes([failing[0], later], None)] == [
        ("0.29.0", 1), ("0.30.0", 1)]


def test_a_fixed_class_met_again_on_its_fix_release_or_later_says_so():
    e = Entry(ClassKey("consumer", "raise:", "AssertionError", "vllm/v1/core/kv_cache_utils.py:resolve_block_hashes"),
              Status.FIXED, "t", "w", fixed_in="0.28.0")
    assert differential.ledgered(e, "0.27.0") == f"{e.id} (fixed)"
    assert differential.ledgered(e) == f"{e.id} (fixed)"
    assert differential.ledgered(e, "0.30.0") == f"{e.id} (fixed in 0.28.0, met again on 0.30.0)"
    assert differential.ledgered(None, "0.30.0") == "NEW"


def test_release_counts_name_why_a_run_is_not_compared_and_count_admissions_above_their_ideal():
    _, runs = _chain()
    raised = _res(64)
    raised.observations.append(Observation("exception", 1, "AssertionError"))
    broken = ConsumerResult("x", "v", harness_error="boom")
    over = _res(71)
    over.hash_block_size = 16  # 71 tokens hit where whole 16-token blocks allow 64: judge.ideal_hit
    runs["0.30.0"] += [raised, broken, over]
    counts = differential.release_counts(runs)
    assert counts["0.28.0"] == {"complete": 3, "admissions": 6, "above ideal": 0}
    assert counts["0.30.0"] == {"complete": 3, "not expressible": 1, "raised or stalled": 1, "error": 1,
                                "admissions": 8, "above ideal": 1}  # a refused or broken run has no hits


def test_reproduce_counts_the_admissions_that_regress_again_on_a_rerun():
    inputs, runs = _chain()
    pairs = differential.pairs(inputs, runs, margin=0)
    classes = [c for p in pairs for c in differential.regression_classes(p.found, None)]
    calls = []

    def rerun(envs, layouts):
        """The rerun (``tiers.client.consumed_on``'s shape, each Layout under its stream): "a" hits
        back on 0.29.0 (a connector's transfer at another step), "b" does not."""
        calls.append((len(layouts), list(envs)))
        older = [_res(64) for _ in layouts]
        newer = [_res(64 if lay.speculative.method == "eagle" else 32) for lay in layouts]
        return older, newer

    differential.reproduce(pairs, classes, {"0.28.0": "env28", "0.29.0": "env29", "0.30.0": "env30"}, 0, rerun)
    assert calls == [(2, ["env28", "env29"])]  # one call, the regressing pair only, each input once
    assert [(c.key.split("[")[1], c.reproduced) for c in classes] == [("eagle]||", 0), ("mtp]||", 1)]


def test_spec_share_and_mtp_modules_count_inputs_by_their_drafts():
    layouts = [_drafting(LAY, "eagle"), LAY, _drafting(LAY, "mtp"), _drafting(LAY2, "mtp", modules=2)]
    assert differential.spec_share(layouts) == (3, {"eagle": 1, "mtp": 2, "none": 1})
    assert differential.mtp_modules(layouts) == {1: 1, 2: 1}
    assert differential.spec_share([]) == (0, {})


def test_compare_prints_its_classes_through_the_package_summary(capsys, tmp_path):
    inputs, runs = _chain()
    rep = differential.diff([(lay, st) for _, lay, st in inputs], runs, margin=0)
    ledger = Ledger(tmp_path, {})
    ledger.add(Entry(ClassKey.parse("consumer|oracle:kv_event||"), Status.FIXED, "t", "w", fixed_in="0.28.0"))
    compare.print_report(rep, Ledger.load(tmp_path))
    out = capsys.readouterr().out.splitlines()
    (eagle,) = [ln for ln in out if "[eagle]" in ln]
    assert eagle.startswith("  REGRESSION NEW consumer|regression:hits@0.29.0[eagle]||: first bad release 0.29.0 "
                            "(after 0.28.0), 1 admissions; worst: input ")
    (failing,) = [ln for ln in out if "NEWLY FAILING" in ln]
    assert "(fixed in 0.28.0, met again on 0.29.0) on 0.29.0" in failing  # the ledger's word, as the bench tables it
