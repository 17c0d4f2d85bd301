"""A release's python with a reproducer's imports done: it forks one child per run.

Runs INSIDE a vLLM environment as a plain file, ``python .../kvproof/running/warm.py PROLOGUE_FILE FOLDER FD``,
started by ``kvproof.bridge.warm``. Stdlib only, and nothing of kvproof is importable from it
(no PYTHONPATH; FOLDER, the script's, replaces this file's folder on the path). So a child is a
``python repro.py`` whose import statements ran a little earlier: the host executes the
script's prologue (its statements up to its last top-level import, e.g.
``os.environ.setdefault("VLLM_LOGGING_LEVEL", ...)`` then vLLM's imports) and waits. vLLM's
import is 8-20 s of CPU; the script's own work is well under a second.

Protocol: one JSON message per request on the SOCK_SEQPACKET socket FD, one reply each.
  {"argv": [...], "cwd": ..., "env": {...}, "path": [...], "out": FILE, "err": FILE, "timeout": S}
      -> {"rc": N, "timed_out": false}  (the child's exit status as python gives it; -N: killed
         by signal N; "timed_out": killed after S seconds). ``argv[0]`` is the file run as
         ``__main__``, or ``-m pytest`` runs pytest as ``python -m pytest`` does.
  {"worker": true, "cwd": ..., "env": {...}, "path": [...]} with three fds (SCM_RIGHTS: the
      worker's stdin, stdout, stderr) -> {"pid": N}: the child serves ``kvproof.running.worker``'s protocol
      (``path`` holds kvproof's package root), as kvproof.running.zygote's children do.
``path`` goes ahead of the host's own ``sys.path`` entries (the script's folder; for ``-m``, the
working directory and PYTHONPATH's entries). The host is the child's parent, so the exit
status is the real one. The host ends at the socket's EOF.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

_WORKERS: set[int] = set()  # forked workers, reaped as they exit (a script child is waited for)


def _exit_code(exc: BaseException) -> int:
    """What python's own exit makes of an uncaught exception (SystemExit's code, else 1 after the traceback)."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        print(code, file=sys.stderr)
        return 1
    import traceback
    traceback.print_exception(exc)
    return 1


def _become(req: dict, base_path: list[str], fds: list[int], imported: dict) -> None:
    """The child's fds 0-2 (``fds``, or /dev/null and the request's files), variables (the
    request's, with what start-up and the prologue set in them: ``imported``), folder, path."""
    if not fds:
        fds = [os.open(os.devnull, os.O_RDONLY)] + [os.open(req[k], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                                                     for k in ("out", "err")]
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 -- fds 0-2 for the life of the child
    sys.stdout = open(1, "w", buffering=1 if req.get("worker") else -1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    env = with_changes(req["env"], imported)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(req["cwd"])
    sys.path[:] = list(req["path"]) + base_path


def _script(argv: list[str]) -> int:
    try:
        import runpy
        if argv[:2] == ["-m", "pytest"]:
            sys.argv = [sys.executable] + argv[2:]  # what runpy's -m leaves in argv[0]
            runpy.run_module("pytest", run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except BaseException as exc:  # noqa: BLE001 -- python's own top level: every exit is a code
        return _exit_code(exc)
    return 0


def _worker() -> int:
    from kvproof.running.worker import exit_with_parent, serve, start  # from the request's path
    exit_with_parent()  # the host is the parent: its client gone, it goes, and so does this
    protocol, bridge, import_seconds = start()
    serve(bridge, sys.stdin, protocol, import_seconds)
    return 0


def _child(req: dict, base_path: list[str], fds: list[int], imported: dict) -> None:
    """Become ``python ARGV`` (or a worker); never returns."""
    _become(req, base_path, fds, imported)
    code = _worker() if req.get("worker") else _script(req["argv"])
    try:  # python's exit, in order: non-daemon threads, atexit, flush
        import threading
        threading._shutdown()  # what the interpreter's own exit calls
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _wait(pid: int, timeout: float) -> dict:
    end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"rc": os.waitstatus_to_exitcode(status), "timed_out": False}
        if time.monotonic() > end:
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
            return {"rc": os.waitstatus_to_exitcode(status), "timed_out": True}
        time.sleep(0.01)


def _reap(*_) -> None:
    for pid in list(_WORKERS):
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                _WORKERS.discard(pid)
        except ChildProcessError:
            _WORKERS.discard(pid)


def exec_environ() -> dict[str, str]:
    """The variables this process was started with (before site's .pth files ran)."""
    with open("/proc/self/environ", "rb") as f:
        items = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
    return {k.decode(errors="surrogateescape"): v.decode(errors="surrogateescape") for k, v in items}


def changes_since(before: dict[str, str]) -> dict[str, str | None]:
    """The variables start-up and imports set (name -> value) or removed (name -> None) since ``before``:
    what a fresh interpreter's own start would do again, so a forked child must carry (also kvproof.running.zygote)."""
    return {k: os.environ.get(k) for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)}


def with_changes(env: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """``env`` with ``changes`` (:func:`changes_since`) applied."""
    out = dict(env)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def main(prologue: str, folder: str, fd: int) -> None:
    chan = socket.socket(fileno=fd)
    before = exec_environ()
    os.dup2(2, 1)  # the prologue's prints go to stderr
    base_path = sys.path[1:]  # sys.path[0] is this file's folder (kvproof's): never on a child's path
    sys.path[0] = folder  # where ``python repro.py`` looks first
    try:
        exec(compile(prologue, "<reproducer prologue>", "exec"), {"__name__": "__warm__"})  # noqa: S102
    except Exception:  # noqa: BLE001, S110 -- the child runs the same imports again and fails as python would
        pass
    # what start-up (.pth files) and the prologue set or removed: a fresh python would do the same
    imported = changes_since(before)
    signal.signal(signal.SIGCHLD, _reap)
    chan.send(json.dumps({"ready": True}).encode())
    while True:
        msg, fds, _, _ = socket.recv_fds(chan, 1 << 20, 3)
        if not msg:  # the client is done: nothing to flush, and tearing down vLLM's modules takes seconds
            os._exit(0)
        req = json.loads(msg)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                chan.close()
                _child(req, base_path, fds, imported)
            finally:
                os._exit(1)
        for f in fds:
            os.close(f)
        _reap()
        if req.get("worker"):
            _WORKERS.add(pid)
            chan.send(json.dumps({"pid": pid}).encode())
        else:
            chan.send(json.dumps(_wait(pid, float(req.get("timeout", 300)))).encode())


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        main(f.read(), sys.argv[2], int(sys.argv[3]))
