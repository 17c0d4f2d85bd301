"""Runs of one script (and its pytest) on several releases, each release's vLLM imported once.

A report runs its reproducer on every release, then, on the releases it checks a fix on, the
pytest reproducer and the script again on the fix overlay. Every run is a fresh python whose
vLLM import (8-20 s of CPU) is nearly all its time. :class:`Hosts` keeps one
``kvproof/running/warm.py`` per environment, which ran the script's prologue (its imports) once and
forks a child per run: the child is that release's python running the file, as
``python repro.py`` or ``python -m pytest ...`` would, with the real exit status. A host that
cannot start or dies is no verdict: the run falls back to a fresh python (:func:`run`).
"""

from __future__ import annotations

import ast
import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from kvproof.bridge.zygotes import ForkedProc

if TYPE_CHECKING:
    from kvproof.bridge.client import Worker
    from kvproof.envs import Env

_HOST = Path(__file__).resolve().parents[1] / "running" / "warm.py"
_GRACE_S = 30.0  # beyond a run's own timeout, which the host enforces
_WORKER_START_S = 600.0  # a worker's first request: the host's import, if it has not run yet


def prologue(source: str) -> str:
    """The script's statements up to its last top-level import (what a host runs once)."""
    tree = ast.parse(source)
    last = max((n.end_lineno or n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))),
               default=0)
    return "\n".join(source.splitlines()[:last]) + "\n"


def host_env(env: Env) -> dict[str, str]:
    """The variables a report's runs of ``env`` start under, its host's included: a worker's
    (kvproof.bridge.client.worker_env: the hub offline, PYTHONHASHSEED fixed, vLLM's logging at
    ERROR; so a worker forked from the host imported vLLM as a fresh one does) without kvproof
    on PYTHONPATH, and the release's own ``VLLM_CACHE_ROOT`` unless the caller set one: vLLM's
    model registry caches what it learnt of a model under a file name without the release, so
    with one shared root each release evicts the last one's entry and the next run re-inspects
    the model in a subprocess that imports vLLM and torch again (~10 s of CPU a run here)."""
    from kvproof.bridge.client import worker_env
    from kvproof.settings import vllm_cache_root

    out = worker_env()
    if "PYTHONPATH" in os.environ:
        out["PYTHONPATH"] = os.environ["PYTHONPATH"]
    else:
        out.pop("PYTHONPATH", None)
    out.setdefault("VLLM_CACHE_ROOT", str(vllm_cache_root(env.name)))
    return out


class HostGone(Exception):
    """The host did not answer: the caller runs the file in a fresh python instead."""


class Host:
    """One environment's warm python: started at once, ready after the prologue ran."""

    def __init__(self, python: str, env: dict[str, str], prologue_file: Path, folder: Path) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="kvproof-warm-"))
        self.lock = threading.Lock()
        self.ready = False
        self.chan, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.proc = subprocess.Popen([python, str(_HOST), str(prologue_file), str(folder), str(theirs.fileno())],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env=env, cwd=str(folder),
                                         pass_fds=[theirs.fileno()])
        self.runs = 0

    def _ask(self, req: dict, fds: list[int], timeout: float) -> dict:
        """One request, its reply within ``timeout`` (and a grace) seconds; the first waits for the
        prologue (the import) as long as the run may take (a host not ready by then is gone:
        the run starts afresh)."""
        with self.lock:
            if self.proc.poll() is not None:
                raise HostGone("the warm python is gone")
            try:
                if not self.ready:
                    self._reply(timeout)
                    self.ready = True
                socket.send_fds(self.chan, [json.dumps(req).encode()], fds)
                return self._reply(timeout + _GRACE_S)
            except OSError as exc:
                self.close()
                raise HostGone(str(exc)) from exc

    def _reply(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.chan], [], [], timeout)
        msg = self.chan.recv(1 << 16) if ready else b""
        if not msg:
            self.proc.kill()
            self.close()
            raise HostGone("the warm python did not answer")
        return json.loads(msg)

    def run(self, argv: list[str], cwd: str, env: dict[str, str], path: list[str],
            timeout: float) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of ``python ARGV`` forked from the host."""
        with self.lock:
            self.runs += 1
            out, err = self.tmp / f"{self.runs}.out", self.tmp / f"{self.runs}.err"
        reply = self._ask({"argv": argv, "cwd": cwd, "env": env, "path": path, "out": str(out), "err": str(err),
                           "timeout": timeout}, [], timeout)
        if reply.get("timed_out"):
            raise subprocess.TimeoutExpired(argv, timeout)
        return int(reply["rc"]), out.read_text(errors="replace"), err.read_text(errors="replace")

    def worker(self, env: dict[str, str], path: list[str]) -> ForkedProc:
        """A ``kvproof.running.worker`` forked from the host: its pipes, as ``subprocess.Popen`` gives them."""
        theirs, ours = ForkedProc.pipes()
        try:
            reply = self._ask({"worker": True, "cwd": os.getcwd(), "env": env, "path": path}, theirs, _WORKER_START_S)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return ForkedProc.of(int(reply["pid"]), ours)

    def stop(self) -> None:
        """EOF on the host's channel: it ends by itself (python's exit with vLLM loaded takes ~2 s)."""
        try:
            self.chan.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """Stop the host and wait for it to end."""
        self.stop()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.chan.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Hosts:
    """One :class:`Host` per environment for ``script``, started on first use; a context manager
    (every host ends with it). The hosts of the environments named in ``once`` stop after their
    first run (a host holds a whole vLLM import in memory)."""

    def __init__(self, script: Path, once=()) -> None:
        self.once = set(once)
        self.script = Path(script).resolve()
        self.tmp = Path(tempfile.mkdtemp(prefix="kvproof-warm-prologue-"))
        self.prologue = self.tmp / "prologue.py"
        self.prologue.write_text(prologue(self.script.read_text()))
        self.hosts: dict[str, Host] = {}
        self.done: list[Host] = []
        self.lock = threading.Lock()

    def host(self, env: Env) -> Host:
        """``env``'s host; a new one imports under :func:`host_env`, as a fresh run of the script does."""
        with self.lock:
            if env.name not in self.hosts:
                self.hosts[env.name] = Host(str(env.python), host_env(env), self.prologue, self.script.parent)
            return self.hosts[env.name]

    def worker(self, env: Env, kind: type[Worker] | None = None) -> Worker:
        """A started :class:`~kvproof.bridge.client.Worker` (or ``kind``) of ``env`` forked from its
        host (the host starts here if the report has not run there yet); a fresh one if the host is gone."""
        from kvproof.bridge.client import Worker, package_root, worker_env

        w = (kind or Worker)(env)
        try:
            w.attach(self.host(env).worker(worker_env(), [str(package_root())]))
        except HostGone:
            w.spawn()
        w.handshake()
        return w

    def used(self, env: Env) -> None:
        """A run on ``env`` is done: its host stops if it was for one run only."""
        if env.name in self.once:
            with self.lock:
                host = self.hosts.pop(env.name, None)
                if host is not None:
                    self.done.append(host)
            if host is not None:
                host.stop()

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc) -> None:
        with self.lock:
            ending, self.hosts = self.done + list(self.hosts.values()), {}
            self.done = []
        for h in ending:  # all at once: each host's exit takes a while
            h.stop()
        for h in ending:
            h.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run(hosts: Hosts | None, env: Env, argv: list[str], cwd: str, variables: dict[str, str],
        path: list[str], timeout: float) -> tuple[int, str, str]:
    """``python ARGV`` of ``env`` in ``cwd`` under ``variables``: forked from its host where there is
    one and it answers, else a fresh python. ``path``: what that fresh python would put first on
    sys.path (the script's folder; for ``-m``, the working directory and PYTHONPATH's entries).
    Raises subprocess.TimeoutExpired and OSError as subprocess.run does."""
    if hosts is not None:
        try:
            return hosts.host(env).run(argv, cwd, variables, path, timeout)
        except HostGone:
            pass
        finally:
            hosts.used(env)
    proc = subprocess.run([str(env.python), *argv], check=False, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=variables)
    return proc.returncode, proc.stdout, proc.stderr
