"""How a counterexample relates to what a user can configure.

``label(revision, property, witness_layout)`` -> ``(Reachability, reason,
witness_config | None)``:

- REACHABLE: a Config whose real derivation yields a layout with the same
  violation (the Config comes back as a dict). Needs the derivation engine
  (``kvproof.config`` / ``kvproof.derivation``); until it is importable no
  witness is labelled reachable.
- FREE: the witness satisfies the engine premise (``cache_config.block_size``
  as EngineCore derives it), but no Config within the bounds is known to
  derive it.
- UNREACHABLE: the engine premise excludes the witness; the reason names the
  fact (``kvproof.spec.facts.ENGINE_BLOCK_SIZE_OVER``) and the values.

The label is decided on the witness itself (a concrete replay of the query
under the ``engine`` premise), so a caller need not say which premise the
query ran under; ``premise`` and ``engine_status`` refine the reason only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvproof.spec import facts
from kvproof.spec import revisions as R
from kvproof.spec.properties import BY_KEY, Property

from kvproof.layout import Layout
from kvproof.verdicts import ProofStatus, Reachability


def status(value: Any) -> ProofStatus | None:
    """A result's status as ``ProofStatus`` (strings and enum members alike; None stays None)."""
    if value is None or isinstance(value, ProofStatus):
        return value
    return ProofStatus[str(value)]


def _layout(witness: Layout | dict) -> Layout:
    return witness if isinstance(witness, Layout) else Layout.from_dict(witness)


def _prop(prop: Property | str) -> Property:
    return BY_KEY[prop] if isinstance(prop, str) else prop


def engine_fact(revision: str, lay: Layout) -> tuple[bool, str]:
    """Does ``lay`` have the cache block size EngineCore derives? (held, the fact in words)."""
    rule = facts.ENGINE_BLOCK_SIZE_OVER[revision]
    sizes = [g.block_size for g in lay.groups]
    cacheable = [g.prefix_cacheable is not False for g in lay.groups]
    want = facts.engine_cache_block_size(rule, sizes, cacheable)
    over = "all groups" if rule == "all" else "prefix-cacheable groups (all if none)"
    text = (f"EngineCore sets cache_config.block_size to the smallest block size over {over} "
            f"(facts.ENGINE_BLOCK_SIZE_OVER[{revision!r}]): {want} here, the witness has "
            f"{lay.cache.block_size}")
    return lay.cache.block_size == want, text


def _in_engine_premise(revision: str, prop: Property, lay: Layout, bounds: dict) -> bool:
    from kvproof.spec.query import (
        concrete_holds,  # z3; imported late so `label` stays cheap to import
    )
    return concrete_holds(lay, revision, prop, "engine", **bounds)


def _derived_config(revision: str, prop: Property, lay: Layout) -> tuple[dict | None, str]:
    """Hook for the derivation engine: (a Config as a dict whose derived layout violates ``prop``, or
    None; what was searched, in words).

    Contract expected from ``kvproof.derivation`` (being written): a function
    ``find_config(revision, property_key, witness_layout) -> Config | None``
    that searches configurations within its bounds and returns one whose real
    derivation gives a layout on which the property is violated (not
    necessarily ``lay`` itself); ``Config.to_dict()`` gives the JSON. Until
    that exists nothing is searched and no finding is REACHABLE.
    """
    try:
        from kvproof import derivation  # type: ignore[attr-defined]
    except ImportError:
        return None, "no configuration search yet (kvproof.derivation pending)"
    find: Callable | None = getattr(derivation, "find_config", None)
    if find is None:
        return None, "no configuration search yet (kvproof.derivation.find_config pending)"
    try:
        cfg = find(revision, prop.key, lay)
    except Exception as err:  # noqa: BLE001 -- a derivation bug must not fail the proof run; the label stays FREE
        return None, f"configuration search failed ({type(err).__name__}: {err})"
    if cfg is None:
        return None, "no configuration within the derivation bounds derives a violating layout"
    return (cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)), "a configuration derives a violating layout"


def label(revision: str, prop: Property | str, witness_layout: Layout | dict, *, premise: str | None = None,
          engine_status: Any = None, max_block: int | None = None, dcp_values=None,
          derive: bool = True) -> tuple[Reachability, str, dict | None]:
    """Label one witness. ``premise``: the premise its query ran under; ``engine_status``: the
    ``engine`` query's status at the witness's group count (UNKNOWN keeps the label FREE);
    ``max_block``/``dcp_values``: the run's domain (the model's defaults when None)."""
    p = _prop(prop)
    lay = _layout(witness_layout)
    if R.not_expressible(lay, revision):
        return Reachability.UNREACHABLE, f"not expressible in {revision}: {R.not_expressible(lay, revision)}", None
    bounds: dict = {}
    if max_block is not None:
        bounds["max_block"] = max_block
    if dcp_values is not None:
        bounds["dcp_values"] = tuple(dcp_values)
    if _in_engine_premise(revision, p, lay, bounds):
        cfg, searched = _derived_config(revision, p, lay) if derive else (None, "configuration search off")
        if cfg is not None:
            return Reachability.REACHABLE, searched, cfg
        reason = (f"engine premise holds (cache_config.block_size as EngineCore derives it) "
                  f"for {lay.summary()}; {searched}")
        return Reachability.FREE, reason, None
    held, fact = engine_fact(revision, lay)
    if status(engine_status) == ProofStatus.UNKNOWN:
        # the engine query gave up: an engine-shaped witness may exist, so do not claim more
        return Reachability.FREE, f"engine premise UNKNOWN; this witness is only a direct caller's ({fact})", None
    if not held:
        proved = " (the engine query is PROVED here)" if status(engine_status) == ProofStatus.PROVED else ""
        return Reachability.UNREACHABLE, f"{fact}{proved}", None
    # cache block size is the engine's, yet the engine query excludes it: another premise clause does
    return Reachability.UNREACHABLE, f"excluded by the engine premise of {revision} (spec.model.engine_premise)", None


__all__ = ["engine_fact", "label", "status"]
