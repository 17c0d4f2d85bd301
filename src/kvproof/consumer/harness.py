"""The consumer harness: the REAL scheduler driven by a request stream. Runs INSIDE a vLLM env.

Builds, from a Layout and a Stream, what the engine core builds: the
``KVCacheConfig`` (with ``kv_cache_tensors`` sized from the specs' page sizes,
so connectors that size their own pools from it can), a ``VllmConfig`` with a
model config, KV cache events on (``KVEventsConfig``, null publisher, batches
captured), the connector named by the Layout; the real resolver gives
(scheduler, hash) block sizes; the real ``Scheduler`` builds the real
``KVCacheManager``, block pool and the connector's scheduler side. Then the
stream is fed in, step by step, with fake ``ModelRunnerOutput``s the way
vLLM's scheduler tests do (a token per request whose prefill is done), plus a
fake worker for connectors (finished sends/receives reported one step later).
Chunked prefill comes from ``max_num_batched_tokens``, preemption from a small
``num_blocks``. Everything adapts to the release by introspection.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from kvproof.settings import use_release_cache_root

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
use_release_cache_root()  # before the first ModelConfig (see kvproof.settings)

import torch  # noqa: E402,F401
import vllm  # noqa: E402
from vllm.config import (CacheConfig, DeviceConfig, KVEventsConfig, KVTransferConfig, ModelConfig,  # noqa: E402
                         ParallelConfig, SchedulerConfig, VllmConfig)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1 import kv_cache_interface as kvi  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.sched import scheduler as sched_mod  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from kvproof.bridge.build import Builder  # noqa: E402
import kvproof  # noqa: E402
from kvproof.consumer import compat, spies  # noqa: E402
from kvproof.consumer.oracles import Oracles, Recorder, local_chunks  # noqa: E402
from kvproof.consumer.result import ConsumerResult  # noqa: E402
from kvproof.consumer.stream import Req, Stream  # noqa: E402
from kvproof.consumer.truth import HashIndex  # noqa: E402
from kvproof.errors import NotExpressible  # noqa: E402
from kvproof.layout import Layout  # noqa: E402
from kvproof.outcome import vllm_frame  # noqa: E402
from kvproof.spec import facts  # noqa: E402

MAX_MODEL_LEN_CEILING = 1 << 20


_KVPROOF_DIR = os.path.dirname(os.path.abspath(kvproof.__file__)) + os.sep


def _exc(err: BaseException) -> str:
    msg = " ".join(str(err).split())[:300]
    return f"{type(err).__name__}: {msg} @ {vllm_frame(err)}"


def _own_error(err: BaseException) -> str | None:
    """The harness error line when ``err`` was raised in kvproof's own code, else None."""
    frame = compat.own_frame(err, _KVPROOF_DIR)
    if frame is None:
        return None
    msg = " ".join(str(err).split())[:300]
    return f"{type(err).__name__} raised in kvproof's harness at {frame}: {msg}"


def _kwargs_for(fn: Any, **candidates: Any) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in candidates.items() if k in params}


def needs() -> list[compat.Need]:
    """The vLLM APIs this harness, its spies (``kvproof.consumer.spies``) and its fake worker and
    model runner call, as the harness calls them (checked at start-up, ``compat``)."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    here = "kvproof/consumer/harness.py"
    spy = "kvproof/consumer/spies.py"
    n = compat.Need
    rows = [
        n(f"{here}:Harness._run", kv_cache_utils.resolve_kv_cache_block_sizes,
          positional=("kv_cache_config", "vllm_config")),
        n(f"{here}:Harness._run", kv_cache_utils.init_none_hash, positional=("hash_fn",)),
        n(f"{here}:Harness._run", kv_cache_utils.get_request_block_hasher,
          positional=("hash_block_size", "caching_hash_fn")),
        n(f"{here}:Harness._hash_block", kv_cache_utils.hash_block_tokens,
          positional=("hash_function", "parent_block_hash", "curr_block_token_ids")),
        n(f"{here}:Harness._run", sched_mod.Scheduler.__init__,
          provides=("vllm_config", "kv_cache_config", "structured_output_manager", "block_size",
                    "hash_block_size", "log_stats")),
        n(f"{here}:Harness._drive", sched_mod.Scheduler.schedule, positional=()),
        n(f"{here}:Harness._drive", sched_mod.Scheduler.add_request, positional=("request",)),
        n(f"{here}:Harness._drive", sched_mod.Scheduler.update_from_output,
          positional=("scheduler_output", "model_runner_output")),
        n(f"{here}:Harness._drive", sched_mod.Scheduler.finish_requests,
          positional=("request_ids", "finished_status")),
        n(f"{here}:Harness._request", Request.__init__,
          provides=("request_id", "prompt_token_ids", "sampling_params", "pooling_params", "block_hasher",
                    "eos_token_id", "arrival_time")),
        n(f"{here}:Harness._model_output", ModelRunnerOutput,
          provides=("req_ids", "req_id_to_index", "sampled_token_ids", "logprobs", "prompt_logprobs_dict",
                    "pooler_output", "kv_connector_output")),
        n(f"{here}:Harness._model_output", KVConnectorOutput,
          accepts_all=("finished_sending", "finished_recving", "kv_connector_worker_meta"),
          provides=("finished_sending", "finished_recving", "kv_connector_worker_meta")),
        n(f"{here}:Harness.vllm_config", KVEventsConfig, accepts_all=("enable_kv_cache_events", "publisher")),
        n(f"{here}:Harness.vllm_config", KVTransferConfig,
          accepts_all=("kv_connector", "kv_role", "kv_connector_extra_config")),
        n(f"{here}:Harness.vllm_config", ParallelConfig,
          accepts_all=("tensor_parallel_size", "decode_context_parallel_size")),
        n(f"{spy}:spy_allocations", KVCacheManager.allocate_slots, accepts_any=facts.ALLOC_TOKEN_PARAMS,
          positional=("request",), forwards=True),
    ]
    rows += [n(f"{spy}:spy_lookups", getattr(KVCacheManager, name), positional=("request",),
                    forwards=True)
             for name in facts.PREFIX_LOOKUP_METHODS if hasattr(KVCacheManager, name)]
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    except ImportError:
        pass
    else:
        rows.append(n(f"{spy}:spy_connector", KVConnectorBase_V1.get_num_new_matched_tokens,
                      positional=("request", "num_computed_tokens"), forwards=True))
    return rows


@dataclass
class RunState:
    """One run in progress: the ``ConsumerResult`` it fills and the recorder of its observations
    (writing into the result's ``observations`` and ``counts``)."""

    res: ConsumerResult
    rec: Recorder = field(init=False)

    def __post_init__(self) -> None:
        self.rec = Recorder(self.res.observations, self.res.counts)


class Harness:
    """One per process (after ``import vllm``): caches the model config and the builder."""

    def __init__(self) -> None:
        self.builder = Builder()
        self._model_config: Any = None
        self._model_dir = tempfile.mkdtemp(prefix="kvproof-consumer-")
        self._hash_fn: Any = None
        self.sched_params = inspect.signature(sched_mod.Scheduler.__init__).parameters
        self.mro_fields = set(getattr(ModelRunnerOutput, "__dataclass_fields__", {}))
        self.storage = tempfile.mkdtemp(prefix="kvproof-consumer-storage-")
        # the vLLM APIs this harness relies on, checked once against the installed release
        self.incompatible = compat.first_problem(needs())

    def warm(self) -> float:
        """Pay the one-time costs before the first timed input; returns the seconds spent.

        The first ``ModelConfig``, ``SpeculativeConfig``, ``Scheduler`` and each connector
        import modules lazily (vLLM's executor, tracing, the connector modules, and the model
        registry's inspection when its cache misses: seconds each, tens on a cold disk). One
        small run per connector (and none) here moves that into start-up, so a fuzzer's
        execs/s and a run's ``seconds`` measure the scheduler, not imports. The runs'
        results are discarded; nothing they cache changes a later run's result."""
        t0 = time.perf_counter()
        stream = Stream((32,), (Req(0, 32, 4, 0, 2), Req(0, 32, 8, 1, 2)), None, 64, 4)
        for conn in (None,) + tuple(facts.CONSUMER_CONNECTORS):
            kind = "hidden_state" if conn == facts.HIDDEN_STATES_CONNECTOR else "full_attention"
            layout = Layout.from_dict({"groups": [{"kind": kind, "block_size": 16}], "kv_connector": conn,
                                       "cache": {"block_size": 16, "enable_prefix_caching": True}})
            try:
                self.run(layout, stream)
            except Exception:  # a release without the connector: its first real input says so
                pass
        return time.perf_counter() - t0

    # --- configs ----------------------------------------------------------------
    def model_config(self, max_model_len: int) -> Any:
        if self._model_config is None:
            # one KV head (MQA): the engine's dcp validation needs tensor_parallel_size > KV heads,
            # and the harness sets tp = dcp; the KV cache specs come from the Layout, not this model
            # 64 attention heads: tp = dcp up to 64 must divide them (ParallelConfig/ModelConfig
            # validation "Total number of attention heads must be divisible by tensor parallel size")
            hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
                  "intermediate_size": 256, "num_attention_heads": 64, "num_key_value_heads": 1,
                  "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": MAX_MODEL_LEN_CEILING,
                  "torch_dtype": "float16"}
            with open(os.path.join(self._model_dir, "config.json"), "w") as f:
                json.dump(hf, f)
            self._model_config = ModelConfig(model=self._model_dir, skip_tokenizer_init=True, dtype="float16",
                                             max_model_len=MAX_MODEL_LEN_CEILING, seed=0)
        mc = self._model_config
        mc.max_model_len = max_model_len
        return mc

    def kv_cache_config(self, layout: Layout, num_blocks: int) -> Any:
        mode = layout.cache.mamba_cache_mode
        groups, tensors = [], []
        for i, g in enumerate(layout.groups):
            spec = self.builder.spec(g, mode)
            name = f"model.layers.{i}.attn"
            groups.append(kvi.KVCacheGroupSpec([name], spec))
            page = spec.page_size_bytes
            # layer-outermost placement; field names differ by release (shared_by <= 0.28, layers 0.32)
            tensors.append(kvi.KVCacheTensor(**_kwargs_for(
                kvi.KVCacheTensor, size=page * num_blocks, shared_by=[name], layers=[name],
                layer_stride=page * num_blocks, block_stride=page)))
        return kvi.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)

    def vllm_config(self, layout: Layout, stream: Stream, num_blocks: int, gpu_bytes: int | None = None) -> Any:
        c = layout.cache
        if c.prefix_match_unit is not None and "prefix_match_unit" not in self.builder.cache_fields:
            raise NotExpressible("prefix_match_unit (no CacheConfig.prefix_match_unit)")
        cache = CacheConfig(**_kwargs_for(CacheConfig, block_size=c.block_size,
                                          enable_prefix_caching=c.enable_prefix_caching,
                                          prefix_match_unit=c.prefix_match_unit, mamba_cache_mode=c.mamba_cache_mode))
        mml = min(layout.max_model_len, MAX_MODEL_LEN_CEILING)
        sched = SchedulerConfig(**_kwargs_for(
            SchedulerConfig, max_model_len=mml, is_encoder_decoder=False, max_num_seqs=stream.max_num_seqs,
            max_num_batched_tokens=max(stream.max_num_batched_tokens, 1), enable_chunked_prefill=True,
            long_prefill_token_threshold=0))
        parallel = ParallelConfig(tensor_parallel_size=layout.dcp, decode_context_parallel_size=layout.dcp)
        kv_transfer = None
        speculative = None
        model_config = self.model_config(mml)
        if layout.kv_connector:
            hidden = layout.kv_connector == facts.HIDDEN_STATES_CONNECTOR
            if hidden:
                # What the engine builds for hidden-state extraction: the speculative method
                # extract_hidden_states (the connector asserts it) and the connector as producer.
                n = sum(g.kind == "hidden_state" for g in layout.groups)
                if n != 1:
                    raise NotExpressible(
                        f"{layout.kv_connector} with {n} hidden-state groups: the engine's extract_hidden_states "
                        f"path adds exactly one HiddenStateCacheSpec group (the connector refuses any other "
                        f"count: 'Could not uniquely identify the extract-hidden-states group')")
                speculative = self.speculative_config(model_config, parallel)
            kv_transfer = KVTransferConfig(kv_connector=layout.kv_connector,
                                           kv_role="kv_producer" if hidden else "kv_both",
                                           kv_connector_extra_config=self.connector_extra(gpu_bytes))
        events = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
        extra = {"speculative_config": speculative} if speculative is not None else {}
        cfg = VllmConfig(model_config=model_config, cache_config=cache, scheduler_config=sched,
                         parallel_config=parallel, kv_transfer_config=kv_transfer, kv_events_config=events,
                         device_config=DeviceConfig(device="cpu"), **extra)
        cfg.cache_config.num_gpu_blocks = num_blocks
        # what the engine core does after KV init; the Layout says the block size it ended at
        cfg.cache_config.block_size = c.block_size
        cfg.cache_config.enable_prefix_caching = c.enable_prefix_caching
        return cfg

    def connector_extra(self, gpu_bytes: int | None) -> dict:
        """The connectors' extra config: an offload pool twice the GPU cache, at most
        ``CONSUMER_CONNECTOR_EXTRA``'s. The offload managers build one object per CPU block when
        they start; 64 MiB of 256-byte pages was 1.1 s per scheduler, and a pool larger than what
        the stream can fill exercises nothing more."""
        extra = dict(facts.CONSUMER_CONNECTOR_EXTRA, shared_storage_path=self.storage)
        if gpu_bytes:
            extra["cpu_bytes_to_use"] = min(extra["cpu_bytes_to_use"], 2 * gpu_bytes)
        return extra

    @staticmethod
    def speculative_config(model_config: Any, parallel: Any) -> Any:
        """``SpeculativeConfig(method="extract_hidden_states")`` as ``EngineArgs`` builds it from
        ``speculative_config={"method": ..., "draft_model_config": {"hf_config": {aux layer ids}}}``."""
        from vllm.config import SpeculativeConfig
        return SpeculativeConfig(**_kwargs_for(
            SpeculativeConfig, method="extract_hidden_states", num_speculative_tokens=1,
            draft_model_config={"hf_config": {"eagle_aux_hidden_state_layer_ids": [1]}},
            target_model_config=model_config, target_parallel_config=parallel))

    def hash_fn(self, vcfg: Any) -> Any:
        from vllm.utils.hashing import get_hash_fn_by_name
        return get_hash_fn_by_name(vcfg.cache_config.prefix_caching_hash_algo)

    @staticmethod
    def auto_blocks(layout: Layout, stream: Stream) -> int:
        need = 0
        longest = 1
        for i, r in enumerate(stream.requests):
            n = len(stream.prompt(i)) + r.max_tokens + 1
            longest = max(longest, n)
            need += sum(math.ceil(n / g.block_size) + 1 for g in layout.groups)
        need *= 2 if any(r.resend_at is not None for r in stream.requests) else 1
        return need + 8 * len(layout.groups) + 16

    @staticmethod
    def min_blocks(layout: Layout, stream: Stream) -> int:
        """The engine refuses a KV cache that cannot hold one longest request; so does this harness."""
        longest = max(len(stream.prompt(i)) + r.max_tokens + 1 for i, r in enumerate(stream.requests))
        return sum(math.ceil(longest / g.block_size) + 2 for g in layout.groups) + 1

    # --- one run --------------------------------------------------------------------
    def run(self, layout: Layout, stream: Stream, max_steps: int | None = None) -> ConsumerResult:
        """One run of ``layout`` under ``stream``; ``seconds`` is its wall time."""
        t0 = time.perf_counter()
        st = RunState(ConsumerResult(layout.content_hash(), vllm.__version__, connector=layout.kv_connector))
        if self.incompatible:
            st.res.harness_error = self.incompatible
        else:
            self._run(st, layout, stream, max_steps)
        st.res.seconds = time.perf_counter() - t0
        return st.res

    def _run(self, st: RunState, layout: Layout, stream: Stream, max_steps: int | None) -> None:
        rec = st.rec
        if layout.groups and all(g.prefix_cacheable is False for g in layout.groups):
            # Only CircularBufferSpec opts a group out of prefix caching (kv_cache_interface.py,
            # 0.32), and only DeepSeek-V4-style compressor caches build it, always beside
            # MLA/attention groups that are cacheable: no model derives a KV cache of such
            # groups alone. vLLM then raises in whatever reads the cacheable groups first
            # (HybridKVCacheCoordinator, offloading/config.py:76, simple_kv_offload/manager.py:193).
            st.res.not_expressible = ("every group opts out of prefix caching (CircularBufferSpec only): no "
                                      "model derives such a KV cache; they sit beside cacheable MLA/attention "
                                      "groups")
            return
        num_blocks = max(stream.num_blocks or 0, self.min_blocks(layout, stream)) if stream.num_blocks \
            else self.auto_blocks(layout, stream)
        try:
            kv_cfg = self.kv_cache_config(layout, num_blocks)
            vcfg = self.vllm_config(layout, stream, num_blocks,
                                    gpu_bytes=sum(t.size for t in kv_cfg.kv_cache_tensors))
        except NotExpressible as err:
            st.res.not_expressible = str(err)
            return
        except Exception as err:
            st.res.harness_error = _own_error(err)
            if st.res.harness_error is None:
                st.res.setup_error = _exc(err)
            return
        rec.step = 0
        try:
            scheduler_bs, hash_bs = kv_cache_utils.resolve_kv_cache_block_sizes(kv_cfg, vcfg)
        except Exception as err:
            self._raised(st, err, "resolver: ")
            return
        st.res.scheduler_block_size, st.res.hash_block_size = scheduler_bs, hash_bs
        hash_fn = self.hash_fn(vcfg)
        kv_cache_utils.init_none_hash(hash_fn)
        # what the engine core builds: 0.33+ hashes num_hash_lookahead_tokens past each block
        # (EAGLE without block drop); by signature, 0 where the release has no such parameter
        lookahead = getattr(vcfg, "num_hash_lookahead_tokens", 0) or 0
        block_hasher = kv_cache_utils.get_request_block_hasher(hash_bs, hash_fn, **_kwargs_for(
            kv_cache_utils.get_request_block_hasher, num_hash_lookahead_tokens=lookahead))
        try:
            kw = _kwargs_for(sched_mod.Scheduler.__init__, vllm_config=vcfg, kv_cache_config=kv_cfg,
                             structured_output_manager=StructuredOutputManager(vcfg), block_size=scheduler_bs,
                             hash_block_size=hash_bs, log_stats=True)
            scheduler = sched_mod.Scheduler(**kw)
        except Exception as err:
            refusal = next((why for needle, why in facts.CONNECTOR_SETUP_REFUSALS if needle in str(err)), None)
            if refusal is not None:
                st.res.not_expressible = f"{layout.kv_connector}: {refusal} ({_exc(err)})"
            else:
                self._raised(st, err, "Scheduler(): ")
            return
        conn = scheduler.connector
        if conn is not None and len(layout.groups) > 1 and not self._supports_hma(conn):
            st.res.not_expressible = (f"{type(conn).__name__} does not implement SupportsHMA: the engine turns "
                                      f"the hybrid KV cache manager off for it, so these {len(layout.groups)} "
                                      f"groups never reach its scheduler side")
            return
        try:
            self._drive(layout, stream, scheduler, block_hasher, hash_fn, st, max_steps)
        except Exception as err:
            self._raised(st, err)
        finally:
            st.res.steps = max(st.res.steps, rec.step)
            try:
                if scheduler.connector is not None and hasattr(scheduler.connector, "shutdown"):
                    scheduler.connector.shutdown()
            except Exception:
                pass

    @staticmethod
    def _raised(st: RunState, err: BaseException, where: str = "") -> None:
        """An exception during a run: vLLM's (the ``exception`` oracle) or the harness's own."""
        own = _own_error(err)
        if own is not None:
            st.res.harness_error = where + own
        else:
            st.rec.add("exception", where + _exc(err))

    # --- the loop -------------------------------------------------------------------
    def _drive(self, layout: Layout, stream: Stream, scheduler: Any, block_hasher: Any, hash_fn: Any,
               st: RunState, max_steps: int | None) -> None:
        rec = st.rec
        mgr = scheduler.kv_cache_manager
        st.res.alignment = self._alignment(mgr.coordinator, st.res.scheduler_block_size)
        index = HashIndex(st.res.hash_block_size, self._hash_block(hash_fn),
                          lookahead=int(getattr(scheduler, "num_hash_lookahead_tokens", 0) or 0))
        oracles = Oracles(st.res, rec, index, self.builder.group_block_sizes(scheduler.kv_cache_config, layout.dcp),
                          local_chunks(scheduler.kv_cache_config))
        spies.spy_lookups(mgr, oracles)
        spies.spy_allocations(mgr, oracles)
        spies.spy_events(scheduler.kv_event_publisher, oracles)
        conn = scheduler.connector
        if conn is not None:
            st.res.connector_class = type(conn).__name__
            spies.spy_connector(conn, scheduler, oracles)

        events: dict[int, list[tuple[str, int]]] = {}
        for i, r in enumerate(stream.requests):
            events.setdefault(r.arrival, []).append(("add", i))
            if r.resend_at is not None:
                events.setdefault(max(r.resend_at, r.arrival + 1), []).append(("resend", i))
            if r.abort_at is not None:
                events.setdefault(max(r.abort_at, r.arrival), []).append(("abort", i))
        last_event = max(events) if events else 0
        total = sum(len(stream.prompt(i)) + r.max_tokens for i, r in enumerate(stream.requests))
        budget = max_steps or (last_event + 4 * total // max(stream.max_num_batched_tokens, 1) + 200
                               + 4 * sum(r.max_tokens for r in stream.requests))
        finished_sending: set[str] = set()
        finished_recving: set[str] = set()
        worker_meta: Any = None  # the fake worker's kv_connector_worker_meta for the next output
        job_driven = False  # the connector reports loads through its jobs (offloading, simple CPU)
        sent_ids: dict[int, list[str]] = {}
        step = 0
        while True:
            rec.step = step
            for kind, i in events.get(step, ()):
                if kind == "abort":
                    for rid in sent_ids.get(i, ()):
                        if rid in scheduler.requests and not self._finished(scheduler.requests[rid]):
                            scheduler.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
                    continue
                rid = f"r{i}" if kind == "add" else f"r{i}.re{len(sent_ids.get(i, ()))}"
                sent_ids.setdefault(i, []).append(rid)
                req = self._request(rid, stream.prompt(i), stream.requests[i].max_tokens, block_hasher)
                oracles.admit(rid, req, stream.prompt(i))
                scheduler.add_request(req)
            if step > last_event and not scheduler.requests and not finished_sending and worker_meta is None \
                    and not finished_recving:
                break
            if step >= budget:
                rec.add("stalled", f"{len(scheduler.requests)} requests unfinished after {step} steps "
                                   f"(num_blocks={scheduler.kv_cache_config.num_blocks})")
                break
            out = scheduler.schedule()
            st.res.preemptions += len(getattr(out, "preempted_req_ids", None) or ())
            scheduled = dict(out.num_scheduled_tokens)
            oracles.scheduled(step, scheduled)
            # a real worker reports each load once, when it completes; the scheduler asserts the
            # request is then still waiting for it or finished (scheduler.py:3230
            # _update_from_kv_xfer_finished). Checked at delivery, i.e. after this step's schedule().
            delivered = set()
            for rid in finished_recving:
                req = scheduler.requests.get(rid)
                if req is not None and (req.status == RequestStatus.WAITING_FOR_REMOTE_KVS or self._finished(req)):
                    delivered.add(rid)
                else:
                    st.res.worker_recv_dropped += 1
            # fake model runner: a token for each request whose prompt (and output so far) is computed
            mro = self._model_output(scheduler, out, finished_sending, delivered, worker_meta)
            finished_sending, finished_recving, worker_meta = set(), set(), None
            if conn is not None:
                # the fake worker: every job in this step's connector metadata completes by the next step
                worker_meta, recv, driven = self._worker_reply(getattr(out, "kv_connector_metadata", None),
                                                               scheduler.vllm_config.parallel_config.world_size)
                job_driven |= driven
                finished_recving |= recv
            scheduler.update_from_output(out, mro)
            oracles.stepped(scheduled)
            if conn is not None:
                for rid, req in list(scheduler.requests.items()):
                    if self._finished(req):
                        if rid not in finished_recving:  # one release per request (the recv path frees it)
                            finished_sending.add(rid)
                    elif req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and not job_driven:
                        finished_recving.add(rid)
            step += 1
        st.res.steps = step

    @staticmethod
    def _hash_block(hash_fn: Any) -> Any:
        """(parent, block tokens, lookahead tokens) -> the block's hash, with vLLM's own primitive:
        no lookahead, the legacy hash; L lookahead tokens (0.33 ``get_request_block_hasher`` with
        ``num_hash_lookahead_tokens``), extra keys ``(None, *next L tokens)`` for a request without
        multimodal inputs, LoRA or cache salt (``generate_lookahead_block_hash_extra_keys``)."""
        def hash_block(parent: Any, toks: Any, ahead: Any = ()) -> Any:
            if not ahead:
                return kv_cache_utils.hash_block_tokens(hash_fn, parent, toks)
            return kv_cache_utils.hash_block_tokens(hash_fn, parent, toks, (None, *ahead))
        return hash_block

    # --- pieces -----------------------------------------------------------------------
    @staticmethod
    def _supports_hma(conn: Any) -> bool:
        try:
            from vllm.distributed.kv_transfer.kv_connector.v1 import SupportsHMA
        except ImportError:
            return True
        return isinstance(conn, SupportsHMA)

    @staticmethod
    def _finished(req: Any) -> bool:
        return RequestStatus.is_finished(req.status)

    @staticmethod
    def _alignment(coord: Any, scheduler_bs: int) -> int:
        """The hit alignment the release's coordinator promises (read from it, never guessed)."""
        for name in facts.HIT_ALIGNMENT_ATTRS:
            val = getattr(coord, name, None)
            if isinstance(val, int) and val > 0:
                return val
        single = getattr(coord, "block_size", None)  # UnitaryKVCacheCoordinator aligns to its block size
        if isinstance(single, int) and single > 0 and len(getattr(coord, "single_type_managers", ())) == 1:
            return single
        return scheduler_bs

    def _request(self, rid: str, prompt: list[int], max_tokens: int, block_hasher: Any) -> Any:
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        kw = _kwargs_for(Request.__init__, request_id=rid, prompt_token_ids=prompt, sampling_params=sp,
                         pooling_params=None, block_hasher=block_hasher, eos_token_id=None, arrival_time=0.0)
        return Request(**kw)

    @staticmethod
    def _worker_reply(meta: Any, workers: int = 1) -> tuple[Any, set[str], bool]:
        """What the connector's worker side reports one step after receiving ``meta``, the way
        vLLM's connector unit tests complete transfers (every job succeeds): (worker metadata,
        finished_recving, whether loads are job-driven). The worker metadata is what the
        executor hands the scheduler: each of the ``workers`` (``parallel_config.world_size``)
        ranks reports every job once, and ``KVOutputAggregator.aggregate``
        (kv_connector/utils.py) merges them with the metadata's own ``aggregate``. Both
        offloading schedulers complete a job only at world_size reports (offloading/scheduler.py
        ``pending_count=num_workers``; simple_kv_offload/manager.py ``_expected_worker_count``):
        one report per job under tp = dcp > 1 left stores pending forever, and a later request
        whose CPU lookup was HIT_PENDING was told to ask again at every step (finding
        047644c41341). Shapes (0.27-0.32, same in each):
        offloading ``OffloadingConnectorMetadata(load_jobs, store_jobs)`` -> 
        ``OffloadingWorkerMetadata(completed_jobs={job: 1})`` + the load jobs' requests as
        finished_recving (offloading/worker.py ``get_finished``); simple CPU offload
        ``SimpleCPUOffloadMetadata(store_event, load_event_to_reqs)`` ->
        ``SimpleCPUOffloadWorkerMetadata(completed_store_events={event: 1})`` + the load
        event's requests as finished_recving (manager.py ``update_connector_output``)."""
        if meta is None:
            return None, set(), False
        import sys
        mod = sys.modules.get(type(meta).__module__)
        load_jobs, store_jobs = getattr(meta, "load_jobs", None), getattr(meta, "store_jobs", None)
        if isinstance(load_jobs, dict) and isinstance(store_jobs, dict):
            cls = getattr(mod, "OffloadingWorkerMetadata", None)
            jobs = list(load_jobs) + list(store_jobs)
            recv = {j.req_id for j in load_jobs.values()}
            one = cls(completed_jobs={j: 1 for j in jobs}) if jobs and cls else None
            return Harness._aggregate(one, workers), recv, True
        if hasattr(meta, "store_event") and isinstance(getattr(meta, "load_event_to_reqs", None), dict):
            cls = getattr(mod, "SimpleCPUOffloadWorkerMetadata", None)
            ev = meta.store_event
            # only the load event issued in THIS step: ``load_event_to_reqs`` also lists every earlier
            # event still mapped, and reporting those again is what made the scheduler assert
            # (scheduler.py:3230) on a request already promoted to RUNNING. The real worker
            # (simple_kv_offload/worker.py:297 get_finished) reports each event index once.
            le = getattr(meta, "load_event", -1)
            recv = set(meta.load_event_to_reqs.get(le, ())) if isinstance(le, int) and le >= 0 else set()
            one = cls(completed_store_events={ev: 1}) if cls and isinstance(ev, int) and ev >= 0 else None
            return Harness._aggregate(one, workers), recv, True
        return None, set(), False

    @staticmethod
    def _aggregate(one: Any, workers: int) -> Any:
        """``workers`` identical per-rank worker metadata merged the way the executor merges them
        (the first as accumulator, then ``acc.aggregate(next)``)."""
        if one is None:
            return None
        acc = one
        for _ in range(max(workers, 1) - 1):
            acc = acc.aggregate(one)
        return acc

    def _model_output(self, scheduler: Any, out: Any, sending: set[str], recving: set[str],
                      worker_meta: Any = None) -> Any:
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            req = scheduler.requests[rid]
            done = req.num_computed_tokens >= req.num_tokens  # already advanced by schedule()
            sampled.append([1 + (req.num_tokens * 7 + 3) % 29999] if done else [])
        kw: dict[str, Any] = dict(req_ids=req_ids, req_id_to_index={r: k for k, r in enumerate(req_ids)},
                                  sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                  pooler_output=[])
        if scheduler.connector is not None:
            kw["kv_connector_output"] = KVConnectorOutput(finished_sending=sending or None,
                                                          finished_recving=recving or None,
                                                          kv_connector_worker_meta=worker_meta)
        return ModelRunnerOutput(**{k: v for k, v in kw.items() if k in self.mro_fields})
