"""What kvproof does not model is UNCHECKED, never a verdict about vLLM: a layout whose speculative
method the consumer tier does not draft for (suffix decoding, which every managed release accepts) on real vLLM."""

from __future__ import annotations

import pytest

from conftest import RELEASES, consumer_worker, require_env
from kvproof.tiers.client import consumed
from kvproof.consumer.stream import default_stream
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

SUFFIX = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                           "cache": {"block_size": 16, "enable_prefix_caching": True},
                           "speculative": {"method": "suffix", "num_speculative_tokens": 3}})


@pytest.mark.parametrize("release", RELEASES[-1:])
def test_an_unmodelled_drafter_is_unchecked_not_a_vllm_verdict(release):
    env = require_env(release)
    with consumer_worker(env) as w:
        res, = consumed(w, [SUFFIX.with_stream(default_stream(SUFFIX))])
    j = judge_consumer(res, SUFFIX)
    assert j.verdict is Verdict.UNCHECKED, j.line()
    assert "suffix" in (res.unchecked or "") and "lifted by" in res.unchecked
    assert not res.not_expressible and not res.observations
    assert Verdict.OK < j.verdict < Verdict.WARN  # ordered below every statement about vLLM
