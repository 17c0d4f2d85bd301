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

A class found with drafts whose drafter has KV cache layers of its own (MTP, EAGLE-3) is also
searched under each model's own drafter of that method, as the derivation tables serve it
(``derivation.model_flag_sets``): the drafter's layers may be what brings the class's kinds.
A class found under DCP > 1 runs its candidates at the class's dcp (one CPU process derives dcp
1 only; the groups are per rank either way). Many classes at once, and the record a search
leaves in the ledger: ``kvproof.findings.witness_search`` (``search``, ``search_many``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from kvproof.judging.classkey import class_key

from kvproof import facts
from kvproof.inputs.config import Config, reference_models
from kvproof.derivation import model_flag_sets, reference_flags
from kvproof.consumer.drafts import Drafts, drafts_of
from kvproof.inputs.drafts import parse_acceptance
from kvproof.consumer.stream import Req, Stream
from kvproof.differential import REGRESSION_CHECK
from kvproof.errors import LayoutError
from kvproof.inputs.layout import Layout


# a Stream's bound on max_num_batched_tokens (consumer/stream.py): a window ratio in the hundreds
# (a 1-token window found, a 1024-token one real) must not scale the batch past it
MAX_BATCHED_TOKENS = 1 << 20


@dataclass(frozen=True)
class Witness:
    release: str
    config: Config
    layout: Layout  # as the release derived it, with its stream (consumer tier)
    message: str

    def to_dict(self) -> dict:
        return {"release": self.release, "config": self.config.to_dict(minimal=True),
                "layout": self.layout.to_dict(), "stream": self.layout.stream and self.layout.stream.to_dict(),
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


def class_drafts(entry, found: Layout) -> Drafts | None:
    """The drafts the class was found with: its Layout's speculation under its stream's acceptance."""
    if found.speculative is None:
        return None
    return drafts_of(found.speculative, parse_acceptance((entry.stream or {}).get("accept")))


def own_drafters(model: str, method: str) -> list[dict]:
    """``model``'s own speculative configs of ``method`` as the derivation tables serve it (MTP at
    each depth for facts.MTP_REFERENCE_MODELS, EAGLE-3 with its reference draft): none for a
    method whose drafter has no layers (ngram) or no reference draft (draft_model)."""
    out: list[dict] = []
    for flags in model_flag_sets(model):
        if "--speculative-config" not in flags:
            continue
        spec = json.loads(flags[flags.index("--speculative-config") + 1])
        # MODEL_FLAG_SETS's MTP row is every model's (refused without MTP layers): only real MTP models
        if spec.get("method") == method and (method != "mtp" or model in facts.MTP_REFERENCE_MODELS) \
                and spec not in out:
            out.append(spec)
    return out


def flag_sets(entry, found: Layout, model: str) -> list[tuple[str, ...]]:
    """The serve flag sets ``model`` is searched under for ``entry``: the class's own without its
    drafts (``candidates`` gives the class's drafter to a layout the model derives without one of
    that method), then, for a class that drafts, one per own drafter of its method."""
    plain = serve_flags(replace(found, speculative=None))
    sets = [plain]
    drafts = class_drafts(entry, found)
    if drafts is not None and "--speculative-config" not in plain:
        sets += [plain + ("--speculative-config", json.dumps(s, separators=(",", ":")))
                 for s in own_drafters(model, drafts.method)]
    return [reference_flags(model, f) for f in dict.fromkeys(sets)]


def regression_release(entry) -> str | None:
    """The release a hit-regression class regressed on (``regression:hits@R[cause]``), else None."""
    check = entry.key.check
    return check[len(REGRESSION_CHECK):].split("[", 1)[0] if check.startswith(REGRESSION_CHECK) else None


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
                   max_num_batched_tokens=min(stream.max_num_batched_tokens * k, MAX_BATCHED_TOKENS))


def candidates(entry, found: Layout, real: Layout, name: str) -> list[tuple[str, Layout]]:
    """``real`` as the class's tier runs it: itself, or (the stream's tier, consumer) once per stream scale."""
    from kvproof.tiers import registry

    if found.dcp > 1 and real.dcp == 1:
        real = replace(real, dcp=found.dcp)
    if entry.key.tier != str(registry.streamed()):
        return [(name, real)]
    stream = Stream.from_dict(entry.stream) if entry.stream else Stream(requests=(Req(),))
    own, drafted = real.speculative, found.speculative
    if drafted is not None and (own is None or own.method != drafted.method):
        real = replace(real, speculative=drafted)  # the class's drafter; the model's own one keeps its
        # depth and MTP modules, under the class's acceptance (the stream's)
    fb, rb = max(g.block_size for g in found.groups), max(g.block_size for g in real.groups)
    out = []
    for k in scales(found, real):
        s = scale(stream, k, fb, rb)
        try:
            Stream.from_dict(s.to_dict())  # as the worker parses it: a scale past a Stream bound is not run
        except LayoutError:
            continue
        if max((s.prompt_len(i) for i in range(len(s.requests))), default=0) < real.max_model_len:
            out.append((f"{name} x{k}", real.with_stream(s)))
    return out


def record(ledger, entry, w: Witness):
    """``entry`` with ``w`` as its witness: reachable, the witness Config, and the report's layout and
    stream where the report has none (its words, serve line included, are a person's: kept)."""
    report = dict(entry.report or {})
    if "witness" not in report:
        report["witness"] = {"layout": w.layout.to_dict(), "stream": w.layout.stream and w.layout.stream.to_dict()}
    return ledger.add(replace(entry, reachability="reachable", witness_config=w.config.to_dict(minimal=True),
                              report=report))
