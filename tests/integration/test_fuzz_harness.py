"""Smoke runs of the atheris harnesses on the real vLLM releases (a few seconds each)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvproof.bridge.client import worker_env
from kvproof.tiers import client
from kvproof.inputs.layout import Layout
from conftest import require_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _in_env(release: str, code: str, timeout: int = 300) -> str:
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=worker_env({"VLLM_LOGGING_LEVEL": "ERROR"}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def _run(args: list[str], tmp_path: Path, timeout: int = 400, ledger: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kvproof.fuzz.run", "--workdir", str(tmp_path / "work"),
           "--crash-dir", str(tmp_path / "crashes"), "--status-every", "5", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=worker_env({"KVPROOF_LEDGER": str(ledger)} if ledger else {}))


def test_pyfdp_matches_the_real_atheris_provider():
    code = r"""
import sys
import random, atheris
from kvproof.fuzz.provider import PyFDP
from kvproof.fuzz.decode import decode
rng = random.Random(0)
for _ in range(3000):
    data = rng.randbytes(rng.randint(0, 80))
    a, b = atheris.FuzzedDataProvider(data), PyFDP(data)
    for _ in range(rng.randint(1, 30)):
        if rng.random() < 0.3:
            assert a.ConsumeBool() == b.ConsumeBool()
        else:
            lo = rng.randint(0, 50); hi = lo + rng.choice([0, 1, 7, 255, 256, 70000, 1 << 20, 1 << 33])
            assert a.ConsumeIntInRange(lo, hi) == b.ConsumeIntInRange(lo, hi)
    assert decode(a, premise="free") == decode(b, premise="free")  # the unread rest (decode's as_source)
    assert decode(atheris.FuzzedDataProvider(data)) == decode(PyFDP(data))
print("same", file=sys.__stdout__)
"""
    assert _in_env("0.32.0", code) == "same"


def test_fast_path_gives_the_bridge_outcomes():
    code = r"""
import sys
import random
from kvproof.bridge.runtime import Bridge
from kvproof.fuzz.decode import decode
from kvproof.fuzz.harness import release_caps
from kvproof.fuzz.provider import PyFDP
plain, quick = Bridge(), Bridge(fast=True)
caps = release_caps(plain.builder)
rng = random.Random(1)
layouts = [decode(PyFDP(rng.randbytes(rng.randint(0, 60))), caps, rng.choice(["engine", "free"])) for _ in range(400)]
layouts += layouts[:100]  # repeats exercise the manager memo
ref = [plain.evaluate(x) for x in layouts]
fast = [quick.evaluate(x, content_hash=True) for x in layouts]
assert quick.manager_hits > 0, quick.manager_hits
assert ref == fast, [(x.summary(), a, b) for x, a, b in zip(layouts, ref, fast) if a != b][:2]
print("same", file=sys.__stdout__)
"""
    for release in ("0.27.0", "0.32.0"):
        assert _in_env(release, code) == "same"


def test_manager_escalation_gives_the_verdicts_of_a_manager_on_every_input(tmp_path):
    """The contracts harness builds the real manager only where a manager-tier contract
    predicts a violation (KVPROOF_FUZZ_MANAGER=escalate). Over the same inputs it must
    count the verdicts, FAIL classes and LATENT contracts that a manager built on every
    input (always) gives; with_manager on a function-tier Outcome equals evaluate(manager=True)."""
    code = r"""
import os, sys, json, random
from pathlib import Path
os.environ.update(KVPROOF_FUZZ_INSTRUMENT="0")
from kvproof.fuzz.harness import build, release_caps
from kvproof.bridge.runtime import Bridge
from kvproof.fuzz.decode import decode
from kvproof.fuzz.provider import PyFDP
tmp = Path(sys.argv[1])
rng = random.Random(3)
inputs = [rng.randbytes(rng.randint(0, 60)) for _ in range(1500)]
got = {}
for mode in ("escalate", "always"):
    os.environ.update(KVPROOF_FUZZ_MANAGER=mode, KVPROOF_FUZZ_WORKDIR=str(tmp / mode),
                      KVPROOF_FUZZ_CORPUS_OUT=str(tmp / mode / "found"))
    one = build("contracts")
    for d in inputs:
        one(d)
    got[mode] = {k: one.stats.data[k] for k in ("verdicts", "latent", "errors")}
    got[mode]["classes"] = {cid: c["count"] for cid, c in one.stats.data["classes"].items()}
b = Bridge(fast=True)
caps = release_caps(b.builder)
for d in inputs[:500]:
    x = decode(PyFDP(d), caps)
    try:
        lo = b.evaluate(x, manager=False)
    except Exception:
        continue
    assert b.with_manager(x, lo) == b.evaluate(x, manager=True), x.summary()
print(json.dumps(got), file=sys.__stdout__)
"""
    for release in ("0.28.0", "0.32.0"):
        got = json.loads(_in_env(release, code.replace("sys.argv[1]", repr(str(tmp_path / release))), 600))
        assert got["escalate"] == got["always"], (release, got)
        v = got["always"]["verdicts"]
        assert v.get("FAIL", 0) > 0 and v.get("LATENT", 0) > 0, got  # both sides of the rule were exercised


def test_instrumentation_reaches_resolver_coordinators_and_block_pool():
    code = r"""
import sys
import json
from kvproof.bridge import runtime  # imports vLLM
from kvproof.fuzz.harness import instrument_covered
print(json.dumps(instrument_covered()), file=sys.__stdout__)
"""
    counts = json.loads(_in_env("0.32.0", code))
    for module in ("vllm.v1.core.kv_cache_utils", "vllm.v1.core.kv_cache_coordinator", "vllm.v1.core.block_pool"):
        assert counts[module] > 10, counts


def _classes(tmp_path) -> list[tuple[dict, Layout]]:
    from kvproof.fuzz.run import read_classes
    return [(c, Layout.from_json(Path(c["path"]).read_text())) for c in read_classes(tmp_path / "work")]


def _seed_class(c: dict) -> bool:
    """The seed bug's class: the hybrid divisibility assertion with Mamba in align mode, at the manager."""
    return c["tier"] == "manager" and c["check"] == "hybrid.group_multiple_of_hash[align]"


def test_contracts_campaign_stores_a_class_the_ledger_lacks_and_keeps_going(tmp_path, workers):
    """With an empty ledger the seed class on 0.27 is NEW: stored once in the campaign folder
    (not corpus/), counted on every later hit, and the campaign runs to its time box (exit 1).
    Once the ledger holds the class, the same campaign no longer reports it as new."""
    require_env("0.27.0")
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    proc = _run(["--vllm", "0.27.0", "--seconds", "20"], tmp_path, ledger=ledger)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    first = lambda head: next(i for i, ln in enumerate(lines) if ln.startswith(head))  # noqa: E731
    assert first("NEW classes") < first("Classes by ledger status") < first("Verdicts:"), proc.stdout[-3000:]
    seed = [(c, lay) for c, lay in _classes(tmp_path) if _seed_class(c)]
    assert seed, proc.stdout[-3000:]
    c, layout = seed[0]
    assert c["count"] > 1, c  # met again after it was stored: the campaign went on in-process
    assert Path(c["path"]).parent == tmp_path / "crashes" and c["premise"] == "reachable"
    assert layout.meta["vllm"] == "0.27.0" and layout.meta["class_id"] == c["id"]
    assert not list((tmp_path / "work" / "artifacts").glob("crash-*"))  # libFuzzer never saw a crash
    # Replayable as is: the real 0.27 manager fails it, 0.28 (the fix) builds it.
    from kvproof.judging.classkey import ClassKey
    from kvproof.findings.ledger import Entry, Ledger, Status
    from kvproof.fuzz.run import report
    from kvproof.judging.judge import judge
    from kvproof.verdicts import Verdict

    bad = client.outcomes(workers("0.27.0"), [layout])[0]
    assert judge(layout, bad).verdict == Verdict.FAIL
    good = client.outcomes(workers("0.28.0"), [layout])[0]
    assert good.manager_error is None and judge(layout, good).verdict < Verdict.LATENT
    book = Ledger.load(ledger)
    book.add(Entry(key=ClassKey.parse(c["key"]), status=Status.FIXED, title="seed", why="test", fixed_in="0.28.0"))
    text, n_new = report(tmp_path / "work", Ledger.load(ledger))
    # The seed class is now known (fixed); any other class the campaign met (0.27 also has the
    # mode=all crash) stays NEW.
    others = {k["id"] for k, _ in _classes(tmp_path)} - {c["id"]}
    assert n_new == len(others) and "fixed 1" in text, text
    assert not [ln for ln in text.splitlines() if ln.startswith("NEW (") and c["id"] in ln], text


@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_seed_class_is_fixed(tmp_path, release):
    """0.28 fixed the seed class (align mode): a short campaign never meets it. Whatever else
    it meets is counted per class; exit 1 exactly when a FAIL class is not in the ledger."""
    require_env(release)
    proc = _run(["--vllm", release, "--seconds", "8"], tmp_path)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    from kvproof.fuzz.run import merged_classes

    stats = [json.loads(p.read_text()) for p in (tmp_path / "work" / "stats").glob("*.json")]
    assert sum(s["execs"] for s in stats) > 100, proc.stdout
    assert (proc.returncode == 1) == bool(_classes(tmp_path)), proc.stdout[-3000:]
    assert not [c for c in merged_classes(tmp_path / "work").values() if _seed_class(c)]


def test_conformance_smoke(tmp_path):
    env = require_env("0.32.0")
    probe = subprocess.run([str(env.python), "-c", "import kvproof.spec.model"], capture_output=True, text=True,
                           env=worker_env(), timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"the Z3 model is not importable in {env.name}: {probe.stderr.strip().splitlines()[-1:]}")
    proc = _run(["--vllm", "0.32.0", "--target", "conformance", "--seconds", "8"], tmp_path)
    stats = [json.loads(p.read_text()) for p in (tmp_path / "work" / "stats").glob("*.json")]
    assert stats and sum(s["execs"] for s in stats) > 10, proc.stdout + proc.stderr
    assert proc.returncode == 0, "model disagrees with vLLM 0.32.0:\n" + proc.stdout


@pytest.mark.parametrize("release", ["0.27.0", "0.28.0", "0.32.0"])
def test_consumers_target_smoke(tmp_path, release):
    """``kvproof fuzz --target consumers``: Layout + request stream through the real
    scheduler; every FAIL class the ledger lacks is stored as a Layout with its stream (meta.stream)."""
    require_env(release)
    proc = _run(["--vllm", release, "--target", "consumers", "--seconds", "20"], tmp_path, 600)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    stats = [json.loads(p.read_text()) for p in (tmp_path / "work" / "stats").glob("*.json")]
    assert stats and sum(s["execs"] for s in stats) > 20, proc.stdout + proc.stderr
    assert sum(s.get("steps", 0) for s in stats) > 0  # the scheduler stepped
    classes = _classes(tmp_path)
    assert (proc.returncode == 1) == bool(classes), proc.stdout[-2000:]
    for c, layout in classes:
        assert layout.meta["vllm"] == release and layout.stream is not None, c


def test_continuous_consumers_campaign_runs_the_differential_against_the_release_before(tmp_path):
    """After the epoch's merge the stored corpus runs on 0.32.0 (the release before 0.33.0, by
    default) and on 0.33.0 through the consumer worker: one status line with the counts; a
    regression found is a campaign class (exit 1), never a stop."""
    for release in ("0.32.0", "0.33.0"):
        require_env(release)
    proc = _run(["--vllm", "0.33.0", "--target", "consumers", "--continuous", "--jobs", "1", "--seconds", "25",
                 "--merge-every", "20", "--diff-max", "5"], tmp_path, 600)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-3000:]
    m = re.search(r"^\[fuzz differential 0\.32\.0 -> 0\.33\.0\] epoch 0: inputs compared (\d+) .*"
                  r"admissions compared (\d+), regressions (\d+)", proc.stdout, re.MULTILINE)
    assert m, out[-3000:]
    assert 0 < int(m.group(1)) <= 5 and int(m.group(2)) > 0, m.group(0)
    state = json.loads((tmp_path / "work" / "stats" / "differential.json").read_text())
    assert len(state["compared"]["0.32.0"]) == int(m.group(1))
    diff_classes = [c for c in state["classes"].values() if c["check"].startswith("regression:hits@0.33.0[")]
    assert len(diff_classes) == len(state["classes"]) and (int(m.group(3)) > 0) == bool(diff_classes)


def test_consumer_inputs_stay_within_the_block_budget():
    """A generated stream needs at most BLOCK_BUDGET blocks unless it is at the smallest
    token scale, and the budget is what shrank the largest (they needed more at first)."""
    code = r"""
import random, sys
from kvproof.fuzz.consumers import BLOCK_BUDGET, SPEC_SHARE, decode_input, fit_input, stream_scale
from kvproof.consumer.harness import Harness
from kvproof.consumer.sizing import auto_blocks
from kvproof.consumer.stream import random_input
from kvproof.fuzz.harness import release_caps
caps = release_caps(Harness().builder)
rng = random.Random(3)
over = shrunk = 0
for _ in range(300):
    base, _ = decode_input(rng.randbytes(rng.randint(8, 120)), caps)
    seed = rng.randrange(1 << 32)
    lay, st = fit_input(base, seed)
    need = auto_blocks(lay, st)
    over += need > BLOCK_BUDGET and (lay, st) != random_input(random.Random(seed), base, 16, SPEC_SHARE)
    shrunk += need < auto_blocks(*random_input(random.Random(seed), base, stream_scale(base), SPEC_SHARE))
print(over, shrunk, file=sys.__stdout__)
"""
    over, shrunk = map(int, _in_env("0.32.0", code).split())
    assert over == 0 and shrunk > 0
