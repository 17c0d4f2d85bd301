"""The consumer harness's spies: wrappers on the real scheduler's methods that report to the oracles.

No vLLM import: each spy wraps a bound method of an object the harness built
(``KVCacheManager`` lookups and ``allocate_slots``, the hybrid coordinator's hit, the block pool's
``get_new_blocks``, the KV event publisher, the connector's scheduler side and
the hash-carrying methods of its inner pieces), calls the real method unchanged and hands what it saw to
the run's ``kvproof.consumer.oracles.Oracles``, which passes it on to the oracles that judge it.
Every wrapper takes the real method's arguments as they come (``*args, **kw``), so a release that adds a parameter
(0.33's ``get_computed_blocks(request, max_cache_hit_length)``) reaches vLLM
as the scheduler passed it.
"""

from __future__ import annotations

import inspect
from typing import Any

from kvproof.consumer import coord_oracle
from kvproof.consumer.oracles import Oracles
from kvproof import facts

# Methods of a connector's inner pieces whose arguments carry block hashes / offload keys.
HASH_METHODS = facts.CONNECTOR_HASH_METHODS


def spy_lookups(mgr: Any, oracles: Oracles) -> None:
    """(b) the real prefix-cache lookups (plain, and the connector variant where it exists)."""
    def spy(real: Any) -> Any:
        def lookup(request: Any, *args: Any, **kw: Any) -> Any:
            oracles.answered(None)  # the coordinator's spy fills it for this lookup
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
    # where each token-count parameter arrives: its position among (request, *args) when it can come
    # positionally, else by keyword only (what Signature.bind would say, without binding every call)
    where = [(name, i if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else None)
             for i, (name, p) in enumerate(inspect.signature(real_alloc).parameters.items())
             if name in facts.ALLOC_TOKEN_PARAMS]

    def allocate_slots(request: Any, *args: Any, **kw: Any) -> Any:
        got = real_alloc(request, *args, **kw)
        if got is not None:
            extra = 0
            for name, i in where:
                v = args[i - 1] if i is not None and 0 < i <= len(args) else kw.get(name)
                if isinstance(v, int):
                    extra += v
            oracles.allocated(request, extra)
        return got
    mgr.allocate_slots = allocate_slots


def spy_events(publisher: Any, oracles: Oracles) -> None:
    """(d) every KV event batch the scheduler publishes."""
    real_publish = publisher.publish

    def publish(batch: Any) -> None:
        events = getattr(batch, "events", ()) or ()
        for ev in events:
            oracles.event(ev)
        if events:
            oracles.published(events)
        return real_publish(batch)
    publisher.publish = publish


def spy_reuse(pool: Any, oracles: Oracles) -> None:
    """For the shadow oracle: a block the pool hands out again no longer holds what it held."""
    real_get = pool.get_new_blocks

    def get_new_blocks(*args: Any, **kw: Any) -> Any:
        got = real_get(*args, **kw)
        oracles.reused(got)
        return got
    pool.get_new_blocks = get_new_blocks


def spy_coordinator(coord: Any, oracles: Oracles) -> None:
    """The reconciliation oracle: each attention group's manager lookups (a subclass per group
    that records the length it answered; the coordinator compares classes only at init) and
    the reconciled hit the hybrid coordinator returns. A coordinator without attention groups
    (unitary, no prefix cache) has nothing to reconcile.

    Every coordinator's lookup also leaves, per group kind, what its manager was asked and
    answered (``Oracles.answered``: kind -> [max_length asked, tokens answered] of the
    group's first lookup in the call, the smallest answer where several groups share a kind),
    which the first admission's hit record carries (``hits[i]["groups"]``): a hit regression is
    keyed by the kinds whose answer shrank (kvproof.differential.lost_by)."""
    groups = getattr(coord, "attention_groups", None)
    if not groups:
        _spy_unitary(coord, oracles)
        return
    answers: dict[int, int] = {}
    firsts: dict[int, tuple[int | None, int]] = {}
    kinds = [facts.spec_kind(grp.spec) for grp in groups]
    judged = []
    for k, grp in enumerate(groups):
        spec, ids, cls = grp.spec, grp.group_ids, grp.manager_cls
        mgr = coord.single_type_managers[ids[0]]
        judged.append(coord_oracle.Group(
            full=any(c.__name__ == "FullAttentionSpec" for c in type(spec).__mro__), group_ids=ids,
            block_size=int(getattr(mgr, "block_size", 0) or 0), eagle=bool(getattr(grp, "use_eagle", False)),
            keeps_longer=bool(getattr(mgr, "retains_longer_hit", False)), name=type(spec).__name__))
        groups[k] = grp._replace(manager_cls=_answering(cls, k, answers, firsts))
    real = coord.find_longest_cache_hit

    def find_longest_cache_hit(*args: Any, **kw: Any) -> Any:
        answers.clear()
        firsts.clear()
        got = real(*args, **kw)
        oracles.answered(by_kind(kinds, firsts))
        oracles.reconciled(judged, answers, got[0], got[1])
        return got
    coord.find_longest_cache_hit = find_longest_cache_hit

    per_group = getattr(coord, "find_longest_cache_hit_per_group", None)
    if per_group is not None:  # the connector's lookup (0.27+): each group's own hit, unreconciled
        ids = {gid: k for k, grp in enumerate(groups) for gid in grp.group_ids}

        def find_longest_cache_hit_per_group(block_hashes: Any, max_cache_hit_length: int, *args: Any,
                                             **kw: Any) -> Any:
            firsts.clear()
            got = per_group(block_hashes, max_cache_hit_length, *args, **kw)
            lengths = got[1] if isinstance(got, tuple) and len(got) > 1 else ()
            seen = {ids[g]: (max_cache_hit_length, int(n)) for g, n in enumerate(lengths)
                    if g in ids and isinstance(n, int)}
            oracles.answered(by_kind(kinds, seen))
            return got
        coord.find_longest_cache_hit_per_group = find_longest_cache_hit_per_group


def _spy_unitary(coord: Any, oracles: Oracles) -> None:
    """A unitary coordinator's one group: what it was asked and answered (``Oracles.answered``)."""
    cfg = getattr(coord, "kv_cache_config", None)
    cfg_groups = getattr(cfg, "kv_cache_groups", None) or []
    if type(coord).__name__ != "UnitaryKVCacheCoordinator" or len(cfg_groups) != 1:
        return
    kind = facts.spec_kind(cfg_groups[0].kv_cache_spec)
    real = coord.find_longest_cache_hit

    def find_longest_cache_hit(block_hashes: Any, max_cache_hit_length: int, *args: Any, **kw: Any) -> Any:
        got = real(block_hashes, max_cache_hit_length, *args, **kw)
        oracles.answered({kind: [max_cache_hit_length, int(got[1])]})
        return got
    coord.find_longest_cache_hit = find_longest_cache_hit


def by_kind(kinds: list[str], firsts: dict[int, tuple[int | None, int]]) -> dict[str, list]:
    """Attention group index -> (asked, answered), as kind -> [asked, answered]: the smallest
    answer where several groups are of one kind (the one that cut most)."""
    out: dict[str, list] = {}
    for k, (asked, got) in sorted(firsts.items()):
        kind = kinds[k] if k < len(kinds) else "?"
        if kind not in out or got < out[kind][1]:
            out[kind] = [asked, got]
    return out


def _answering(cls: Any, k: int, answers: dict[int, int], firsts: dict[int, tuple[int | None, int]]) -> Any:
    """``cls`` whose ``find_longest_cache_hit`` records the length it answered for group ``k``
    (``answers``: the last; ``firsts``: the first of the coordinator's call, with the
    ``max_length`` it was asked: a group's answer never grows as the candidate shrinks)."""
    real = cls.find_longest_cache_hit

    def find_longest_cache_hit(klass: Any, *args: Any, **kw: Any) -> Any:
        got = real(*args, **kw)
        answers[k] = got[1]
        if k not in firsts:
            asked = kw.get("max_length", args[1] if len(args) > 1 else None)
            firsts[k] = (asked if isinstance(asked, int) else None, int(got[1]))
        return got
    return type(cls.__name__, (cls,), {"find_longest_cache_hit": classmethod(find_longest_cache_hit),
                                       "__module__": cls.__module__})


def spy_connector(conn: Any, scheduler: Any, oracles: Oracles) -> None:
    """(c) the connector's scheduler side: its external-hit claims, and every method of its inner
    pieces (up to 4 levels of vLLM objects) named in ``HASH_METHODS``."""
    res = oracles.ctx.res
    real_match = conn.get_num_new_matched_tokens
    name = type(conn).__name__

    def get_num_new_matched_tokens(request: Any, num_computed_tokens: int, *args: Any, **kw: Any) -> Any:
        got = real_match(request, num_computed_tokens, *args, **kw)
        res.connector_calls += 1
        oracles.claim(name, request, num_computed_tokens, got)
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
    res = oracles.ctx.res

    def spy(*args: Any, **kw: Any) -> Any:
        res.connector_calls += 1
        oracles.connector_call(label, store, args + tuple(kw.values()) if kw else args)
        return fn(*args, **kw)
    spy._kvproof = True  # type: ignore[attr-defined]
    return spy
