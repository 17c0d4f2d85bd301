"""The continuous campaign's release differential (fuzz/differential.py) without vLLM: corpus
files built with the project's encoder, decoded the harness's way, selected once per release
compared against (and resumed after a restart); regressions recorded as campaign classes the
report and the ledger check read. The consumer runs are stood in by a runner that derives each
request's hits from the real decoded stream (the real worker: tests/integration/test_fuzz_harness.py)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from kvproof.judging.classkey import ClassKey
from kvproof.findings.ledger import Entry, Ledger, Status
from kvproof.fuzz import differential, run
from kvproof.fuzz.decode import FULL, NotEncodable, decode, encode
from kvproof.fuzz.provider import Encoder, PyFDP
from kvproof import facts

from kvproof.fuzz.consumers import fit_input
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream
from kvproof.inputs.drafts import Acceptance
from kvproof.errors import UsageError
from kvproof.inputs.layout import Layout


def consumer_bytes(layout: Layout, seed: int, conn: int = len(facts.CONSUMER_CONNECTORS)) -> bytes:
    """Bytes the consumers harness reads as (``layout`` with connector ``conn``, the seed's stream):
    the seed and the connector are its first two choices, then the Layout's (``decode.encode``)."""
    head = Encoder()
    head.int(0, (1 << 32) - 1, seed)
    head.int(0, len(facts.CONSUMER_CONNECTORS), conn)
    return encode(layout) + head.data()


def inputs(n: int, seed: int = 0) -> list[tuple[bytes, Layout, Stream]]:
    """``n`` distinct encodable inputs: (bytes, the Layout they mean (its drawn speculation too), the
    stream they mean)."""
    rng = random.Random(seed)
    out: list[tuple[bytes, Layout, Stream]] = []
    while len(out) < n:
        layout = decode(PyFDP(rng.randbytes(rng.randint(0, 40))), FULL, "engine")
        try:
            encode(layout)
        except NotEncodable:
            continue
        s, conn = rng.randrange(1 << 32), rng.randrange(len(facts.CONSUMER_CONNECTORS) + 1)
        expect = layout if conn == len(facts.CONSUMER_CONNECTORS) else replace(
            layout, kv_connector=facts.CONSUMER_CONNECTORS[conn])
        data = consumer_bytes(layout, s, conn)
        if all(data != d for d, _, _ in out):
            out.append((data, *fit_input(expect, s)))
    return out


def campaign_folder(tmp_path: Path, files: list[bytes]) -> tuple[Path, Path]:
    """A campaign folder whose harness recorded its capabilities, with ``files`` as its corpus."""
    work, corpus = tmp_path / "work", tmp_path / "work" / "corpus"
    corpus.mkdir(parents=True)
    (work / "stats").mkdir()
    (work / "stats" / "consumers-1.json").write_text(json.dumps({"target": "consumers", "caps": FULL.to_dict()}))
    for i, data in enumerate(files):
        (corpus / f"{i:04d}").write_bytes(data)
    return work, corpus


class Runner:
    """Stands in for ``tiers.client.consumed_on``: each request hits its whole prompt on every
    release, except that on ``worse`` a stream with drafts hits one token less on every request.
    ``calls``: (env, the (Layout, Stream) pairs it was given, each Layout without its stream)."""

    def __init__(self, worse: str | None = None) -> None:
        self.worse = worse
        self.calls: list[tuple[str, list]] = []

    def __call__(self, envs, layouts):
        return [self.one(layouts, env) for env in envs]

    def one(self, layouts, env):
        self.calls.append((env, [(lay.with_stream(None), lay.stream) for lay in layouts]))
        out = []
        for lay in layouts:
            res = ConsumerResult("x", env)
            res.hits = prompt_hits(lay, worse=env == self.worse)
            out.append(res)
        return out


def prompt_hits(lay: Layout, worse: bool) -> list[dict]:
    """Each request's hit record (of the Layout's stream): its whole prompt, one token less when the
    Layout drafts and ``worse``."""
    out, st = [], lay.stream
    for i in range(len(st.requests)):
        n = len(st.prompt(i))
        lose = 1 if worse and lay.speculative and n else 0
        out.append({"step": 0, "req": i, "hit": n - lose, "external": 0, "truth": n})
    return out


def make(work: Path, corpus: Path, runner: Runner, against: str = "0.32.0", limit: int = 2):
    return differential.Differential(work, corpus, work / "findings", "0.33.0", "0.33.0", "0.33.0",
                                     against, against, limit=limit, runner=runner)


def test_corpus_files_decode_the_way_the_harness_reads_them():
    for data, layout, stream in inputs(30):
        assert differential.decode_file(data, FULL, "engine") == (layout, stream)


def test_each_file_is_compared_once_per_release_and_a_restart_resumes(tmp_path, capsys):
    made = inputs(5, seed=1)
    work, corpus = campaign_folder(tmp_path, [d for d, _, _ in made])
    runner = Runner()
    seen = []
    for epoch in range(2):
        counts = make(work, corpus, runner).epoch(epoch)
        assert counts["inputs"] == 2
        (_, older), (_, newer) = runner.calls[-2:]
        assert older == newer  # the same inputs on both releases
        seen += older
    assert [env for env, _ in runner.calls] == ["0.32.0", "0.33.0"] * 2  # the older release first
    restarted = make(work, corpus, runner)  # a new process reads what the folder remembers
    assert restarted.epoch(2)["inputs"] == 1
    seen += runner.calls[-1][1]
    assert sorted(map(repr, seen)) == sorted(repr((lay, st)) for _, lay, st in made)  # each file once
    assert restarted.epoch(3)["inputs"] == 0 and len(runner.calls) == 6  # nothing left: no worker started
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[fuzz differential")]
    assert len(lines) == 4 and lines[0].startswith("[fuzz differential 0.32.0 -> 0.33.0] epoch 0: inputs compared 2 "
                                                   "(3 corpus files left), admissions compared ")
    assert "regressions 0" in lines[0] and "inputs compared 0 (0 corpus files left)" in lines[3]
    # against another release every file is new again; a file the merge dropped is forgotten
    assert make(work, corpus, runner, against="0.31.0", limit=50).epoch(4)["inputs"] == 5
    (corpus / "0000").unlink()
    make(work, corpus, runner).epoch(5)
    state = json.loads((work / "stats" / differential.STATS).read_text())
    assert {rel: len(shas) for rel, shas in state["compared"].items()} == {"0.32.0": 4, "0.31.0": 4}


def test_files_the_decoder_refuses_are_never_compared(tmp_path, monkeypatch):
    made = inputs(3, seed=2)
    work, corpus = campaign_folder(tmp_path, [d for d, _, _ in made])
    original = differential.decode_file
    monkeypatch.setattr(differential, "decode_file", lambda data, caps, premise, real=(): (
        None if data == made[1][0] else original(data, caps, premise, real)))
    runner = Runner()
    assert make(work, corpus, runner, limit=50).epoch(0)["inputs"] == 2
    assert [repr(x) for x in runner.calls[0][1]] == [repr((lay, st)) for _, lay, st in (made[0], made[2])]
    assert make(work, corpus, runner, limit=50).epoch(1)["inputs"] == 0
    assert json.loads((work / "stats" / differential.STATS).read_text())["refused"] == [
        differential.scan(corpus)[1][0]]


def test_regressions_are_campaign_classes_the_report_and_the_ledger_count(tmp_path, monkeypatch, capsys):
    made = inputs(12, seed=3)
    families = {lay.speculative.method for _, lay, _ in made if lay.speculative}
    assert families and any(lay.speculative is None for _, lay, _ in made)
    work, corpus = campaign_folder(tmp_path, [d for d, _, _ in made])
    monkeypatch.setenv("KVPROOF_LEDGER", str(tmp_path / "ledger"))
    (tmp_path / "ledger").mkdir()
    counts = make(work, corpus, Runner(worse="0.33.0"), limit=50).epoch(0)
    assert counts["inputs"] == 12 and counts["regressions"] > 0
    keys = {f"consumer|regression:hits@0.33.0[{m}]||" for m in families}
    classes = run.merged_classes(work)
    assert {c["key"] for c in classes.values()} == keys
    assert sum(c["count"] for c in classes.values()) == counts["regressions"]
    assert len(list((work / "stats").glob("*.tmp"))) == 0
    text, n_new = run.report(work, Ledger.load(), "0.33.0")
    assert n_new == len(keys) and text.count("NEW (consumer) regression:hits@0.33.0[") == len(keys)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "epoch 0" in ln)
    assert f"regressions {counts['regressions']} in " in line and line.count(" new") == len(keys)
    # the first input of each class is stored with its stream, ready for --record and replay
    for c in classes.values():
        stored = Layout.from_json(Path(c["path"]).read_text())
        assert stored.meta["found_by"] == "differential" and stored.meta["class_id"] == c["id"]
        st = stored.stream
        assert isinstance(st, Stream) and "stream" not in stored.meta
        assert stored.speculative and f"[{stored.speculative.method}]" in c["key"]
    # a ledgered regression is known: the report no longer counts it as new
    known = ClassKey.parse(min(keys))
    (tmp_path / "ledger" / f"{known.id}.json").write_text(json.dumps(Entry(
        key=known, status=Status.BUG, title="hits lost", why="test").to_dict()))
    assert run.report(work, Ledger.load(), "0.33.0")[1] == len(keys) - 1
    # ... and a campaign meeting it after it was ledgered counts it as known and stores nothing
    work3, corpus3 = campaign_folder(tmp_path / "c", [d for d, _, _ in made])
    make(work3, corpus3, Runner(worse="0.33.0"), limit=50).epoch(0)
    assert f"{known.id} known" in capsys.readouterr().out
    again = run.merged_classes(work3)
    assert again[known.id]["status"] == "bug" and "path" not in again[known.id]
    assert json.loads((work3 / "stats" / differential.STATS).read_text())["known"] == again[known.id]["count"]
    # no regression where both releases hit the same
    work2, corpus2 = campaign_folder(tmp_path / "b", [d for d, _, _ in made])
    assert make(work2, corpus2, Runner(), limit=50).epoch(0)["regressions"] == 0
    assert not run.merged_classes(work2)


def test_the_release_before_and_the_skip_line(tmp_path, monkeypatch, capsys):
    assert differential.previous_release("0.33.0") == "0.32.0"
    assert differential.previous_release("0.27.1") == "0.27.0"
    assert differential.previous_release(facts.MANAGED_RELEASES[0]) is None
    monkeypatch.setenv("KVPROOF_ENV_HOME", str(tmp_path / "no-envs"))

    def campaign(**kw):
        args = SimpleNamespace(**{"continuous": True, "target": "consumers", "diff_against": None, "diff_max": 50,
                                  "premise": "engine", **kw})
        return SimpleNamespace(args=args, version="0.33.0", release="0.33.0", workdir=tmp_path, corpus=tmp_path,
                               crash_dir=tmp_path, env=None, started=0.0)

    assert differential.setup(campaign()) is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("[fuzz differential] skipped: no environment for ")
    assert "0.32.0" in out[0]
    for off in ({"diff_against": "none"}, {"diff_max": 0}, {"target": "contracts"}, {"continuous": False}):
        assert differential.setup(campaign(**off)) is None
    assert capsys.readouterr().out == ""
    with pytest.raises(UsageError, match="own release"):
        differential.setup(campaign(diff_against="0.33.0"))


@pytest.mark.parametrize("argv", [["--diff-against", "0.32.0"],
                                  ["--continuous", "--diff-against", "0.32.0"],
                                  ["--continuous", "--target", "consumers", "--diff-max", "-1"]])
def test_differential_options_outside_a_continuous_consumers_campaign_are_usage_errors(argv):
    with pytest.raises(UsageError, match="--diff-"):
        run.parse(argv)


class Flaky(Runner):
    """Hits less on ``worse`` only on the first call of each release (run-to-run noise, as
    OffloadingConnector's external hits vary)."""

    def one(self, items, env):
        first = not any(e == env for e, _ in self.calls)
        worse, self.worse = self.worse, (self.worse if first else None)
        try:
            return super().one(items, env)
        finally:
            self.worse = worse


def test_a_regression_that_does_not_come_back_on_a_rerun_is_not_a_class(tmp_path, monkeypatch, capsys):
    made = inputs(12, seed=3)
    work, corpus = campaign_folder(tmp_path, [d for d, _, _ in made])
    monkeypatch.setenv("KVPROOF_LEDGER", str(tmp_path / "ledger"))
    (tmp_path / "ledger").mkdir()
    runner = Flaky(worse="0.33.0")
    counts = make(work, corpus, runner, limit=50).epoch(0)
    assert counts["regressions"] == 0 and counts["unconfirmed"] > 0 and not run.merged_classes(work)
    assert len(runner.calls) == 4  # both releases, then both again for the regressing inputs
    assert "did not come back on a rerun" in capsys.readouterr().out


def test_campaigns_start_from_what_real_models_derive_and_old_inputs_keep_their_meaning():
    """The consumer target's last choice picks a reference-model layout (fuzz.consumers.real_layouts);
    each seed of real_seeds reads as its layout, and bytes written before the choice existed (no byte
    left for it) read as they did."""
    from kvproof.fuzz.consumers import decode_choices, real_layouts, real_seeds
    from kvproof.fuzz.provider import PyFDP

    real = real_layouts("0.33.0")
    assert len(real) > 50 and any(r.speculative is not None for r in real), len(real)
    assert any(r.kv_connector for r in real) and any(r.has_mamba for r in real)
    seeds = real_seeds("0.33.0")
    assert len(seeds) == len(real)
    for k, data in enumerate(seeds, 1):
        lay, st = decode_choices(PyFDP(data), FULL, "engine", real)
        own = real[k - 1]
        # the model's layout; one without a drafter or connector of its own may draw a drafter
        assert lay == own or (own.speculative is None and not own.kv_connector
                              and replace(lay, speculative=None) == own), k
        if own.speculative is not None:
            assert st.accept == Acceptance()  # the model's own drafter, every draft accepted
    for data, layout, stream in inputs(30):
        assert decode_choices(PyFDP(data), FULL, "engine", real) == (layout, stream)


def test_a_finished_campaigns_folder_is_read_for_the_release_chain(tmp_path):
    """``campaign_corpus`` and ``describe_campaign`` (bench/bench_differential.py's inputs): the
    corpus in name order, one per content, up to the limit, the rest counted; the folder's own account."""
    made = inputs(4, seed=2)
    work, corpus = campaign_folder(tmp_path, [d for d, _, _ in made] + [made[0][0], b""])
    caps, files, picked, refused, left = differential.campaign_corpus(work, 3, "engine")
    assert caps == FULL and files == 5  # the copy of the first file is one content
    assert [(lay, st) for _, _, lay, st in picked] == [(lay, st) for _, lay, st in made[:3]]
    assert not refused and left == 2  # the fourth file and the empty one: for later
    (work / "stats" / "consumers-2.json").write_text(json.dumps({"vllm": "0.33.0", "execs": 5,
                                                                 "verdicts": {"OK": 4, "WARN": 1}}))
    (work / "stats" / "consumers-1.json").write_text(json.dumps({"vllm": "0.33.0", "caps": FULL.to_dict(),
                                                                 "execs": 2, "verdicts": {"OK": 2}}))
    assert differential.describe_campaign(work) == {"release": "0.33.0", "target": "consumers", "sessions": [],
                                                    "execs": 7, "verdicts": {"OK": 6, "WARN": 1}}
    (work / "campaign.json").write_text(json.dumps({"release": "0.32.0", "sessions": [{"execs": 7}]}))
    assert differential.describe_campaign(work)["release"] == "0.32.0"
    for p in corpus.iterdir():
        p.unlink()
    with pytest.raises(UsageError, match="corpus .* is empty and it left no seeds"):
        differential.campaign_corpus(work, 3, "engine")
    seeds = work / "real-seeds"  # a campaign that ran its seeds only: they are its inputs
    seeds.mkdir()
    for i, (data, _, _) in enumerate(made[:2]):
        (seeds / f"real-{i:03d}").write_bytes(data)
    _, files, picked, _, _ = differential.campaign_corpus(work, 3, "engine")
    assert files == 2 and [(lay, st) for _, _, lay, st in picked] == [(lay, st) for _, lay, st in made[:2]]
    with pytest.raises(UsageError, match="no consumers harness stats"):
        differential.campaign_corpus(tmp_path / "elsewhere", 3, "engine")
