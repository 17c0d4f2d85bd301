"""Speculative decoding in the consumer tier: the drafts a run makes (:func:`effective_drafts`),
from the Layout's speculation and the stream's acceptance (:mod:`kvproof.inputs.drafts`, an input type
below the Layout, re-exported here)."""

from __future__ import annotations

from typing import Any

from kvproof.inputs.drafts import ALL, VOCAB, Acceptance, Drafts, output_token, wrong_token  # noqa: F401
from kvproof.errors import Unchecked
from kvproof import facts


def effective_drafts(layout: Any, stream: Any) -> Drafts | None:
    """What drafts a run makes: the Layout's speculative method (the engine's: from a derivation,
    a log line or a generated input), its length capped at ``facts.MAX_SPEC_TOKENS``, under the
    stream's acceptance (None: all accepted). A method the consumer tier does not draft for
    (facts.SPEC_METHODS: suffix, medusa, ...) is UNCHECKED; one a release lacks is that
    release's NOT_EXPRESSIBLE (``drafters.build``)."""
    spec = getattr(layout, "speculative", None)
    if spec is None:
        return None
    if spec.method not in facts.SPEC_METHODS:
        raise Unchecked(f"speculative method {spec.method}: kvproof's consumer tier drafts for "
                        f"{', '.join(facts.SPEC_METHODS)} only (lifted by a drafter for it in "
                        f"kvproof.consumer.drafters)")
    return drafts_of(spec, ALL if stream is None else stream.accept)


def drafts_of(spec: Any, accept: Acceptance) -> Drafts:
    """The drafts a Layout's ``speculative`` makes under ``accept``: its length and (MTP only) its
    modules capped at ``facts.MAX_SPEC_TOKENS``, whatever the method (``effective_drafts`` adds the
    check that the consumer tier drafts for it)."""
    modules = int(spec.mtp_modules or 1) if spec.method == "mtp" else 1
    return Drafts.of(spec.method, min(spec.num_speculative_tokens, facts.MAX_SPEC_TOKENS),
                     min(modules, facts.MAX_SPEC_TOKENS), accept)


def draft_slots(layout: Any) -> int:
    """KV slots a request may hold past its tokens for drafts: the Layout's draft length, as
    :func:`effective_drafts` caps it (0 without speculation)."""
    spec = getattr(layout, "speculative", None)
    return 0 if spec is None else drafts_of(spec, ALL).k
