"""How a finding relates to what a user can configure.

``label(revision, property, witness_layout)`` -> ``(Reachability, reason, witness | None)``:

- REACHABLE: a measured Config (spec/derived/, ``kvproof derive --enumerate``)
  whose real derivation on a release running the revision gives a layout that
  violates the property; the witness carries the Config, the release and the
  derived layout (``kvproof derive`` turns the Config into that layout again:
  tests/integration/test_derivation_table.py). A real architecture
  (spec/models/ under ``vllm serve`` flags, spec/derived/models/) is cited
  when one reaches it; the reason says "only a toy family reaches it" when
  only a tiny family does.
- FREE: the witness satisfies every fact of the engine premise
  (kvproof.spec.premise), but no measured Config derives a violation.
- UNREACHABLE: a fact of the engine premise excludes the witness; the reason
  names the fact, the vLLM code behind it, and the values that break it.
"""

from __future__ import annotations

from typing import Any

from kvproof.spec import premise as premise_facts
from kvproof import revisions as R
from kvproof.spec.properties import BY_KEY, Property

from kvproof.inputs.layout import Layout
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


def _in_engine_premise(revision: str, prop: Property, lay: Layout, bounds: dict) -> bool:
    from kvproof.spec.query import (
        concrete_holds,  # z3; imported late so `label` stays cheap to import
    )
    return concrete_holds(lay, revision, prop, "engine", **bounds)


def _derived_config(revision: str, prop: Property, bounds: dict) -> tuple[dict | None, str]:
    """A measured Config whose real derivation violates ``prop`` (kvproof.derivation tables), or None."""
    from kvproof import derivation
    rows = derivation.tables_for(revision)
    if not rows:
        return None, f"no derivation table for a release running {revision} (spec/derived/)"
    hit = derivation.find_config(revision, prop.key, **bounds)
    releases = "/".join(sorted({r.release for r in rows}))
    real = sum(r.real for r in rows)
    if hit is None:
        why = (f"none of the {len(rows)} measured Configs of vLLM {releases} ({real} of real architectures) "
               f"derives a violating layout")
        refused = derivation.find_config(revision, prop.key, by_design=True, **bounds)
        if refused is not None:
            assert refused.layout is not None
            why += (f" that vLLM accepts; vLLM {refused.release} derives {refused.layout.summary()} from "
                    f"{refused.source()}, which it refuses by design")
        return None, why
    assert hit.layout is not None
    derives = f"vLLM {hit.release} derives {hit.layout.summary()} from {hit.source()}"
    if not hit.real:  # the tables are searched real architectures first: none of them reaches it
        why = (f"none of the {real} real-architecture Configs of vLLM {releases} does" if real else
               f"no reference-model table for vLLM {releases}: kvproof derive --enumerate --models")
        derives = f"only a toy family reaches it ({why}): {derives}"
    return ({"config": hit.config.to_dict(minimal=True), "release": hit.release, "layout": hit.layout.to_dict(),
             "summary": hit.layout.summary(), "real": hit.real}, derives)


def label(revision: str, prop: Property | str, witness_layout: Layout | dict, *, premise: str | None = None,
          engine_status: Any = None, max_block: int | None = None, dcp_values=None,
          derive: bool = True) -> tuple[Reachability, str, dict | None]:
    """Label one finding: (label, reason, witness) where witness, for REACHABLE, is
    ``{"config", "release", "layout", "summary"}``: a measured Config and the layout
    its real derivation gives. ``engine_status``: the engine query's status at the
    witness's group count (UNKNOWN keeps the label FREE); ``max_block``/``dcp_values``:
    the run's domain (the model's defaults when None)."""
    p = _prop(prop)
    lay = _layout(witness_layout)
    bounds: dict = {}
    if max_block is not None:
        bounds["max_block"] = max_block
    if dcp_values is not None:
        bounds["dcp_values"] = tuple(dcp_values)
    if derive:
        found, searched = _derived_config(revision, p, bounds)
        if found is not None:
            return Reachability.REACHABLE, searched, found
    else:
        searched = "configuration search off"
    if R.not_expressible(lay, revision):
        return Reachability.UNREACHABLE, f"not expressible in {revision}: {R.not_expressible(lay, revision)}", None
    st = status(engine_status)
    why = premise_facts.derivable(lay, revision)  # includes the facts only Python can state (spec kinds)
    if st is not None:
        # In a proof run the label is the engine-premise query's answer, not this witness's: Z3 may
        # return another witness next time, and a label must not depend on which one it returned.
        if st in (ProofStatus.COUNTEREXAMPLE, ProofStatus.WARNING):
            note = f"; this witness also breaks {why.split(':')[0]}, a fact the Z3 premise cannot state" if why else ""
            return Reachability.FREE, f"the engine-premise query has a witness{note}; {searched}", None
        if st == ProofStatus.UNKNOWN:
            return Reachability.FREE, f"engine premise UNKNOWN; this witness is a direct caller's; {searched}", None
        return Reachability.UNREACHABLE, (f"the engine-premise query is PROVED (spec/premise.py); e.g. "
                                          f"{lay.summary()}: {why or 'excluded by the Z3 premise'}"), None
    if _in_engine_premise(revision, p, lay, bounds):
        if why:
            return Reachability.UNREACHABLE, f"{lay.summary()}: {why}; {searched}", None
        return Reachability.FREE, f"inside the engine premise ({lay.summary()}); {searched}", None
    return Reachability.UNREACHABLE, f"{lay.summary()}: {why or 'excluded by the engine premise (spec/premise.py)'}", None


__all__ = ["label", "status"]
