"""Speculation (the Layout's method and length, the stream's acceptance), the release differential's
diff and the EAGLE ideal (no vLLM)."""

import random
from dataclasses import replace

import pytest
from kvproof import facts

from kvproof.commands import compare
from kvproof import differential
from kvproof.consumer.drafts import Acceptance, Drafts, effective_drafts, output_token, wrong_token
from kvproof.consumer.oracles import Observation
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Req, Stream, random_input, shrink
from kvproof.errors import LayoutError
from kvproof.judging.judge import above_ideal, ideal_hit, judge_consumer, spec_ideal_hit
from kvproof.verdicts import Verdict
from kvproof.inputs.layout import Layout, Speculative

FA = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]})


def drafting(method, k=1, modules=1, layout=FA):
    """``layout`` speculating with ``method`` (the Layout's record of it)."""
    return replace(layout, speculative=Speculative(method, k, modules))


def test_proposal_follows_the_acceptance_pattern():
    assert Drafts("eagle", 3, "all").proposal("r0", 10) == [output_token(10), output_token(11), output_token(12)]
    none = Drafts("eagle", 3, "none").proposal("r0", 10)
    assert none[0] == wrong_token(10) != output_token(10)
    seeded = Drafts("ngram", 4, "seeded", 0.5, 7)
    # deterministic per (request, length), and accepted drafts are a prefix of the proposal
    assert seeded.proposal("r1", 40) == seeded.proposal("r1", 40)
    lens = {seeded.accepted(f"r{i}", 40, 4) for i in range(50)}
    assert lens <= set(range(5)) and len(lens) > 2


@pytest.mark.parametrize("accept,needle", [
    ([], "must be an object"),
    ({"mode": "some"}, "accept.mode must be one of"),
    ({"mode": "seeded", "p": 2}, "p must be a number"),
    ({"mode": "seeded", "seed": -1}, "seed must be"),
    ({"method": "eagle"}, "unknown field 'method'"),
])
def test_bad_acceptance_is_one_line(accept, needle):
    with pytest.raises(LayoutError) as err:
        Stream.from_dict({"requests": [{"suffix_len": 4}], "accept": accept})
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_speculation_is_recorded_once_and_an_older_file_reads_as_it_was_meant():
    """Issue 43 item 2: the Layout records the method, length and modules; the stream only the
    acceptance. A stream object with the old ``spec`` is refused alone (it needs its Layout), and
    read through its Layout: moved there, the same drafts as before; a Layout already
    speculating otherwise is refused, never silently preferred."""
    reqs = [{"prefix_len": 0, "suffix_len": 4}]
    old = {"method": "mtp", "k": 3, "modules": 2, "accept": "seeded", "p": 0.3, "seed": 9}
    with pytest.raises(LayoutError, match="speculation is the Layout's now"):
        Stream.from_dict({"requests": reqs, "spec": old})
    lay = Layout.from_dict(dict(FA.to_dict(), kvproof={"stream": {"requests": reqs, "spec": old}}))
    assert lay.speculative == Speculative("mtp", 3, 2) and lay.stream.accept == Acceptance("seeded", 0.3, 9)
    assert effective_drafts(lay, lay.stream) == Drafts("mtp", 3, "seeded", 0.3, 9, modules=2)
    again = Layout.from_dict(lay.to_dict(with_meta=True))  # written back: the new form only
    assert "spec" not in again.to_dict(with_meta=True)["kvproof"]["stream"] and again.stream == lay.stream
    assert again == lay
    plain = Layout.from_dict(dict(FA.to_dict(), kvproof={"stream": {"requests": reqs, "spec": {"method": "ngram"}}}))
    assert plain.stream.accept == Acceptance() and "accept" not in plain.stream.to_dict()
    with pytest.raises(LayoutError, match="differs from the layout's speculative"):
        Layout.from_dict(dict(drafting("eagle", 2).to_dict(), kvproof={"stream": {"requests": reqs, "spec": old}}))
    with pytest.raises(LayoutError, match="method mtp only"):
        Layout.from_dict(dict(FA.to_dict(), speculative={"method": "eagle", "mtp_modules": 2}))


def test_extension_prompt_is_the_previous_turn_with_its_outputs():
    s = Stream.from_dict({"prefixes": [20], "requests": [
        {"prefix_len": 20, "suffix_len": 3, "max_tokens": 5},
        {"extends": 0, "suffix_len": 4, "arrival": 9}], "accept": {"mode": "none"}})
    first, second = s.prompt(0), s.prompt(1)
    assert second[:23] == first and second[23:28] == [output_token(p) for p in range(23, 28)]
    assert len(second) == 32 and s.accept == Acceptance("none") and Stream.from_dict(s.to_dict()) == s
    with pytest.raises(LayoutError, match="extends"):
        Stream.from_dict({"requests": [{"suffix_len": 1, "extends": 0}]})


def test_generated_inputs_round_trip_and_speculate_at_the_share():
    rng = random.Random(1)
    got = [random_input(rng, FA, 400, 0.4) for _ in range(300)]
    assert all(Layout.from_dict(lay.with_stream(s).to_dict(with_meta=True)).stream == s for lay, s in got)
    share = sum(lay.speculative is not None for lay, _ in got) / len(got)
    assert 0.3 < share < 0.5
    assert {lay.speculative.method for lay, _ in got if lay.speculative} == set(facts.GENERATED_SPEC_METHODS)
    assert {s.accept.mode for lay, s in got if lay.speculative} == set(facts.SPEC_ACCEPT)
    assert all(s.accept == Acceptance() for lay, s in got if lay.speculative is None)
    assert any(r.extends is not None for _, s in got for r in s.requests)


def test_shrink_accepts_every_draft_and_remaps_extensions():
    s = Stream((30,), (Req(0, 30, 2, 0, 2), Req(0, 10, 5, 1, 1), Req(suffix_len=3, arrival=4, extends=0)),
               accept=Acceptance("seeded", 0.5, 3))
    # "fails" while some request extends the first one
    small = shrink(s, lambda t: any(r.extends == 0 for r in t.requests))
    assert small.accept == Acceptance() and len(small.requests) == 2
    assert small.requests[1].extends == 0 and small.prompt(1)[:small.requests[0].suffix_len] == small.prompt(0)[:small.requests[0].suffix_len]


def test_ideal_hit_under_the_release_rules():
    plain, eagle = ConsumerResult("x", "0.32.0"), ConsumerResult("x", "0.32.0", eagle_drop=True)
    ahead = ConsumerResult("x", "0.33.0", hash_lookahead=1)
    assert spec_ideal_hit(plain, 71, 16) == 64
    assert spec_ideal_hit(eagle, 71, 16) == 48  # the field formula (floor(N/B) - 1) * B
    assert spec_ideal_hit(eagle, 10, 16) == 0
    # a resend of 65 tokens: four blocks have their one lookahead token inside the prompt
    assert spec_ideal_hit(ahead, 64, 16) == 64 and spec_ideal_hit(ahead, 63, 16) == 48
    two = ConsumerResult("x", "0.33.0", hash_lookahead=2)
    assert spec_ideal_hit(two, 64, 16) == 48  # 65 tokens, lookahead 2: the fourth block's hash needs token 65


def _row(truth, lcp, tokens, hit=0, external=0, **kw):
    return {"step": 0, "req": 0, "hit": hit, "external": external, "truth": truth, "lcp": lcp, "tokens": tokens, **kw}


def test_ideal_is_an_upper_bound_on_every_rule_the_hit_oracle_accepts():
    ahead = ConsumerResult("x", "0.33.0", hash_lookahead=1, hash_block_size=16)
    # issue 38's 'r0 224/208/224' on 0.33.0: a 225-token resend, lookahead 1: the hit of 224 is legal
    assert ideal_hit(ahead, _row(224, 225, 225)) == 224
    # the common prefix with computed KV bounds the hit, not only the prompt
    assert ideal_hit(ahead, _row(100, 100, 300)) == 96
    # a lookahead block needs its next token in common too: sharing exactly 2304 tokens of a cached
    # 2404 (Qwen3-Next's 1152-token block) matches one block, sharing 2305 two (the Truth's tokens,
    # KV computed or not); without drafts the 2304 are a whole match
    big = ConsumerResult("x", "0.33.0", hash_lookahead=1, hash_block_size=1152)
    assert ideal_hit(big, _row(2304, 2304, 2344, lcp_tokens=2304)) == 1152
    assert ideal_hit(big, _row(2304, 2304, 2344, lcp_tokens=2305)) == 2304
    assert ideal_hit(ConsumerResult("x", "0.33.0", hash_block_size=1152), _row(2304, 2304, 2344, lcp_tokens=2304)) == 2304
    assert ideal_hit(big, _row(2304, 2304, 2344)) == 2304  # rows recorded before lcp_tokens: no bound from it
    # EAGLE's drop gives back a unit of what matched: a fully cached 32-token prompt still hits 16
    eagle = ConsumerResult("x", "0.32.0", eagle_drop=True, hash_block_size=16)
    assert ideal_hit(eagle, _row(31, 32, 32)) == 16 and ideal_hit(eagle, _row(31, 31, 32)) == 0
    # a connector load is token-granular, chunked local attention's null blocks are free
    plain = ConsumerResult("x", "0.32.0", hash_block_size=16)
    assert ideal_hit(plain, _row(175, 176, 176, hit=160, external=15)) == 175
    assert ideal_hit(plain, _row(10, 10, 200, free=128)) == 128


def test_a_hit_above_the_ideal_is_never_silent():
    res = ConsumerResult("x", "0.33.0", hash_lookahead=1, hash_block_size=16)
    res.efficiency.admissions, res.efficiency.reusable_tokens = 1, 224
    res.efficiency.hit_tokens = res.efficiency.prompt_tokens = 224
    res.hits = [_row(224, 225, 225, hit=224)]
    assert not above_ideal(res) and judge_consumer(res).verdict == Verdict.OK
    assert "r0 224/224/224" in judge_consumer(res).note
    res.hits = [_row(224, 225, 225, hit=240)]  # no oracle saw it: kvproof's ideal must be wrong
    j = judge_consumer(res)
    assert j.verdict == Verdict.ERROR and j.observed.type == "oracle:ideal" and "above its ideal 224" in j.line()
    res.observations.append(Observation("prefix_hit", 0, "r0: hit 240 tokens but ..."))
    assert judge_consumer(res).verdict == Verdict.FAIL  # a wrong hit the oracle faulted stays FAIL


def _res(hits, **kw):
    r = ConsumerResult("x", "v", **kw)
    r.hits = [{"step": 0, "req": q, "hit": h, "external": 0, "truth": 71} for q, h in hits]
    return r


def test_diff_names_the_first_bad_release_once_per_family():
    lay = drafting("eagle", 2)
    st = Stream((71,), (Req(0, 71, 1), Req(0, 71, 1, 3)))
    runs = {"0.27.0": [_res([(0, 0), (1, 64)])], "0.28.0": [_res([(0, 0), (1, 64)])],
            "0.32.0": [_res([(0, 0), (1, 48)])]}
    rep = differential.diff([(lay, st)], runs, margin=0)
    assert rep.requests_compared == 4
    (key, regs), = rep.classes().items()
    assert key == "consumer|regression:hits@0.32.0[eagle]||" and regs[0].before == 64 and regs[0].after == 48
    assert differential.first_bad_release(key.split("|")[1]) == "0.32.0"
    assert differential.first_bad_release("oracle:kv_event") is None
    assert not differential.diff([(lay, st)], runs, margin=16).regressions
    assert rep.gains == {} and rep.to_dict()["gains"] == {}
    back = differential.diff([(lay, st)], {"0.32.0": runs["0.32.0"], "0.33.0": runs["0.27.0"]}, margin=0)
    assert back.gains == {"0.33.0": [1, 16]} and not back.regressions  # the other side is counted, not a class
    assert differential.diff([(lay, st)], {"0.32.0": runs["0.32.0"], "0.33.0": runs["0.27.0"]}, margin=16).gains == {}
    raised = _res([(0, 0)])
    raised.observations.append(Observation("exception", 1, "AssertionError"))
    rep = differential.diff([(lay, st)], {"0.27.0": runs["0.27.0"], "0.32.0": [raised]}, margin=0)
    assert rep.not_compared == {"raised or stalled": 1} and not rep.regressions
    assert [(r, p) for r, p, _, _ in rep.newly_failing] == [("0.32.0", "0.27.0")]
    wrong = _res([(0, 0), (1, 64)])
    wrong.observations.append(Observation("kv_event", 1, "BlockStored(...): hash #0 names other tokens"))
    wrong.counts["kv_event"] = 1
    rep = differential.diff([(lay, st)], {"0.27.0": runs["0.27.0"], "0.32.0": [wrong]}, margin=0)
    assert len(rep.newly_failing) == 1 and "kv_event" in rep.newly_failing[0][3] and not rep.regressions
    assert not differential.diff([(lay, st)], {"0.27.0": [wrong], "0.32.0": [wrong]}, margin=0).newly_failing
    # a newly failing input is named by its FAIL's class: unknown to the ledger, it turns compare red
    assert rep.newly_failing_classes == ["consumer|oracle:kv_event||"]
    from kvproof.judging.classkey import ClassKey
    assert compare.new_classes(rep, set()) == ["consumer|oracle:kv_event||"]
    assert compare.new_classes(rep, {ClassKey.parse("consumer|oracle:kv_event||")}) == []


def test_a_release_that_built_another_scheduler_block_is_one_class_whatever_the_drafts(tmp_path):
    from kvproof.judging.classkey import ClassKey
    from kvproof.findings.ledger import Entry, Ledger, Status
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]})
    items, runs = [], {"0.28.0": [], "0.29.0": []}
    for method in ("mtp", "eagle3"):
        items.append((drafting(method, 2, layout=lay), Stream((71,), (Req(0, 71, 1), Req(0, 71, 1, 3)))))
        runs["0.28.0"].append(_res([(0, 0), (1, 64)], scheduler_block_size=16))
        runs["0.29.0"].append(_res([(0, 0), (1, 48)], scheduler_block_size=48))
    rep = differential.diff(items, runs, margin=0)
    (key, regs), = rep.classes().items()
    assert key == "consumer|regression:hits@0.29.0[scheduler-block]||" and len(regs) == 2
    ledger = Ledger(tmp_path, {})
    assert compare.new_classes(rep, ledger) == [key]
    ledger.add(Entry(ClassKey.parse(key), Status.BY_DESIGN, "t", "w"))
    assert compare.new_classes(rep, Ledger.load(tmp_path)) == []


def test_compare_usage_errors_are_one_line(capsys):
    assert compare.main(["--from", "0.27.0"]) == 2
    assert compare.main(["--from", "0.27.0", "--to", "0.28.0"]) == 2
    assert compare.main(["--from", "0.27.0", "--to", "0.28.0", "--generated", "3", "--spec-share", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("kvproof compare:") for line in err)


def test_layout_states_the_engines_speculation():
    from kvproof.consumer.drafts import effective_drafts
    from kvproof.errors import Unchecked
    lay = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 64, "count": 3},
                                       {"kind": "full_attention", "block_size": 64, "eagle": True}],
                            "speculative": {"method": "mtp", "num_speculative_tokens": 2}})
    assert lay.summary() == "mamba:64x3,full_attention[eagle]:64 cache=64 pc mamba=align spec=mtp:2"
    assert Layout.from_dict(lay.to_dict()) == lay and lay.groups[3].eagle and not lay.groups[0].eagle
    plain = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 64, "count": 3},
                                         {"kind": "full_attention", "block_size": 64}]})
    assert "speculative" not in plain.to_dict() and plain.content_hash() != lay.content_hash()
    # the layout's method drafts, under the stream's acceptance (every draft, unless it says)
    s = Stream((), (Req(suffix_len=8),))
    assert effective_drafts(lay, s) == Drafts("mtp", 2) and effective_drafts(plain, s) is None
    assert effective_drafts(lay, replace(s, accept=Acceptance("none"))) == Drafts("mtp", 2, "none")
    odd = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                            "speculative": {"method": "suffix"}})
    with pytest.raises(Unchecked, match="suffix"):  # kvproof's gap, never a fact about vLLM
        effective_drafts(odd, s)
    for bad, needle in (({"method": 3}, "speculative.method"), ({"method": "mtp", "k": 1}, "unknown field"),
                        ({"method": "mtp", "num_speculative_tokens": 0}, "num_speculative_tokens")):
        with pytest.raises(LayoutError, match=needle):
            Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}], "speculative": bad})


def test_spec_hit_oracle_fires_on_a_hit_that_keeps_the_eagle_unit():
    """The oracle itself (kvproof's code, no vLLM): under the EAGLE drop a hit must leave the last
    hash unit before min(common prefix, num_tokens - 1) to recompute."""
    import hashlib
    from types import SimpleNamespace

    from kvproof.consumer.oracle import RunContext
    from kvproof.consumer.oracles import Oracles, Recorder
    from kvproof.consumer.truth import HashIndex

    def hb(parent, toks, ahead=()):
        return hashlib.sha256(repr((parent, tuple(toks), tuple(ahead))).encode()).digest()

    def run(eagle: bool, n: int):
        res = ConsumerResult("x", "v", alignment=16, eagle_drop=eagle)
        rec = Recorder(res.observations, res.counts)
        o = Oracles.of(RunContext(res, HashIndex(16, hb), [16], []), rec)
        toks = list(range(1, 80))
        o.ctx.truth.record("r0", toks, 79)
        req = SimpleNamespace(request_id="r1", all_token_ids=toks[:72], num_tokens=72, num_prompt_tokens=72)
        o.lookup(req, n)
        return res.counts.get("spec_hit", 0)

    assert run(True, 48) == 0 and run(True, 56) == 0 and run(False, 64) == 0
    assert run(True, 64) == 1  # 64 > min(72, 72) - 16: the drafter's unit was not given back


def test_oracles_learn_tokens_appended_within_the_step_before_judging_a_hash():
    """Accepted drafts append several tokens inside update_from_output, and vLLM may publish the
    blocks they fill before the harness's stepped() runs (class a7ff9c65c29d on 0.33.0 was this lag)."""
    import hashlib
    from types import SimpleNamespace

    from kvproof.consumer.oracle import RunContext
    from kvproof.consumer.oracles import Oracles, Recorder
    from kvproof.consumer.truth import HashIndex

    def hb(parent, toks, ahead=()):
        return hashlib.sha256(repr((parent, tuple(toks), tuple(ahead))).encode()).digest()

    res = ConsumerResult("x", "v")
    o = Oracles.of(RunContext(res, HashIndex(4, hb), [4], []), Recorder(res.observations, res.counts))
    req = SimpleNamespace(request_id="r0", all_token_ids=[5, 6, 7, 8, 9], num_tokens=5, num_prompt_tokens=5)
    o.admit("r0", req, list(req.all_token_ids))
    req.all_token_ids += [10, 11, 12]  # two accepted drafts and a bonus token, not yet stepped()
    second = hb(hb(None, [5, 6, 7, 8]), [9, 10, 11, 12])
    assert o.ctx.index.locate(second) is None and o.ctx.locate(second)[1] == 8


def test_eagle_with_chunked_local_attention_alone_is_a_refusal_by_design():
    from kvproof.judging.contracts import refused_by_design
    from kvproof.outcome import StageError
    lay = Layout.from_dict({"groups": [{"kind": "chunked_local", "block_size": 8, "attention_chunk_size": 64}]})
    err = StageError("AssertionError", "Hybrid KV cache is not supported for eagle + chunked local attention.",
                     "vllm/v1/core/single_type_kv_cache_manager.py:1333 in find_longest_cache_hit")
    assert refused_by_design(lay, err)
    assert not refused_by_design(lay, StageError("AssertionError", "Each KV cache group's real block_size", err.frame))


def test_a_new_consumer_class_is_stored_with_the_shortest_stream_that_keeps_its_class():
    """fuzz.consumers.Target.minimal: kvproof's greedy stream shrinker driven by the class key (the
    harness's run stands in here: a kv_event FAIL whenever a request of 40+ prompt tokens runs,
    an exception otherwise on three requests or more -- another class, which must not be kept)."""
    from kvproof.judging.classkey import class_key

    from kvproof.fuzz.consumers import Target
    from kvproof.judging.judge import judge_consumer

    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]})

    def run(layout, st):
        r = ConsumerResult("x", "v")
        if any(len(st.prompt(i)) >= 40 for i in range(len(st.requests))):
            r.observations.append(Observation("kv_event", 0, "BlockStored(...): other tokens",
                                              "hash-vs-tokens|BlockPool (BlockStored[GPU])"))
            r.counts["kv_event"] = 1
        elif len(st.requests) >= 3:
            r.observations.append(Observation("exception", 0, "AssertionError:  @ vllm/v1/x.py:1 in f"))
        return r

    t = object.__new__(Target)
    t.run, t.premise = run, "free"
    big = Stream((64, 64), (Req(0, 64, 30, 0, 3), Req(1, 50, 10, 2, 2, resend_at=5), Req(0, 20, 8, 4, 1)),
                 accept=Acceptance("none"))
    drafted = drafting("eagle3", 3, layout=lay)
    key = class_key(judge_consumer(run(drafted, big), drafted), drafted)
    same, small = t.minimal(drafted, big, key)
    assert same == lay  # no drafts: the class holds without them
    assert class_key(judge_consumer(run(same, small), same), same) == key
    assert len(small.requests) == 1 and small.accept == Acceptance() and len(small.prompt(0)) < 80
    assert small.requests[0].resend_at is None and small.requests[0].arrival == 0


def test_a_known_class_whose_observations_jump_on_the_newer_release_is_reported():
    """differential.diff: the same inputs FAIL in the same class on both releases, but the newer one
    shows the oracle far more often (a new fault inside a known class, issue 24 item 1); noise
    below JUMP_FACTOR x and JUMP_MIN stays quiet, and a class new on the newer release is a
    newly failing input, not a jump."""
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]})
    st = Stream((71,), (Req(0, 71, 1), Req(0, 71, 1, 3)))

    def events(n):
        r = _res([(0, 0), (1, 64)])
        if n:
            r.observations.append(Observation("kv_event", 1, "BlockStored(...): other tokens",
                                              "hash-vs-tokens|BlockPool (BlockStored[GPU])"))
            r.counts["kv_event"] = n
        return r

    items = [(lay, st)] * 2
    rep = differential.diff(items, {"0.32.0": [events(2), events(1)], "pr": [events(20), events(6)]}, margin=0)
    ((rel, prev, key, before, after),) = rep.jumps
    assert (rel, prev, before, after) == ("pr", "0.32.0", 3, 26) and "oracle:kv_event" in key
    assert not rep.newly_failing and rep.to_dict()["jumps"] == [list(rep.jumps[0])]
    assert not differential.diff(items, {"0.32.0": [events(2), events(1)], "pr": [events(3), events(3)]}, margin=0).jumps
    assert not differential.diff(items, {"0.32.0": [events(1), events(0)], "pr": [events(2), events(2)]}, margin=0).jumps
    fresh = differential.diff(items, {"0.32.0": [events(0), events(0)], "pr": [events(9), events(0)]}, margin=0)
    assert not fresh.jumps and len(fresh.newly_failing) == 1


def test_mtp_modules_parse_round_trip_and_reach_the_target():
    assert "modules=3" in Drafts("mtp", 3, modules=3).label()
    with pytest.raises(LayoutError, match="method mtp only"):
        Layout.from_dict(dict(FA.to_dict(), speculative={"method": "eagle", "num_speculative_tokens": 2,
                                                         "mtp_modules": 2}))
    with pytest.raises(LayoutError, match="mtp_modules must be"):
        Layout.from_dict(dict(FA.to_dict(), speculative={"method": "mtp", "mtp_modules": 0}))
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                            "speculative": {"method": "mtp", "num_speculative_tokens": 2, "mtp_modules": 2}})
    assert Layout.from_dict(lay.to_dict()) == lay and "spec=mtp:2/2m" in lay.summary()
    one = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                            "speculative": {"method": "mtp", "num_speculative_tokens": 2}})
    assert "mtp_modules" not in one.to_dict()["speculative"] and one != lay
    assert effective_drafts(lay, Stream((16,), (Req(0, 16, 1),))) == Drafts("mtp", 2, modules=2)


def test_generated_mtp_inputs_draw_several_modules():
    rng = random.Random(3)
    got = [random_input(rng, FA, 200, 1.0, "mtp")[0].speculative for _ in range(200)]
    assert {d.method for d in got} == {"mtp"}
    assert {d.mtp_modules for d in got if d.num_speculative_tokens > 1} >= {1, 2}
    assert any(d.mtp_modules == d.num_speculative_tokens > 2 for d in got)
    assert all(d.mtp_modules == 1 for d in got if d.num_speculative_tokens == 1)


def test_a_claim_after_a_block_aligned_local_hit_is_measured_as_the_scheduler_uses_it():
    """The scheduler asks a connector after the scheduler-block-aligned part of a local hit
    (scheduler.py ``partial_tail``): a longer claim replaces the local tail, a shorter one is
    dropped. Counting both (0.32.0 seed layout, OffloadingConnector: local 1632 + load 2172 of a
    2199-token prompt) put a hit 15 tokens past the common prefix, above the ideal."""
    import hashlib
    from types import SimpleNamespace

    from kvproof.consumer.oracle import RunContext
    from kvproof.consumer.oracles import Oracles, Recorder
    from kvproof.consumer.truth import HashIndex
    from kvproof.judging.judge import above_ideal

    def hb(parent, toks, ahead=()):
        return hashlib.sha256(repr((parent, tuple(toks), tuple(ahead))).encode()).digest()

    def measure(claim):
        res = ConsumerResult("x", "v", hash_block_size=1)
        o = Oracles.of(RunContext(res, HashIndex(1, hb), [1], []), Recorder(res.observations, res.counts))
        toks = list(range(1, 2200))
        o.ctx.truth.record("r0", toks[:2183] + [0] * 20, 2203)
        req = SimpleNamespace(request_id="r3", all_token_ids=toks, num_tokens=2199, num_prompt_tokens=2199)
        o.ctx.live["r3"] = req
        o.lookup(req, 1632)
        o.claim("OffloadingConnector", req, 0, claim)
        o.scheduled(11, ["r3"])
        [h] = res.hits
        return (h["hit"], h["external"]), above_ideal(res)

    assert measure((2172, True)) == ((0, 2172), [])  # the load supersedes the 1632-token local hit
    assert measure((1000, False)) == ((1632, 0), [])  # shorter than the local tail: nothing loaded


def test_multi_module_mtp_below_its_lookahead_is_a_refusal_by_design():
    """0.28+ KVCacheCoordinator.__init__ refuses, with a ValueError naming both numbers, a
    scheduler block smaller than multi-module MTP's prefill lookahead; the same words as an
    AssertionError, or another ValueError, stay failures."""
    from kvproof.judging.contracts import refused_by_design
    from kvproof.outcome import StageError
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 1}]})
    msg = ("Multi-module MTP with prefix caching requires scheduler_block_size (=1) >= "
           "num_speculative_tokens (=2).")
    frame = "vllm/v1/core/kv_cache_coordinator.py:130 in __init__"
    assert refused_by_design(lay, StageError("ValueError", msg, frame))
    assert not refused_by_design(lay, StageError("AssertionError", msg, frame))
    assert not refused_by_design(lay, StageError("ValueError", "Invalid prefix_match_unit=1", frame))


def test_the_prompt_hasher_round_trips_and_an_unknown_one_is_refused():
    """Stream.hasher (facts.PROMPT_HASHERS): absent at the engine default, kept otherwise."""
    from kvproof import facts

    base = {"requests": [{"suffix_len": 40}]}
    assert "hasher" not in Stream.from_dict(base).to_dict() and Stream.from_dict(base).hasher == "engine"
    for h in facts.PROMPT_HASHERS[1:]:
        s = Stream.from_dict({**base, "hasher": h})
        assert s.hasher == h and Stream.from_dict(s.to_dict()) == s and f"hashed by {h}" in s.summary()
    with pytest.raises(LayoutError, match="hasher must be one of engine, frontend"):
        Stream.from_dict({**base, "hasher": "rust"})
