"""The run's oracles as one listener: each report goes to the oracles that judge it. No vLLM import.

The ids, hard or soft, are ``kvproof.oracle_ids``; each oracle is a plug-in
(``kvproof.consumer.oracle.Oracle``) in its own module: ``hit_oracle``
(prefix_hit, spec_hit), ``shadow`` and ``coord_oracle`` (prefix_hit),
``chain_oracle`` (hash_chain), ``connector_oracle`` (connector),
``event_oracle`` and ``removal_oracle`` (kv_event), ``efficiency_oracle``
(the measurement). Exceptions (``failures``), a stalled stream (``driver``)
and a frontend's hashes (``frontend``) are recorded where they happen.

``Oracles`` keeps no oracle state: the ground truth is the ``RunContext``'s,
the rest each oracle's own. Each hook is bound once, at construction, to the
oracles overriding it (one: its bound method itself), so a report costs no
call more than one to the oracle that judges it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence, TypeVar

from kvproof.consumer.chain_oracle import ChainOracle
from kvproof.consumer.connector_oracle import ConnectorOracle
from kvproof.consumer.coord_oracle import CoordOracle
from kvproof.consumer.efficiency import Efficiency  # noqa: F401  (re-exported: result, judge, tests)
from kvproof.consumer.efficiency_oracle import EfficiencyOracle
from kvproof.consumer.event_oracle import EventOracle
from kvproof.consumer.hit_oracle import HitOracle
from kvproof.consumer.observations import MAX_OBS_PER_ORACLE, Observation, Recorder  # noqa: F401  (re-exported)
from kvproof.consumer.oracle import HOOKS, Oracle, RunContext

T = TypeVar("T", bound=Oracle)


def standard(ctx: RunContext, rec: Recorder) -> list[Oracle]:
    """The oracles every run has, in the order they hear a report (none needs a vLLM object;
    ``wiring`` adds the shadow and the BlockRemoved oracle after them)."""
    return [HitOracle(ctx, rec), EfficiencyOracle(ctx, rec), ChainOracle(ctx, rec), ConnectorOracle(ctx, rec),
            EventOracle(ctx, rec), CoordOracle(ctx, rec)]


def _fan(fns: list[Callable[..., None]]) -> Callable[..., None]:
    if len(fns) == 1:
        return fns[0]

    def every(*args: Any) -> None:
        for f in fns:
            f(*args)
    return every


class Oracles:
    """The run's oracles (``plugins``) and their shared ``ctx``; one method per report."""

    def __init__(self, ctx: RunContext, plugins: Iterable[Oracle]) -> None:
        self.ctx = ctx
        self.plugins = list(plugins)
        for hook in HOOKS:
            base = getattr(Oracle, hook)
            setattr(self, "_" + hook if hook == "stepped" else hook,
                    _fan([getattr(p, hook) for p in self.plugins if getattr(type(p), hook) is not base]))

    @classmethod
    def of(cls, ctx: RunContext, rec: Recorder, extra: Sequence[Oracle] = ()) -> "Oracles":
        """The standard oracles of ``ctx``, then ``extra``."""
        return cls(ctx, standard(ctx, rec) + list(extra))

    def find(self, kind: type[T]) -> T:
        """The run's oracle of class ``kind``."""
        return next(p for p in self.plugins if isinstance(p, kind))

    # reports that change the ground truth first
    def admit(self, rid: str, req: Any, prompt: list[int]) -> None:
        self.ctx.admit(rid, req, prompt)

    def allocated(self, request: Any, extra: int) -> None:
        self.ctx.allocated(request, extra)

    def stepped(self, rids: Iterable[str]) -> None:
        """The model runner's output was applied: the scheduled requests' tokens are computed."""
        for rid in rids:
            req = self.ctx.computed(rid)
            if req is not None:
                self._stepped(req)
