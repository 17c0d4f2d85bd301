"""A release's warm worker parent: it imports vLLM once and forks a worker per client.

Beside kvproof.running.worker (whose serve it runs), above the bridge and consumer folders; started by name.

Runs INSIDE a vLLM environment, started by ``kvproof.bridge.zygotes`` (the client side)
as ``python -m kvproof.running.zygote SOCKET IDLE_SECONDS`` with exactly the variables a
worker gets. It does what ``kvproof.running.worker.main`` does before serving (stdout parked on
stderr, ``Bridge()`` built after vLLM's import), then listens on a Unix socket. A client
sends one JSON header (its pid and its variables) with three pipe ends (SCM_RIGHTS): the
worker's stdin, stdout and stderr. The zygote forks; the child takes the pipes as fds
0-2 and the client's variables as its environment, and serves ``kvproof.running.worker``'s
protocol until EOF, exactly as a freshly started worker would after its import; the
zygote answers the child's pid and waits for the next client. It exits after
IDLE_SECONDS without a client, removing its socket. The client's key (zygotes.key) holds
everything the import depended on, so a changed vLLM or kvproof source never reaches a
zygote started before the change.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from kvproof.running.warm import changes_since, exec_environ, with_changes


def _client_gone(pid: int) -> bool:
    """The client's pid names no process of this user any more (PermissionError: reused by another's)."""
    try:
        os.kill(pid, 0)
        return False
    except (ProcessLookupError, PermissionError):
        return True


def _child(bridge, header: dict, fds: list[int], import_seconds: float, imported: dict) -> None:
    """Become the worker: the client's pipes as fds 0-2, its variables with what the import set
    in them (``imported``: name -> value, None where it removed one), the protocol until EOF."""
    from kvproof.running.worker import exit_when, serve
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    env = with_changes(header["env"], imported)  # computed from variables the key holds equal to the client's
    os.environ.clear()
    os.environ.update(env)
    client = int(header["client"])
    exit_when(lambda: _client_gone(client), "exit-with-client")  # the fork's parent is not the client
    protocol = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 -- fd 1 for the life of the process
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 -- fd 0 for the life of the process
    serve(bridge, sys.stdin, protocol, import_seconds)
    sys.stderr.flush()
    os._exit(0)


def main(path: str, idle: float) -> None:
    from kvproof.running.worker import start
    before = exec_environ()  # what this interpreter started with (its .pth files may set more)
    _, bridge, import_seconds = start()  # exactly the worker's start-up (kvproof.running.worker.start)
    # what start-up, vLLM's import and Bridge set or removed: a fresh worker's would do the same
    imported = changes_since(before)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}.tmp"
    listener.bind(tmp)
    listener.listen(16)
    os.rename(tmp, path)  # the socket appears only once the import is done
    mine = os.stat(path).st_ino
    listener.settimeout(idle)
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return
            with conn:
                conn.settimeout(30)
                try:
                    msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                    header = json.loads(msg.decode())
                except (OSError, ValueError):
                    continue
                if len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    try:
                        _child(bridge, header, fds, import_seconds, imported)
                    finally:
                        os._exit(1)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
    finally:
        try:
            if os.stat(path).st_ino == mine:  # a successor may own the path by now
                os.unlink(path)
        except OSError:
            pass


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
