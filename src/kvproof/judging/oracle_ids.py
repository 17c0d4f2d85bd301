"""The registry of oracle ids: one enum, each id hard (an observation fails the run) or soft. Standard library only.

An observation carries the id's value (``Observation.oracle``), a judged one
the check ``oracle:<id>`` (``OracleId.check``: the StageError type and the
ledger's class key, so the values never change). ``kvproof.judging.judge`` reads
hard and soft here, and an id not registered is an error
(``UnknownOracle``), never an observation that silently fails nothing.
Adding an oracle: one member here, and its module ``kvproof.consumer.<name>_oracle``
(a ``kvproof.consumer.oracle.Oracle`` subclass with ``ids`` and an ``order``, found
by ``kvproof.consumer.oracles.standard``); nothing else (docs/recipes.md).
"""

from __future__ import annotations

from enum import Enum

HARD, SOFT = True, False
CHECK_PREFIX = "oracle:"  # a judged observation's StageError type: CHECK_PREFIX + id


class UnknownOracle(ValueError):
    """An oracle id no member of ``OracleId`` names."""


class OracleId(str, Enum):
    """(value, hard, what it watches, the module that judges it). Equal to, hashed and formatted as its value."""

    hard: bool
    summary: str

    def __new__(cls, value: str, hard: bool, summary: str) -> "OracleId":
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.hard, obj.summary = hard, summary
        return obj

    __hash__ = str.__hash__  # a plain str and its member find each other in sets and dicts

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def check(self) -> str:
        """The StageError type of a judged observation, the ledger's ``check``."""
        return CHECK_PREFIX + self.value

    EXCEPTION = ("exception", HARD, "(a) real vLLM raised on some step (type, message, frame): consumer.failures")
    PREFIX_HIT = ("prefix_hit", HARD, "(b) a hit past the common prefix with computed KV, or off the promised "
                  "alignment: hit_oracle; a block behind a hit holding other tokens (shadow-*): shadow; the "
                  "hybrid coordinator's groups disagreeing on its reconciled hit (coord-*): coord_oracle")
    HASH_CHAIN = ("hash_chain", HARD, "(b) Request.block_hashes disagree with the request's tokens: chain_oracle; "
                  "the engine's use of a frontend's hashes (frontend-*): consumer.frontend")
    CONNECTOR = ("connector", HARD, "(c) a connector's hash names no real prefix, another request's, or ends off "
                 "its group's block boundary; or a claim past the true prefix: connector_oracle")
    KV_EVENT = ("kv_event", HARD, "(d) a BlockStored event disagrees with its blocks: event_oracle; an entry left "
                "the prefix cache without a BlockRemoved, or one never announced was withdrawn: removal_oracle")
    SPEC_HIT = ("spec_hit", HARD, "(b) under an EAGLE-family drafter, a hit kept the unit drop_eagle_block makes "
                "the drafter recompute: hit_oracle")
    EFFICIENCY = ("efficiency", SOFT, "(e) measurement only: tokens reusable in principle vs hit: efficiency_oracle")
    STALLED = ("stalled", SOFT, "the stream did not finish in the step budget (a harness limit, ERROR): "
               "consumer.driver")
    IDEAL = ("ideal", SOFT, "a hit no oracle faults above kvproof's own ideal (a bug in judge.ideal_hit, "
             "ERROR): kvproof.judging.judge")
    PREFIX_CACHING_OUTPUT = ("prefix_caching_output", HARD, "engine tier: served output with prefix caching "
                             "differs from without: tiers.classify")


def oracle_id(value: str) -> OracleId:
    """The registered id named ``value``; ``UnknownOracle`` for any other."""
    try:
        return OracleId(value)
    except ValueError:
        raise UnknownOracle(f"oracle id {value!r} is not registered in kvproof.judging.oracle_ids") from None


def is_hard(value: str) -> bool:
    """Whether an observation of ``value`` fails a run (``UnknownOracle`` if not registered)."""
    return oracle_id(value).hard


HARD_IDS = frozenset(o.value for o in OracleId if o.hard)
SOFT_IDS = frozenset(o.value for o in OracleId if not o.hard)
