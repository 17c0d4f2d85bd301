"""The witness search: which reference architecture reaches a ledger class on real vLLM.

A class found on a tiny or hand-written Layout is a bug a user can hit once a
real model builds its shape. The search serves every reference model
(spec/models/) with the serve flags the class's Layout implies (prefix caching,
Mamba cache mode, connector, speculation), derives each on the release, keeps
those whose KV cache has every kind the class's Layout has, and runs the class's
tier on them in one round trip: a consumer class under its stream scaled to the
model's blocks and windows (tokens x k; k the block ratio, then the window ratio).
A model whose row falls in the class, with the plainest KV cache first, is the
witness: ``kvproof findings witness ID`` prints it, ``--write`` records it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from kvproof.classkey import class_key

from kvproof import facts
from kvproof.config import Config, reference_models
from kvproof.derivation import reference_flags
from kvproof.consumer.stream import Req, Stream
from kvproof.layout import Layout


@dataclass(frozen=True)
class Witness:
    release: str
    config: Config
    layout: Layout  # as the release derived it, the stream (consumer tier) in meta
    message: str

    def to_dict(self) -> dict:
        return {"release": self.release, "config": self.config.to_dict(minimal=True),
                "layout": self.layout.to_dict(), "stream": (self.layout.meta or {}).get("stream"),
                "message": self.message}


def serve_flags(layout: Layout) -> tuple[str, ...]:
    """The ``vllm serve`` flags that ask a real model for ``layout``'s engine settings."""
    flags = ["--enable-prefix-caching" if layout.cache.enable_prefix_caching else "--no-enable-prefix-caching"]
    if layout.cache.mamba_cache_mode and any(g.kind == "mamba" for g in layout.groups):
        flags += ["--mamba-cache-mode", layout.cache.mamba_cache_mode]
    if layout.kv_connector == facts.HIDDEN_STATES_CONNECTOR:
        # the producer side of hidden-state extraction: its speculative method and connector together
        from kvproof.derivation import EXTRACT_HIDDEN_STATES
        flags += list(EXTRACT_HIDDEN_STATES)
    elif layout.kv_connector:
        cfg = {"kv_connector": layout.kv_connector, "kv_role": "kv_both"}
        if layout.kv_connector == facts.OFFLOADING_CONNECTOR:
            cfg["kv_connector_extra_config"] = dict(facts.CONSUMER_CONNECTOR_EXTRA)
        flags += ["--kv-transfer-config", json.dumps(cfg, separators=(",", ":"))]
    if layout.speculative is not None:
        flags += ["--speculative-config", json.dumps(layout.speculative.to_dict(), separators=(",", ":"))]
    return tuple(flags)


def same_shape(found: Layout, real: Layout) -> bool:
    """``real`` has every kind ``found`` has, and its engine settings."""
    return ({g.kind for g in found.groups} <= {g.kind for g in real.groups}
            and real.kv_connector == found.kv_connector
            and bool(real.cache.enable_prefix_caching) == bool(found.cache.enable_prefix_caching))


def scales(found: Layout, real: Layout) -> list[int]:
    """Token scale factors that keep the stream's shape on ``real``: the block ratio, the window ratio."""
    ks = {max(1, math.ceil(max(g.block_size for g in real.groups) / max(g.block_size for g in found.groups)))}
    wf = [g.sliding_window for g in found.groups if g.sliding_window]
    wr = [g.sliding_window for g in real.groups if g.sliding_window]
    if wf and wr:
        ks.add(max(1, math.ceil(min(wr) / min(wf))))
    return sorted(ks)


def scale(stream: Stream, k: int, found_block: int, real_block: int) -> Stream:
    """``stream`` with every token count times ``k`` and its block budget in ``real_block`` blocks."""
    reqs = tuple(replace(r, prefix_len=r.prefix_len * k, suffix_len=r.suffix_len * k,
                         tokens=None if r.tokens is None else tuple(r.tokens) * k) for r in stream.requests)
    blocks = None if stream.num_blocks is None else math.ceil(stream.num_blocks * k * found_block / real_block)
    return replace(stream, prefixes=tuple(p * k for p in stream.prefixes), requests=reqs, num_blocks=blocks,
                   max_num_batched_tokens=stream.max_num_batched_tokens * k)


def candidates(entry, found: Layout, real: Layout, name: str) -> list[tuple[str, Layout]]:
    """``real`` as the class's tier runs it: itself, or (consumer) once per stream scale."""
    if entry.key.tier != "consumer":
        return [(name, real)]
    stream = Stream.from_dict(entry.stream) if entry.stream else Stream(requests=(Req(),))
    fb, rb = max(g.block_size for g in found.groups), max(g.block_size for g in real.groups)
    out = []
    for k in scales(found, real):
        s = scale(stream, k, fb, rb)
        if max((len(s.prompt(i)) for i in range(len(s.requests))), default=0) < real.max_model_len:
            out.append((f"{name} x{k}", real.with_meta(stream=s.to_dict())))
    return out


def search(entry, release: str, models: tuple[str, ...] | None = None) -> list[Witness]:
    """Every reference model (or ``models``) that reaches ``entry``'s class on ``release``,
    the plainest KV cache (fewest groups, smallest blocks) first."""
    from kvproof.findings.measure import TIERS

    from kvproof import checking, envs

    found = Layout.from_dict(entry.layout)
    env = envs.find(release)
    configs = [(m, Config(model=m, flags=reference_flags(m, serve_flags(found)))) for m in (models or reference_models())]
    with checking.Workers.start([env]) as pool:
        worker = pool.by_env[env.name]
        derived = checking.derive_all(release, [c for _, c in configs], worker, chunk=checking.MODEL_CHUNK)
        shaped = {m: d for (m, _), d in zip(configs, derived) if d.layout is not None and same_shape(found, d.layout)}
        named = [c for m, d in shaped.items() for c in candidates(entry, found, d.layout, m)]
        rows = checking.run_tiers(named, TIERS[entry.key.tier], env.name, worker)
    hits = {}
    for row in rows:
        model = row.name.split(" ")[0]
        if model not in hits and row.judgement.observed is not None and class_key(row.judgement, row.layout) == entry.key:
            hits[model] = Witness(release, shaped[model].config, row.layout, row.message())
    return sorted(hits.values(), key=lambda w: (len(w.layout.groups), sorted(g.block_size for g in w.layout.groups),
                                                w.config.model))


def record(ledger, entry, w: Witness):
    """``entry`` with ``w`` as its witness: reachable, the witness Config, and the report's layout and
    stream where the report has none (its words, serve line included, are a person's: kept)."""
    report = dict(entry.report or {})
    if "witness" not in report:
        report["witness"] = {"layout": w.layout.to_dict(), "stream": (w.layout.meta or {}).get("stream")}
    return ledger.add(replace(entry, reachability="reachable", witness_config=w.config.to_dict(minimal=True),
                              report=report))
