"""Turn a vLLM ``block_sizes=[...], hash_block_size=N`` log line into the configurations that print it.

The coordinator's assertion prints group block sizes and the hash block size,
not which groups are Mamba, the Mamba mode, prefix caching or a connector.
``candidates`` enumerates every choice a user could have made (which block
size is the model's one Mamba block size, if any; each Mamba mode the release
accepts; prefix caching on or off; a KV connector or none; prefix_match_unit
when the hash is neither the GCD nor the LCM), ``run`` sends them through
each installed release's real resolver and KVCacheManager, and ``Explanation``
lists per release which choices print exactly the line. "Ambiguous" when
choices a user would set differently print the same line.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Sequence

from kvproof.errors import UsageError
from kvproof.inputs.layout import Layout
from kvproof import facts
from kvproof.spec import premise
from kvproof.revisions import not_expressible, revision_for

_PATTERN = re.compile(r"block_sizes=\[([\d,\s]+)\],\s*hash_block_size=(\d+)")
MAX_DISTINCT = 6  # distinct block sizes a line may carry (each may be the Mamba one)


def parse(line: str) -> tuple[list[int], int]:
    m = _PATTERN.search(line)
    if not m:
        raise UsageError("explain: no 'block_sizes=[...], hash_block_size=N' in the given line")
    try:
        sizes = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
        hash_size = int(m.group(2))
    except ValueError:  # digits past Python's integer-string limit
        raise UsageError("explain: block sizes too large to be vLLM block sizes") from None
    if not sizes or min(sizes) < 1 or hash_size < 1:
        raise UsageError("explain: block sizes and hash_block_size must be positive integers")
    if len(sizes) > 64 or len(set(sizes)) > MAX_DISTINCT:
        raise UsageError(f"explain: at most 64 groups and {MAX_DISTINCT} distinct block sizes are explained")
    return sizes, hash_size


@dataclass(frozen=True)
class Choice:
    """What a user would have set, and the Layout it gives."""

    mamba_block_size: int | None
    mamba_cache_mode: str | None
    prefix_caching: bool
    connector: bool
    prefix_match_unit: int | None
    layout: Layout

    def settings(self) -> tuple:
        """The user-facing part (block sizes aside): two choices differing here are told apart by a user."""
        return (self.mamba_cache_mode, self.prefix_caching, self.connector, self.prefix_match_unit)

    def describe(self) -> str:
        parts = [f"Mamba block {self.mamba_block_size}, mamba_cache_mode={self.mamba_cache_mode}"
                 if self.mamba_block_size else "no Mamba group",
                 "prefix caching " + ("on" if self.prefix_caching else "off"),
                 f"connector {facts.DEFAULT_CONNECTOR}" if self.connector else "no connector"]
        if self.prefix_match_unit:
            parts.append(f"prefix_match_unit={self.prefix_match_unit}")
        return ", ".join(parts)


def candidates(sizes: Sequence[int], hash_size: int, release: str) -> list[Choice]:
    """Every choice that can give these group block sizes on ``release`` (inside the engine premise)."""
    revision = revision_for(release)
    gcd, lcm = math.gcd(*sizes), math.lcm(*sizes)
    pmus = [None] + ([hash_size] if hash_size not in (gcd, lcm) else [])
    out = []
    for mamba_bs in [None] + sorted(set(sizes)):
        modes: tuple[str | None, ...] = facts.MAMBA_MODES[revision] if mamba_bs else (None,)
        if mamba_bs is not None and len(set(sizes)) == 1 and len(sizes) > 1:
            continue  # several groups of one spec is one group (spec/premise.py)
        for mode, caching, connector, pmu in itertools.product(modes, (True, False), (False, True), pmus):
            groups = [{"kind": "mamba" if s == mamba_bs else "full_attention", "block_size": s} for s in sizes]
            if mamba_bs is None and len(set(sizes)) > 1 and len(sizes) > 1:
                # attention-only groups of several sizes: sliding-window groups beside full attention
                groups = [dict(g, kind="full_attention" if s == max(sizes) else "sliding_window")
                          for g, s in zip(groups, sizes)]
            cache = {"enable_prefix_caching": caching, "prefix_match_unit": pmu}
            if mode is not None:
                cache["mamba_cache_mode"] = mode
            layout = Layout.from_dict({"groups": groups, "cache": cache,
                                       "kv_connector": facts.DEFAULT_CONNECTOR if connector else None,
                                       "max_model_len": max(max(sizes), 2048) if mode != "none" else mamba_bs})
            if not_expressible(layout, revision) or premise.derivable(layout, revision):
                continue  # no engine derives it (the fact is named by spec/premise.py)
            if not (caching or connector) and pmu is not None:
                continue
            out.append(Choice(mamba_bs, mode, caching, connector, pmu, layout))
    return out


@dataclass
class ReleaseAnswer:
    release: str
    tried: int
    reproducing: list[Choice] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    examples: list = field(default_factory=list)  # per reproducing choice: a derivation-table row or None

    @property
    def ambiguous(self) -> bool:
        return len({c.settings() for c in self.reproducing}) > 1


def printed(outcome, sizes: Sequence[int], hash_size: int) -> bool:
    """Did real vLLM print exactly this line (in the manager's or resolver's error)?"""
    needle = f"block_sizes={list(sizes)}, hash_block_size={hash_size}"
    return any(err is not None and needle in err.message for err in (outcome.manager_error, outcome.resolver_error))


def derived_example(choice: Choice, release: str):
    """A measured Config (spec/derived/) with the choice's settings whose real derivation and
    resolver give a group the hash does not divide: the same failure class reached by a real model.
    Reference architectures under vllm serve flags (spec/derived/models/) first, then tiny families."""
    from kvproof import derivation

    for row in derivation.load_model_table(release) + derivation.load_table(release):
        lay, h = row.layout, row.hash_block_size
        if lay is None or not h:
            continue
        same = (lay.cache.enable_prefix_caching == choice.prefix_caching
                and (lay.kv_connector is not None) == choice.connector
                and lay.has_mamba == (choice.mamba_block_size is not None)
                and (not lay.has_mamba or lay.cache.mamba_cache_mode == choice.mamba_cache_mode))
        if same and any(g.block_size % h for g in lay.groups if g.prefix_cacheable is not False):
            return row
    return None


def explain(line: str, envs_to_run: Sequence) -> tuple[list[int], int, list[ReleaseAnswer]]:
    """Every choice, through every given environment's real vLLM; the ones that print ``line``."""
    from kvproof.tiers import client

    sizes, hash_size = parse(line)
    answers = []
    workers = client.start(envs_to_run)
    try:
        for w in workers:
            release = w.info["vllm"].split("+")[0]
            choices = candidates(sizes, hash_size, release)
            outcomes = client.outcomes(w, [c.layout for c in choices]) if choices else []
            ans = ReleaseAnswer(release, len(choices))
            for c, o in zip(choices, outcomes):
                if printed(o, sizes, hash_size):
                    ans.reproducing.append(c)
                    ans.messages.append((o.manager_error or o.resolver_error).line())
                    ans.examples.append(derived_example(c, release))
            answers.append(ans)
    finally:
        for w in workers:
            w.close()
    return sizes, hash_size, answers
