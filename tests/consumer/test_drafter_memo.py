"""A drafter's SpeculativeConfig built once per key (kvproof.consumer.drafters.build) is, every
time it is handed out, what vLLM builds afresh for the same inputs: field for field (the draft
model's config and parallel config included), with the caller's own target and parallel configs
in it, and a copy of its own (what VllmConfig later changes in one input's never reaches the
next). Real vLLM, in the release's environment: the CPU release that runs the most methods and
the newest."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import RELEASES, require_env

from kvproof.bridge.client import worker_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

CHILD = r'''
import json, os
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
from vllm.config import ParallelConfig
from kvproof import facts
from kvproof.consumer import drafters
from kvproof.consumer.harness import Harness
from kvproof.inputs.drafts import Drafts
from kvproof.errors import NotExpressible

def plain(x, seen, depth=0):
    if isinstance(x, (str, int, float, bool, type(None))):
        return x
    if depth > 8 or id(x) in seen:
        return "<...>"
    seen = seen | {id(x)}
    if isinstance(x, dict):
        return {str(k): plain(v, seen, depth + 1) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=str) if isinstance(x, (set, frozenset)) else x
        return [plain(v, seen, depth + 1) for v in items]
    if hasattr(x, "to_dict") and type(x).__name__.endswith("Config") and "transformers" in type(x).__module__:
        return plain(x.to_dict(), seen, depth + 1)
    if hasattr(x, "__dict__"):
        return {"type": type(x).__name__, **{k: plain(v, seen, depth + 1) for k, v in sorted(vars(x).items())}}
    return str(x)

h = Harness()
h.warm()
cfgs = h.configs
out = {"checked": 0, "differ": [], "refused": 0, "shared": []}
for method in sorted(set(facts.SPEC_METHODS) & drafters.release_methods()):
    for k in (1, 3):
        d = Drafts(method=method, k=k)
        mc = cfgs.model_config(4096, drafters.target_for(d))
        def par():
            return ParallelConfig(tensor_parallel_size=1, decode_context_parallel_size=1)
        try:
            fresh = drafters._build(d, mc, par(), cfgs.model_dir)
        except NotExpressible as err:
            fresh = err
        got = []
        for _ in range(2):  # the first build (kept), then a copy of it
            p = par()
            try:
                got.append((drafters.build(d, mc, p, cfgs.model_dir), p))
            except NotExpressible as err:
                got.append((err, p))
        for g, p in got:
            out["checked"] += 1
            if isinstance(fresh, NotExpressible) or isinstance(g, NotExpressible):
                out["refused"] += 1
                if str(fresh) != str(g):
                    out["differ"].append([method, k, str(fresh)[:200], str(g)[:200]])
                continue
            if plain(g, frozenset()) != plain(fresh, frozenset()):
                out["differ"].append([method, k, "fields"])
            if g.target_model_config is not mc or getattr(g, "target_parallel_config", p) is not p:
                out["differ"].append([method, k, "not the caller's target/parallel config"])
        if not isinstance(got[0][0], NotExpressible) and got[0][0] is got[1][0]:
            out["shared"].append(method)
print("KVPROOF-TEST " + json.dumps(out))
'''


@pytest.mark.parametrize("release", sorted({"0.32.0", RELEASES[-1]}))
def test_a_memoised_drafter_config_is_the_fresh_one(release):
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", CHILD], check=False, capture_output=True, text=True, env=worker_env(),
                          timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("KVPROOF-TEST ")), None)
    assert line is not None, proc.stderr[-3000:]
    got = json.loads(line.removeprefix("KVPROOF-TEST "))
    assert got["checked"] >= 8, got  # at least four methods built twice each on every release here
    assert got["differ"] == [], got["differ"]
    assert got["shared"] == [], got["shared"]  # each use gets an object of its own
