"""Efficiency (e), a measurement and never a verdict: tokens a perfect prefix cache could reuse vs tokens hit. No vLLM import.

The tally (``Efficiency``, in a result's JSON) and a request's own read limit;
the oracle that fills them is ``efficiency_oracle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Efficiency:
    """Per stream: prompt tokens, tokens a perfect prefix cache could reuse, tokens hit."""

    prompt_tokens: int = 0
    reusable_tokens: int = 0  # sum over first admissions of min(LCP with computed KV, prompt-1)
    hit_tokens: int = 0  # local prefix-cache hit at first admission
    external_tokens: int = 0  # connector-provided tokens at first admission
    admissions: int = 0
    readmissions: int = 0  # after preemption
    preempted_recomputed: int = 0  # tokens recomputed after preemption beyond the re-hit

    @property
    def recomputed_fraction(self) -> float:
        """Fraction of the shared-prefix tokens that were recomputed (0: perfect reuse)."""
        if self.reusable_tokens == 0:
            return 0.0
        return max(0.0, 1.0 - (self.hit_tokens + self.external_tokens) / self.reusable_tokens)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["recomputed_fraction"] = round(self.recomputed_fraction, 6)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Efficiency":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def read_limit(req: Any) -> int | None:
    """The prefix a request lets the cache give it, by its own settings (None: unbounded): 0.34's
    ``prefix_cache_hit_limit`` (prompt logprobs read the cache up to their first scored row,
    ``Request.get_prefix_cache_hit_limit``); before, 0 when it skips prefix-cache reads
    (``Request.get_skip_reading_prefix_cache``, prompt logprobs' default)."""
    if hasattr(req, "get_prefix_cache_hit_limit"):
        return req.prefix_cache_hit_limit
    skip = getattr(req, "get_skip_reading_prefix_cache", None)
    return 0 if skip is not None and skip() else None
