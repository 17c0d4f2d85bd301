"""`kvproof check` judges every tier for every input, on real vLLM (issue 24 item 3).

A Layout pasted from a log line (a file, --groups) goes through the consumer tier as the
Config that builds it does, through the one tier runner (checking.run_tiers, one worker per release):

- the Kimi-style hybrid (MLA 1536 + align Mamba 1536 + sliding window 3456) used to be OK
  from a Layout file (function and manager tiers only); its consumer tier is the WARN that
  test_efficiency_real.py measures (hits on the 13,824-token LCM, 987 tokens lost per
  request against 384-token hash blocks on 0.32.0), and --no-consumer gives the old answer;
- the Layout that `check --config` derives and judges, written to a file and checked as a
  Layout, gets the same verdict at every tier.
"""

from __future__ import annotations

import json

import pytest

from kvproof.running import checking
from kvproof.commands import cli
from kvproof.inputs.config import Config
from kvproof.tiers.client import consumed
from kvproof.consumer.stream import default_stream
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Tier, Verdict

from conftest import consumer_worker, require_env, worker_for

pytestmark = pytest.mark.integration

KIMI_STYLE = {"groups": [{"kind": "mla", "block_size": 1536}, {"kind": "mamba", "block_size": 1536},
                         {"kind": "sliding_window", "block_size": 3456}],
              "cache": {"block_size": 1536, "enable_prefix_caching": True, "mamba_cache_mode": "align"},
              "max_model_len": 65536}


def _check(capsys, *argv: str) -> tuple[int, list[dict]]:
    rc = cli.main(["check", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)["results"]


def test_kimi_style_layout_file_gets_the_consumer_warn_on_032(tmp_path, capsys):
    require_env("0.32.0")
    f = tmp_path / "kimi.json"
    f.write_text(json.dumps(KIMI_STYLE))
    rc, rows = _check(capsys, str(f), "--vllm", "0.32.0")
    assert rc == 0, rows
    assert [(r["tier"], r["verdict"]) for r in rows] == [("manager", "OK"), ("consumer", "WARN")], rows
    manager, consumer = rows
    assert (manager["scheduler_block_size"], manager["hash_block_size"]) == (13824, 384)
    assert (consumer["scheduler_block_size"], consumer["hash_block_size"]) == (13824, 384)
    assert consumer["outcome"] is None and consumer["consumer"]["alignment"] == 13824
    assert [w["contract"] for w in consumer["warnings"]] == ["efficiency.consumer_prefix_reuse"]
    assert "ideal at the finest granularity (384 tokens)" in consumer["note"]
    # hits on the LCM lose the 6,912 reusable tokens of the half-prefix request, 987 per request
    # over the default stream's 7 admissions (1,152 over 6 before the stream grew a next turn)
    assert "r2 0/6912/6915" in consumer["note"] and "987 tokens lost per request" in consumer["note"], consumer["note"]
    # the same WARN, word for word, as the consumer tier run directly (test_efficiency_real.py)
    layout = Layout.from_dict(KIMI_STYLE)
    with consumer_worker(require_env("0.32.0")) as cw:
        [res] = consumed(cw, [layout.with_stream(default_stream(layout))])
    assert judge_consumer(res, layout).note == consumer["note"]
    # the opt-out: the function and manager tiers only, the answer a Layout used to get
    rc, rows = _check(capsys, str(f), "--vllm", "0.32.0", "--no-consumer")
    assert rc == 0 and [(r["tier"], r["verdict"]) for r in rows] == [("manager", "OK")], rows


@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_a_derived_layout_checked_as_a_layout_gets_the_config_paths_verdicts(release, tmp_path):
    """The README's config (nemotron_h_8b, prefix caching, align) through check_configs, then its
    derived Layout through checking.run, on the same live workers: the same rows, tier by tier."""
    env = require_env(release)
    w = worker_for(release)
    live = {env.name: w}
    cfg = Config(model="nemotron_h_8b", flags=("--enable-prefix-caching", "--mamba-cache-mode", "align"))
    [check] = checking.check_configs([("nemotron_h_8b", cfg)], [env], workers=live)
    assert check.not_derivable is None, check.not_derivable
    f = tmp_path / "derived.json"
    f.write_text(json.dumps(check.derived.layout.to_dict()))
    from kvproof.inputs.files import load_layouts
    rows, _ = checking.run(load_layouts([str(f)]), [env], tiers=checking.CHECK_TIERS, workers=live)
    assert w.proc is not None and w.proc.poll() is None  # a live worker is used and left running
    assert [r.tier for r in check.rows] == [Tier.MANAGER, Tier.CONSUMER], check.rows

    def seen(rs):
        return [(r.tier, r.verdict, r.judgement.contract, r.scheduler_block_size, r.hash_block_size,
                 r.judgement.note) for r in rs]
    assert seen(rows) == seen(check.rows)
    assert rows[1].consumer is not None and rows[1].outcome is None
    assert all(r.verdict != Verdict.ERROR for r in rows), [r.message() for r in rows]


def test_a_layout_runs_under_its_own_stream_through_the_tier_runner():
    """A consumer finding's file carries its stream in meta.stream; the one round trip must send
    it to the worker (it once sent the Layout without meta, so every finding, corpus input and
    self-test input ran under the default stream). Two prompts of 48 and 80 tokens: the result
    counts exactly those (the default stream's are hundreds)."""
    from kvproof.consumer.stream import Req, Stream

    env = require_env("0.32.0")
    w = worker_for("0.32.0")
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                            "cache": {"block_size": 16, "enable_prefix_caching": True}})
    own = Stream(prefixes=(32,), requests=(Req(prefix=0, prefix_len=32, suffix_len=16),
                                           Req(prefix=0, prefix_len=32, suffix_len=48, arrival=1)))
    rows = checking.run_tiers([("own", lay.with_meta(stream=own.to_dict())), ("default", lay)],
                              [Tier.CONSUMER], env.name, w)
    got = [r.consumer.efficiency.prompt_tokens for r in rows]
    assert got[0] == 128 and got[1] > 128, [r.message() for r in rows]
