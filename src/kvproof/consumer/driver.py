"""The step loop: a stream's requests fed to the real scheduler, step by step. In a vLLM env.

Each step: the stream's events for that step (a request arrives, is sent
again, is aborted), ``schedule()``, the fake model runner's output for the
batch (``kvproof.consumer.runner``, ``spec_runner`` under speculative
decoding), the fake connector worker's report one
step later (``kvproof.consumer.fake_worker``), ``update_from_output`` and the
next drafts. The oracles hear of every step (``kvproof.consumer.oracles``).
"""

from __future__ import annotations

from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request, RequestStatus

from kvproof.consumer import fake_worker
from kvproof.bridge.compat import kwargs_for
from kvproof.consumer.observations import Recorder
from kvproof.consumer.oracles import Oracles
from kvproof.consumer.runner import FakeModelRunner
from kvproof.consumer.stream import Stream
from kvproof.judging.oracle_ids import OracleId


def finished(req: Any) -> bool:
    return RequestStatus.is_finished(req.status)


def timeline(stream: Stream) -> dict[int, list[tuple[str, int]]]:
    """step -> the stream's events at that step: ("add" | "resend" | "abort", request index)."""
    events: dict[int, list[tuple[str, int]]] = {}
    for i, r in enumerate(stream.requests):
        events.setdefault(r.arrival, []).append(("add", i))
        if r.resend_at is not None:
            events.setdefault(max(r.resend_at, r.arrival + 1), []).append(("resend", i))
        if r.abort_at is not None:
            events.setdefault(max(r.abort_at, r.arrival), []).append(("abort", i))
    return events


class Driver:
    def __init__(self, scheduler: Any, stream: Stream, block_hasher: Any, oracles: Oracles, runner: FakeModelRunner,
                 rec: Recorder, res: Any) -> None:
        self.scheduler, self.stream, self.block_hasher = scheduler, stream, block_hasher
        self.oracles, self.runner, self.rec, self.res = oracles, runner, rec, res
        self.sent_ids: dict[int, list[str]] = {}
        self.frontend: Any = None  # kvproof.consumer.frontend.Frontend where a frontend hashes the prompts

    def budget(self, last_event: int) -> int:
        s = self.stream
        total = sum(s.prompt_len(i) + r.max_tokens for i, r in enumerate(s.requests))
        return (last_event + 4 * total // max(s.max_num_batched_tokens, 1) + 200
                + 4 * sum(r.max_tokens for r in s.requests))

    def request(self, rid: str, i: int) -> Any:
        r = self.stream.requests[i]
        logprobs = {}
        if r.prompt_logprobs_from is not None:  # SamplingParams is a msgspec Struct: its fields say what it takes
            logprobs = {"prompt_logprobs": 1}
            # 0.34 (facts.CONSUMER_MARKS["prompt_logprobs_hit_cap"]): read the prefix cache up to the
            # first scored row; before, prompt_logprob_start needs prompt_logprob_token_ids and the
            # request skips prefix-cache reads (SamplingParams' default with prompt logprobs)
            if hasattr(Request, "get_prefix_cache_hit_limit"):
                logprobs.update(prompt_logprob_start=r.prompt_logprobs_from, skip_reading_prefix_cache=False)
        sp = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True, **logprobs)
        kw = kwargs_for(Request.__init__, request_id=rid, prompt_token_ids=self.stream.prompt(i), sampling_params=sp,
                        pooling_params=None, block_hasher=self.block_hasher, eos_token_id=None, arrival_time=0.0)
        if self.frontend is not None:
            return self.frontend.request(rid, self.stream.prompt(i), sp, lambda: Request(**kw))
        return Request(**kw)

    def apply(self, kind: str, i: int) -> None:
        sched = self.scheduler
        if kind == "abort":
            for rid in self.sent_ids.get(i, ()):
                if rid in sched.requests and not finished(sched.requests[rid]):
                    sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
            return
        rid = f"r{i}" if kind == "add" else f"r{i}.re{len(self.sent_ids.get(i, ()))}"
        self.sent_ids.setdefault(i, []).append(rid)
        req = self.request(rid, i)
        self.oracles.admit(rid, req, self.stream.prompt(i))
        sched.add_request(req)

    def run(self, max_steps: int | None) -> int:
        """Drive the stream to the end (or the step budget); returns the steps taken."""
        sched, rec, oracles, runner = self.scheduler, self.rec, self.oracles, self.runner
        events = timeline(self.stream)
        last_event = max(events) if events else 0
        budget = max_steps or self.budget(last_event)
        conn = sched.connector
        sending: set[str] = set()
        recving: set[str] = set()
        worker_meta: Any = None  # the fake worker's kv_connector_worker_meta for the next output
        job_driven = False  # the connector reports loads through its jobs (offloading, simple CPU)
        step = 0
        while True:
            rec.step = step
            for kind, i in events.get(step, ()):
                self.apply(kind, i)
            if step > last_event and not sched.requests and not sending and worker_meta is None and not recving:
                break
            if step >= budget:
                rec.add(OracleId.STALLED, f"{len(sched.requests)} requests unfinished after {step} steps "
                                   f"(num_blocks={sched.kv_cache_config.num_blocks})")
                break
            out = sched.schedule()
            self.res.preemptions += len(getattr(out, "preempted_req_ids", None) or ())
            scheduled = dict(out.num_scheduled_tokens)
            oracles.scheduled(step, scheduled)
            delivered = self.deliverable(recving)
            mro = runner.output(sched, out, sending, delivered, worker_meta)
            sending, recving, worker_meta = set(), set(), None
            if conn is not None:
                # every job in this step's connector metadata completes by the next step
                worker_meta, recv, driven = fake_worker.worker_reply(
                    getattr(out, "kv_connector_metadata", None), sched.vllm_config.parallel_config.world_size)
                job_driven |= driven
                recving |= recv
            sched.update_from_output(out, mro)
            oracles.stepped(scheduled)
            runner.propose(sched, [r for r, toks in zip(mro.req_ids, mro.sampled_token_ids) if toks])
            if conn is not None:
                for rid, req in list(sched.requests.items()):
                    if finished(req):
                        if rid not in recving:  # one release per request (the recv path frees it)
                            sending.add(rid)
                    elif req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and not job_driven:
                        recving.add(rid)
            step += 1
        return step

    def deliverable(self, recving: set[str]) -> set[str]:
        """The loads a real worker reports now: the scheduler asserts the request is still
        waiting for it or finished (scheduler.py:3230 _update_from_kv_xfer_finished), checked at
        delivery, i.e. after this step's schedule()."""
        out = set()
        for rid in recving:
            req = self.scheduler.requests.get(rid)
            if req is not None and (req.status == RequestStatus.WAITING_FOR_REMOTE_KVS or finished(req)):
                out.add(rid)
            else:
                self.res.worker_recv_dropped += 1
        return out
