"""Engine-tier client: boots tiny models in a vLLM environment, one subprocess per call.

Stdlib only. ``boot(env, recipe)`` runs ``python -m kvproof.tiers.boot`` with
the environment's interpreter under a wall-clock limit and returns the
``BootResult`` (a timeout or a crash becomes a failed result with the stderr
tail, never an exception). ``boot_many`` boots several recipes in ONE process
(import paid once): the synthesiser's cheap probe path; ``boot_each`` boots each
in a process of its own forked after that one import (the replay's path).

One ``VLLM_CACHE_ROOT`` per release keeps compiled artefacts of different
releases apart. The machine has 2 cores: never run two boots at once (a lock
file serialises boots across processes).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from kvproof.bridge.client import worker_env
from kvproof.envs import Env, engine_refusal
from kvproof.locks import file_lock
from kvproof.tiers.families import BootResult, Recipe
from kvproof.settings import settings, vllm_cache_root

MARK = "KVPROOF-BOOT "
DEFAULT_TIMEOUT = 300.0


def kvproof_cache() -> Path:
    return settings().cache_home


def env_release(env: Env) -> str:
    m = env.manifest() or {}
    return str(m.get("vllm") or m.get("version") or env.name.rsplit("-", 1)[-1])


def boot_env(env: Env) -> dict[str, str]:
    root = vllm_cache_root(env.name)
    root.mkdir(parents=True, exist_ok=True)
    return worker_env({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CACHE_ROOT": str(root),
                       "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})


def boot_lock():
    """At most one engine boot at a time on this machine (2 cores, 24 GB)."""
    return file_lock(kvproof_cache() / ".engine-boot.lock")


def _failed(recipe: Recipe, release: str, stage: str, message: str, tail: list[str], seconds: float) -> BootResult:
    return BootResult(ok=False, release=release, recipe=recipe.to_dict(), stage=stage, error_type=stage,
                      error_message=message, boot_seconds=round(seconds, 2), log_tail=tail[-15:])


def boot_many(env: Env, recipes: Sequence[Recipe], probe: bool = False,
              timeout: float = DEFAULT_TIMEOUT, per_boot: float = 120.0, fork: bool = False) -> list[BootResult]:
    """Boot ``recipes`` one after another in one process; results in order. With ``fork`` each
    boots in a child forked after the import (a process per boot, one import: ``boot_each``).

    ``timeout`` bounds the import; each boot adds ``per_boot`` to the budget.
    A process that dies or times out yields failed results for what is left.
    """
    release = env_release(env)
    if not recipes:
        return []
    refusal = engine_refusal(env)  # a python-only environment has no kernels for this release
    if refusal:
        return [_failed(r, release, "python-only", refusal, [], 0.0) for r in recipes]
    work = Path(tempfile.mkdtemp(prefix="kvproof-boot-"))
    request = json.dumps({"recipes": [r.to_dict() for r in recipes], "workdir": str(work), "probe": probe,
                          "fork": fork})
    results: list[BootResult] = []
    stderr_tail: list[str] = []
    cpu = ""
    started = time.monotonic()
    with boot_lock():
        proc = subprocess.Popen([str(env.python), "-m", "kvproof.tiers.boot"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=boot_env(env),
                                cwd=str(work), start_new_session=True)

        def drain() -> None:
            assert proc.stderr
            for line in proc.stderr:
                if line.strip():
                    stderr_tail.append(line.rstrip()[:400])
                    del stderr_tail[:-40]

        threading.Thread(target=drain, daemon=True).start()
        limit = timeout + per_boot * len(recipes)
        killer = threading.Timer(limit, lambda: _kill(proc))
        killer.start()
        try:
            assert proc.stdin and proc.stdout
            proc.stdin.write(request)
            proc.stdin.close()
            for line in proc.stdout:
                if not line.startswith(MARK):
                    continue
                payload = json.loads(line[len(MARK):])
                if payload.get("ready"):
                    cpu = str(payload.get("cpu") or "")
                    continue
                results.append(BootResult.from_dict(payload))
            proc.wait()
        finally:
            killer.cancel()
            _kill(proc)
        # Peak RSS of the boot process (children reaped so far; the max is per process).
        peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    elapsed = time.monotonic() - started
    for r in recipes[len(results):]:
        if elapsed >= limit:
            results.append(_failed(r, release, "timeout", f"no result within {limit:.0f} s", stderr_tail, elapsed))
        else:
            last = next((ln for ln in reversed(stderr_tail) if ln.strip()), "no output")
            results.append(_failed(r, release, "crash", f"boot process exited with code {proc.returncode}: {last}",
                                   stderr_tail, elapsed))
    for res in results:
        res.cpu = res.cpu or cpu
        if res.peak_rss_mb is None:
            res.peak_rss_mb = round(peak_children, 1)
        if not res.ok and not res.log_tail:
            res.log_tail = [ln for ln in stderr_tail if "Error" in ln or "error" in ln][-5:]
    shutil.rmtree(work, ignore_errors=True)
    return results


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # the boot's own session: only what we started


def boot(env: Env, recipe: Recipe, timeout: float = DEFAULT_TIMEOUT) -> BootResult:
    """One recipe in one fresh process: the engine tier's real replay."""
    return boot_many(env, [recipe], probe=False, timeout=timeout, per_boot=0.0)[0]


def boot_each(env: Env, recipes: Sequence[Recipe], timeout: float = DEFAULT_TIMEOUT) -> list[BootResult]:
    """Each recipe as ``boot`` replays it, in a process of its own (forked after one import of
    vLLM: the import is most of a tiny model's boot), each with ``timeout``; a recipe met twice
    boots once (a boot is a function of the release and the recipe)."""
    unique = list({r.key(): r for r in recipes}.values())
    got = dict(zip((r.key() for r in unique), boot_many(env, unique, timeout=timeout, per_boot=timeout, fork=True)))
    return [got[r.key()] for r in recipes]
