"""Speculative decoding in a run: how the target accepts drafts, and the drafts a run makes. Stdlib only.

An input type, below :mod:`kvproof.inputs.stream` and :mod:`kvproof.inputs.layout` (the consumer tier's
``kvproof.consumer.drafts`` re-exports it and adds ``effective_drafts``). Speculation is recorded
once: the Layout's ``speculative`` says which method drafts how many tokens (``SpeculativeConfig
.method``, ``num_speculative_tokens``; for MTP the target's modules), the stream's ``accept`` says
how the target judges them (:class:`Acceptance`, JSON ``{"mode": "seeded", "p": 0.5, "seed": 7}``,
absent: every draft accepted). :class:`Drafts` is a run's view of the two together, never stored.

MTP modules are the target's ``num_nextn_predict_layers``: real models ship one (DeepSeek-V3,
GLM-4.5, Qwen3-Next) or several, and 0.33 hashes ``num_speculative_tokens`` tokens past each block
once several modules draft (``VllmConfig.num_prefill_lookahead_tokens``,
``SpeculativeConfig.use_multi_module_mtp``), one otherwise.

The fake model runner (``kvproof.consumer.runner``) is a deterministic
target model: the token at position ``i`` is ``output_token(i)`` whatever
was drafted. A draft proposes ``k`` tokens after each sampled token; an
accepted draft token is the target's own token, a rejected one differs, and
the target's token at the first rejected position is the bonus token. So
the final token sequence of a request is the same under every method,
acceptance pattern and release: only what the KV cache does with it differs.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from kvproof.errors import LayoutError
from kvproof import facts

VOCAB = 30000
_ACCEPT_KEYS = {"mode", "p", "seed"}


def output_token(position: int) -> int:
    """The target model's token at ``position`` (1..VOCAB-1; never 0)."""
    return 1 + (position * 7 + 3) % (VOCAB - 1)


def wrong_token(position: int) -> int:
    """A draft token the target rejects at ``position``."""
    return 1 + (output_token(position) % (VOCAB - 2))


@dataclass(frozen=True)
class Acceptance:
    """How the target judges drafts (a stream's part of speculation): every draft, none, or each
    with probability ``p`` from ``seed`` (deterministic: same stream, same answer)."""

    mode: str = "all"
    p: float = 0.5
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"mode": self.mode}
        if self.mode == "seeded":
            d.update(p=self.p, seed=self.seed)
        return d

    def label(self) -> str:
        return f"seeded p={self.p} seed={self.seed}" if self.mode == "seeded" else self.mode


ALL = Acceptance()


@dataclass(frozen=True)
class Drafts:
    """A run's drafts: the Layout's method, draft length and MTP modules under the stream's
    acceptance (``kvproof.consumer.drafts.effective_drafts`` puts them together). Never stored."""

    method: str = "ngram"
    k: int = 1
    accept: str = "all"
    p: float = 0.5
    seed: int = 0
    modules: int = 1  # MTP modules of the target (num_nextn_predict_layers); 1 for other methods

    @property
    def eagle(self) -> bool:
        """An EAGLE-family method (``SpeculativeConfig.use_eagle()``)."""
        return self.method in facts.EAGLE_METHODS

    def accepted(self, rid: str, num_tokens: int, proposed: int) -> int:
        """How many of ``proposed`` drafts the target accepts for request ``rid`` whose
        sequence is ``num_tokens`` long (deterministic: same stream, same answer)."""
        if self.accept == "all":
            return proposed
        if self.accept == "none":
            return 0
        rng = random.Random(f"{self.seed}:{rid}:{num_tokens}")
        n = 0
        while n < proposed and rng.random() < self.p:
            n += 1
        return n

    def proposal(self, rid: str, num_tokens: int) -> list[int]:
        """The ``k`` draft tokens proposed after a sequence of ``num_tokens`` tokens."""
        good = self.accepted(rid, num_tokens, self.k)
        return [output_token(num_tokens + j) if j < good else wrong_token(num_tokens + j)
                for j in range(self.k)]

    @classmethod
    def of(cls, method: str, k: int, modules: int, acceptance: Acceptance) -> Drafts:
        return cls(method, k, acceptance.mode, acceptance.p, acceptance.seed, modules)

    @property
    def acceptance(self) -> Acceptance:
        return Acceptance(self.accept, self.p, self.seed) if self.accept == "seeded" else Acceptance(self.accept)

    def label(self) -> str:
        mods = f" modules={self.modules}" if self.modules > 1 else ""
        return f"{self.method} k={self.k}{mods} accept={self.acceptance.label()}"


def parse_acceptance(data: Any, where: str = "accept") -> Acceptance:
    """A stream's ``accept`` object (absent: every draft accepted)."""
    if data is None:
        return ALL
    if not isinstance(data, dict):
        raise LayoutError(f"{where} must be an object, got {type(data).__name__}")
    bad = sorted(set(data) - _ACCEPT_KEYS)
    if bad:
        raise LayoutError(f"{where} has unknown field {bad[0]!r} (allowed: {', '.join(sorted(_ACCEPT_KEYS))})")
    mode = data.get("mode", "all")
    if mode not in facts.SPEC_ACCEPT:
        raise LayoutError(f"{where}.mode must be one of {', '.join(facts.SPEC_ACCEPT)}, got {json.dumps(mode)[:40]}")
    p = data.get("p", 0.5)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise LayoutError(f"{where}.p must be a number in [0, 1], got {json.dumps(p)[:40]}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 32:
        raise LayoutError(f"{where}.seed must be an integer in [0, 2^32), got {json.dumps(seed)[:40]}")
    return Acceptance(mode, float(p), seed) if mode == "seeded" else Acceptance(mode)
