"""The bridge client: drives a worker process inside a vLLM environment.

One worker per environment imports vLLM once (3-15 s); each ``batch`` call then
evaluates a batch of Layouts at microseconds apiece. The client itself never
imports vLLM, so one CLI can drive several releases side by side.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kvproof.envs import Env
from kvproof.errors import BridgeError
from kvproof.settings import settings

MAPPED = ("spec", "verify", "fuzz", "findings")  # top-level folders pyproject maps into the package


def _location(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def package_root() -> Path:
    """A folder whose ``kvproof`` is exactly the package this process imported.

    A vLLM environment has no kvproof installed; its worker gets this folder
    as PYTHONPATH (and nothing else of this venv). From a wheel the mapped
    subpackages already sit inside kvproof/, so the folder holds one symlink;
    from an editable checkout it holds a kvproof/ folder of symlinks laid out
    the way a wheel is. Built once per layout of the package, atomically.
    """
    top = _location("kvproof")
    mapped = {name: _location(f"kvproof.{name}") for name in MAPPED}
    inside = all(loc.parent == top for loc in mapped.values())
    entries = {} if inside else {p.name: p for p in top.iterdir() if p.name != "__pycache__"}
    entries.update({} if inside else mapped)
    key = hashlib.sha256(repr((str(top), sorted((k, str(v)) for k, v in entries.items()))).encode()).hexdigest()[:16]
    root = settings().cache_home / "import-roots" / key
    if (root / "kvproof").exists():
        return root
    tmp = root.with_name(f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")  # threads spawn at once (spawn_all)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if inside:
        os.symlink(top, tmp / "kvproof")
    else:
        (tmp / "kvproof").mkdir()
        for name, target in entries.items():
            os.symlink(target, tmp / "kvproof" / name)
    try:
        os.rename(tmp, root)
    except OSError:  # another process built the same root first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


# vLLM's init_none_hash (v1/core/kv_cache_utils.py) seeds every block-hash chain from
# os.urandom(32) unless PYTHONHASHSEED is set, so each run hashes the same tokens to other
# values; OffloadingConnector keeps a job's keys in a set (keys=set(keys_to_store)) whose order
# follows those values and decides its CPU LRU order (complete_store -> mark_evictable), so the
# same input evicted other chunks and loaded other token counts run by run (issue 38). A fixed
# seed makes every run of an input the same; a user's own PYTHONHASHSEED wins.
WORKER_HASH_SEED = "0"


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for any process that imports vLLM on this CPU machine."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(package_root())]
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("PYTHONHASHSEED", WORKER_HASH_SEED)
    env.update(extra or {})
    return env


# Variables that change under a running test process without changing what a worker computes.
_POOL_IGNORES = ("PYTEST_CURRENT_TEST",)
POOL_IDLE = 4  # idle processes a pool keeps (~0.7 GB each), the least recently closed go first


class _Pool:
    """Live worker processes a closed Worker left behind (``KVPROOF_WORKER_POOL=1``), keyed by the
    interpreter, the server module and every variable the process started with: the next Worker
    of the same key takes one instead of importing vLLM again. A worker serves request after
    request by design (a fuzz campaign sends thousands), so a reused process answers as a new one
    does (tests/integration/test_worker_pool.py). Closed for good at exit."""

    def __init__(self) -> None:
        self.idle: list[tuple[tuple, subprocess.Popen, list[str]]] = []
        self.lock = threading.Lock()

    @staticmethod
    def key(python: Path, module: str, env: dict[str, str]) -> tuple:
        return (str(python), module, tuple(sorted((k, v) for k, v in env.items() if k not in _POOL_IGNORES)))

    def take(self, key: tuple) -> tuple[subprocess.Popen, list[str]] | None:
        with self.lock:
            self.idle = [entry for entry in self.idle if entry[1].poll() is None]  # the dead go
            for i, (k, proc, stderr) in enumerate(self.idle):
                if k == key:
                    del self.idle[i]
                    return proc, stderr
        return None

    def give(self, key: tuple, proc: subprocess.Popen, stderr: list[str]) -> None:
        with self.lock:
            self.idle.append((key, proc, stderr))
            evicted, self.idle = self.idle[:-POOL_IDLE], self.idle[-POOL_IDLE:]
        for _, old, _ in evicted:
            _stop(old)

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for _, proc, _ in idle:
            _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """End a worker process: EOF on its stdin, then a kill if it lingers."""
    if proc.poll() is None:
        assert proc.stdin
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _drain(stream, lines: list[str]) -> None:
    """Keep a worker's last 50 stderr lines (the cause a BridgeError quotes)."""
    for line in stream:
        lines.append(line.rstrip())
        del lines[:-50]


POOL = _Pool()
atexit.register(POOL.close)


class Worker:
    """A live worker process of one release: spawn, handshake, ``batch`` (its one door), close.
    What a reply means per tier, and which answer is whose, is ``kvproof.tiers``' (``tiers.client``)."""

    MODULE = "kvproof.running.worker"  # the JSON-lines server run inside the environment

    def __init__(self, env: Env, timeout: float = 600) -> None:
        self.env = env
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self._stderr: list[str] = []
        self._key: tuple | None = None  # the pool's key, when the pool is on

    def __enter__(self) -> "Worker":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> dict:
        self.spawn()
        return self.handshake()

    def spawn(self) -> None:
        """Start the process (vLLM import begins), or take a pooled one; pair with ``handshake``."""
        env = worker_env()
        self._key = _Pool.key(self.env.python, self.MODULE, env) if settings().worker_pool else None
        pooled = POOL.take(self._key) if self._key else None
        if pooled is not None:
            self.proc, self._stderr = pooled
            return
        forked = None
        if settings().worker_zygote and self.MODULE == Worker.MODULE:  # the zygote serves this protocol only
            from kvproof.bridge.zygotes import fork_worker
            forked = fork_worker(self.env.python, env)
        if forked is not None:
            self.attach(forked)
            return
        self.proc = subprocess.Popen(
            [str(self.env.python), "-m", self.MODULE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, bufsize=1)
        # the drain thread keeps the process's stream and list, whichever Worker holds it later
        threading.Thread(target=_drain, args=(self.proc.stderr, self._stderr), daemon=True).start()

    def attach(self, proc) -> None:
        """Serve through ``proc``, a worker forked elsewhere (a zygote's, a report's warm python:
        the subset of ``subprocess.Popen`` kvproof.bridge.zygotes.ForkedProc has); pair with ``handshake``."""
        self.proc = proc
        threading.Thread(target=_drain, args=(proc.stderr, self._stderr), daemon=True).start()

    def handshake(self) -> dict:
        self.info = self._call({"op": "info"})
        return self.info

    def call(self, request: dict) -> dict:
        """One request, one reply (``kvproof.running.worker``'s protocol); a worker error raises BridgeError."""
        return self._call(request)

    def _call(self, request: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            raise BridgeError(f"{self.env.name}: worker is not running{self._why()}")
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise BridgeError(f"{self.env.name}: worker died{self._why()}") from None
        stopped: list[bool] = []  # the timer stopped the worker (not a crash)
        proc = self.proc
        timer = threading.Timer(self.timeout, lambda: (stopped.append(True), proc.kill()))
        timer.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not line:
            self.proc.wait()
            if stopped:
                raise BridgeError(f"{self.env.name}: no reply within {self.timeout:.0f} s: the worker was stopped "
                                  f"(a smaller batch, or a quieter machine, fits the limit)")
            raise BridgeError(f"{self.env.name}: worker exited with code {self.proc.returncode}{self._why()}")
        reply = json.loads(line)
        if "error" in reply:
            raise BridgeError(f"{self.env.name}: worker error: {reply['error']}")
        return reply

    def _why(self) -> str:
        lines = [ln for ln in self._stderr if ln.strip()]
        return f": {lines[-1]}" if lines else ""

    def batch(self, configs: Sequence[dict] = (), layouts: Sequence[dict] = (),
              asks: Mapping[str, Mapping[str, Any]] | None = None) -> dict:
        """The worker's one door (``kvproof.running.worker.batch``): config and layout dicts, each sent once
        under :func:`input_key` of exactly what is sent, and ``asks`` (reply part -> serving
        function and options: ``kvproof.tiers.registry.asks``); the reply files every answer under
        its input's key. Returns the reply and ``"keys"``: the key of each config, then each layout,
        in the order given (equal inputs share one); ``derived`` and each part asked a mapping,
        empty where the worker had nothing to answer."""
        asks = dict(asks or {})
        ckeys = [input_key("config", d) for d in configs]
        lkeys = [input_key("layout", d) for d in layouts]
        reply = self._call({"op": "batch",
                            "configs": [{"key": k, "config": d} for k, d in dict(zip(ckeys, configs)).items()],
                            "layouts": [{"key": k, "layout": d} for k, d in dict(zip(lkeys, layouts)).items()],
                            "asks": asks})
        parts = {p: reply.get(p) or {} for p in ("derived", *asks)}
        return dict(reply, keys=ckeys + lkeys, **parts)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self._key is not None:
                POOL.give(self._key, self.proc, self._stderr)
            else:
                _stop(self.proc)
        self.proc = None


def input_key(kind: str, payload: Mapping[str, Any]) -> str:
    """The key a batch reply names an input's answers by: ``kind`` and a hash of exactly what the
    worker is sent (a Layout with its meta, stream included; a Config's dict). Equal inputs share
    a key (and are sent once); a reply is matched to inputs by these keys, never by position."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return f"{kind}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def answer(answers: Mapping[str, Any], key: str, what: str) -> Any:
    """The answer filed under input ``key`` (one part of a batch reply); a missing one is the
    worker's error, never a neighbour's answer."""
    if key not in answers:
        raise BridgeError(f"the worker's reply has no {what} for input {key}")
    return answers[key]


def spawn_all(workers: Sequence[Worker]) -> None:
    """``spawn`` every worker at once: a plain spawn returns while vLLM imports, but one from a
    zygote not yet running waits for that zygote's import, so each gets a thread of its own
    (one after the other, a window of three releases imported serially). The first error raises."""
    errors: list[BaseException] = []

    def one(w: Worker) -> None:
        try:
            w.spawn()
        except BaseException as err:  # noqa: BLE001 -- raised below, in the caller's thread
            errors.append(err)

    threads = [threading.Thread(target=one, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def start_all(envs: Sequence[Env], timeout: float | None = None) -> list[Worker]:
    """Start one worker per environment (each call's limit ``timeout`` s, default the Worker's),
    importing vLLM in parallel."""
    workers = [Worker(env) if timeout is None else Worker(env, timeout) for env in envs]
    try:
        spawn_all(workers)
        for w in workers:
            w.handshake()
    except BaseException:
        for w in workers:
            w.close()
        raise
    return workers

