"""Drive the consumer worker from any Python (no vLLM import here)."""

from __future__ import annotations

import json
import subprocess
import threading
from typing import Iterable, Sequence

from kvproof.bridge.client import worker_env
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Req, Stream
from kvproof.envs import Env
from kvproof.errors import BridgeError
from kvproof.layout import Layout


def default_stream(layout: Layout) -> Stream:
    """A shared-prefix stream sized to the layout: full, partial and resent prefixes, some decode.

    The prefix is about four of the largest group blocks long (capped by
    max_model_len), so every release's hit alignment has room to land.
    """
    big = max(g.block_size for g in layout.groups)
    # the longest request is p + 64 prompt tokens + 4 outputs (+1): it must fit max_model_len,
    # or the scheduler never finishes it (a harness stall, not a vLLM verdict)
    p = max(8, min(4 * big + 7, layout.max_model_len - 64 - 5))
    reqs = (Req(0, p, 16, 0, 4),
            Req(0, p, 32, 3, 2),
            Req(0, p // 2, 9, 5, 2),
            Req(0, p, 16, 8, 2, resend_at=None),
            Req(0, p, 64, 10, 3, resend_at=30))
    return Stream((p,), reqs, None, max(512, big), 8)


class ConsumerWorker:
    """``with ConsumerWorker(env) as w: results = w.run([(layout, stream), ...])``."""

    def __init__(self, env: Env, timeout: float = 900) -> None:
        self.env, self.timeout = env, timeout
        self.proc: subprocess.Popen | None = None
        self._stderr: list[str] = []

    def __enter__(self) -> "ConsumerWorker":
        self.proc = subprocess.Popen([str(self.env.python), "-m", "kvproof.consumer.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=worker_env(), bufsize=1)
        threading.Thread(target=self._drain, daemon=True).start()
        self.info = self._call({"op": "info"})
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

    def _drain(self) -> None:
        assert self.proc and self.proc.stderr
        for line in self.proc.stderr:
            self._stderr.append(line.rstrip())
            del self._stderr[:-50]

    def _call(self, request: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            raise BridgeError(f"{self.env.name}: consumer worker is not running{self._why()}")
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise BridgeError(f"{self.env.name}: consumer worker died{self._why()}") from None
        timer = threading.Timer(self.timeout, self.proc.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not line:
            self.proc.wait()
            raise BridgeError(f"{self.env.name}: consumer worker exited with code {self.proc.returncode}{self._why()}")
        reply = json.loads(line)
        if "error" in reply:
            raise BridgeError(f"{self.env.name}: consumer worker error: {reply['error']}")
        return reply

    def _why(self) -> str:
        lines = [ln for ln in self._stderr if ln.strip()]
        return f": {lines[-1]}" if lines else ""

    def run(self, items: Iterable[tuple[Layout, Stream]]) -> list[ConsumerResult]:
        batch = [{"layout": lay.to_dict(), "stream": s.to_dict()} for lay, s in items]
        reply = self._call({"op": "run", "items": batch})
        return [ConsumerResult.from_dict(d) for d in reply["results"]]


def run_many(items: Sequence[tuple[Layout, Stream]], env: Env) -> list[ConsumerResult]:
    with ConsumerWorker(env) as w:
        return w.run(items)


def run(layout: Layout, stream: Stream | None, env: Env) -> ConsumerResult:
    """One consumer-tier run of ``layout`` under ``stream`` (default: ``default_stream``) on ``env``."""
    return run_many([(layout, stream or default_stream(layout))], env)[0]
