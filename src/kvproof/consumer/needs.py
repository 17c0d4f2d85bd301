"""The vLLM APIs the consumer harness calls, as it calls them. In a vLLM env.

``needs()`` lists them as ``compat.Need`` rows, each naming the kvproof frame
that relies on the API; the harness checks them once at start-up
(``compat.first_problem``), so a release that changed one is a harness error
before any run, never a vLLM FAIL.
"""

from __future__ import annotations

from typing import Any

from vllm.config import KVEventsConfig, KVTransferConfig, ParallelConfig
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.sched import scheduler as sched_mod
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request

from kvproof.bridge import compat
from kvproof import facts


def needs() -> list[compat.Need]:
    """The vLLM APIs the harness's scheduler build, wiring, driver, configs, spies, shadow and fake
    model runners call, as they call them (checked at start-up, ``compat``)."""
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    sch, wire = "kvproof/consumer/scheduler.py", "kvproof/consumer/wiring.py"
    spy = "kvproof/consumer/spies.py"
    drv, run, cfg = "kvproof/consumer/driver.py", "kvproof/consumer/runner.py", "kvproof/consumer/configs.py"
    spec_run = "kvproof/consumer/spec_runner.py"
    n = compat.Need
    rows = [
        n(f"{sch}:build", kv_cache_utils.resolve_kv_cache_block_sizes,
          positional=("kv_cache_config", "vllm_config")),
        n(f"{sch}:build", kv_cache_utils.init_none_hash, positional=("hash_fn",)),
        n(f"{sch}:build", kv_cache_utils.get_request_block_hasher,
          positional=("hash_block_size", "caching_hash_fn")),
        n(f"{wire}:hash_block", kv_cache_utils.hash_block_tokens,
          positional=("hash_function", "parent_block_hash", "curr_block_token_ids")),
        n(f"{sch}:build", sched_mod.Scheduler.__init__,
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
    rows += [n(f"{spy}:spy_reuse", BlockPool.get_new_blocks, positional=("num_blocks",), forwards=True),
             n("kvproof/consumer/shadow.py:Shadow._write", KVCacheCoordinator.get_blocks, positional=("request_id",))]
    rows += [n(f"{spy}:spy_lookups", getattr(KVCacheManager, name), positional=("request",),
                    forwards=True)
             for name in facts.PREFIX_LOOKUP_METHODS if hasattr(KVCacheManager, name)]
    draft_ids = draft_ids_cls()
    if draft_ids is not None:  # the fake model runner's drafts (a release without them: NOT_EXPRESSIBLE)
        rows += [n(f"{spec_run}:SpeculativeRunner.propose", sched_mod.Scheduler.update_draft_token_ids,
                   positional=("draft_token_ids",)),
                 n(f"{spec_run}:SpeculativeRunner.propose", draft_ids, provides=("req_ids", "draft_token_ids"))]
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    except ImportError:
        pass
    else:
        rows.append(n(f"{spy}:spy_connector", KVConnectorBase_V1.get_num_new_matched_tokens,
                      positional=("request", "num_computed_tokens"), forwards=True))
    return rows


def draft_ids_cls() -> Any:
    """The release's carrier of draft token ids for ``Scheduler.update_draft_token_ids``, or None."""
    try:
        from vllm.v1.outputs import DraftTokenIds
    except ImportError:
        return None
    return DraftTokenIds if hasattr(sched_mod.Scheduler, "update_draft_token_ids") else None
