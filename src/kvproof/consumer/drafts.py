"""Speculative decoding in the consumer tier: the stream's drafts (:mod:`kvproof.drafts`, an input
type below the Layout, re-exported here) and the drafts a run makes (:func:`effective_drafts`)."""

from __future__ import annotations

from typing import Any

from kvproof.drafts import VOCAB, Drafts, output_token, parse_drafts, wrong_token  # noqa: F401
from kvproof.errors import Unchecked
from kvproof import facts


def effective_drafts(layout: Any, stream: Any) -> Drafts | None:
    """What drafts a run makes: the stream's, else the Layout's speculative method (the engine's,
    from a derivation or a log line) with every draft accepted. A method the consumer tier does
    not draft for (facts.SPEC_METHODS: suffix, medusa, ...) is UNCHECKED; one a release lacks is
    that release's NOT_EXPRESSIBLE (``drafters.build``)."""
    if stream.spec is not None:
        return stream.spec
    spec = getattr(layout, "speculative", None)
    if spec is None:
        return None
    if spec.method not in facts.SPEC_METHODS:
        raise Unchecked(f"speculative method {spec.method}: kvproof's consumer tier drafts for "
                        f"{', '.join(facts.SPEC_METHODS)} only (lifted by a drafter for it in "
                        f"kvproof.consumer.drafters)")
    modules = int(getattr(spec, "mtp_modules", 1) or 1) if spec.method == "mtp" else 1
    return Drafts(spec.method, min(spec.num_speculative_tokens, facts.MAX_SPEC_TOKENS),
                  modules=min(modules, facts.MAX_SPEC_TOKENS))
