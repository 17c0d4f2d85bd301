"""Engine boots: runs INSIDE a vLLM environment (``python -m kvproof.tiers.boot``).

Reads one JSON request on stdin::

    {"recipes": [Recipe.to_dict(), ...], "workdir": "/tmp/...", "probe": false, "fork": false}

and for each recipe writes the tiny model's config.json, boots ``vllm.LLM``
with dummy weights (in this process: VLLM_ENABLE_V1_MULTIPROCESSING=0), reads
the live KV layout back from the engine, generates a few tokens from token-id
prompts unless ``probe`` is set, and prints one ``BootResult`` per recipe on a
stdout line starting with ``KVPROOF-BOOT ``. vLLM's own output goes to stderr.

The live layout is read by wrapping the engine core's
``resolve_kv_cache_block_sizes``: its arguments are exactly what the engine
derived (groups, cache block size after KV init, Mamba mode), and its result
is what the scheduler and coordinator get, so the layout is known even when
the coordinator then refuses it.

With ``"fork": true`` each recipe boots in a child forked after the import
(``boot_forked``): one process per boot, as a fresh interpreter gives, for one import.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

MARK = "KVPROOF-BOOT "
_real_stdout = sys.stdout
sys.stdout = sys.stderr

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from kvproof import frames  # noqa: E402
from kvproof.outcome import bare_assert  # noqa: E402
from kvproof.tiers.families import PROMPTS, VOCAB, BootResult, Recipe  # noqa: E402
from kvproof import facts  # noqa: E402

_T0 = time.perf_counter()
import torch  # noqa: E402,F401
import vllm  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.v1.engine import core as engine_core  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - _T0


class Capture:
    """Wraps the engine core's resolver call and remembers what it saw."""

    def __init__(self) -> None:
        from vllm.v1.core import kv_cache_utils
        self.seen: dict[str, Any] | None = None
        self.original = kv_cache_utils.resolve_kv_cache_block_sizes
        # The engine core and the consumers that resolve on their own (e.g. the
        # OffloadingConnector's config, imported lazily) all see the wrapper:
        # patch the defining module and every module already holding the name.
        for name, mod in list(sys.modules.items()):
            # vars(), not getattr(): a lazy module's __getattr__ would import things (transformers).
            if name.startswith("vllm") and mod is not None and \
                    vars(mod).get("resolve_kv_cache_block_sizes") is self.original:
                setattr(mod, "resolve_kv_cache_block_sizes", self._wrapped)
        engine_core.resolve_kv_cache_block_sizes = self._wrapped

    def _wrapped(self, kv_cache_config: Any, vllm_config: Any, *args: Any, **kw: Any) -> Any:
        cache = vllm_config.cache_config
        groups = []
        for g in kv_cache_config.kv_cache_groups:
            spec = g.kv_cache_spec
            d = {"kind": facts.spec_kind(spec), "block_size": int(spec.block_size), "spec": type(spec).__name__,
                 "layers": len(g.layer_names)}
            for name in ("sliding_window", "attention_chunk_size", "mamba_cache_mode", "dcp_sharded",
                         "tokens_per_state"):
                value = getattr(spec, name, None)
                if value is not None and not callable(value):
                    d[name] = value if isinstance(value, (int, bool, str)) else str(value)
            try:
                d["prefix_cacheable"] = bool(getattr(spec, "prefix_cacheable", True))
            except Exception:  # a property that needs more context
                pass
            groups.append(d)
        ktc = vllm_config.kv_transfer_config
        self.seen = {
            "caller": _caller(),
            "groups": groups, "cache_block_size": int(cache.block_size),
            "mamba_cache_mode": getattr(cache, "mamba_cache_mode", None),
            "enable_prefix_caching": bool(cache.enable_prefix_caching),
            "kv_connector": getattr(ktc, "kv_connector", None) if ktc is not None else None,
            "max_model_len": int(vllm_config.model_config.max_model_len),
        }
        result = self.original(kv_cache_config, vllm_config, *args, **kw)
        self.seen["scheduler_block_size"], self.seen["hash_block_size"] = int(result[0]), int(result[1])
        return result


def _caller() -> str:
    """Which vLLM function called the resolver (engine core, a connector, ...): the innermost vLLM
    frame above this one, ``_wrapped`` and ``_wrapped``'s caller."""
    return frames.stack_vllm(3)


def _coordinator(llm: Any) -> str:
    obj = llm.llm_engine
    for attr in ("engine_core", "engine_core", "scheduler", "kv_cache_manager", "coordinator"):
        obj = getattr(obj, attr, None)
        if obj is None:
            return ""
    return type(obj).__name__


def cpu_kernels() -> str:
    """Which x86 kernel build vLLM loads here (vllm/platforms/cpu.py import_kernels) and AMX.

    _C for AVX512-BF16, _C_AVX512 for AVX512 without BF16, _C_AVX2 otherwise; AMX also switches
    the GDN/Mamba conv path and forces a float32 SSM state (check_and_update_config). Printed with
    every failed boot so a CPU-dependent kernel error names the CPU it happened on.
    """
    try:
        cpu = torch.cpu
        if not cpu._is_avx512_supported():
            isa, lib = "AVX2", "_C_AVX2"
        elif cpu._is_avx512_bf16_supported():
            isa, lib = "AVX512_BF16", "_C"
        else:
            isa, lib = "AVX512", "_C_AVX512"
        if cpu._is_amx_tile_supported():
            isa += "+AMX"
        cap = torch.backends.cpu.get_cpu_capability()
        return f"{isa} ({lib}; torch {cap})"
    except Exception as err:  # an older torch or a non-x86 machine
        return f"unknown ({type(err).__name__})"


CPU = cpu_kernels()


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _cleanup(llm: Any) -> None:
    """Tear one engine down so the next boot in this process starts clean."""
    try:
        from vllm.distributed.kv_transfer import kv_transfer_state
        kv_transfer_state.ensure_kv_transfer_shutdown()
        kv_transfer_state._KV_CONNECTOR_AGENT = None
    except Exception:
        pass
    try:
        del llm
        gc.collect()
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel
        destroy_model_parallel()
        destroy_distributed_environment()
    except Exception:
        pass
    gc.collect()


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def serve_prompts(recipe: Recipe, scheduler_block_size: int | None) -> list[list[int]]:
    """Three prompts that reach the prefix cache: A = P + a, B = P + b (shares P with A), A again.

    P spans at least two scheduler blocks (the hit granularity of hybrid models in align mode) and
    leaves room for the suffix and the generated tokens inside max_model_len."""
    s = scheduler_block_size or recipe.block_size or 64
    room = recipe.max_model_len - recipe.max_tokens - 16
    plen = max(8, min(2 * s + s // 2 + 3, room))
    v = max(VOCAB - 3, 2)  # ids inside the tiny model's vocabulary
    prefix = [1 + (37 * k + 11) % v for k in range(plen)]
    a = [1 + (13 * k + 5) % v for k in range(9)]
    b = [1 + (17 * k + 7 + v // 2) % v for k in range(11)]
    return [prefix + a, prefix + b, prefix + a]


def serve(llm: Any, prompts: list[list[int]], max_tokens: int) -> tuple[list[list[int]], list[int | None]]:
    """One request at a time (each may hit what the earlier ones cached), greedy; the generated ids
    and each request's prefix-cache hit in tokens (``RequestOutput.num_cached_tokens``)."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, detokenize=False, ignore_eos=True, seed=0)
    toks, cached = [], []
    for p in prompts:
        [out] = llm.generate([{"prompt_token_ids": list(p)}], params, use_tqdm=False)
        toks.append(list(out.outputs[0].token_ids))
        n = getattr(out, "num_cached_tokens", None)
        cached.append(int(n) if isinstance(n, int) else None)
    return toks, cached


def boot(recipe: Recipe, workdir: Path, probe: bool, capture: Capture) -> BootResult:
    res = BootResult(ok=False, release=vllm.__version__, recipe=recipe.to_dict(), stage="config",
                     import_seconds=round(IMPORT_SECONDS, 2), cpu=CPU)
    model_dir = workdir / f"model-{recipe.key()}"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(recipe.hf_config(), indent=1))
    storage = workdir / "hidden_states"
    storage.mkdir(exist_ok=True)
    capture.seen = None
    llm = None
    t0 = time.perf_counter()
    try:
        res.stage = "engine"
        llm = LLM(**recipe.llm_kwargs(str(model_dir), str(storage)))
        res.boot_seconds = round(time.perf_counter() - t0, 2)
        res.coordinator = _coordinator(llm)
        generate = recipe.generate and not probe
        if generate and recipe.aux_layers and not torch.cuda.is_available():
            generate = False
            res.notes.append("generation skipped: extract_hidden_states on a hybrid model in align mode needs "
                             "a GPU (Triton-only run_fused_precopy; the hidden-states connector pins memory)")
        if generate:
            res.stage = "generate"
            t1 = time.perf_counter()
            params = SamplingParams(max_tokens=recipe.max_tokens, temperature=0.0, detokenize=False,
                                    ignore_eos=True)
            outs = llm.generate([{"prompt_token_ids": list(p)} for p in PROMPTS], params, use_tqdm=False)
            res.token_ids = [list(o.outputs[0].token_ids) for o in outs]
            res.generate_seconds = round(time.perf_counter() - t1, 2)
        if generate and recipe.enable_prefix_caching:
            res.stage = "serve"
            seen = dict(capture.seen) if capture.seen else None
            sbs = (seen or {}).get("scheduler_block_size")
            prompts = serve_prompts(recipe, sbs)
            _cleanup(llm)
            llm = None
            # Prefill in chunks of one scheduler block: on CPU, Mamba align mode cannot write the
            # intermediate state checkpoints of a chunk that crosses a block boundary
            # (mamba_mixer2.py:880 conv_ssm_forward IndexError, the CPU scan returns final states
            # only); block-sized chunks end on the boundaries, so every state is a final state.
            chunk = max(int(sbs or 256), 16)
            results = []
            for r in (recipe, dataclasses.replace(recipe, enable_prefix_caching=False)):
                kw = dict(r.llm_kwargs(str(model_dir), str(storage)), max_num_batched_tokens=chunk,
                          enable_chunked_prefill=True)
                llm = LLM(**kw)
                results.append(serve(llm, prompts, recipe.max_tokens))
                _cleanup(llm)
                llm = None
            capture.seen = seen  # the layout under test is the recipe's own boot
            (on, cached), (off, _) = results
            mismatch = [i for i, (a, b) in enumerate(zip(on, off)) if a != b]
            res.serve = {"prefix_len": _common(prompts[0], prompts[1]), "prompts": len(prompts),
                         "prompt_lens": [len(p) for p in prompts], "cached_tokens": cached, "on": on, "off": off,
                         "match": not mismatch and len(on) == len(off), "mismatch": mismatch}
        res.stage = "done"
        res.ok = True
    except BaseException as err:  # noqa: BLE001 - we report every failure verbatim
        if res.boot_seconds is None:
            res.boot_seconds = round(time.perf_counter() - t0, 2)
        res.error_type = type(err).__name__
        res.error_message = str(err)[:2000]
        res.error_frame = frames.vllm_frame(err)
        res.error_condition, res.error_caller = bare_assert(err)
        if isinstance(err, KeyboardInterrupt):
            raise
    finally:
        if capture.seen:
            for k, v in capture.seen.items():
                if k == "caller":
                    res.notes.append(f"layout read at the resolver call from {v}")
                else:
                    setattr(res, k, v)
        res.peak_rss_mb = _peak_rss_mb()
        _cleanup(llm)
    return res


def _emit(result: BootResult) -> None:
    _real_stdout.write(MARK + json.dumps(result.to_dict()) + "\n")
    _real_stdout.flush()


def boot_forked(recipe: Recipe, workdir: Path, probe: bool, capture: Capture) -> BootResult:
    """``boot`` in a child forked from this process after vLLM's import: a process of its own
    (nothing of another boot's engine survives into it, a crash ends only it), without paying the
    import again. vLLM forks its own workers after the same import (its CPU default)."""
    read, write = os.pipe()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: boot, hand the result to the parent, leave without cleanup handlers
        os.close(read)
        code = 0
        try:
            with os.fdopen(write, "w") as out:
                out.write(json.dumps(boot(recipe, workdir, probe, capture).to_dict()))
        except BaseException:  # noqa: BLE001 - the parent reports the missing result
            code = 1
        sys.stderr.flush()
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as got:
        text = got.read()
    _, status = os.waitpid(pid, 0)
    if text:
        return BootResult.from_dict(json.loads(text))
    how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"code {os.WEXITSTATUS(status)}")
    return BootResult(ok=False, release=vllm.__version__, recipe=recipe.to_dict(), stage="crash",
                      error_type="crash", error_message=f"boot process exited with {how}",
                      import_seconds=round(IMPORT_SECONDS, 2), cpu=CPU)


def main() -> None:
    request = json.loads(sys.stdin.read())
    workdir = Path(request["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    capture = Capture()
    _real_stdout.write(MARK + json.dumps({"ready": True, "vllm": vllm.__version__, "cpu": CPU,
                                          "import_seconds": round(IMPORT_SECONDS, 2)}) + "\n")
    _real_stdout.flush()
    run = boot_forked if request.get("fork") else boot
    for raw in request["recipes"]:
        _emit(run(Recipe.from_dict(raw), workdir, bool(request.get("probe")), capture))


if __name__ == "__main__":
    main()
