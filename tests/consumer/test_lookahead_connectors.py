"""0.34 keeps lookahead block hashes under connectors that say so (facts.LOOKAHEAD_HASH_CONNECTORS),
where 0.33 turned them off under every connector: driven on the real scheduler with each connector
the consumer tier runs, an EAGLE stream on a full-attention and an align-mode Mamba hybrid layout."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import RELEASES, consumer_worker, require_env
from kvproof import facts
from kvproof.tiers.client import consumed
from kvproof.inputs.layout import Speculative
from kvproof.consumer.stream import Req, Stream
from kvproof.judging.judge import above_ideal, judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.revisions import revision_for
from kvproof.verdicts import Verdict

pytestmark = [pytest.mark.integration, pytest.mark.consumer]
SINCE = facts.CONSUMER_MARKS["lookahead_hashes"][0] + ".0"
LOOKAHEAD_RELEASES = [r for r in RELEASES if facts.release_key(r) >= facts.release_key(SINCE)]

EAGLE = Speculative("eagle", 2)  # every draft accepted
LAYOUTS = (
    Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                      "cache": {"block_size": 16, "enable_prefix_caching": True}}),
    Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 64}, {"kind": "full_attention", "block_size": 64}],
                      "cache": {"block_size": 64, "enable_prefix_caching": True, "mamba_cache_mode": "align"}}),
)
# a prompt computed and decoded, then resent, then extended: the resend and the next turn ask
# the local cache and the connector
STREAM = Stream((263,), (Req(0, 263, 0, 0, 6), Req(0, 263, 0, 12, 2), Req(suffix_len=9, arrival=20, max_tokens=2,
                                                                           extends=0)),
                max_num_batched_tokens=512)
CONNECTORS = ("SimpleCPUOffloadConnector", "OffloadingConnector", "ExampleConnector")


@pytest.fixture(scope="module", params=LOOKAHEAD_RELEASES or ["none"])
def runs(request):
    if request.param == "none":
        pytest.skip(f"no release from {SINCE} under test")
    env = require_env(request.param)
    items = [(replace(lay, kv_connector=c, speculative=EAGLE), STREAM) for lay in LAYOUTS for c in CONNECTORS]
    with consumer_worker(env) as w:
        return request.param, items, consumed(w, [lay.with_stream(s) for lay, s in items])


def test_lookahead_hashes_follow_the_connector(runs):
    release, items, results = runs
    keeps = set(facts.lookahead_hash_connectors(release))
    ran = 0
    for (lay, _), res in zip(items, results):
        what = f"{release} {lay.summary()}"
        if res.not_expressible:  # e.g. ExampleConnector lacks SupportsHMA: no hybrid layout reaches it
            hma = facts.release_connectors(release, revision_for(release))[1]
            assert len(lay.groups) > 1 and lay.kv_connector not in hma, (what, res.not_expressible)
            continue
        ran += 1
        assert not res.harness_error and not res.setup_error, (what, res.harness_error, res.setup_error)
        lookahead = 1 if lay.kv_connector in keeps else 0
        assert (res.hash_lookahead, res.eagle_drop) == (lookahead, lookahead == 0), what
        assert judge_consumer(res, lay).verdict < Verdict.LATENT, (what, judge_consumer(res, lay).line())
        assert not above_ideal(res), (what, above_ideal(res))
    assert ran >= 4, f"{release}: too few connector runs"
