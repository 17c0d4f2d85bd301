"""Worker processes that run proof queries, each under a hard deadline.

Z3 does not always honour its own timeout on nonlinear integer problems, so
every query runs in a child process: the parent waits ``timeout + grace``
seconds and then kills the child (SIGKILL) and starts a fresh one. Workers
are reused between queries (importing z3 costs ~0.3 s), one query at a time
each.

With a :class:`kvproof.verify.cache.Cache`, a task whose result is cached
(kvproof.verify.cache: same task, same z3, unchanged sources) is answered
without a worker, and a definite result a worker computes is stored with the
worker's loaded kvproof sources as its dependencies. Workers start on the
first task the cache does not answer.

A task ``{"label": ...}`` is one finding's reachability label (``run_label``),
and ``{"corpus": ...}`` one first witness's minimisation for the corpus copy
(``run_corpus``): the run hands them over when a chain ends with a witness, so
they are computed on the workers while other queries still run (and reuse the
worker's encodings).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import wait

from kvproof.verdicts import ProofStatus
from typing import Any

GRACE = 3.0  # seconds on top of a query's own timeout before the kill


def _serve(conn) -> None:
    from kvproof.spec.query import run_query  # import inside the child
    from kvproof.verify.cache import label_sources, loaded_sources
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        tid, spec = task
        extra: list[str] = []
        try:
            if "label" in spec:  # a finding's reachability label (kvproof.verify.reachability)
                result, extra = run_label(spec["label"]), label_sources()
            elif "corpus" in spec:  # a first witness minimised for the corpus copy
                result = run_corpus(spec["corpus"])
            else:
                result = run_query(spec)
        except Exception as err:  # noqa: BLE001 -- a model bug: report it as UNKNOWN with the reason
            result = {"status": ProofStatus.UNKNOWN, "seconds": 0.0, "detail": f"{type(err).__name__}: {err}"}
        conn.send((tid, result, loaded_sources() + extra))


def run_label(task: dict) -> dict:
    """One label task (the dict ``kvproof.verify.cli.label`` keys its cache entry by) -> a result."""
    from kvproof.verify import reachability
    t0 = time.monotonic()
    lab, reason, cfg = reachability.label(task["revision"], task["property"], task["layout"],
                                          premise=task["premise"], engine_status=task["engine_status"],
                                          max_block=task["max_block"], dcp_values=task["dcp_values"])
    return {"status": "LABELLED", "label": lab.name, "reason": reason, "witness": cfg,
            "seconds": time.monotonic() - t0}


def run_corpus(task: dict) -> dict:
    """One corpus task (``kvproof.verify.cli.corpus_task``) -> the minimised layout."""
    from kvproof.spec.query import minimise_corpus
    t0 = time.monotonic()
    lay = minimise_corpus(task["layout"], task["revision"], task["property"], task["premise"], task["max_block"],
                          task["dcp_values"], seconds=task["seconds"])
    return {"status": "MINIMISED", "layout": lay.to_dict(), "seconds": time.monotonic() - t0}


def affinity(spec: dict) -> str | None:
    """The revision a task works on: a worker that solved that revision before holds its encodings,
    induction context and derivation tables in memory (kvproof.spec.model/induction memos)."""
    return spec.get("revision") or (spec.get("label") or spec.get("corpus") or {}).get("revision")


class _Worker:
    def __init__(self, ctx) -> None:
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.task: tuple | None = None
        self.deadline = 0.0
        self.started = 0.0
        self.warm: set = set()  # the revisions this process has worked on (affinity)

    def give(self, tid: int, spec: dict) -> None:
        self.task = (tid, spec)
        self.warm.add(affinity(spec))
        self.started = time.monotonic()
        self.deadline = self.started + spec["timeout"] * (3 if spec.get("minimise", True) else 1) + GRACE
        self.parent.send((tid, spec))

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.parent.close()

    def stop(self) -> None:
        try:
            self.parent.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(2)
        if self.proc.is_alive():
            self.kill()


class Pool:
    """Run query specs on ``jobs`` killable workers; results come back through ``on_result``."""

    def __init__(self, jobs: int, cache=None) -> None:
        self.ctx = mp.get_context("spawn")
        self.jobs = max(1, jobs)
        self.workers: list[_Worker] = []  # started on the first task the cache does not answer
        self.cache = cache
        self.killed = 0
        self.started = 0

    def run(self, first: Iterable[tuple[int, dict]], on_result: Callable[[int, dict], list[tuple[int, dict]]],
            on_start: Callable[[int], None] | None = None) -> None:
        """``on_result`` may return follow-up tasks (the next group count of a chain)."""
        queue: list[tuple[int, dict]] = []
        specs: dict[int, dict] = {}

        def intake(tasks: Iterable[tuple[int, dict]]) -> None:
            """Queue tasks; one the cache answers is answered now (its follow-ups come in here too)."""
            pending = list(tasks)
            while pending:
                tid, spec = pending.pop(0)
                hit = self.cache.get("query", spec) if self.cache is not None else None
                if hit is None:
                    queue.append((tid, spec))
                else:
                    pending.extend(on_result(tid, hit))

        intake(first)
        while queue or any(w.task for w in self.workers):
            # a new worker when the queue holds more tasks than idle workers (waiting for an idle one
            # to come back would leave a core unused while short tasks keep the first one busy)
            while len(self.workers) < self.jobs and len(queue) > sum(w.task is None for w in self.workers):
                self.workers.append(_Worker(self.ctx))
                self.started += 1
            for w in self.workers:
                if w.task is None and queue:
                    tid, spec = queue.pop(self._pick(queue, w))
                    specs[tid] = spec
                    w.give(tid, spec)
                    if on_start:
                        on_start(tid)
            busy = [w for w in self.workers if w.task is not None]
            if not busy:
                continue
            now = time.monotonic()
            wait_s = max(0.05, min(w.deadline for w in busy) - now)
            ready = wait([w.parent for w in busy], timeout=min(wait_s, 0.5))
            for w in busy:
                if w.parent in ready:
                    try:
                        tid, result, sources = w.parent.recv()
                        if self.cache is not None and tid in specs:
                            self.cache.put("query", specs[tid], result, sources)
                    except (EOFError, OSError):  # the child died (OOM, crash)
                        tid = w.task[0]
                        result = {"status": ProofStatus.UNKNOWN, "seconds": time.monotonic() - w.started,
                                  "detail": "worker died"}
                        self._replace(w)
                    w.task = None
                    intake(on_result(tid, result))
                elif time.monotonic() > w.deadline:
                    tid = w.task[0]
                    self.killed += 1
                    self._replace(w)
                    intake(on_result(tid, {"status": ProofStatus.UNKNOWN, "seconds": time.monotonic() - w.started,
                                           "detail": "killed at the hard deadline"}))

    def _pick(self, queue: list[tuple[int, dict]], w: _Worker) -> int:
        """The queue index ``w`` takes next: the first task of a revision it is warm for, else the
        first one no other worker is warm for, else the first. Never idles a worker; only the
        order changes (each task is solved on its own, so its answer does not depend on it)."""
        others = set().union(*(o.warm for o in self.workers if o is not w))
        cold = None
        for i, (_, spec) in enumerate(queue):
            rev = affinity(spec)
            if rev in w.warm:
                return i
            if cold is None and rev not in others:
                cold = i
        return cold if cold is not None else 0

    def _replace(self, w: _Worker) -> None:
        w.kill()
        i = self.workers.index(w)
        self.workers[i] = _Worker(self.ctx)

    def close(self) -> None:
        for w in self.workers:
            w.stop()


def run_one(spec: dict) -> dict[str, Any]:
    """One query in its own killable process (tests and the bench use this)."""
    pool = Pool(1)
    out: dict[str, Any] = {}

    def got(tid, result):
        out.update(result)
        return []

    try:
        pool.run([(0, spec)], got)
    finally:
        pool.close()
    return out
