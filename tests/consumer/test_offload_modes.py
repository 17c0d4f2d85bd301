"""SimpleCPUOffloadConnector in both of its modes (kv_connector_extra_config lazy_offload, 0.27+;
0.34 frees offloaded GPU blocks first in lazy mode and touches CPU copies on a GPU hit in eager
mode): a stream that evicts and comes back, on every release under test."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import RELEASES, consumer_worker, require_env
from kvproof.tiers.client import consumed
from kvproof.consumer.stream import Stream, default_stream
from kvproof.judging.judge import above_ideal, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

LAYOUT = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                           "cache": {"block_size": 16, "enable_prefix_caching": True},
                           "kv_connector": "SimpleCPUOffloadConnector"})


def _stream(offload: str) -> Stream:
    base = default_stream(LAYOUT)
    again = tuple(dataclasses.replace(r, arrival=r.arrival + 40) for r in base.requests[:4])  # after eviction
    return dataclasses.replace(base, num_blocks=12, requests=base.requests + again, offload=offload)


@pytest.mark.parametrize("release", RELEASES)
def test_both_offload_modes_load_from_the_cpu(release):
    env = require_env(release)
    with consumer_worker(env) as w:
        eager, lazy = consumed(w, [LAYOUT.with_stream(_stream("eager")), LAYOUT.with_stream(_stream("lazy"))])
    for mode, res in (("eager", eager), ("lazy", lazy)):
        j = judge_consumer(res, LAYOUT)
        assert j.verdict < Verdict.LATENT, (release, mode, j.line())
        assert not above_ideal(res), (release, mode, above_ideal(res))
        assert res.efficiency.external_tokens > 0, (release, mode)  # blocks came back from the CPU
    # the mode reached vLLM: the connector worked differently (lazy offloads at eviction)
    seen = lambda r: (r.connector_calls, r.events_stored, r.events_opaque)  # noqa: E731
    assert seen(lazy) != seen(eager), (release, seen(lazy))


def test_the_mode_rides_with_the_stream():
    st = _stream("lazy")
    assert Stream.from_dict(st.to_dict()) == st and st.to_dict()["offload"] == "lazy"
    assert "offload" not in _stream("eager").to_dict()  # streams written before keep their form
