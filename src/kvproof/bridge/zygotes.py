"""Workers forked from a warm per-release parent (``KVPROOF_WORKER_ZYGOTE=1``): no vLLM import.

Every kvproof process that needs a release starts a worker, and the worker's vLLM import
(8-30 s of CPU) is most of a short command. With the zygote on, the first worker of a
release starts ``kvproof.running.zygote`` (one import) as a detached process, and every
worker after it, in this process or any other, is a fork of it: the same interpreter,
the same imports, the client's own variables. A zygote is keyed by everything its import
read: the interpreter, the variables (but the pytest and kvproof ones no worker reads at
import), kvproof's sources and the vLLM package's files (path, size,
mtime), so an overlay rewritten in place or an edited kvproof gets a new zygote. It exits
after ``IDLE`` seconds unused, or when a new one needs its place (at most ``MAX_LIVE``). Anything that goes wrong here falls back to a plain worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import subprocess
import time
from functools import cache
from pathlib import Path

IDLE = 240.0  # seconds a zygote waits for its next client
MAX_LIVE = 6  # live zygotes per user (each holds one vLLM import, ~0.5-1 GB); the least recently used goes
START_TIMEOUT = 600.0
# What a worker's import reads of kvproof's variables: the Triton stand-in's choice (read at
# interpreter start, src/kvproof/envs/stand_in_triton.py) and the cache home (the release's
# VLLM_CACHE_ROOT, kvproof.settings.use_release_cache_root); the rest are read by the client
# side only, and pytest's vary from test to test. The child still gets the client's
# exact values: only the zygote's key leaves them out.
_IMPORT_READS = ("KVPROOF_TRITON_STAND_IN", "KVPROOF_CACHE_HOME")


def _read_at_import(name: str) -> bool:
    return not name.startswith(("PYTEST_", "KVPROOF_")) or name in _IMPORT_READS


def home() -> Path:
    """Short on purpose: a Unix socket path holds at most 107 bytes."""
    d = Path(f"/tmp/kvproof-zygotes-{os.getuid()}")
    d.mkdir(mode=0o700, exist_ok=True)
    return d


@cache
def _kvproof_digest(root: str) -> str:
    """Content of every kvproof source file the worker could import (this process's package)."""
    h = hashlib.sha256()
    for p in sorted(Path(root).resolve().rglob("*.py")):
        h.update(str(p).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _vllm_stamp(python: Path) -> str:
    """The vLLM package's files as (path, size, mtime): an overlay rewritten in place changes it."""
    env_root = Path(python).resolve().parent.parent
    h = hashlib.sha256()
    for site in sorted(env_root.glob("lib/python*/site-packages/vllm")):
        for dirpath, dirnames, files in os.walk(site):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith((".py", ".so", ".pth")):
                    st = os.stat(os.path.join(dirpath, f))
                    h.update(f"{dirpath}/{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def key(python: Path, env: dict[str, str]) -> str:
    import kvproof
    kept = sorted((k, v) for k, v in env.items() if _read_at_import(k))
    parts = [str(python), json.dumps(kept), _kvproof_digest(str(Path(kvproof.__file__).parent)), _vllm_stamp(python)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


class ForkedProc:
    """The subset of ``subprocess.Popen`` a Worker uses, for a worker the zygote forked.
    Its exit status is the zygote's to reap, so ``returncode`` is -1 once it is gone."""

    def __init__(self, pid: int, stdin, stdout, stderr) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self.returncode: int | None = None

    @staticmethod
    def pipes() -> tuple[list[int], list[int]]:
        """Three pipes for a worker to be forked: (its stdin, stdout, stderr ends; ours)."""
        p = [os.pipe() for _ in range(3)]
        return [p[0][0], p[1][1], p[2][1]], [p[0][1], p[1][0], p[2][0]]

    @classmethod
    def of(cls, pid: int, ours: list[int]) -> ForkedProc:
        """The forked worker ``pid`` behind our ends of :meth:`pipes`, as ``subprocess.Popen`` gives them."""
        return cls(pid, os.fdopen(ours[0], "w", buffering=1), os.fdopen(ours[1], "r"),
                   os.fdopen(ours[2], "r", errors="replace"))

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("forked worker", timeout)
            time.sleep(0.02)
        return -1

    def kill(self) -> None:
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass


def _live() -> list[Path]:
    """The pid files of the zygotes alive now, least recently used first (a dead one's file goes)."""
    out = []
    for f in home().glob("*.pid"):
        try:
            os.kill(int(f.read_text()), 0)
            out.append((f.stat().st_mtime, f))
        except (ValueError, OSError):
            f.unlink(missing_ok=True)
    return [f for _, f in sorted(out)]


def _make_room() -> None:
    """At the cap, stop the least recently used zygotes. Safe at any moment: the workers it forked
    are processes of their own and keep serving their clients; its next client starts it anew."""
    live = _live()
    for f in live[:max(0, len(live) - MAX_LIVE + 1)]:
        try:
            os.kill(int(f.read_text()), 15)
        except (ValueError, OSError):
            pass
        f.unlink(missing_ok=True)
        f.with_suffix(".sock").unlink(missing_ok=True)


def _start(python: Path, env: dict[str, str], path: Path, module: str) -> subprocess.Popen:
    _make_room()
    with open(path.with_suffix(".log"), "ab") as log:
        proc = subprocess.Popen([str(python), "-m", module, str(path), str(IDLE)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, env=env, start_new_session=True)
    path.with_suffix(".pid").write_text(str(proc.pid))
    return proc


def _connect(path: Path) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return s
    except OSError:
        s.close()
        return None


def _used(path: Path) -> None:
    try:
        os.utime(path.with_suffix(".pid"))
    except OSError:
        pass


def _ready(python: Path, env: dict[str, str], k: str, module: str) -> socket.socket | None:
    """A connection to the zygote of key ``k``, started (one starter per key) if none listens."""
    path = home() / f"{k}.sock"
    conn = _connect(path)
    if conn is not None:
        _used(path)
        return conn
    with open(home() / f"{k}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # other processes wanting this key wait for this start
        conn = _connect(path)
        if conn is not None:
            return conn
        try:
            path.unlink()  # a dead zygote's socket
        except FileNotFoundError:
            pass
        proc = _start(python, env, path, module)
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end and proc.poll() is None:
            if path.exists():
                return _connect(path)
            time.sleep(0.05)
        return None


def fork_worker(python: Path, env: dict[str, str], module: str = "kvproof.running.zygote") -> ForkedProc | None:
    """A worker forked from ``python``'s zygote for ``env``, or None (the caller starts a plain one)."""
    try:
        conn = _ready(python, env, key(python, env), module)
        if conn is None:
            return None
    except OSError:
        return None
    theirs, ours = ForkedProc.pipes()
    header = json.dumps({"client": os.getpid(), "env": env}).encode()
    reply = ""
    try:
        with conn:
            conn.settimeout(60)
            socket.send_fds(conn, [header], theirs)
            reply = conn.makefile("r").readline()
    except OSError:
        pass
    finally:
        for fd in theirs:
            os.close(fd)
    if not reply.strip().isdigit():
        for fd in ours:
            os.close(fd)
        return None
    return ForkedProc.of(int(reply), ours)
