"""The consumer harness's spies: wrappers on the real scheduler's methods that report to the oracles.

No vLLM import: each spy wraps a bound method of an object the harness built
(``KVCacheManager`` lookups and ``allocate_slots``, the block pool's
``get_new_blocks``, the KV event publisher, the connector's scheduler side and
the hash-carrying methods of its inner pieces), calls the real method unchanged and hands what it saw to
``kvproof.consumer.oracles.Oracles``. Every wrapper takes the real method's
arguments as they come (``*args, **kw``), so a release that adds a parameter
(0.33's ``get_computed_blocks(request, max_cache_hit_length)``) reaches vLLM
as the scheduler passed it.
"""

from __future__ import annotations

import inspect
from typing import Any

from kvproof.consumer.oracles import Oracles
from kvproof.spec import facts

# Methods of a connector's inner pieces whose arguments carry block hashes / offload keys.
HASH_METHODS = facts.CONNECTOR_HASH_METHODS


def spy_lookups(mgr: Any, oracles: Oracles) -> None:
    """(b) the real prefix-cache lookups (plain, and the connector variant where it exists)."""
    def spy(real: Any) -> Any:
        def lookup(request: Any, *args: Any, **kw: Any) -> Any:
            got = real(request, *args, **kw)
            oracles.lookup(request, got[1])  # (blocks, num_computed_tokens, ...) in every release seen
            return got
        return lookup
    for name in facts.PREFIX_LOOKUP_METHODS:
        if hasattr(mgr, name):
            setattr(mgr, name, spy(getattr(mgr, name)))


def spy_allocations(mgr: Any, oracles: Oracles) -> None:
    """Truth: KV of scheduled tokens counts as computed from the moment its slots are allocated."""
    real_alloc = mgr.allocate_slots
    alloc_sig = inspect.signature(real_alloc)

    def allocate_slots(request: Any, *args: Any, **kw: Any) -> Any:
        got = real_alloc(request, *args, **kw)
        if got is not None:
            bound = alloc_sig.bind(request, *args, **kw).arguments
            extra = sum(v for k, v in bound.items() if k in facts.ALLOC_TOKEN_PARAMS and isinstance(v, int))
            oracles.allocated(request, extra)
        return got
    mgr.allocate_slots = allocate_slots


def spy_events(publisher: Any, oracles: Oracles) -> None:
    """(d) every KV event batch the scheduler publishes."""
    real_publish = publisher.publish

    def publish(batch: Any) -> None:
        for ev in getattr(batch, "events", ()) or ():
            oracles.event(ev)
        return real_publish(batch)
    publisher.publish = publish


def spy_reuse(pool: Any, shadow: Any) -> None:
    """The shadow oracle: a block the pool hands out again no longer holds what it held."""
    real_get = pool.get_new_blocks

    def get_new_blocks(*args: Any, **kw: Any) -> Any:
        got = real_get(*args, **kw)
        shadow.reused(got)
        return got
    pool.get_new_blocks = get_new_blocks


def spy_connector(conn: Any, scheduler: Any, oracles: Oracles) -> None:
    """(c) the connector's scheduler side: its external-hit claims, and every method of its inner
    pieces (up to 4 levels of vLLM objects) named in ``HASH_METHODS``."""
    res = oracles.res
    real_match = conn.get_num_new_matched_tokens
    name = type(conn).__name__

    def get_num_new_matched_tokens(request: Any, num_computed_tokens: int, *args: Any, **kw: Any) -> Any:
        got = real_match(request, num_computed_tokens, *args, **kw)
        res.connector_calls += 1
        oracles.connector_claim(name, request, num_computed_tokens, got)
        return got
    conn.get_num_new_matched_tokens = get_num_new_matched_tokens

    gpu_pool = scheduler.kv_cache_manager.block_pool
    seen: set[int] = {id(gpu_pool), id(scheduler), id(scheduler.kv_cache_manager)}

    def walk(obj: Any, depth: int) -> None:
        if depth > 4 or id(obj) in seen or obj is None:
            return
        seen.add(id(obj))
        mod = type(obj).__module__ or ""
        if not mod.startswith("vllm"):
            return
        for method in HASH_METHODS:
            fn = getattr(obj, method, None)
            if callable(fn) and not getattr(fn, "_kvproof", False):
                try:
                    setattr(obj, method, _hash_spy(fn, f"{type(obj).__name__}.{method}", oracles))
                except (AttributeError, TypeError):
                    pass
        for attr in list(getattr(obj, "__dict__", {}).values()):
            if isinstance(attr, (list, tuple)):
                for x in attr[:8]:
                    walk(x, depth + 1)
            elif isinstance(attr, dict):
                continue
            else:
                walk(attr, depth + 1)
    walk(conn, 0)


def _hash_spy(fn: Any, label: str, oracles: Oracles) -> Any:
    store = label.rsplit(".", 1)[-1] in facts.CONNECTOR_STORE_METHODS
    res = oracles.res

    def spy(*args: Any, **kw: Any) -> Any:
        res.connector_calls += 1
        oracles.connector_args(label, store, args + tuple(kw.values()) if kw else args)
        return fn(*args, **kw)
    spy._kvproof = True  # type: ignore[attr-defined]
    return spy
