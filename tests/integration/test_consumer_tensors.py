"""The consumer harness lays out ``kv_cache_tensors`` as the release's own engine does.

The offload connectors size their CPU pools from them (``kv_cache_tensors[0].size`` as the GPU
cache's bytes, 0.29+); a harness that described each group's tensor as its own page x blocks gave
SimpleCPUOffloadConnector a pool many times the engine's (up to 262144 CPU blocks, 30% of a
campaign's time). Here ``configs.kv_cache_tensors`` is compared with the release's
``get_kv_cache_config_from_groups`` on the same groups (one page size, as real models have).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import RELEASES, require_env

from kvproof.bridge.client import package_root

# The oldest and the newest release tested: the two shapes (``shared_by`` <= 0.28, ``layers`` 0.29+).
ENDS = sorted({RELEASES[0], RELEASES[-1]})

CHILD = r"""
import importlib, json
from kvproof.bridge.build import Builder
from kvproof.consumer.configs import EngineConfigs, kv_cache_bytes
from kvproof.consumer.stream import default_stream
from kvproof.inputs.layout import Layout

from importlib.util import find_spec
# its home: kv_cache_utils up to 0.32, kv_cache_planning from 0.33
home = "vllm.v1.core.kv_cache_planning" if find_spec("vllm.v1.core.kv_cache_planning") else "vllm.v1.core.kv_cache_utils"
real = importlib.import_module(home).get_kv_cache_config_from_groups
configs, out = EngineConfigs(Builder()), []
for groups in ([{"kind": "full_attention", "block_size": 16}],
               [{"kind": "full_attention", "block_size": 16},
                {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}],
               [{"kind": "full_attention", "block_size": 16}] * 3):
    layout = Layout.from_dict({"groups": groups, "cache": {"block_size": 16, "enable_prefix_caching": True}})
    vcfg = configs.vllm_config(layout, default_stream(layout), 100)
    vcfg.cache_config.num_gpu_blocks_override = 100
    if hasattr(vcfg.cache_config, "kv_cache_layout"):  # 0.32+: the engine core resolves it first
        vcfg.cache_config.kv_cache_layout = "NHD"
    mine = configs.kv_cache_config(layout, 100)
    theirs = real(vcfg, mine.kv_cache_groups, 1 << 40)
    out.append({"mine": repr(mine.kv_cache_tensors), "theirs": repr(theirs.kv_cache_tensors),
                "blocks": theirs.num_blocks, "bytes": kv_cache_bytes(mine),
                "page": mine.kv_cache_groups[0].kv_cache_spec.page_size_bytes})
# pages that differ (a layout's groups need not pad them equal): the engine packs them into one
# block-outermost allocation (0.32+, which resolves a layout); its every tensor is that allocation
mixed = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16},
                                     {"kind": "full_attention", "block_size": 48}],
                          "cache": {"block_size": 16, "enable_prefix_caching": True}})
vcfg = configs.vllm_config(mixed, default_stream(mixed), 100)
vcfg.cache_config.num_gpu_blocks_override = 100
if hasattr(vcfg.cache_config, "kv_cache_layout"):
    vcfg.cache_config.kv_cache_layout = "BLHNC"
    mine = configs.kv_cache_config(mixed, 100)
    theirs = real(vcfg, mine.kv_cache_groups, 1 << 40)
    out.append({"mine": [(t.size, t.offset) for t in mine.kv_cache_tensors],
                "theirs": [(t.size, t.offset) for t in theirs.kv_cache_tensors],
                "blocks": theirs.num_blocks, "bytes": kv_cache_bytes(mine),
                "page": max(g.kv_cache_spec.page_size_bytes for g in mine.kv_cache_groups)})
print(json.dumps({"cases": out, "resolves_layout": hasattr(vcfg.cache_config, "kv_cache_layout")}))
"""


@pytest.mark.parametrize("release", ENDS)
def test_tensors_are_the_engines(release):
    env = require_env(release)
    proc = subprocess.run([str(env.python), "-c", CHILD], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(package_root()), "VLLM_LOGGING_LEVEL": "ERROR"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    cases = got["cases"]
    assert len(cases) == 3 + got["resolves_layout"], cases
    for case in cases:
        assert case["blocks"] == 100
        assert case["mine"] == case["theirs"], case
        # the GPU cache's bytes, which the harness hands the connectors as cpu_bytes_to_use's bound:
        # one allocation of a page per block (the groups alias it), whatever the group count
        assert case["bytes"] == case["page"] * 100, case
