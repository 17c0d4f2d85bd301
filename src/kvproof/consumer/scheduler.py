"""What the engine core builds for one consumer run, up to the real ``Scheduler``. In a vLLM env.

From a Layout and a Stream: the ``KVCacheConfig`` and ``VllmConfig``
(``configs``), the release's own resolver's (scheduler, hash) block sizes,
the request block hasher, and the ``Scheduler``, which builds the real
``KVCacheManager``, block pool and the connector's scheduler side. What the
release refuses is recorded on the run (NOT_EXPRESSIBLE, a setup error, the
``exception`` oracle or a harness error) and nothing is returned.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core import kv_cache_utils
from vllm.v1.core.sched import scheduler as sched_mod
from vllm.v1.structured_output import StructuredOutputManager

from kvproof.consumer import sizing
from kvproof.bridge.compat import kwargs_for
from kvproof.consumer.configs import EngineConfigs, kv_cache_bytes
from kvproof.consumer.failures import exc_line, own_error, raised
from kvproof.consumer.result import RunState
from kvproof.consumer.stream import Stream
from kvproof.errors import NotExpressible, Unchecked
from kvproof.inputs.layout import Layout
from kvproof import facts


def build(configs: EngineConfigs, st: RunState, layout: Layout, stream: Stream) -> tuple[Any, Any, Any] | None:
    """(scheduler, hash function, request block hasher), or None with the reason on ``st.res``."""
    num_blocks = sizing.num_blocks(layout, stream)
    try:
        kv_cfg = configs.kv_cache_config(layout, num_blocks)
        vcfg = configs.vllm_config(layout, stream, num_blocks, gpu_bytes=kv_cache_bytes(kv_cfg))
    except Unchecked as err:  # kvproof's gap, never a fact about vLLM
        st.res.unchecked = str(err)
        return None
    except NotExpressible as err:
        st.res.not_expressible = str(err)
        return None
    except Exception as err:
        st.res.harness_error = own_error(err)
        if st.res.harness_error is None:
            st.res.setup_error = exc_line(err)
        return None
    st.rec.step = 0
    try:
        scheduler_bs, hash_bs = kv_cache_utils.resolve_kv_cache_block_sizes(kv_cfg, vcfg)
    except Exception as err:
        raised(st, err, "resolver: ")
        return None
    st.res.scheduler_block_size, st.res.hash_block_size = scheduler_bs, hash_bs
    hash_fn = configs.hash_fn(vcfg)
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
        limit = next((f"{why}; {lift}" for needle, why, lift in facts.CONNECTOR_MACHINE_LIMITS
                      if needle in str(err)), None)
        if refusal is not None:
            st.res.not_expressible = f"{layout.kv_connector}: {refusal} ({exc_line(err)})"
        elif limit is not None:
            st.res.unchecked = f"{layout.kv_connector}: {limit} ({exc_line(err)})"
        else:
            raised(st, err, "Scheduler(): ")
        return None
    conn = scheduler.connector
    if conn is not None and len(layout.groups) > 1 and not supports_hma(conn):
        st.res.not_expressible = (f"{type(conn).__name__} does not implement SupportsHMA: the engine turns "
                                  f"the hybrid KV cache manager off for it, so these {len(layout.groups)} "
                                  f"groups never reach its scheduler side")
        return None
    return scheduler, hash_fn, block_hasher


def supports_hma(conn: Any) -> bool:
    """Whether the connector takes hybrid (several-group) KV caches; True where the release has no such marker."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1 import SupportsHMA
    except ImportError:
        return True
    return isinstance(conn, SupportsHMA)
