"""`kvproof replay --tier consumer` and the engine tier's serving comparison (one release each)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvproof.consumer.stream import stream_for
from kvproof.inputs.layout import Layout
from kvproof.replay import cli
from kvproof.tiers import boots as engine, classify
from kvproof.tiers.families import Recipe
from kvproof.verdicts import Tier, Verdict

from conftest import require_env

pytestmark = pytest.mark.replay

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
DCP_MAMBA = CORPUS / "33c4006700b5c115.json"  # one Mamba group, block 1, dcp 8, prefix caching, align


def test_consumer_tier_replays_a_corpus_file_and_records(tmp_path, capsys):
    """0.28.0: the first prefix-cache lookup asserts in MambaManager (dcp 8 with Mamba), the FAIL
    the manager tier only predicts (LATENT); --record writes it as the consumer expectation."""
    require_env("0.28.0")
    path = tmp_path / DCP_MAMBA.name
    shutil.copy(DCP_MAMBA, path)
    assert cli.main([str(path), "--tier", "consumer", "--vllm", "0.28.0", "--record"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("33c4006700b5c115"))
    assert "consumer" in row and "FAIL" in row and "DCP not support mamba now" in row, out
    expect = json.loads(path.read_text())["kvproof"]["expect"]["0.28.0"]
    assert expect["consumer"] == "FAIL" and expect["manager"] == "LATENT"
    # the recorded file replays without contradiction, and the layout (its name) is unchanged
    assert Layout.from_json(path.read_text()).content_hash() == path.stem
    assert cli.main([str(path), "--tier", "consumer", "--vllm", "0.28.0", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["results"]
    assert [(r["tier"], r["verdict"], r["contradicts"]) for r in res] == [("consumer", "FAIL", False)]


def test_consumer_rows_use_the_files_stream():
    lay = Layout.from_json(DCP_MAMBA.read_text())
    assert stream_for(lay).requests  # the default stream when the file carries none
    withs = lay.with_meta(**dict(lay.meta, stream={"prefixes": [40], "requests": [
        {"prefix": 0, "prefix_len": 40, "suffix_len": 2, "arrival": 0, "max_tokens": 1}]}))
    assert [len(withs and stream_for(withs).prompt(0))] == [42]


@pytest.mark.engine
def test_engine_tier_serves_shared_prefixes_and_compares_with_caching_off():
    """0.32.0, NemotronH M*M- in align mode with prefix caching: after the boot the engine serves
    A = P + a, B = P + b, A again (P spans 2+ scheduler blocks), then a fresh engine (same seed,
    dummy weights, greedy) serves them with caching off; outputs must match token for token."""
    env = require_env("0.32.0")
    recipe = Recipe(family="nemotron_h", pattern="M*M-", mamba_cache_mode="align", enable_prefix_caching=True,
                    max_model_len=1024)
    b = engine.boot(env, recipe)
    assert b.ok, (b.stage, b.error_type, b.error_message, b.log_tail[-3:])
    sv = b.serve
    assert sv and sv["prompts"] == 3 and sv["prefix_len"] >= 2 * b.scheduler_block_size
    assert sv["cached_tokens"][0] == 0 and all(c and c >= b.scheduler_block_size for c in sv["cached_tokens"][1:])
    assert sv["match"] and sv["on"] == sv["off"] and not sv["mismatch"]
    ev = classify.engine_verdict(b)
    assert ev.verdict in (Verdict.OK, Verdict.WARN, Verdict.LATENT) and ev.tier == Tier.ENGINE
    assert "outputs match prefix caching off token for token" in ev.detail
    # a mismatch is a FAIL observed at the engine tier
    bad = type(b).from_dict(dict(b.to_dict(), serve=dict(sv, match=False, mismatch=[1])))
    ev_bad = classify.engine_verdict(bad)
    assert ev_bad.verdict == Verdict.FAIL and ev_bad.tier == Tier.ENGINE and "DIFFER" in ev_bad.detail
