"""verify's worker pool: every core busy from the first task, a revision's tasks kept on one worker.

Tasks run in killable worker processes (kvproof.verify.runner). A worker keeps what it built for a
revision (encodings, the induction context, the derivation tables), so the pool hands a worker the
tasks of revisions it already holds (``_pick``) but never leaves a worker idle while tasks wait.
"""

from __future__ import annotations

from kvproof.verify import runner
from kvproof.verify.runner import Pool


class _Idle:
    def __init__(self, *warm: str) -> None:
        self.warm, self.task = set(warm), None


def _task(rev: str) -> tuple[int, dict]:
    return (0, {"revision": rev})


def test_a_worker_takes_its_own_revisions_first_then_one_nobody_holds_then_any():
    pool = Pool(2)
    mine, other = _Idle("0.27"), _Idle("0.28")
    pool.workers = [mine, other]
    queue = [_task("0.28"), _task("0.29"), _task("0.27")]
    assert pool._pick(queue, mine) == 2  # its own revision, though queued last
    assert pool._pick(queue[:2], mine) == 1  # 0.29: nobody holds it
    assert pool._pick(queue[:1], mine) == 0  # only the other's left: take it rather than idle
    label = (1, {"label": {"revision": "0.27"}, "timeout": 1})
    assert runner.affinity(label[1]) == "0.27" and pool._pick([_task("0.31"), label], mine) == 1


def test_every_worker_starts_while_tasks_wait():
    # short tasks kept the first worker answering before the pool looked again, so the second
    # started only once a task outlasted the 0.5 s wait (7.8 s into a proof run)
    spec = {"revision": "0.27", "property": "coordinator.scheduler_multiple_of_hash[any]", "n": 1,
            "premise": "free", "timeout": 10, "max_block": 64, "dcp_values": [1], "seed": None}
    done: list[str] = []
    pool = Pool(2)
    try:
        pool.run([(i, dict(spec)) for i in range(4)], lambda tid, r: done.append(str(r["status"])) or [])
    finally:
        pool.close()
    assert pool.started == 2 and len(done) == 4 and set(done) == {"PROVED"}
