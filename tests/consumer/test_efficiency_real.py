"""C6 on real vLLM: hits rounded down to a coarse LCM are a WARN that shows measured versus ideal.

A Kimi-style hybrid (MLA 1536 + Mamba 1536 + sliding window 3456): 0.32.0 schedules at the
13,824-token LCM and hashes at 384, and its prefix-cache hits land on the LCM. On the default
shared-prefix stream the consumer tier measures the recomputed share of reusable tokens and
compares it with what hits on every 384-token hash block would recompute.
"""

from __future__ import annotations

import re

import pytest

from kvproof.consumer.stream import default_stream
from kvproof.tiers.client import consumed
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict

from conftest import consumer_worker, require_env

pytestmark = pytest.mark.integration

KIMI_STYLE = {"groups": [{"kind": "mla", "block_size": 1536}, {"kind": "mamba", "block_size": 1536},
                         {"kind": "sliding_window", "block_size": 3456}],
              "cache": {"block_size": 1536, "enable_prefix_caching": True, "mamba_cache_mode": "align"},
              "max_model_len": 65536}


def test_kimi_style_lcm_hits_warn_with_measured_and_ideal_on_032():
    layout = Layout.from_dict(KIMI_STYLE)
    with consumer_worker(require_env("0.32.0")) as cw:
        [res] = consumed(cw, [layout.with_stream(default_stream(layout))])
    assert (res.scheduler_block_size, res.hash_block_size, res.alignment) == (13824, 384, 13824)
    j = judge_consumer(res, layout)
    assert j.verdict == Verdict.WARN and j.contract == "efficiency.consumer_prefix_reuse", j.line()
    m = re.search(r"\(([\d.]+)% recomputed;.*ideal at the finest granularity \(384 tokens\) ([\d.]+)% recomputed, "
                  r"(\d+) tokens lost per request", j.note)
    assert m, j.note
    measured, ideal, lost = float(m.group(1)), float(m.group(2)), int(m.group(3))
    assert measured > ideal + 5 and lost >= 64, j.note
    e = res.efficiency
    assert e.hit_tokens % 13824 == 0 and e.hit_tokens < e.reusable_tokens  # hits land on the LCM
