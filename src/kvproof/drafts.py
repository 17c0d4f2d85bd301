"""Speculative decoding in a stream: the method, the draft length and how drafts are judged. Stdlib only.

An input type, below :mod:`kvproof.stream` and :mod:`kvproof.layout` (the consumer tier's
``kvproof.consumer.drafts`` re-exports it and adds ``effective_drafts``).

JSON (the stream's ``"spec"`` field)::

    {"method": "eagle3", "k": 2, "accept": "seeded", "p": 0.5, "seed": 7}
    {"method": "mtp", "k": 3, "modules": 3}

``modules`` (MTP only) is the target's number of MTP modules, its
``num_nextn_predict_layers``: real models ship one (DeepSeek-V3, GLM-4.5,
Qwen3-Next) or several, and 0.33 hashes ``num_speculative_tokens`` tokens past
each block once several modules draft (``VllmConfig.num_prefill_lookahead_tokens``,
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
_KEYS = {"method", "k", "accept", "p", "seed", "modules"}


def output_token(position: int) -> int:
    """The target model's token at ``position`` (1..VOCAB-1; never 0)."""
    return 1 + (position * 7 + 3) % (VOCAB - 1)


def wrong_token(position: int) -> int:
    """A draft token the target rejects at ``position``."""
    return 1 + (output_token(position) % (VOCAB - 2))


@dataclass(frozen=True)
class Drafts:
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

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"method": self.method, "k": self.k, "accept": self.accept}
        if self.accept == "seeded":
            d.update(p=self.p, seed=self.seed)
        if self.modules > 1:
            d["modules"] = self.modules
        return d

    def label(self) -> str:
        acc = f"seeded p={self.p} seed={self.seed}" if self.accept == "seeded" else self.accept
        mods = f" modules={self.modules}" if self.modules > 1 else ""
        return f"{self.method} k={self.k}{mods} accept={acc}"


def parse_drafts(data: Any, where: str = "spec") -> Drafts | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise LayoutError(f"{where} must be an object, got {type(data).__name__}")
    bad = sorted(set(data) - _KEYS)
    if bad:
        raise LayoutError(f"{where} has unknown field {bad[0]!r} (allowed: {', '.join(sorted(_KEYS))})")
    method = data.get("method", "ngram")
    if method not in facts.SPEC_METHODS:
        raise LayoutError(f"{where}.method must be one of {', '.join(facts.SPEC_METHODS)}, got {json.dumps(method)[:40]}")
    k = data.get("k", 1)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= facts.MAX_SPEC_TOKENS:
        raise LayoutError(f"{where}.k must be an integer in [1, {facts.MAX_SPEC_TOKENS}], got {json.dumps(k)[:40]}")
    accept = data.get("accept", "all")
    if accept not in facts.SPEC_ACCEPT:
        raise LayoutError(f"{where}.accept must be one of {', '.join(facts.SPEC_ACCEPT)}, got {json.dumps(accept)[:40]}")
    p = data.get("p", 0.5)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise LayoutError(f"{where}.p must be a number in [0, 1], got {json.dumps(p)[:40]}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 32:
        raise LayoutError(f"{where}.seed must be an integer in [0, 2^32), got {json.dumps(seed)[:40]}")
    modules = data.get("modules", 1)
    if isinstance(modules, bool) or not isinstance(modules, int) or not 1 <= modules <= facts.MAX_SPEC_TOKENS:
        raise LayoutError(f"{where}.modules must be an integer in [1, {facts.MAX_SPEC_TOKENS}], "
                          f"got {json.dumps(modules)[:40]}")
    if modules > 1 and method != "mtp":
        raise LayoutError(f"{where}.modules is the target's MTP modules: method mtp only, got {method}")
    return Drafts(method, k, accept, float(p), seed, modules)
