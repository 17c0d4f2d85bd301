"""The Triton stand-in of an environment whose vLLM refuses x86 CPUs without Triton (0.34+).

vLLM 0.34's ``CpuPlatform.check_and_update_config`` raises ``RuntimeError("vLLM on x86 CPUs
requires Triton (triton-cpu).")`` when ``vllm.triton_utils.HAS_TRITON`` is false; 0.33 only
warned. No Triton with a CPU backend installs from the package index (``triton`` ships the
NVIDIA and AMD backends only, which vLLM's own probe then disables on a machine without a
GPU), and the model runner is the only part that runs Triton kernels: the scheduler, the
managers, the block pool and derivation run none. So the environment carries this stand-in,
named in its manifest and printed by ``kvproof env create/list``:

- ``gate`` (default): only inside the two methods that refuse to start without Triton
  (``GATES``) and the module that sets up the x86 runner (``MODULE_GATES``) does ``HAS_TRITON``
  read true, so each runs as vLLM wrote it and every other reader still sees false;
- ``everywhere``: once ``vllm.triton_utils`` is imported every later reader sees true (what a
  triton-cpu install reports), kept for the test that no tier depends on the choice
  (tests/integration/test_triton_stand_in.py);
- ``off``: no stand-in, vLLM's own refusal (what a user without triton-cpu meets).

The choice is ``KVPROOF_TRITON_STAND_IN``. This file is copied into the environment's
site-packages as ``kvproof_stand_in_triton.py`` and imported by a ``.pth`` line at interpreter
start, so every process of the environment (workers, fuzz harnesses, standalone reproducers
that import only vLLM) sees the same vLLM. Stdlib only; it imports no vLLM itself.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

VARIABLE = "KVPROOF_TRITON_STAND_IN"
MODES = ("gate", "everywhere", "off")
# The gates, read from 0.34.0. Methods: module -> (class, method, module whose HAS_TRITON the
# method reads): the platform's config check (it imports vllm.triton_utils' name lazily) and the
# model runner's worker (gpu_worker.py binds the name at import; CPUWorker is a subclass), which
# derivation builds on the meta device. Modules: whose top level, run with Triton, adapts the
# model runner to x86 CPUs (cpu/shm.py: the CPU UvaBuffer without pinned memory, ...), as the
# triton-cpu runner vLLM ships for x86 has it.
GATES = {"vllm.platforms.cpu": ("CpuPlatform", "check_and_update_config", "vllm.triton_utils"),
         "vllm.v1.worker.gpu_worker": ("Worker", "__init__", "vllm.v1.worker.gpu_worker")}
MODULE_GATES = ("vllm.v1.worker.cpu.shm",)
# What vLLM raises without it (read from 0.34.0's vllm/platforms/cpu.py); kvproof.envs looks for it.
REFUSAL = "requires Triton (triton-cpu)"


def mode() -> str:
    m = os.environ.get(VARIABLE, "gate")
    return m if m in MODES else "gate"


def _gate(module) -> None:
    cls_name, method, reads = GATES[module.__name__]
    cls = getattr(module, cls_name, None)
    raw = cls.__dict__.get(method) if cls is not None else None
    if raw is None:
        return
    is_cm = isinstance(raw, classmethod)
    real = raw.__func__ if is_cm else raw

    def gated(*args, **kwargs):
        where = sys.modules[reads]
        if where.HAS_TRITON:
            return real(*args, **kwargs)
        where.HAS_TRITON = True  # read by the gate at the top of the real method
        try:
            return real(*args, **kwargs)
        finally:
            where.HAS_TRITON = False

    gated.__wrapped__ = real
    gated.__name__ = real.__name__
    setattr(cls, method, classmethod(gated) if is_cm else gated)


def _everywhere(module) -> None:
    module.HAS_TRITON = True  # `triton` stays vLLM's placeholder: no kernel can run
    sys.modules["vllm.triton_utils.importing"].HAS_TRITON = True


def _with_triton(run):
    """``run()`` with ``vllm.triton_utils.HAS_TRITON`` true (the module's own top-level gate)."""
    import vllm.triton_utils as tu
    if tu.HAS_TRITON:
        return run()
    tu.HAS_TRITON = True
    try:
        return run()
    finally:
        tu.HAS_TRITON = False


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the execution of the target modules, nothing else: ``patches`` maps a module name
    to ``(run_module, module)``, which must run the module."""

    def __init__(self, patches: dict) -> None:
        self.patches = patches

    def find_spec(self, name, path, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        real_exec = spec.loader.exec_module
        spec.loader.exec_module = lambda module: patch(lambda: real_exec(module), module)
        return spec


def _after(fix):
    def patch(run, module):
        run()
        fix(module)
    return patch


def install() -> str:
    """Install the chosen stand-in (idempotent); returns the mode."""
    m = mode()
    if m == "off" or any(isinstance(f, _Finder) for f in sys.meta_path):
        return m
    if m == "gate":
        patches = {**dict.fromkeys(GATES, _after(_gate)), **{n: lambda run, _: _with_triton(run) for n in MODULE_GATES}}
    else:
        patches = {"vllm.triton_utils": _after(_everywhere)}
    sys.meta_path.insert(0, _Finder(patches))
    return m


def describe() -> str:
    """One line for manifests and listings."""
    return (f"Triton stand-in ({VARIABLE}=gate): vLLM's start-up gates (platform check, model-runner worker, "
            f"x86 runner set-up) see Triton; no Triton kernel runs in any tier")
