"""The connector's worker side, faked: every transfer job completes by the next step. In a vLLM env.

What the connector's worker side reports one step after the scheduler hands it
``kv_connector_metadata``, the way vLLM's connector unit tests complete
transfers (every job succeeds): worker metadata, the requests whose loads
finished, and whether loads are job-driven. Each of the
``parallel_config.world_size`` ranks reports every job once and
``KVOutputAggregator.aggregate`` (kv_connector/utils.py) merges them with the
metadata's own ``aggregate``: both offloading schedulers complete a job only
at world_size reports (offloading/scheduler.py ``pending_count=num_workers``;
simple_kv_offload/manager.py ``_expected_worker_count``). One report per job
under tp = dcp > 1 left stores pending forever (finding 047644c41341 was that
harness stall). Shapes (0.27-0.33, the same in each):

- offloading ``OffloadingConnectorMetadata(load_jobs, store_jobs)`` ->
  ``OffloadingWorkerMetadata(completed_jobs={job: 1})`` + the load jobs'
  requests as finished_recving (offloading/worker.py ``get_finished``);
- simple CPU offload ``SimpleCPUOffloadMetadata(store_event, load_event_to_reqs)``
  -> ``SimpleCPUOffloadWorkerMetadata(completed_store_events={event: 1})`` +
  the load event's requests as finished_recving (manager.py
  ``update_connector_output``).
"""

from __future__ import annotations

import sys
from typing import Any


def worker_reply(meta: Any, workers: int = 1) -> tuple[Any, set[str], bool]:
    """(worker metadata, finished_recving, job-driven) for this step's connector metadata."""
    if meta is None:
        return None, set(), False
    mod = sys.modules.get(type(meta).__module__)
    load_jobs, store_jobs = getattr(meta, "load_jobs", None), getattr(meta, "store_jobs", None)
    if isinstance(load_jobs, dict) and isinstance(store_jobs, dict):
        cls = getattr(mod, "OffloadingWorkerMetadata", None)
        jobs = list(load_jobs) + list(store_jobs)
        recv = {j.req_id for j in load_jobs.values()}
        one = cls(completed_jobs={j: 1 for j in jobs}) if jobs and cls else None
        return aggregate(one, workers), recv, True
    if hasattr(meta, "store_event") and isinstance(getattr(meta, "load_event_to_reqs", None), dict):
        cls = getattr(mod, "SimpleCPUOffloadWorkerMetadata", None)
        ev = meta.store_event
        # only the load event issued in THIS step: ``load_event_to_reqs`` also lists every earlier
        # event still mapped, and reporting those again made the scheduler assert
        # (scheduler.py:3230) on a request already promoted to RUNNING. The real worker
        # (simple_kv_offload/worker.py:297 get_finished) reports each event index once.
        le = getattr(meta, "load_event", -1)
        recv = set(meta.load_event_to_reqs.get(le, ())) if isinstance(le, int) and le >= 0 else set()
        one = cls(completed_store_events={ev: 1}) if cls and isinstance(ev, int) and ev >= 0 else None
        return aggregate(one, workers), recv, True
    return None, set(), False


def aggregate(one: Any, workers: int) -> Any:
    """``workers`` identical per-rank worker metadata merged the way the executor merges them
    (the first as accumulator, then ``acc.aggregate(next)``)."""
    if one is None:
        return None
    acc = one
    for _ in range(max(workers, 1) - 1):
        acc = acc.aggregate(one)
    return acc
