"""The same engine tier on a GPU with the CUDA ``vllm`` package (marker ``gpu``).

Point KVPROOF_GPU_PYTHON at an interpreter whose vLLM is the CUDA build (the
prepared script gpu/replay_gpu.sh makes one). Skipped cleanly without it or
without CUDA.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from kvproof.envs import from_python
from kvproof.tiers import boots as engine, classify
from kvproof.tiers.families import SEED_HIDDEN_STATES, Recipe
from kvproof.verdicts import Tier, Verdict

pytestmark = [pytest.mark.engine, pytest.mark.gpu]

SEED_SW = Recipe(family="nemotron_h", pattern="M*M-", sliding_window=64, kv_cache_dtype="fp8",
                 kv_cache_dtype_skip_layers=("sliding_window",))


@pytest.fixture(scope="module")
def gpu_env():
    python = os.environ.get("KVPROOF_GPU_PYTHON")
    if not python:
        pytest.skip("KVPROOF_GPU_PYTHON not set (an interpreter with the CUDA vllm package)")
    probe = subprocess.run([python, "-c", "import torch, vllm; print(torch.cuda.is_available(), vllm.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or not probe.stdout.startswith("True"):
        pytest.skip(f"no CUDA through {python}: {probe.stdout.strip() or probe.stderr.strip()[-200:]}")
    return from_python(python), probe.stdout.split()[1]


@pytest.mark.parametrize("recipe", [SEED_SW, SEED_HIDDEN_STATES], ids=["sliding_window_fp8", "hidden_states"])
def test_seed_class_on_gpu(gpu_env, recipe):
    env, version = gpu_env
    b = engine.boot(env, recipe, timeout=900)
    ev = classify.engine_verdict(b)
    fixed = tuple(int(x) for x in version.split(".")[:2]) >= (0, 28)
    if fixed:
        assert ev.verdict in (Verdict.OK, Verdict.WARN), ev.detail
        assert b.token_ids, "GPU boots must generate"
    else:
        mismatch = any(g["kind"] == "mamba" and g["block_size"] != b.cache_block_size for g in b.groups)
        if not mismatch:
            pytest.skip(f"the GPU engine built {b.layout_summary()}: no Mamba group above the cache block size")
        assert ev.verdict is Verdict.FAIL and ev.tier is Tier.ENGINE, ev.detail
