"""Config -> Layout through REAL vLLM: runs INSIDE a vLLM environment (imports vLLM).

``derive(config)`` walks a user configuration through the release's own
derivation, the same code an engine boot runs, minus weights, memory
profiling, KV tensor allocation, warm-up and generation:

1. ``vllm.LLM(**kwargs)`` up to the engine: the LLM constructor's own argument
   handling builds the ``EngineArgs`` (``LLMEngine.from_engine_args`` is
   intercepted for the duration of the call, nothing else is replaced);
   ``EngineArgs.create_engine_config`` then runs config validation, the
   platform hook and the hybrid-model hooks of
   ``model_executor/models/config.py`` (align mode sets the attention block
   size so page sizes match; "none" with prefix caching becomes the release's
   caching mode).
2. The release's executor class (``Executor.get_class``) is built: worker,
   device, model runner, model with dummy weights (a tiny model: ~0.05 s).
   ``get_kv_cache_specs()`` is the runner's own spec collection, the drafter's
   cache-only layers included (hidden-state extraction).
3. ``EngineCore._initialize_kv_caches`` (the real method, run on a stand-in
   ``self``) does page-size unification, ``get_kv_cache_configs``,
   ``generate_scheduler_kv_cache_config``, the update of
   ``cache_config.block_size`` and ``validate_block_size``. Only the
   executor's memory profile (which warms the model up on CPU) is replaced by
   the configured ``kv_cache_memory_bytes`` (the explicit-size path of the CPU
   worker), and KV allocation / warm-up are skipped.
4. The real ``resolve_kv_cache_block_sizes`` on the result.

A real model (``Config.model``: an HF ``config.json``, e.g. a reference
configuration of ``spec/models/``) takes another way in, at its real depth and
width and without weights: the ``vllm serve`` flags (``Config.flags``) go
through the release's own ``EngineArgs`` argument parser (so every flag means
what that release means by it; the serve defaults apply), weights are never
read (dummy load format) and the model is built on the meta device (the
release's own layer classes build their own KV cache specs; no parameter
storage: a 52-layer 8B model derives in ~2 s and under 1 GB). The KV memory is
sized from the specs themselves (several times what one ``max_model_len``
request needs), so nobody passes ``kv_cache_memory_bytes``.

The returned dict carries the kvproof Layout the engine would resolve, the
resolver's result, or the first real error verbatim (type, message, the last
vLLM frame, the stage). Derivation uses this machine's platform (CPU): its
default block size and attention backend are the CPU ones, as in a CPU boot.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import os
import re
import resource
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Kimi-Linear (0.32+: vllm.models.kimi_k3, with NVIDIA and AMD implementations only; a CPU takes the
# NVIDIA one) fuses its row-parallel projections with the TP all-reduce in an SM100 CuTe-DSL kernel
# (kernels/linear/cute_dsl/gemm_rs_ar.py: `import cutlass`) unless VLLM_KIMI_K3_GEMM_AR=0, the
# release's own switch ("To disable GEMM-AR, set VLLM_KIMI_K3_GEMM_AR=0"). A projection kernel, not
# a KV cache spec: the derivation turns it off (a user's own setting stands) and says so.
GEMM_AR_OFF = "VLLM_KIMI_K3_GEMM_AR" not in os.environ
os.environ.setdefault("VLLM_KIMI_K3_GEMM_AR", "0")

import vllm
from vllm.entrypoints import llm as _llm_mod
from vllm.platforms import current_platform
from vllm.usage.usage_lib import UsageContext
from vllm.v1.core import kv_cache_utils
from vllm.v1.engine import core as _engine_core_mod
from vllm.v1.engine.core import EngineCore
from vllm.v1.executor import Executor

from kvproof.inputs.config import Config, load_model_config
from kvproof.derivation import layout_dict
from kvproof import facts, frames
from kvproof.revisions import revision_for
from kvproof.settings import use_release_cache_root

use_release_cache_root()

# --- torchvision, absent from the environments (kvproof.envs.BROKEN_ON_CPU) ----------------------
# PyPI's x86-64 torchvision is a CUDA build (its _C.so needs libtorch_cuda.so, which the CPU torch
# lacks: `import torchvision` fails on "operator torchvision::nms does not exist"), the CPU builds
# are only on download.pytorch.org, and there is no source distribution: the environments have
# none. transformers' image processors import it unguarded (qwen2_vl's image processor:
# `from torchvision.transforms.v2 import functional`), and a text model whose module imports a
# multimodal sibling (qwen3_5.py imports qwen3_vl for Qwen3_5ForConditionalGeneration) cannot be
# imported at all, though its KV cache specs never touch an image. The derive worker (and the
# registry's inspection subprocess, through a sitecustomize on PYTHONPATH) therefore answers an
# import of torchvision with a placeholder when the environment has none: every name can be
# imported, looked up, compared and hashed; calling one raises ImportError, so a derivation that
# really runs torchvision fails with that cause instead of computing anything. Availability checks
# see no torchvision: importlib.util.find_spec until a placeholder is imported (then it returns the
# imported module's spec, as it does for any imported module), transformers' is_torchvision_available
# always (cached at `import vllm`, before the placeholder is installed; vLLM itself checks nothing).
# A derivation whose model module reaches the placeholder names it as a stand-in.
_ABSENT_TORCHVISION_SOURCE = r'''
import importlib.abc, importlib.machinery, importlib.util, sys, types

_MESSAGE = ("{}: torchvision is not installed (no CPU wheel on the package index); kvproof's "
            "derivation imports it only as a placeholder, and this derivation called it")


class AbsentName:
    """A torchvision name: importable, looked up further, compared and hashed; calling it raises."""

    def __init__(self, name):
        object.__setattr__(self, "_kvproof_absent", name)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return AbsentName(object.__getattribute__(self, "_kvproof_absent") + "." + attr)

    def __call__(self, *args, **kwargs):
        raise ImportError(_MESSAGE.format(object.__getattribute__(self, "_kvproof_absent")))

    def __mro_entries__(self, bases):
        return (object,)

    def __eq__(self, other):
        return isinstance(other, AbsentName) and other._kvproof_absent == self._kvproof_absent

    def __hash__(self):
        return hash(self._kvproof_absent)

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __repr__(self):
        return "<kvproof placeholder " + self._kvproof_absent + ">"


class AbsentModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return AbsentName(self.__name__ + "." + attr)


class AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a real torchvision always wins."""

    _checks = (importlib.util.find_spec.__code__,)

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision" and not name.startswith("torchvision."):
            return None
        frame = sys._getframe(1)
        while frame is not None:  # an availability check, not an import
            if frame.f_code in self._checks:
                return None
            frame = frame.f_back
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return AbsentModule(spec.name)

    def exec_module(self, module):
        return None


def install():
    if importlib.util.find_spec("torchvision") is not None:
        return False
    if not any(type(f).__name__ == "AbsentFinder" for f in sys.meta_path):
        sys.meta_path.append(AbsentFinder())
    return True
'''
_absent_torchvision = types.ModuleType("kvproof_absent_torchvision")
exec(compile(_ABSENT_TORCHVISION_SOURCE, "<kvproof absent torchvision>", "exec"),  # noqa: S102 - our own source
     _absent_torchvision.__dict__)


def _install_absent_torchvision() -> bool:
    """In this worker and, through PYTHONPATH, its subprocesses; True when torchvision is absent."""
    if not _absent_torchvision.install():
        return False
    site = Path(tempfile.mkdtemp(prefix="kvproof-absent-torchvision-"))
    (site / "kvproof_absent_torchvision.py").write_text(_ABSENT_TORCHVISION_SOURCE)
    (site / "sitecustomize.py").write_text("import kvproof_absent_torchvision\nkvproof_absent_torchvision.install()\n")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return True


TORCHVISION_ABSENT = _install_absent_torchvision()
TORCHVISION_STAND_IN = ("torchvision import placeholder (the environment has none: no CPU wheel on the package "
                        "index; the model's module imports a multimodal processor, never run here)")
_REACHES_ABSENT: dict[str, bool] = {}


def _reaches_absent(module_name: str) -> bool:
    """Whether the loaded module ``module_name`` reaches a torchvision placeholder through its
    globals: a placeholder name or module, a module it binds (its own submodules aside), the
    module of a class or function it binds; only vllm, transformers and torchvision modules are
    followed (memoised: what a module binds at import is fixed once it is loaded)."""
    if not TORCHVISION_ABSENT or module_name in _REACHES_ABSENT:
        return _REACHES_ABSENT.get(module_name, False)
    absent = (_absent_torchvision.AbsentName, _absent_torchvision.AbsentModule)
    seen = {module_name}
    todo = [module_name]
    found = False
    while todo and not found:
        name = todo.pop()
        module = sys.modules.get(name)
        if module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, absent):
                found = True
                break
            if isinstance(value, types.ModuleType):
                other = value.__name__
                if other.startswith(name + "."):
                    continue  # a package's own submodule, bound on it by the import system
            else:
                other = getattr(value, "__module__", None) if isinstance(value, (type, types.FunctionType)) else None
            if isinstance(other, str) and other not in seen and other.split(".", 1)[0] in (
                    "vllm", "transformers", "torchvision"):
                seen.add(other)
                todo.append(other)
    _REACHES_ABSENT[module_name] = found
    return found


GEMM_AR_STAND_IN = ("VLLM_KIMI_K3_GEMM_AR=0 (the SM100 GEMM-AR projection kernel imports cutlass; the "
                    "release's own switch, no KV cache spec changes)")


def _module_stand_ins(vllm_config: Any) -> list[str]:
    """What the target's or the draft's model module was built with beside the release's CPU
    defaults: the torchvision placeholder (when the module reaches it), GEMM-AR off (kimi_k3)."""
    from vllm.model_executor.models.registry import ModelRegistry
    configs = [vllm_config.model_config]
    sc = vllm_config.speculative_config
    if sc is not None and getattr(sc, "draft_model_config", None) is not None:
        configs.append(sc.draft_model_config)
    modules = [getattr(ModelRegistry.models.get(arch), "module_name", None) or ""
               for mc in configs for arch in getattr(mc, "architectures", None) or []]
    out = []
    if TORCHVISION_ABSENT and any(m and _reaches_absent(m) for m in modules):
        out.append(TORCHVISION_STAND_IN)
    if GEMM_AR_OFF and any(m.startswith("vllm.models.kimi_k3") for m in modules):
        out.append(GEMM_AR_STAND_IN)
    return out


RELEASE = vllm.__version__
REVISION = revision_for(RELEASE)
_WORKDIR = Path(tempfile.mkdtemp(prefix="kvproof-derive-"))
_MEMO: dict[str, dict[str, Any]] = {}
_SINCE_GC = 0
_WARM = False


class _Intercepted(Exception):
    def __init__(self, engine_args: Any) -> None:
        super().__init__("engine args captured")
        self.engine_args = engine_args


def raw_group(spec: Any, layers: int) -> dict[str, Any]:
    """One group as the boot capture (kvproof.tiers.boot.Capture) records it."""
    d: dict[str, Any] = {"kind": facts.spec_kind(spec), "block_size": int(spec.block_size), "spec": type(spec).__name__,
                         "layers": layers}
    for name in ("sliding_window", "attention_chunk_size", "mamba_cache_mode", "dcp_sharded", "tokens_per_state"):
        value = getattr(spec, name, None)
        if value is not None and not callable(value):
            d[name] = value if isinstance(value, (int, bool, str)) else str(value)
    try:
        d["prefix_cacheable"] = bool(getattr(spec, "prefix_cacheable", True))
    except Exception:  # noqa: BLE001,S110 - a property that needs more context
        pass
    return d


def engine_args(config: Config) -> Any:
    """The EngineArgs ``vllm.LLM(**kwargs)`` builds for this config (nothing started)."""
    hf = config.hf_config()
    model_dir = _WORKDIR / f"model-{hashlib.sha256(json.dumps(hf, sort_keys=True).encode()).hexdigest()[:12]}"
    if not (model_dir / "config.json").exists():
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(hf, indent=1))
    storage = _WORKDIR / "hidden_states"
    storage.mkdir(exist_ok=True)
    engine_cls = _llm_mod.LLMEngine
    original = engine_cls.__dict__["from_engine_args"]

    def intercept(cls: Any, engine_args: Any, *args: Any, **kw: Any) -> Any:
        raise _Intercepted(engine_args)

    engine_cls.from_engine_args = classmethod(intercept)
    try:
        _llm_mod.LLM(**config.llm_kwargs(str(model_dir), str(storage)))
    except _Intercepted as got:
        return got.engine_args
    finally:
        engine_cls.from_engine_args = original
    raise RuntimeError("vllm.LLM did not reach LLMEngine.from_engine_args")  # pragma: no cover


class FlagError(Exception):
    """The release's own argument parser refused a ``vllm serve`` flag (its message, verbatim)."""


def serve_engine_args(config: Config) -> Any:
    """The EngineArgs ``vllm serve <model> <flags>`` builds in this release (its own parser).

    Weights are never read (``load_format=dummy``, no tokenizer, eager): what a
    flag says about the KV cache is untouched.
    """
    import io
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    hf = load_model_config(config.model)
    model_dir = _WORKDIR / f"model-{hashlib.sha256(json.dumps(hf, sort_keys=True).encode()).hexdigest()[:12]}"
    if not (model_dir / "config.json").exists():
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(hf, indent=1))
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm serve", exit_on_error=False))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(["--model", str(model_dir), *config.flags])
    except (SystemExit, Exception) as exc:  # argparse exits on a bad flag: its message is the answer
        text = err.getvalue().strip().splitlines()
        raise FlagError((text[-1] if text else str(exc)) or "the flags were refused") from None
    args = EngineArgs.from_cli_args(ns)
    _reference_draft(args)
    args.load_format = "dummy"
    args.skip_tokenizer_init = True
    args.enforce_eager = True
    # The CPU worker's explicit-size path (no free-memory check of this machine); the size itself
    # is replaced by one computed from the model's own specs (_spec_bytes) before anything reads it.
    args.kv_cache_memory_bytes = 1 << 30
    return args


def _reference_draft(args: Any) -> None:
    """A ``--speculative-config`` whose ``"model"`` names a reference draft (spec/models/drafts/)
    gets a folder with that ``config.json`` in its place, as a hub download would."""
    from kvproof.inputs.config import load_draft_config, reference_drafts
    sc = getattr(args, "speculative_config", None)
    if not isinstance(sc, dict) or sc.get("model") not in reference_drafts():
        return
    hf = load_draft_config(sc["model"])
    draft_dir = _WORKDIR / f"draft-{hashlib.sha256(json.dumps(hf, sort_keys=True).encode()).hexdigest()[:12]}"
    if not (draft_dir / "config.json").exists():
        draft_dir.mkdir(parents=True, exist_ok=True)
        (draft_dir / "config.json").write_text(json.dumps(hf, indent=1))
    args.speculative_config = dict(sc, model=str(draft_dir))


@contextlib.contextmanager
def _meta_weights(on: bool) -> Iterator[None]:
    """On the meta device, skip the loader's weight post-processing (kernel prepacking of
    dummy weights, e.g. the CPU MoE prepack has no meta kernel); layers and their KV cache
    specs are the release's own, built before it."""
    if not on:
        yield
        return
    from vllm.model_executor.model_loader import base_loader
    real = base_loader.process_weights_after_loading
    base_loader.process_weights_after_loading = lambda *a, **k: None
    try:
        yield
    finally:
        base_loader.process_weights_after_loading = real


def _name_stand_in(out: dict[str, Any], name: str) -> None:
    """Add ``name`` to the derivation's stand-ins (once)."""
    named = out.get("stand_in_backend") or ""
    if name not in named:
        out["stand_in_backend"] = f"{named}; {name}" if named else name


@contextlib.contextmanager
def _stand_in_amx(out: dict[str, Any]) -> Iterator[None]:
    """The CPU platform builds MLA layers for its AMX MLA backend only on CPUs with AMX tiles;
    elsewhere it forces prefix caching off (and a hybrid MLA model's own config hook then refuses
    itself: "--mamba-block-size can only be set with --enable-prefix-caching"). A CPU without AMX
    derives as the release does for that backend, and says so (``stand_in_backend``)."""
    import torch
    real = torch.cpu._is_amx_tile_supported
    if real():
        yield
        return
    def stand_in() -> bool:
        _name_stand_in(out, "CPU AMX MLA (platforms/cpu.py; this CPU has no AMX tiles)")
        return True
    torch.cpu._is_amx_tile_supported = stand_in
    try:
        yield
    finally:
        torch.cpu._is_amx_tile_supported = real


SPARSE_MLA_STAND_IN = ("CUDA FLASHMLA_SPARSE for sparse MLA (platforms/cuda.py; the CPU platform refuses sparse "
                       "attention), its workspace on the meta device")


@contextlib.contextmanager
def _stand_in_sparse_mla(out: dict[str, Any]) -> Iterator[None]:
    """The CPU platform refuses sparse MLA outright ("Sparse Attention is not supported on CPU"), so
    a model with an indexer (DeepSeek-V3.2-style, GLM-5.3) has no CPU build at all. A sparse MLA
    layer is built as the release builds it on CUDA, for FLASHMLA_SPARSE (in the sparse priorities
    of platforms/cuda.py for SM90 and SM100; its class imports without CUDA), and the derivation
    says so (``stand_in_backend``). Every other layer keeps the CPU backend."""
    platform = type(current_platform)
    real = platform.__dict__["get_attn_backend_cls"]

    def stand_in(cls: Any, selected_backend: Any, attn_selector_config: Any, *args: Any, **kw: Any) -> str:
        if not getattr(attn_selector_config, "use_sparse", False):
            return real.__func__(cls, selected_backend, attn_selector_config, *args, **kw)
        _name_stand_in(out, SPARSE_MLA_STAND_IN)
        import torch
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
        from vllm.v1.worker import workspace  # GPUModelRunner.__init__ sets it up; the CPU runner never does
        if not workspace.is_workspace_manager_initialized():
            workspace.init_workspace_manager(torch.device("meta"))
        return AttentionBackendEnum.FLASHMLA_SPARSE.get_path()

    platform.get_attn_backend_cls = classmethod(stand_in)
    try:
        yield
    finally:
        platform.get_attn_backend_cls = real


def _uses_mla(args: Any) -> bool:
    """Whether the model's config.json describes MLA layers (a latent KV rank, or DeepSeek)."""
    hf = json.loads((Path(args.model) / "config.json").read_text())
    return bool(hf.get("kv_lora_rank")) or "deepseek" in str(hf.get("model_type", ""))


def _spec_bytes(real: Any, vllm_config: Any) -> int:
    """KV memory for the derivation: several times one max_model_len request, from the specs themselves."""
    specs = real.get_kv_cache_specs()
    layers = [s for per_worker in specs for s in per_worker.values()]
    # A layer may end up stored as full attention (page-size unification, a hybrid allocator
    # disabled by a connector): count every layer at least as a full max_model_len request.
    full = -(-int(vllm_config.model_config.max_model_len) // 1)
    need = sum(max(int(s.max_memory_usage_bytes(vllm_config)),
                   -(-full // int(s.block_size)) * int(s.page_size_bytes)) for s in layers)
    pages = sum(int(s.page_size_bytes) for s in layers)
    return 4 * need + 64 * pages + (64 << 20)


class _NoAllocExecutor:
    """The real executor, minus memory profiling (a CPU warm-up run), KV allocation and warm-up."""

    def __init__(self, real: Any, kv_bytes: int | None, vllm_config: Any = None) -> None:
        self.real = real
        self.kv_bytes = kv_bytes if kv_bytes is not None else _spec_bytes(real, vllm_config)

    def get_kv_cache_specs(self) -> Any:
        return self.real.get_kv_cache_specs()

    def determine_available_memory(self) -> list[int]:
        return [self.kv_bytes]  # the CPU worker's explicit kv_cache_memory_bytes path

    def initialize_from_config(self, kv_cache_configs: Any) -> None:
        return None

    def compile_or_warm_up_model(self) -> Any:
        return None

    def collective_rpc(self, *args: Any, **kw: Any) -> Any:
        return self.real.collective_rpc(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _cleanup(executor: Any) -> None:
    try:
        from vllm.distributed.kv_transfer import kv_transfer_state
        kv_transfer_state.ensure_kv_transfer_shutdown()
        kv_transfer_state._KV_CONNECTOR_AGENT = None
    except Exception:  # noqa: BLE001,S110 - best effort, as in kvproof.tiers.boot
        pass
    # Model-parallel groups are created by the first executor of a process with that
    # model's shape (an expert-parallel group only for MoE models); left in place they
    # make the next derivation depend on the previous one (qwen3_next after
    # granite_moe_hybrid: "expert parallel group is not initialized").
    try:
        from vllm.distributed import parallel_state
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()
    except Exception:  # noqa: BLE001,S110 - nothing initialised is fine
        pass
    # No executor.shutdown() and no gc.collect(): the runner's shutdown only frees the
    # (never allocated) profiling KV cache through a full gc.collect(), ~0.45 s each
    # time; the tiny model is freed with its last reference, cycles by the normal gc.
    del executor
    global _SINCE_GC
    _SINCE_GC += 1
    if _SINCE_GC >= 64:  # amortised: one full collection per 64 derivations bounds the worker's memory
        gc.collect()
        _SINCE_GC = 0


@functools.cache  # once per worker
def _limit_address_space() -> None:
    """Cap the worker's address space once: on 0.27/0.28 DeepSeek-V4 and Kimi-Linear allocate
    real multi-GB scratch buffers although their layers are on the meta device (a 0.27 worker
    reached 23 GB and was OOM-killed on a 24 GB machine). Under the cap the allocation fails in
    that configuration and becomes its NOT_DERIVABLE cause; the machine keeps running.
    Three quarters of physical memory, at least 8 GiB (torch and vLLM map a few GiB on import)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return
    cap = max(8 << 30, physical * 3 // 4)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def derive(config: Config | dict[str, Any]) -> dict[str, Any]:
    """The Layout real vLLM derives for ``config`` (memoised per config), or its error."""
    _limit_address_space()
    if not isinstance(config, Config):
        config = Config.from_dict(config, REVISION)
    key = json.dumps(config.to_dict(), sort_keys=True)
    if key not in _MEMO:
        _MEMO[key] = _derive(config)
    return dict(_MEMO[key])


@contextlib.contextmanager
def _cheap_repeats() -> Iterator[None]:
    """Costs a release pays once per process, paid once per worker here (0.32: ~2 s -> ~0.2 s a config).

    * 0.32's CPU ``init_worker`` registers Triton kernel overrides (C++ stand-ins for the block
      table's and the drafters' Triton kernels, bound by a scan of every module, ~0.7 s). The
      derivation launches no kernel, so they are never registered here, the first executor of a
      worker included: in one process the model module is imported before the worker starts, and
      the scan trips over llvmlite's library object when that module loaded numba (Kimi-Linear's
      vision processor: "AttributeError: '_lib_fn_wrapper' object has no attribute 'get'" in
      triton_utils/dispatcher.py _rebind_kernels), so a model derived or not by the order of a
      worker's derivations.
    * model loaders call ``gc.collect()``; after the first build the import-time
      heap is frozen (``gc.freeze``), so a collection scans only new objects.
    Neither touches a config, a spec or the KV cache derivation.
    """
    global _WARM
    platform = current_platform
    skip = hasattr(platform, "register_triton_kernel_overrides")
    if skip:
        platform.register_triton_kernel_overrides = _noop
    try:
        yield
    finally:
        if skip:
            del platform.register_triton_kernel_overrides
        if not _WARM:
            gc.collect()
            gc.freeze()
            _WARM = True


def _noop() -> None:
    return None


def _layout(kv_cache_config: Any, vllm_config: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Layout dict (and the raw groups) of what the resolver is handed."""
    cache = vllm_config.cache_config
    ktc = vllm_config.kv_transfer_config
    raw = [raw_group(g.kv_cache_spec, len(g.layer_names)) for g in kv_cache_config.kv_cache_groups]
    for r, g in zip(raw, kv_cache_config.kv_cache_groups):
        if getattr(g, "is_eagle_group", False):  # KVCacheGroupSpec.is_eagle_group (0.27+)
            r["eagle"] = True
    sc = vllm_config.speculative_config
    spec = None
    # extract_hidden_states is the hidden-states connector's own method: the connector says it
    if sc is not None and getattr(sc, "method", None) and sc.method != "extract_hidden_states":
        spec = {"method": str(sc.method), "num_speculative_tokens": int(sc.num_speculative_tokens or 1)}
        draft = getattr(getattr(sc, "draft_model_config", None), "hf_config", None)
        modules = getattr(draft, "num_nextn_predict_layers", 1) if sc.method == "mtp" else 1
        if isinstance(modules, int) and modules > 1:  # the target's MTP modules (0.33: multi-module lookahead)
            spec["mtp_modules"] = modules
    layout = layout_dict(
        raw, REVISION, cache_block_size=int(cache.block_size),
        enable_prefix_caching=bool(cache.enable_prefix_caching),
        prefix_match_unit=getattr(cache, "prefix_match_unit", None),
        mamba_cache_mode=getattr(cache, "mamba_cache_mode", None),
        kv_connector=getattr(ktc, "kv_connector", None) if ktc is not None else None,
        dcp=int(getattr(vllm_config.parallel_config, "decode_context_parallel_size", 1) or 1),
        max_model_len=int(vllm_config.model_config.max_model_len), speculative=spec)
    return layout, raw


_UNINSPECTED = re.compile(r"Model architectures \[(?P<archs>[^\]]*)\] failed to be inspected")


def _inspection_cause(err: BaseException) -> str:
    """vLLM inspects a model class in a subprocess and reports only that it "failed to be
    inspected"; importing the class here names the cause (e.g. a module the environment lacks)."""
    m = _UNINSPECTED.search(str(err))
    if not m:
        return ""
    try:
        from vllm.model_executor.models.registry import ModelRegistry
        for arch in re.findall(r"'([^']+)'", m.group("archs")):
            model = ModelRegistry.models.get(arch)
            try:
                getattr(model, "load_model_cls", None) and model.load_model_cls()
            except Exception as exc:  # noqa: BLE001 - the cause is what we report
                return f" (cause: {arch}: {type(exc).__name__}: {exc})"
    except Exception:  # noqa: BLE001,S110 - best effort: the release's message stands alone
        pass
    return ""


def _derive(config: Config) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": False, "release": RELEASE, "revision": REVISION,
                           "config": config.to_dict(minimal=True), "stage": "config"}
    t0 = time.perf_counter()
    executor = None
    try:
        # An MLA model's backend stand-ins cover the config hooks and the executor build alike: 0.32+
        # picks the attention backends and checks the aligned block size against them there.
        backends = contextlib.ExitStack()
        if config.model is not None:
            out["stage"] = "flags"
            args = serve_engine_args(config)
            out["stage"] = "config"
            if _uses_mla(args):
                backends.enter_context(_stand_in_amx(out))
                backends.enter_context(_stand_in_sparse_mla(out))
            with backends:
                vllm_config = args.create_engine_config(UsageContext.OPENAI_API_SERVER)
                vllm_config.load_config.device = "meta"  # the release's own layers, no parameter storage
                out["stage"] = "model"
                with _cheap_repeats(), _meta_weights(True):
                    executor = Executor.get_class(vllm_config)(vllm_config)
        else:
            vllm_config = engine_args(config).create_engine_config(UsageContext.LLM_CLASS)
            out["stage"] = "model"
            with _cheap_repeats(), _meta_weights(False):
                executor = Executor.get_class(vllm_config)(vllm_config)
        stand_ins = _module_stand_ins(vllm_config)
        if stand_ins:
            out["stand_in_backend"] = "; ".join(filter(None, [out.get("stand_in_backend"), *stand_ins]))
        out["stage"] = "kv_cache"
        stand_in = types.SimpleNamespace(available_gpu_memory_for_kv_cache=-1)
        kv_bytes = None if config.model is not None else int(config.kv_cache_memory_bytes)
        stand_in.model_executor = _NoAllocExecutor(executor, kv_bytes, vllm_config)
        out["kv_cache_memory_bytes"] = stand_in.model_executor.kv_bytes
        stand_in.collective_rpc = stand_in.model_executor.collective_rpc
        seen: dict[str, Any] = {}
        real_resolver = kv_cache_utils.resolve_kv_cache_block_sizes

        def resolver(kv_cfg: Any, vcfg: Any, *args: Any, **kw: Any) -> Any:
            # 0.32+ resolves inside _initialize_kv_caches: record its inputs, then run it.
            seen.setdefault("args", (kv_cfg, vcfg))
            out["stage"] = "resolver"
            result = real_resolver(kv_cfg, vcfg, *args, **kw)
            seen.setdefault("result", result)
            return result

        _engine_core_mod.resolve_kv_cache_block_sizes = resolver
        try:
            kv_cache_config = EngineCore._initialize_kv_caches(stand_in, vllm_config)
        finally:
            _engine_core_mod.resolve_kv_cache_block_sizes = real_resolver
            if "args" in seen:
                out["layout"], out["groups"] = _layout(*seen["args"])
        if "args" not in seen:  # up to 0.31 the engine core resolves right after KV cache init
            out["layout"], out["groups"] = _layout(kv_cache_config, vllm_config)
            out["stage"] = "resolver"
            seen["result"] = real_resolver(kv_cache_config, vllm_config)
        out["mamba_block_size"] = getattr(vllm_config.cache_config, "mamba_block_size", None)
        scheduler, hash_size = seen["result"]
        out["scheduler_block_size"], out["hash_block_size"] = int(scheduler), int(hash_size)
        out["stage"] = "done"
        out["ok"] = True
    except Exception as err:  # noqa: BLE001 - the release's own rejection, recorded verbatim
        out["error_type"] = type(err).__name__
        cause = _inspection_cause(err)  # right after vLLM's "failed to be inspected"
        out["error_message"] = _UNINSPECTED.sub(lambda m: m.group(0) + cause, str(err), count=1)[:2400]
        out["error_frame"] = frames.vllm_frame(err)
    finally:
        _cleanup(executor)
        out["seconds"] = round(time.perf_counter() - t0, 4)
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main() -> None:
    """``python -m kvproof.bridge.derive < configs.json``: one JSON result per line."""
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    for raw in json.loads(sys.stdin.read()):
        real_stdout.write(json.dumps(derive(raw)) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
