"""The shadow oracle on real vLLM: a hit of the right length built on the wrong blocks is caught.

A fault seeded into the real ``FullAttentionManager.find_longest_cache_hit`` (inside the
release's environment, the way a pull request would change it) hands the first two blocks of
every hit in swapped order: the hit's length stays the true common prefix, so the length-based
prefix_hit oracle passes it, and each block then holds the request's tokens at another position.
Unpatched, the same stream hits just as far and the shadow sees nothing.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from kvproof.bridge.client import worker_env
from kvproof.consumer.result import ConsumerResult

from conftest import RELEASES, require_env  # the ci releases (src/kvproof/facts/__init__.py)

PROBE = textwrap.dedent("""
    import json, sys
    from kvproof.consumer import harness
    from kvproof.consumer.stream import Req, Stream
    from kvproof.inputs.layout import Layout
    if sys.argv[1] == "swap":
        from vllm.v1.core import single_type_kv_cache_manager as stm
        real = stm.FullAttentionManager.find_longest_cache_hit
        def swapped(cls, *args, **kw):
            blocks, n = real(*args, **kw)
            for group in blocks:
                if len(group) >= 2:
                    group[0], group[1] = group[1], group[0]
            return blocks, n
        stm.FullAttentionManager.find_longest_cache_hit = classmethod(swapped)
    layout = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                               "cache": {"block_size": 16, "enable_prefix_caching": True}})
    # r1 arrives once r0's 96 shared tokens are computed: a hit of 96 tokens, six blocks
    stream = Stream((96,), (Req(0, 96, 8, 0, 2), Req(0, 96, 24, 4, 2)), None, 256, 4)
    print("RESULT " + json.dumps(harness.Harness().run(layout, stream).to_dict()))
""")


def _probe(release: str, mode: str) -> ConsumerResult:
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", PROBE, mode], capture_output=True, text=True,
                          env=worker_env(), timeout=600, check=False)
    line = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stderr[-2000:]
    return ConsumerResult.from_dict(json.loads(line[-1][7:]))


def _shadow(res: ConsumerResult) -> list:
    return [o for o in res.by("prefix_hit") if o.cause.startswith("shadow-")]


@pytest.mark.integration
@pytest.mark.parametrize("release", RELEASES)
def test_shadow_catches_swapped_blocks_the_length_oracle_passes(release):
    clean = _probe(release, "clean")
    assert not clean.harness_error and not clean.observations, clean.observations
    assert any(h["req"] == 1 and h["hit"] == 96 for h in clean.hits), clean.hits
    swap = _probe(release, "swap")
    assert not swap.harness_error, swap.harness_error
    assert [h["hit"] for h in swap.hits] == [h["hit"] for h in clean.hits]  # the same lengths
    got = _shadow(swap)
    assert got and got[0].cause.startswith("shadow-other-position|"), swap.observations
    assert "holds group 0's tokens from position 16" in got[0].detail, got[0].detail
    assert len(got) == len(swap.by("prefix_hit")), "the length-based prefix_hit oracle fired too"
