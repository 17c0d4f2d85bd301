"""The prefix-hit oracle catches a wrong hit served by the REAL vLLM block pool.

Inside the release's own Python (one subprocess per release) the stream is run twice through
the consumer harness (``kvproof.consumer.worker.run_one``): first as shipped (the control),
then with ``vllm.v1.core.kv_cache_utils.hash_block_tokens`` replaced at run time by a broken
one that hashes only the FIRST token of each block (plus the parent hash). That is the name
``get_request_block_hasher``'s inner ``request_block_hasher`` looks up on every call
(kv_cache_utils.py:738 in 0.27.0, :718 in 0.28.0, :990 in 0.32.0; no other module imports it),
so every ``Request.block_hashes`` the real scheduler and block pool see is the broken chain.

r1's prompt agrees with r0's only at the first token of every 16-token block. With the broken
hash the real ``KVCacheManager.get_computed_blocks`` returns r0's cached blocks for r1: a hit of
many blocks where the true longest common token prefix is 1 token, i.e. vLLM would serve r0's KV
for r1's different prompt. The ``prefix_hit`` oracle compares the hit with the longest common
prefix of the REAL token ids (``oracles.Truth``), not with hashes, so it sees the collision even
though the kvproof hash index (built with the same patched primitive) agrees with the chain
(no ``hash_chain`` observation): the prefix_hit oracle alone catches it.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from kvproof.bridge.client import worker_env
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Req, Stream
from kvproof.judging.judge import judge_consumer
from kvproof.inputs.layout import Layout
from kvproof.verdicts import Verdict

from conftest import require_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

BLOCK = 16
LAYOUT = {"groups": [{"kind": "full_attention", "block_size": BLOCK}],
          "cache": {"block_size": BLOCK, "enable_prefix_caching": True}}
A = [1 + (37 * k + 11) % 29000 for k in range(4 * BLOCK)]  # r0: 64 tokens, 4 full blocks
# r1: the first token of every block equals r0's, every other token differs; 5 blocks + 3 tokens
B = [A[k] if k < len(A) and k % BLOCK == 0 else 29500 + k for k in range(5 * BLOCK + 3)]
TRUE_LCP = 1  # B[0] == A[0], B[1] != A[1]
# r0 (2 output tokens, so its 4 prompt blocks are computed and cached) arrives at step 0; r1 at step 4
STREAM = Stream((), (Req(arrival=0, max_tokens=2, tokens=tuple(A)), Req(arrival=4, max_tokens=2, tokens=tuple(B))),
                max_num_batched_tokens=256)

SCRIPT = textwrap.dedent("""
    import json, sys
    from vllm.v1.core import kv_cache_utils
    from kvproof.consumer.worker import run_one
    from kvproof.consumer.stream import Stream
    from kvproof.inputs.layout import Layout
    layout, stream = Layout.from_dict(json.loads(sys.argv[1])), Stream.from_dict(json.loads(sys.argv[2]))
    print("RESULT control " + json.dumps(run_one(layout, stream).to_dict()), flush=True)
    real = kv_cache_utils.hash_block_tokens
    def first_token_only(hash_function, parent_block_hash, curr_block_token_ids, extra_keys=None):
        return real(hash_function, parent_block_hash, list(curr_block_token_ids)[:1], extra_keys)
    kv_cache_utils.hash_block_tokens = first_token_only
    print("RESULT patched " + json.dumps(run_one(layout, stream).to_dict()), flush=True)
""")

_cache: dict[str, dict[str, ConsumerResult]] = {}


def _results(release: str) -> dict[str, ConsumerResult]:
    if release not in _cache:
        env = require_env(release)
        proc = subprocess.run([str(env.python), "-c", SCRIPT, json.dumps(LAYOUT), STREAM.to_json()],
                              capture_output=True, text=True, env=worker_env(), timeout=600)
        got = {}
        for ln in (proc.stdout + proc.stderr).splitlines():
            if ln.startswith("RESULT "):
                _, mode, body = ln.split(" ", 2)
                got[mode] = ConsumerResult.from_dict(json.loads(body))
        assert set(got) == {"control", "patched"}, (proc.returncode, proc.stderr[-3000:])
        _cache[release] = got
    return _cache[release]


def _r1(res: ConsumerResult) -> dict:
    [hit] = [h for h in res.hits if h["req"] == 1]
    return hit


@pytest.mark.parametrize("release", ("0.27.0", "0.28.0", "0.32.0"))
def test_prefix_hit_oracle_catches_a_hit_past_the_true_common_prefix(release):
    got = _results(release)
    layout = Layout.from_dict(LAYOUT)

    # control: the shipped hash; r1 shares one token with r0, so no block can hit
    ctl = got["control"]
    assert [o for o in ctl.observations if o.oracle != "efficiency"] == [], ctl.observations
    assert _r1(ctl) == dict(_r1(ctl), hit=0, truth=TRUE_LCP)
    assert judge_consumer(ctl, layout).verdict in (Verdict.OK, Verdict.WARN)

    # patched: the real block pool serves r0's cached blocks for r1's different prompt
    res = got["patched"]
    hit = _r1(res)["hit"]
    assert _r1(res)["truth"] == TRUE_LCP
    assert hit == len(A), res.hits  # all 4 of r0's cached blocks, where only token 0 is shared
    wrong = res.by("prefix_hit")
    assert wrong, res.observations
    assert any(o.detail.startswith(f"r1: hit {hit} tokens but the longest common prefix with computed KV is "
                                   f"{TRUE_LCP}") for o in wrong), wrong
    # it is the prefix_hit oracle that sees it: the chain agrees with the (patched) primitive
    assert not res.by("hash_chain") and not res.by("exception"), res.observations
    j = judge_consumer(res, layout)
    assert j.verdict == Verdict.FAIL, j.line() or j.note
