"""The BlockRemoved oracle's view of the pool's cache (``wiring.removals``'s ``absent``) equals the
plain reading of it: every packed key vLLM holds, converted with vLLM's own functions, as a set.

``absent`` looks each announced entry up by the key it came from and walks the cache only when
one is missing (the plain reading built the whole set after every published batch: 12% of a
campaign's time). Keys are packed and converted by the release's ``kv_cache_utils``.
"""

from __future__ import annotations

import json
import os
import subprocess

from conftest import RELEASES, require_env

from kvproof.bridge.client import package_root

CHILD = r"""
import json, random
from types import SimpleNamespace
from vllm.v1.core import kv_cache_utils as u
from kvproof.consumer import wiring

def plain(m):
    return {(u.get_group_id(k), u.maybe_convert_block_hash(u.get_block_hash(k))) for k in m}

cache = {}
pool = SimpleNamespace(cached_block_hash_to_block=SimpleNamespace(_cache=cache), enable_kv_cache_events=True)
ctx = SimpleNamespace()
from kvproof.consumer.observations import Recorder
oracle = wiring.removals(pool, ctx, Recorder())
rng, checked, differ = random.Random(3), 0, 0
keys = [u.make_block_hash_with_group_id(u.BlockHash(bytes([i % 251, i // 251]) * 16), i % 3) for i in range(600)]
for step in range(400):
    for k in rng.sample(keys, rng.randint(0, 6)):  # stored, evicted, stored again
        if rng.random() < 0.6:
            cache[k] = object()
        else:
            cache.pop(k, None)
    if step % 50 == 0:  # reset_prefix_cache puts a new map in place
        pool.cached_block_hash_to_block._cache = cache = dict(cache)
    announced = set(rng.sample(sorted(plain(keys), key=repr), 40))
    got, want = oracle.absent(announced), announced - plain(cache)
    checked += 1
    differ += got != want
print(json.dumps({"checked": checked, "differ": differ, "some_absent": len(want) > 0}))
"""


def test_absent_is_the_plain_set_difference():
    env = require_env(RELEASES[-1])
    proc = subprocess.run([str(env.python), "-c", CHILD], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(package_root()), "VLLM_LOGGING_LEVEL": "ERROR"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["checked"] == 400 and got["differ"] == 0 and got["some_absent"], got
