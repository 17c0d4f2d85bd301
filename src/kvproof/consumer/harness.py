"""The consumer harness: the REAL scheduler driven by a request stream. Runs INSIDE a vLLM env.

What the engine core builds, from a Layout and a Stream (``configs``): the
``KVCacheConfig``, the ``VllmConfig`` (KV events on, the Layout's connector,
the stream's speculative decoding); the real resolver gives (scheduler, hash)
block sizes; the real ``Scheduler`` builds the real ``KVCacheManager``, block
pool and the connector's scheduler side. The spies (``spies``) report what
they do to the oracles (``oracles``); the driver (``driver``) feeds the stream
step by step with a fake model runner (``runner``) and a fake connector worker
(``fake_worker``), the way vLLM's scheduler tests do. Chunked prefill comes
from ``max_num_batched_tokens``, preemption from a small ``num_blocks``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

from kvproof.settings import use_release_cache_root

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
use_release_cache_root()  # before the first ModelConfig (see kvproof.settings)

import torch  # noqa: E402,F401
import vllm  # noqa: E402
from vllm.config import KVEventsConfig, KVTransferConfig, ParallelConfig  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.sched import scheduler as sched_mod  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

import kvproof  # noqa: E402
from kvproof.bridge.build import Builder  # noqa: E402
from kvproof.consumer import compat, sizing, spies  # noqa: E402
from kvproof.consumer.compat import kwargs_for  # noqa: E402
from kvproof.consumer.configs import EngineConfigs  # noqa: E402
from kvproof.consumer.drafts import effective_drafts  # noqa: E402
from kvproof.consumer.driver import Driver  # noqa: E402
from kvproof.consumer.oracles import Oracles, Recorder, local_chunks  # noqa: E402
from kvproof.consumer.result import ConsumerResult  # noqa: E402
from kvproof.consumer.runner import FakeModelRunner  # noqa: E402
from kvproof.consumer.stream import Req, Stream  # noqa: E402
from kvproof.consumer.truth import HashIndex  # noqa: E402
from kvproof.errors import NotExpressible  # noqa: E402
from kvproof.layout import Layout  # noqa: E402
from kvproof.outcome import vllm_frame  # noqa: E402
from kvproof.spec import facts  # noqa: E402

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


def needs() -> list[compat.Need]:
    """The vLLM APIs this harness, its driver, configs, spies and fake model runner call, as
    they call them (checked at start-up, ``compat``)."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    here = "kvproof/consumer/harness.py"
    spy = "kvproof/consumer/spies.py"
    drv, run, cfg = "kvproof/consumer/driver.py", "kvproof/consumer/runner.py", "kvproof/consumer/configs.py"
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
        n(f"{drv}:Driver.run", sched_mod.Scheduler.schedule, positional=()),
        n(f"{drv}:Driver.apply", sched_mod.Scheduler.add_request, positional=("request",)),
        n(f"{drv}:Driver.run", sched_mod.Scheduler.update_from_output,
          positional=("scheduler_output", "model_runner_output")),
        n(f"{drv}:Driver.apply", sched_mod.Scheduler.finish_requests,
          positional=("request_ids", "finished_status")),
        n(f"{drv}:Driver.request", Request.__init__,
          provides=("request_id", "prompt_token_ids", "sampling_params", "pooling_params", "block_hasher",
                    "eos_token_id", "arrival_time")),
        n(f"{run}:FakeModelRunner.output", ModelRunnerOutput,
          provides=("req_ids", "req_id_to_index", "sampled_token_ids", "logprobs", "prompt_logprobs_dict",
                    "pooler_output", "kv_connector_output")),
        n(f"{run}:FakeModelRunner.output", KVConnectorOutput,
          accepts_all=("finished_sending", "finished_recving", "kv_connector_worker_meta"),
          provides=("finished_sending", "finished_recving", "kv_connector_worker_meta")),
        n(f"{cfg}:EngineConfigs.vllm_config", KVEventsConfig, accepts_all=("enable_kv_cache_events", "publisher")),
        n(f"{cfg}:EngineConfigs.vllm_config", KVTransferConfig,
          accepts_all=("kv_connector", "kv_role", "kv_connector_extra_config")),
        n(f"{cfg}:EngineConfigs.vllm_config", ParallelConfig,
          accepts_all=("tensor_parallel_size", "decode_context_parallel_size")),
        n(f"{spy}:spy_allocations", KVCacheManager.allocate_slots, accepts_any=facts.ALLOC_TOKEN_PARAMS,
          positional=("request",), forwards=True),
    ]
    rows += [n(f"{spy}:spy_lookups", getattr(KVCacheManager, name), positional=("request",),
                    forwards=True)
             for name in facts.PREFIX_LOOKUP_METHODS if hasattr(KVCacheManager, name)]
    draft_ids = _draft_ids_cls()
    if draft_ids is not None:  # the fake model runner's drafts (a release without them: NOT_EXPRESSIBLE)
        rows += [n(f"{run}:FakeModelRunner.propose", sched_mod.Scheduler.update_draft_token_ids,
                   positional=("draft_token_ids",)),
                 n(f"{run}:FakeModelRunner.propose", draft_ids, provides=("req_ids", "draft_token_ids"))]
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
        self.configs = EngineConfigs(self.builder)
        self.draft_ids_cls = _draft_ids_cls()
        # the vLLM APIs this harness relies on, checked once against the installed release
        self.incompatible = compat.first_problem(needs())

    def warm(self) -> float:
        """Pay the one-time costs before the first timed input; returns the seconds spent.

        The first ``ModelConfig``, ``SpeculativeConfig``, ``Scheduler`` and each connector
        import modules lazily (vLLM's executor, tracing, the connector modules, and the model
        registry's inspection when its cache misses: seconds each, tens on a cold disk). One
        small run per connector (and none, and one with drafts) here moves that into start-up,
        so a fuzzer's execs/s and a run's ``seconds`` measure the scheduler, not imports. The
        runs' results are discarded; nothing they cache changes a later run's result."""
        from kvproof.consumer.drafts import Drafts
        t0 = time.perf_counter()
        stream = Stream((32,), (Req(0, 32, 4, 0, 2), Req(0, 32, 8, 1, 2)), None, 64, 4)
        runs = [(conn, stream) for conn in (None,) + tuple(facts.CONSUMER_CONNECTORS)]
        runs += [(None, Stream(stream.prefixes, stream.requests, None, 64, 4, Drafts(m, 2)))
                 for m in facts.SPEC_METHODS]
        for conn, s in runs:
            kind = "hidden_state" if conn == facts.HIDDEN_STATES_CONNECTOR else "full_attention"
            layout = Layout.from_dict({"groups": [{"kind": kind, "block_size": 16}], "kv_connector": conn,
                                       "cache": {"block_size": 16, "enable_prefix_caching": True}})
            try:
                self.run(layout, s)
            except Exception:  # a release without the connector: its first real input says so
                pass
        return time.perf_counter() - t0

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
        try:  # the Layout's speculative method (a derivation's) drafts when the stream names none
            stream = replace(stream, spec=effective_drafts(layout, stream))
        except NotExpressible as err:
            st.res.not_expressible = str(err)
            return
        if any(g.eagle for g in layout.groups) and not (stream.spec is not None and stream.spec.eagle):
            # kv_cache_utils.py annotates is_eagle_group only under use_eagle_block_drop()
            st.res.not_expressible = ("a group flagged eagle without an EAGLE-family drafter: the engine sets "
                                      "is_eagle_group only when it drafts with eagle, eagle3 or mtp")
            return
        if stream.spec is not None and self.draft_ids_cls is None:
            st.res.not_expressible = "this release's scheduler takes no draft token ids (no DraftTokenIds)"
            return
        if stream.spec is not None and stream.spec.eagle and len(layout.groups) > 1 \
                and any(g.kind == "chunked_local" for g in layout.groups):
            # vllm/config/vllm.py turns the hybrid KV cache manager off for chunked local
            # attention, always with EAGLE: these groups never reach one coordinator
            st.res.not_expressible = ("EAGLE with chunked local attention: the engine turns the hybrid KV "
                                      "cache manager off, so these groups never share a coordinator")
            return
        num_blocks = sizing.num_blocks(layout, stream)
        try:
            kv_cfg = self.configs.kv_cache_config(layout, num_blocks)
            vcfg = self.configs.vllm_config(layout, stream, num_blocks,
                                            gpu_bytes=sum(t.size for t in kv_cfg.kv_cache_tensors))
        except NotExpressible as err:
            st.res.not_expressible = str(err)
            return
        except Exception as err:
            st.res.harness_error = _own_error(err)
            if st.res.harness_error is None:
                st.res.setup_error = _exc(err)
            return
        st.rec.step = 0
        try:
            scheduler_bs, hash_bs = kv_cache_utils.resolve_kv_cache_block_sizes(kv_cfg, vcfg)
        except Exception as err:
            self._raised(st, err, "resolver: ")
            return
        st.res.scheduler_block_size, st.res.hash_block_size = scheduler_bs, hash_bs
        hash_fn = self.configs.hash_fn(vcfg)
        kv_cache_utils.init_none_hash(hash_fn)
        # what the engine core builds: 0.33+ hashes num_hash_lookahead_tokens past each block
        # (EAGLE without block drop); by signature, 0 where the release has no such parameter
        lookahead = getattr(vcfg, "num_hash_lookahead_tokens", 0) or 0
        block_hasher = kv_cache_utils.get_request_block_hasher(hash_bs, hash_fn, **kwargs_for(
            kv_cache_utils.get_request_block_hasher, num_hash_lookahead_tokens=lookahead))
        try:
            kw = kwargs_for(sched_mod.Scheduler.__init__, vllm_config=vcfg, kv_cache_config=kv_cfg,
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
        runner = FakeModelRunner(ModelRunnerOutput, KVConnectorOutput, stream.spec, self.draft_ids_cls)
        try:
            driver = Driver(scheduler, stream, block_hasher, self._oracles(st, layout, scheduler, hash_fn), runner,
                            st.rec, st.res)
            st.res.steps = driver.run(max_steps)
        except Exception as err:
            self._raised(st, err)
        finally:
            st.res.steps = max(st.res.steps, st.rec.step)
            st.res.drafts_proposed, st.res.drafts_accepted = runner.proposed, runner.accepted
            st.res.drafts_verified = runner.verified
            try:
                if scheduler.connector is not None and hasattr(scheduler.connector, "shutdown"):
                    scheduler.connector.shutdown()
            except Exception:
                pass

    def _oracles(self, st: RunState, layout: Layout, scheduler: Any, hash_fn: Any) -> Oracles:
        """The run's oracles, wired to the scheduler's manager, event publisher and connector."""
        mgr = scheduler.kv_cache_manager
        st.res.alignment = self._alignment(mgr.coordinator, st.res.scheduler_block_size)
        st.res.eagle_drop = self._eagle_drop(mgr.coordinator)
        st.res.hash_lookahead = int(getattr(scheduler, "num_hash_lookahead_tokens", 0) or 0)
        index = HashIndex(st.res.hash_block_size, self._hash_block(hash_fn), lookahead=st.res.hash_lookahead)
        kcc = scheduler.kv_cache_config
        oracles = Oracles(st.res, st.rec, index, self.builder.group_block_sizes(kcc, layout.dcp),
                          local_chunks(kcc), mamba=layout.has_mamba,
                          specs=[type(g.kv_cache_spec).__name__ for g in kcc.kv_cache_groups],
                          coordinator=type(mgr.coordinator).__name__)
        spies.spy_lookups(mgr, oracles)
        spies.spy_allocations(mgr, oracles)
        spies.spy_events(scheduler.kv_event_publisher, oracles)
        if scheduler.connector is not None:
            st.res.connector_class = type(scheduler.connector).__name__
            spies.spy_connector(scheduler.connector, scheduler, oracles)
        return oracles

    @staticmethod
    def _raised(st: RunState, err: BaseException, where: str = "") -> None:
        """An exception during a run: vLLM's (the ``exception`` oracle) or the harness's own."""
        own = _own_error(err)
        if own is not None:
            st.res.harness_error = where + own
        else:
            st.rec.add("exception", where + _exc(err))

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

    @staticmethod
    def _eagle_drop(coord: Any) -> bool:
        """Whether the coordinator's managers drop the unit past a hit for EAGLE: its
        ``drop_eagle_group_ids`` (0.33: empty when lookahead hashing replaces the drop), else its
        ``eagle_group_ids`` (0.27-0.32: every group when use_eagle and none is flagged)."""
        for name in facts.EAGLE_DROP_ATTRS:
            ids = getattr(coord, name, None)
            if ids is not None:
                return bool(ids)
        return bool(getattr(coord, "use_eagle", False))

    @staticmethod
    def _supports_hma(conn: Any) -> bool:
        try:
            from vllm.distributed.kv_transfer.kv_connector.v1 import SupportsHMA
        except ImportError:
            return True
        return isinstance(conn, SupportsHMA)

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


def _draft_ids_cls() -> Any:
    """The release's carrier of draft token ids for ``Scheduler.update_draft_token_ids``, or None."""
    try:
        from vllm.v1.outputs import DraftTokenIds
    except ImportError:
        return None
    return DraftTokenIds if hasattr(sched_mod.Scheduler, "update_draft_token_ids") else None
