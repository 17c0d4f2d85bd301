"""Class keys that separate causes (issue 44 item 3): a bare assert is keyed by its condition and
caller, a hit regression by the group kinds whose manager answer shrank. No vLLM."""

from __future__ import annotations

import importlib.util

from kvproof import differential
from kvproof.judging.classkey import ClassKey, class_key
from kvproof.consumer.observations import Observation
from kvproof.consumer.result import ConsumerResult, RunState
from kvproof.consumer.stream import Req, Stream
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.outcome import StageError, bare_assert, source_condition
from kvproof.verdicts import Verdict

HELPER = '''\
def resolve(block_size, hash_block_size):
    if block_size == hash_block_size:
        return 1
    assert (block_size %
            hash_block_size  ==  0)
    return 2


def checked(x):
    assert x > 0, "x must be positive"


def lookup():
    return resolve(16, 5)


def store():
    return resolve(4, 16)
'''


def _module(tmp_path):
    path = tmp_path / "site-packages" / "vllm" / "v1" / "helpers.py"
    path.parent.mkdir(parents=True)
    path.write_text(HELPER)
    spec = importlib.util.spec_from_file_location("kvproof_test_vllm_helpers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _raised(fn, *args):
    try:
        fn(*args)
    except AssertionError as err:
        return err
    raise AssertionError("did not raise")


def test_the_condition_is_read_from_the_source_whatever_its_layout():
    one = ["    assert block_size % hash_block_size == 0\n"]
    two = ["    assert (\n", "        block_size\n", "        % hash_block_size == 0\n", "    )\n"]
    assert source_condition(one, 1) == "block_size % hash_block_size == 0"
    # a traceback may name any line of a multi-line statement: the statement is found either way
    assert source_condition(two, 1) == source_condition(two, 3) == "block_size % hash_block_size == 0"
    assert source_condition(["x = 1\n"], 1) == "" and source_condition(one, 7) == ""
    assert source_condition(["    assert a | b, ''\n"], 1) == "a | b"


def test_a_bare_assert_carries_its_condition_and_caller_a_messaged_one_neither(tmp_path):
    mod = _module(tmp_path)
    cond, caller = bare_assert(_raised(mod.lookup))
    assert cond == "block_size % hash_block_size == 0"
    assert caller.startswith("vllm/v1/helpers.py:") and caller.endswith(" in lookup")
    assert bare_assert(_raised(mod.store))[1].endswith(" in store")
    assert bare_assert(_raised(mod.checked, 0)) == ("", "")  # it has a message: its stem keys it
    assert bare_assert(ValueError("")) == ("", "")


def _consumer_key(err, lay):
    """The class key of a consumer run that raised ``err`` (the worker's path: failures.raised)."""
    from kvproof.consumer.failures import raised
    st = RunState(ConsumerResult("x", "0.30.0"))
    raised(st, err)
    (obs,) = st.res.observations
    j = judge_consumer(st.res, lay)
    assert j.verdict == Verdict.FAIL
    return obs, j, class_key(j, lay)


def test_one_assert_met_from_two_callers_is_two_classes_keyed_by_its_condition(tmp_path):
    mod = _module(tmp_path)
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]})
    obs, j, a = _consumer_key(_raised(mod.lookup), lay)
    assert obs.cause.startswith("assert block_size % hash_block_size == 0 <- vllm/v1/helpers.py:")
    assert j.observed.condition == "block_size % hash_block_size == 0"
    assert j.observed.line() == "AssertionError: assert block_size % hash_block_size == 0"
    assert a == ClassKey("consumer", "raise:assert block_size % hash_block_size == 0", "AssertionError",
                         "vllm/v1/helpers.py:resolve <- vllm/v1/helpers.py:lookup")
    _, _, b = _consumer_key(_raised(mod.store), lay)
    assert b.check == a.check and b.frame.endswith("<- vllm/v1/helpers.py:store") and a.id != b.id
    assert ClassKey.parse(str(a)) == a
    # a messaged assert keeps its stem and its frame alone
    _, _, c = _consumer_key(_raised(mod.checked, 0), lay)
    assert c == ClassKey("consumer", "raise:x must be positive", "AssertionError", "vllm/v1/helpers.py:checked")


def test_a_result_from_before_the_condition_keeps_the_bare_key():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]})
    r = ConsumerResult("x", "0.27.0", [Observation("exception", 0, "AssertionError:  @ vllm/v1/x.py:3 in f")],
                       {"exception": 1})
    assert class_key(judge_consumer(r, lay)) == ClassKey("consumer", "raise:", "AssertionError", "vllm/v1/x.py:f")
    e = StageError("AssertionError", "", "vllm/v1/x.py:3 in f", "a | b", "vllm/v1/y.py:9 in g")
    assert e.line() == "AssertionError: assert a | b"
    assert StageError("ValueError", "m", "f").to_dict() == {"type": "ValueError", "message": "m", "frame": "f"}
    key = ClassKey("consumer", "raise:assert a | b", "AssertionError", "vllm/v1/x.py:f <- vllm/v1/y.py:g")
    assert ClassKey.parse(str(key)) == key


def _hit(req, hit, groups=None, external=0):
    return {"step": 0, "req": req, "hit": hit, "external": external, "truth": 200,
            **({"groups": groups} if groups is not None else {})}


def _run(hits):
    r = ConsumerResult("x", "v", scheduler_block_size=16)
    r.hits = hits
    return r


def test_lost_by_names_the_kinds_asked_for_the_old_hit_that_answered_less():
    x = _hit(1, 96, {"full_attention": [200, 96], "sliding_window": [96, 96]})
    # sliding window was asked for 96 and answered 0: it lost the hit (full attention held)
    assert differential.lost_by(x, _hit(1, 0, {"full_attention": [200, 96], "sliding_window": [96, 0]})) \
        == "sliding_window"
    # full attention cut to 32, the window only followed (asked 32): full attention alone is named
    assert differential.lost_by(x, _hit(1, 32, {"full_attention": [200, 32], "sliding_window": [32, 32]})) \
        == "full_attention"
    # both refused the old hit
    assert differential.lost_by(x, _hit(1, 0, {"full_attention": [200, 64], "sliding_window": [96, 0]})) \
        == "full_attention+sliding_window"
    # the lookup itself asked for less: the kinds whose answer fell below their own answer before
    assert differential.lost_by(x, _hit(1, 48, {"full_attention": [48, 48], "sliding_window": [48, 48]})) \
        == "full_attention+sliding_window"
    assert differential.lost_by(_hit(1, 96, {"mla": [40, 40]}), _hit(1, 40, {"mla": [40, 40]})) == "lookup"
    # the local hit held, the connector's part shrank
    assert differential.lost_by(_hit(1, 64, external=32), _hit(1, 64)) == "connector"
    assert differential.lost_by(x, _hit(1, 0)) == ""  # a run that recorded no answers


def test_a_regression_class_names_the_kind_that_lost_the_hit_beside_release_and_method():
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                       {"kind": "sliding_window", "block_size": 16, "sliding_window": 128}],
                            "speculative": {"method": "mtp", "num_speculative_tokens": 1}})
    st = Stream((200,), (Req(0, 200, 1), Req(0, 200, 1, 3)))
    old = _run([_hit(0, 0), _hit(1, 96, {"full_attention": [199, 96], "sliding_window": [96, 96]})])
    sw = _run([_hit(0, 0), _hit(1, 0, {"full_attention": [199, 96], "sliding_window": [96, 0]})])
    fa = _run([_hit(0, 0), _hit(1, 64, {"full_attention": [199, 64], "sliding_window": [64, 64]})])
    bare = _run([_hit(0, 0), _hit(1, 64)])
    rep = differential.diff([(lay, st)] * 3, {"0.32.0": [old, old, old], "0.33.0": [sw, fa, bare]}, margin=0)
    assert sorted(rep.classes()) == ["consumer|regression:hits@0.33.0[mtp:full_attention]||",
                                     "consumer|regression:hits@0.33.0[mtp:sliding_window]||",
                                     "consumer|regression:hits@0.33.0[mtp]||"]
    for key in rep.classes():
        assert differential.first_bad_release(ClassKey.parse(key).check) == "0.33.0"
    assert {c: [r["lost"] for r in v] for c, v in rep.to_dict()["classes"].items()}[
        "consumer|regression:hits@0.33.0[mtp:sliding_window]||"] == ["sliding_window"]
    # another scheduler block stays one cause, whatever lost the hit on it
    other = _run([_hit(0, 0), _hit(1, 0, {"full_attention": [199, 0]})])
    other.scheduler_block_size = 32
    (key,) = differential.diff([(lay, st)], {"0.32.0": [old], "0.33.0": [other]}, margin=0).classes()
    assert key == "consumer|regression:hits@0.33.0[scheduler-block]||"


def test_a_by_design_status_covers_only_the_cause_it_was_measured_on():
    """d8f1808a902e's argument is about Mamba: re-keyed to [mtp:mamba], the ledger no longer
    knows a full attention + sliding window regression of the same release and method."""
    from kvproof.findings.ledger import Ledger, Status
    led = Ledger.load()
    mamba = led.find("d8f1808a902e")
    assert mamba.status == Status.BY_DESIGN and mamba.key.check == "regression:hits@0.33.0[mtp:mamba]"
    assert ClassKey.parse("consumer|regression:hits@0.33.0[mtp:sliding_window]||") not in led \
        or led.get(ClassKey.parse("consumer|regression:hits@0.33.0[mtp:sliding_window]||")).id != mamba.id
