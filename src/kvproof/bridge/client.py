"""The bridge client: drives a worker process inside a vLLM environment.

One worker per environment imports vLLM once (3-15 s); each ``run`` then
evaluates a batch of Layouts at microseconds apiece. The client itself never
imports vLLM, so one CLI can drive several releases side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Iterable, Sequence

from kvproof.envs import Env
from kvproof.errors import BridgeError
from kvproof.layout import Layout
from kvproof.outcome import Outcome

SRC = Path(__file__).resolve().parents[2]  # .../src, put on the worker's PYTHONPATH


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for any process that imports vLLM on this CPU machine."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.update(extra or {})
    return env


class Worker:
    """A live worker: ``with Worker(env) as w: outcomes = w.run(layouts)``."""

    def __init__(self, env: Env, timeout: float = 600) -> None:
        self.env = env
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self._stderr: list[str] = []

    def __enter__(self) -> "Worker":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> dict:
        self.spawn()
        return self.handshake()

    def spawn(self) -> None:
        """Start the process (vLLM import begins); pair with ``handshake``."""
        self.proc = subprocess.Popen(
            [str(self.env.python), "-m", "kvproof.bridge.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=worker_env(), bufsize=1)
        threading.Thread(target=self._drain, daemon=True).start()

    def handshake(self) -> dict:
        self.info = self._call({"op": "info"})
        return self.info

    def _drain(self) -> None:
        assert self.proc and self.proc.stderr
        for line in self.proc.stderr:
            self._stderr.append(line.rstrip())
            del self._stderr[:-50]

    def _call(self, request: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            raise BridgeError(f"{self.env.name}: worker is not running{self._why()}")
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise BridgeError(f"{self.env.name}: worker died{self._why()}") from None
        timer = threading.Timer(self.timeout, self.proc.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not line:
            self.proc.wait()
            raise BridgeError(f"{self.env.name}: worker exited with code {self.proc.returncode}{self._why()}")
        reply = json.loads(line)
        if "error" in reply:
            raise BridgeError(f"{self.env.name}: worker error: {reply['error']}")
        return reply

    def _why(self) -> str:
        lines = [ln for ln in self._stderr if ln.strip()]
        return f": {lines[-1]}" if lines else ""

    def run(self, layouts: Sequence[Layout] | Iterable[Layout], manager: bool = True) -> list[Outcome]:
        batch = [layout.to_dict() for layout in layouts]
        reply = self._call({"op": "run", "layouts": batch, "manager": manager})
        return [Outcome.from_dict(d) for d in reply["outcomes"]]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


def start_all(envs: Sequence[Env]) -> list[Worker]:
    """Start one worker per environment, importing vLLM in parallel."""
    workers = [Worker(env) for env in envs]
    try:
        for w in workers:
            w.spawn()
        for w in workers:
            w.handshake()
    except BaseException:
        for w in workers:
            w.close()
        raise
    return workers


def evaluate(env: Env, layouts: Sequence[Layout], manager: bool = True) -> list[Outcome]:
    """One-shot: start a worker, run the batch, stop it."""
    with Worker(env) as worker:
        return worker.run(layouts, manager)
