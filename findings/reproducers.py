"""The reproducers of a ledger entry, generated from its layout, stream and class key: a
standalone script (``findings/repro/{manager,consumer}.py.in``) and a pytest in vLLM's test
style (``test_consumer.py.in``). Both import only vLLM (and torch, pytest)."""

from __future__ import annotations

import pprint
from pathlib import Path

from kvproof.errors import UsageError
from kvproof.findings.ledger import Entry
from kvproof.judging.oracle_ids import OracleId


def _tier(name: str):
    """A ledger key's tier as the registry knows it: ``(tier, default, streamed)`` (tier None for a
    name that is no tier), so a reproducer is chosen by the tier's role, not its name."""
    from kvproof.tiers import registry
    from kvproof.tiers.classify import as_tier
    try:
        tier = as_tier(name)
    except ValueError:
        tier = None
    return tier, registry.default(), registry.streamed()

TEMPLATES = Path(__file__).resolve().parent / "repro"


def _literal(value) -> str:
    return pprint.pformat(value, width=110, compact=True, sort_dicts=False)


def _stream_literal(stream: dict) -> dict:
    from kvproof.consumer.stream import Stream

    s = Stream.from_dict(stream)
    if any(r.resend_at is not None or r.abort_at is not None for r in s.requests):
        raise UsageError("the standalone reproducer does not replay resends or aborts yet")
    return {"prompts": [s.prompt(i) for i in range(len(s.requests))],
            "requests": [{"arrival": r.arrival, "max_tokens": r.max_tokens} for r in s.requests],
            "num_blocks": s.num_blocks, "max_num_batched_tokens": s.max_num_batched_tokens,
            "max_num_seqs": s.max_num_seqs}


def script(entry: Entry) -> str:
    """The standalone reproducer of ``entry`` (imports only vLLM)."""
    lay = entry.layout
    if not lay.get("groups"):
        raise UsageError(f"ledger entry {entry.id} has no layout")
    groups = [{k: v for k, v in g.items() if v is not None} for g in lay["groups"]]
    for g in groups:
        if g.pop("count", 1) != 1:
            raise UsageError("the standalone reproducer takes one group per spec (no count)")
    cache = {k: v for k, v in (lay.get("cache") or {}).items() if v is not None}
    cache.setdefault("enable_prefix_caching", True)
    key = entry.key
    tier, default, streamed = _tier(key.tier)
    if tier == default:  # the bridge's manager stage
        expect = {"exc_type": key.exc_type, "frame": key.raising_frame}
        subs = {"MAX_MODEL_LEN": str(lay.get("max_model_len") or 2048)}
        template = "manager.py.in"
    elif tier == streamed:
        if entry.stream is None:
            raise UsageError(f"ledger entry {entry.id}: a consumer finding without its stream")
        drafter = (entry.layout or {}).get("speculative")
        if drafter:  # a report whose reproducer cannot show the bug is not written
            raise UsageError(f"ledger entry {entry.id}: its layout drafts ({drafter.get('method')}) and "
                             f"the standalone reproducer (findings/repro/consumer.py.in) has no drafter yet")
        if key.check == OracleId.KV_EVENT.check:
            expect = {"check": OracleId.KV_EVENT.value}
        elif key.exc_type:
            expect = {"exc_type": key.exc_type, "frame": key.raising_frame}
        else:
            raise UsageError(f"no standalone reproducer for consumer check {key.check!r} yet")
        subs = {"STREAM": _literal(_stream_literal(entry.stream))}
        template = "consumer.py.in"
    else:
        raise UsageError(f"no standalone reproducer for the {key.tier} tier")
    subs.update(TITLE=entry.title, GROUPS=_literal(groups), CACHE=_literal(cache),
                CONNECTOR=repr(lay.get("kv_connector")), EXPECT=repr(expect))
    text = (TEMPLATES / template).read_text()
    for k, v in subs.items():
        text = text.replace(f"@@{k}@@", v)
    if "@@" in text:
        raise UsageError(f"template {template}: unfilled placeholder")
    return text


def _runs(tokens: list[int]) -> str:
    """A prompt as Python: arithmetic runs as ``list(range(...))``, the rest as literals."""
    parts, i = [], 0
    while i < len(tokens):
        j = i + 1
        if j < len(tokens):
            d = tokens[j] - tokens[i]
            while j + 1 < len(tokens) and tokens[j + 1] - tokens[j] == d:
                j += 1
            if d != 0 and j - i >= 3:
                parts.append(f"list(range({tokens[i]}, {tokens[j] + d}, {d}))")
                i = j + 1
                continue
        parts.append(repr(tokens[i:j]))
        i = j
    return " + ".join(parts) or "[]"


def pytest_script(entry: Entry) -> str:
    """A pytest in vLLM's test style (tests/v1/...), built from vLLM's public classes only:
    it fails where the bug is and passes where it is not. Consumer-tier classes for now."""
    lay, key = entry.layout, entry.key
    tier, _, streamed = _tier(key.tier)
    if tier != streamed or entry.stream is None:
        raise UsageError(f"no pytest reproducer for a {key.tier}-tier entry yet")
    kinds = {g["kind"] for g in lay.get("groups", [])}
    if not kinds <= {"full_attention", "sliding_window"}:
        raise UsageError(f"the pytest reproducer builds attention specs only, not {sorted(kinds)}")
    st = _stream_literal(entry.stream)
    reqs = ",\n    ".join(f'{{"arrival": {r["arrival"]}, "max_tokens": {r["max_tokens"]}, "prompt": {_runs(p)}}}'
                          for r, p in zip(st["requests"], st["prompts"]))
    stream = (f'{{"num_blocks": {st["num_blocks"]}, "max_num_batched_tokens": {st["max_num_batched_tokens"]}, '
              f'"requests": [\n    {reqs}]}}')
    groups = [{k: v for k, v in g.items() if v is not None and k != "count"} for g in lay["groups"]]
    cache = {"block_size": (lay.get("cache") or {}).get("block_size")}
    name = (entry.report or {}).get("test") or f"kv_cache_{entry.id}"
    subs = dict(TITLE=(entry.report or {}).get("title") or entry.title, GROUPS=_literal(groups),
                CACHE=_literal(cache), STREAM=stream, CONNECTOR=repr(lay.get("kv_connector")), NAME=name)
    text = (TEMPLATES / "test_consumer.py.in").read_text()
    for k, v in subs.items():
        text = text.replace(f"@@{k}@@", v)
    return text
