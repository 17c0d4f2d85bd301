"""bench/bench_fuzz.py's time-to-first-violation row, read from what a real contracts campaign
writes: the harness's ``Stats`` (classes a dict by class id, since campaigns keep going) with
the checked-in ledger and a ``FindingStore``, judged by the fuzz oracle (no vLLM)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from kvproof.findings.ledger import Ledger
from kvproof.fuzz.harness import Stats
from kvproof.fuzz.oracle import judge
from kvproof.fuzz.store import FindingStore

from kvproof.inputs.layout import Layout
from kvproof.outcome import Outcome, StageError
from kvproof.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]
HYBRID_MSG = ("Each KV cache group's real block_size must be divisible by hash_block_size. "
              "block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464")
COORDINATOR = "vllm/v1/core/kv_cache_coordinator.py:51 in __init__"


def _bench_fuzz():
    spec = importlib.util.spec_from_file_location("bench_fuzz", ROOT / "bench" / "bench_fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _judged(layout: dict, s: int, h: int, exc: str, msg: str, frame: str = "", sizes=None):
    x = Layout.from_dict(layout)
    o = Outcome(layout_hash=x.content_hash(), vllm_version="0.27.0", scheduler_block_size=s, hash_block_size=h,
                group_block_sizes=sizes or [g.block_size for g in x.groups], manager_attempted=True,
                manager_error=StageError(exc, msg, frame))
    return x, judge(x, o)


ALIGN = {"groups": [{"kind": "mamba", "block_size": 544, "count": 4}, {"kind": "hidden_state", "block_size": 181}],
         "cache": {"block_size": 181, "mamba_cache_mode": "align"}}
NOT_ALIGN = {"groups": [{"kind": "mamba", "block_size": 544}, {"kind": "full_attention", "block_size": 16}],
             "cache": {"block_size": 16, "mamba_cache_mode": "all"}, "kv_connector": "OffloadingConnector"}
BY_DESIGN = {"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "sliding_window", "block_size": 48}],
             "dcp": 2}


def _campaign(work: Path, met) -> dict:
    """Meet the judged inputs in order, as the contracts harness does; the stats file it writes."""
    stats = Stats(work, "contracts", "0.27.0")  # the checked-in ledger, as in a campaign
    stats.store = FindingStore(work.parent / "out", work / "seen", "0.27.0")
    for x, f in met:
        stats.tick()
        stats.meet(f.judgement, f.key, x, b"input", f.detail)
    stats.flush()
    (written,) = [json.loads(p.read_text()) for p in (work / "stats").glob("*.json")]
    return written


KNOWN = _judged(ALIGN, 98464, 98464, "AssertionError", HYBRID_MSG, COORDINATOR)  # the seed bug: fixed in 0.28.0
UNSUPPORTED = _judged(BY_DESIGN, 96, 96, "AssertionError", "DCP with hybrid KV cache layouts only supports ...",
                      sizes=[32, 96])
NEW_1 = _judged(NOT_ALIGN, 544, 544, "RuntimeError", "boom", COORDINATOR)
NEW_2 = _judged(ALIGN, 98464, 98464, "ValueError", "boom", COORDINATOR)


def test_the_judged_inputs_are_what_the_campaign_meets():
    ledger = Ledger.load()
    assert ledger.get(KNOWN[1].key).status.value == "fixed"
    assert ledger.get(NEW_1[1].key) is None and ledger.get(NEW_2[1].key) is None
    assert UNSUPPORTED[1].judgement.verdict == Verdict.UNSUPPORTED
    assert {f.judgement.verdict for _, f in (KNOWN, NEW_1, NEW_2)} == {Verdict.FAIL}
    fails = [f.key for _, f in (NEW_1, KNOWN, NEW_2)]  # met in this order below: neither id nor key order gives it
    assert min(fails, key=lambda k: k.id) != NEW_1[1].key and min(fails, key=str) != NEW_1[1].key


def test_first_violation_is_the_first_fail_class_met(tmp_path):
    written = _campaign(tmp_path / "w", [UNSUPPORTED, NEW_1, KNOWN, NEW_2, NEW_2, KNOWN, NEW_1])
    assert isinstance(written["classes"], dict) and len(written["classes"]) == 4  # the shape the bench read as a list
    row = _bench_fuzz().campaign_first_violation(tmp_path / "w")
    assert row == {"first_crash_s": written["classes"][NEW_1[1].key.id]["first_s"], "execs": 7,
                   "contract": "hybrid.group_multiple_of_hash[not-align]", "status": "new"}


def test_a_class_the_ledger_knows_is_a_violation_too(tmp_path):
    """On --bug-vllm (0.27.0) the seed bug is in the ledger (fixed in 0.28.0): the stats'
    first_crash_s (new classes only) stays None, the bench still times it."""
    written = _campaign(tmp_path / "w", [UNSUPPORTED, KNOWN, NEW_2])
    assert written["first_crash_s"] is not None
    row = _bench_fuzz().campaign_first_violation(tmp_path / "w")
    assert row["contract"] == "hybrid.group_multiple_of_hash[align]" and row["status"] == "fixed"
    assert row["first_crash_s"] == written["classes"][KNOWN[1].key.id]["first_s"] and row["execs"] == 3
    written = _campaign(tmp_path / "known", [KNOWN])
    assert written["first_crash_s"] is None and written["new"] == 0
    row = _bench_fuzz().campaign_first_violation(tmp_path / "known")
    assert row["first_crash_s"] == written["classes"][KNOWN[1].key.id]["first_s"] and row["status"] == "fixed"


def test_a_campaign_without_a_fail_class_has_no_first_violation(tmp_path):
    bench = _bench_fuzz()
    nothing = {"first_crash_s": None, "execs": None, "contract": None, "status": None}
    assert bench.campaign_first_violation(tmp_path / "nothing") == nothing
    _campaign(tmp_path / "w", [UNSUPPORTED])
    assert bench.campaign_first_violation(tmp_path / "w") == dict(nothing, execs=1)
