"""bench/bench_differential.py without vLLM: a campaign folder as the consumers harness leaves it
(stats with the release's capabilities, a corpus of byte files), decoded the harness's way, run
on a release chain by a runner that stands in for ``tiers.client.consumed_on`` (each request hits its whole
prompt, except where a test makes one release hit less), compared with ``differential.diff`` and
written as the table. The real worker runs in ``make bench`` (the Makefile's BENCH settings)."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from kvproof.fuzz import differential
from kvproof.fuzz.decode import FULL

from kvproof.consumer.oracles import Observation
from kvproof.consumer.result import ConsumerResult
from test_fuzz_differential import prompt_hits

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_differential.py"
CHAIN = ["0.28.0", "0.29.0", "0.30.0"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_differential", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def campaign(tmp_path: Path, n: int, seed: int = 0) -> tuple[Path, list[tuple]]:
    """A consumers campaign folder with ``n`` corpus files the decoder takes; their (layout, stream)."""
    work = tmp_path / "work"
    (work / "corpus").mkdir(parents=True)
    (work / "stats").mkdir()
    (work / "stats" / "consumers-1.json").write_text(json.dumps(
        {"target": "consumers", "vllm": "0.30.0", "caps": FULL.to_dict(), "execs": 7, "verdicts": {"OK": 7}}))
    (work / "campaign.json").write_text(json.dumps(
        {"release": "0.30.0", "target": "consumers", "sessions": [{"mode": "timeboxed", "seconds": 9, "execs": 7}]}))
    rng = random.Random(seed)
    made = {}
    while len(made) < n:
        data = rng.randbytes(rng.randint(4, 48))
        item = differential.decode_file(data, FULL, "engine")
        if item is not None:
            made[data] = item
    for i, data in enumerate(made):
        (work / "corpus" / f"{i:04d}").write_bytes(data)
    return work, list(made.values())


class Runner:
    """Stands in for ``tiers.client.consumed_on`` on one release (``__call__``: the chain) or two
    (``each``: the rerun of the regressing inputs): on ``worse`` a stream with drafts hits one token less on every
    request (``blocks``: and that release built another scheduler block); ``refuse`` releases
    cannot express the first input; on ``fail`` the first two inputs meet a hard oracle."""

    def __init__(self, worse: str | None = None, blocks: bool = False, refuse: tuple[str, ...] = (),
                 fail: str | None = None) -> None:
        self.worse, self.blocks, self.refuse, self.fail = worse, blocks, refuse, fail
        self.calls: list[str] = []
        self.reruns: list[list[str]] = []

    def each(self, envs, layouts):
        self.reruns.append(list(envs))
        return [self.run(layouts, env) for env in envs]

    def __call__(self, envs, layouts):
        (env,) = envs  # the chain: one release a call
        self.calls.append(env)
        return [self.run(layouts, env)]

    def run(self, layouts, env):
        out = []
        for j, lay in enumerate(layouts):
            res = ConsumerResult("x", env, scheduler_block_size=32 if self.blocks and env == self.worse else 16)
            if j == 0 and env in self.refuse:
                res.not_expressible = "not on this release"
            if j < 2 and env == self.fail:  # a hard oracle: the judge's FAIL
                res.observations.append(Observation("kv_event", 1, "a bad event", cause="block-size|pool"))
            res.hits = prompt_hits(lay, worse=env == self.worse)
            out.append(res)
        return out


def run_script(monkeypatch, bench, runner, argv):
    monkeypatch.setattr(bench.envs, "find", lambda rel: rel)  # the release stands in for its environment
    monkeypatch.setattr(bench, "on_release", runner)
    monkeypatch.setattr(bench, "consumed_on", runner.each)
    assert bench._main(argv) == 0


def test_a_release_that_hits_less_under_drafts_is_one_class_per_family(tmp_path, monkeypatch, capsys):
    bench = _bench()
    work, made = campaign(tmp_path, 12)
    out = tmp_path / "diff.md"
    monkeypatch.setenv("KVPROOF_LEDGER", str(tmp_path / "no-ledger"))  # the stand-in's classes are NEW
    runner = Runner(worse="0.29.0")
    run_script(monkeypatch, bench, runner,
               ["--workdir", str(work), *[x for r in CHAIN for x in ("--vllm", r)], "--out", str(out)])
    assert runner.calls == CHAIN  # one worker call per release, oldest first
    assert runner.reruns == [["0.28.0", "0.29.0"]]  # the regressing pair's inputs, once more
    text = out.read_text()
    drafted = [(lay, st) for lay, st in made if lay.speculative]
    assert drafted and len(drafted) < len(made)  # the seed gives both kinds
    assert f"**{len(drafted)} of {len(made)}**" in text
    requests = sum(len(st.requests) for _, st in made)
    assert f"| 0.28.0 -> 0.29.0 | {len(made)} | {requests:,} | none | {sum(len(st.requests) for _, st in drafted)} |" in text
    assert f"| 0.29.0 -> 0.30.0 | {len(made)} | {requests:,} | none | 0 | none | 0 |" in text  # hits back: no class
    assert "None: no input the judge passes on a release FAILs on the next." in text
    families = {lay.speculative.method for lay, _ in drafted}
    for fam in families:
        (row,) = [ln for ln in text.splitlines() if ln.startswith(f"| `consumer\\|regression:hits@0.29.0[{fam}]")]
        assert "| 0.29.0 (after 0.28.0) | NEW |" in row
        n = sum(len(st.requests) for lay, st in drafted if lay.speculative.method == fam)
        assert f"| {n} of {n} |" in row  # the stand-in is deterministic: every admission again
    assert text.count("(same) |") == len(families)
    assert f"Written by `.venv/bin/python bench/bench_differential.py --workdir {work}" in text
    assert "12 decoded and compared (`--max 300`, in name order), 0 refused by the decoder, 0 left over" in text
    assert "timeboxed 9 s, 7 execs" in text
    printed = capsys.readouterr().out
    assert "release differential 0.28.0 -> 0.29.0 -> 0.30.0" in printed and "NEW consumer|regression" in printed


def test_another_scheduler_block_is_the_ledgered_class_and_refusals_are_counted(tmp_path, monkeypatch):
    """0.29.0 building another scheduler block is the checked-in ledger's by-design class."""
    bench = _bench()
    work, _ = campaign(tmp_path, 8, seed=3)
    out = tmp_path / "diff.md"
    run_script(monkeypatch, bench, Runner(worse="0.29.0", blocks=True, refuse=("0.30.0",)),
               ["--workdir", str(work), "--vllm", "0.28.0", "--vllm", "0.30.0", "--vllm", "0.29.0",
                "--max", "5", "--out", str(out)])
    text = out.read_text()
    assert "| `consumer\\|regression:hits@0.29.0[scheduler-block]\\|\\|` | 0.29.0 (after 0.28.0) | 04867824f289 (by-design) |" in text
    assert "| 16 -> 32 |" in text
    assert "| 0.29.0 -> 0.30.0 | 4 |" in text and "| 1 not expressible |" in text
    assert "5 decoded and compared (`--max 5`, in name order), 0 refused by the decoder, 3 left over" in text
    assert "| 0.30.0 |" in text and text.index("| 0.28.0 |") < text.index("| 0.29.0 |") < text.index("| 0.30.0 |")


def test_a_folder_without_harness_stats_is_a_usage_error(tmp_path, monkeypatch, capsys):
    bench = _bench()
    monkeypatch.setattr(bench.envs, "find", lambda rel: rel)
    (tmp_path / "corpus").mkdir()
    assert bench.main(["--workdir", str(tmp_path), "--out", str(tmp_path / "x.md")]) == 2
    assert "no consumers harness stats" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


@pytest.mark.parametrize("argv", [[], ["--workdir", "/nonexistent", "--max", "0"],
                                  ["--workdir", "/nonexistent", "--vllm", "9.9.9"],
                                  ["--workdir", "/nonexistent", "--vllm", "0.30.0"],
                                  ["--workdir", "/nonexistent", "--campaign-vllm", "0.33.0"]])
def test_usage_error_is_one_line_exit_2(argv):
    """A bad option or a release without an environment: one line, exit 2, nothing written."""
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv, "--out", "/nonexistent/x.md"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_differential.py: "), proc.stderr


def test_an_input_that_fails_on_the_newer_release_is_newly_failing_by_class(tmp_path, monkeypatch):
    bench = _bench()
    work, _ = campaign(tmp_path, 6, seed=5)
    out = tmp_path / "diff.md"
    run_script(monkeypatch, bench, Runner(fail="0.30.0"),
               ["--workdir", str(work), *[x for r in CHAIN for x in ("--vllm", r)], "--out", str(out)])
    text = out.read_text()
    assert "| none | 0 | none | 0 |" in text and "| none | 0 | none | 2 |" in text  # 0.28 -> 0.29, 0.29 -> 0.30
    (row,) = [ln for ln in text.splitlines() if ln.startswith("| `consumer\\|oracle:kv_event")]
    assert "| 0.30.0 (after 0.29.0) | NEW | 2 |" in row and "a bad event" in row
    assert "## Regression classes\n\nNone: no admission" in text


class Flaky(Runner):
    """0.29.0 hits less the first time only (a connector's transfer finishing at another step)."""

    def run(self, items, env):
        out = super().run(items, env)
        if env == "0.29.0" and self.reruns:
            out = Runner().run(items, env)
        return out


def test_a_regression_that_does_not_come_back_on_a_rerun_says_so(tmp_path, monkeypatch):
    bench = _bench()
    work, made = campaign(tmp_path, 12)
    out = tmp_path / "diff.md"
    runner = Flaky(worse="0.29.0")
    run_script(monkeypatch, bench, runner, ["--workdir", str(work), "--vllm", "0.28.0", "--vllm", "0.29.0",
                                            "--out", str(out)])
    rows = [ln for ln in out.read_text().splitlines() if ln.startswith("| `consumer\\|regression:hits@0.29.0[")]
    assert rows and all("| 0 of " in r for r in rows)

