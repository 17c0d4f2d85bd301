"""The Z3 model of vLLM's ``resolve_kv_cache_block_sizes``, per revision.

Public API:

* ``evaluate(layout, revision) -> Outcome``: the model on concrete inputs
  (``source="model:<revision>"``).
* ``revision_for(vllm_version) -> str``: ``"0.27.0"`` -> ``"0.27"``.
* ``REVISIONS``, ``drift(fingerprint, vllm_version)``, ``not_expressible``:
  the revision table (kvproof.revisions).
* ``kvproof.spec.fingerprint``: the resolver source fingerprint.
* ``kvproof.spec.properties.PROPERTIES`` and ``kvproof.spec.query.Query``:
  the contract catalogue as Z3 queries.
* Dev only, outside the wheel: ``tests/layout_strategies.py`` (Hypothesis strategy for
  Layouts) and ``tests/crosshair_model.py`` (CrossHair contracts on the model).

z3 is imported lazily so that ``kvproof.spec.fingerprint`` and the revision
table work inside a vLLM environment without z3.
"""

from __future__ import annotations

from kvproof.revisions import (REVISIONS, drift, not_expressible, revision_for,  # noqa: F401
                                    revision_for_fingerprint)


def evaluate(layout, revision: str):
    """The model's Outcome for ``layout`` under ``revision`` (needs z3)."""
    from kvproof.spec.model import evaluate as _evaluate
    return _evaluate(layout, revision)


__all__ = ["evaluate", "revision_for", "revision_for_fingerprint", "REVISIONS", "drift", "not_expressible"]
