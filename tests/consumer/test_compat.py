"""Harness compatibility: the consumer harness checks the vLLM signatures it relies on at start-up,
and an exception raised in kvproof's own frames is a harness error (never a vLLM FAIL)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from kvproof.bridge.client import worker_env
from kvproof.bridge import compat
from kvproof.consumer.result import ConsumerResult

from conftest import RELEASES, require_env  # the ci releases (src/kvproof/facts/__init__.py)


class _Manager033:  # the shape of 0.33's KVCacheManager.get_computed_blocks (no vLLM needed)
    def get_computed_blocks(self, request, max_cache_hit_length=None):
        return [], 0, 0


class _Manager032:
    def get_computed_blocks(self, request):
        return [], 0, 0


def test_a_one_argument_wrapper_is_flagged_on_the_033_signature():
    """The wrapper ``lookup(request)`` that broke on 0.33 (``takes 1 positional argument but 2
    were given``, 49 FAIL classes) is one line at start-up, naming the kvproof frame and the API."""
    need = compat.Need("kvproof/consumer/spies.py:spy_lookups", _Manager033.get_computed_blocks,
                       positional=("request",), takes=1)
    line = need.problem()
    assert line and line.startswith("kvproof/consumer/spies.py:spy_lookups: ") and "get_computed_blocks" in line
    assert "\n" not in line
    assert compat.Need("f", _Manager032.get_computed_blocks, positional=("request",), takes=1).problem() is None
    # a forwarding wrapper (*args, **kw) fits both
    for m in (_Manager032, _Manager033):
        assert compat.Need("f", m.get_computed_blocks, positional=("request",), forwards=True).problem() is None


def test_a_new_required_parameter_and_a_removed_keyword_are_flagged():
    def init(self, request_id, prompt_token_ids, sampling_params, new_required): ...

    def cfg(self, enable_kv_cache_events=False): ...
    assert "new_required" in compat.Need("h", init, provides=("request_id", "prompt_token_ids",
                                                              "sampling_params")).problem()
    assert "publisher" in compat.Need("h", cfg, accepts_all=("enable_kv_cache_events", "publisher")).problem()
    assert compat.first_problem([compat.Need("h", cfg, accepts_all=("enable_kv_cache_events",))]) is None


PROBE = textwrap.dedent("""
    import json, sys
    from kvproof.bridge import compat
    from kvproof.consumer import harness
    from kvproof.consumer.stream import Req, Stream
    from kvproof.inputs.layout import Layout
    mode = sys.argv[1]
    layout = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                               "cache": {"block_size": 16, "enable_prefix_caching": True}})
    stream = Stream((64,), (Req(0, 64, 4, 0, 2), Req(0, 64, 8, 1, 2)), None, 64, 4)
    if mode == "check":
        print("RESULT " + json.dumps(compat.check(harness.needs())))
        sys.exit(0)
    if mode == "oracle_raises":   # a bug in kvproof's own ground truth, mid-run: lcp(Truth, tokens)
        from kvproof.consumer import truth
        truth.Truth.longest = truth.lcp
    elif mode == "api_changed":   # the start-up check finds an API that no longer fits
        real = harness.needs
        from vllm.v1.request import Request
        harness.needs = lambda: real() + [compat.Need("kvproof/consumer/harness.py:Harness._run",
                                                      Request.__init__, provides=())]
    print("RESULT " + json.dumps(harness.Harness().run(layout, stream).to_dict()))
""")


def _probe(release: str, mode: str):
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", PROBE, mode], capture_output=True, text=True,
                          env=worker_env(), timeout=600)
    line = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stderr[-2000:]
    return json.loads(line[-1][7:])


@pytest.mark.integration
@pytest.mark.parametrize("release", RELEASES)
def test_harness_fits_every_release(release):
    assert _probe(release, "check") == []


@pytest.mark.integration
@pytest.mark.parametrize("release", ("0.32.0",))
def test_exception_in_kvproof_frame_is_a_harness_error(release):
    res = ConsumerResult.from_dict(_probe(release, "oracle_raises"))
    assert res.harness_error and "kvproof/consumer/" in res.harness_error and "TypeError" in res.harness_error
    assert not res.by("exception"), res.observations


@pytest.mark.integration
@pytest.mark.parametrize("release", ("0.32.0",))
def test_changed_api_is_a_harness_error_before_any_run(release):
    res = ConsumerResult.from_dict(_probe(release, "api_changed"))
    assert res.harness_error and "Harness._run" in res.harness_error and "Request.__init__" in res.harness_error
    assert res.steps == 0 and not res.observations
