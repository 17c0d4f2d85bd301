"""The run's oracles as one listener: each report goes to the oracles that judge it. No vLLM import.

The ids, hard or soft, are ``kvproof.judging.oracle_ids``; each oracle is a plug-in
(``kvproof.consumer.oracle.Oracle``) in its own module: ``hit_oracle``
(prefix_hit, spec_hit), ``shadow`` and ``coord_oracle`` (prefix_hit),
``chain_oracle`` (hash_chain), ``connector_oracle`` (connector),
``event_oracle`` and ``removal_oracle`` (kv_event), ``efficiency_oracle``
(the measurement). Exceptions (``failures``), a stalled stream (``driver``)
and a frontend's hashes (``frontend``) are recorded where they happen.

The standard oracles are found, not listed: every ``Oracle`` subclass that a
module ``<name>_oracle`` of ``kvproof.consumer`` defines with an ``order`` of
its own (``standard_classes``, once per process). Adding one is its module and,
for a new id, its ``OracleId`` member; nothing else. Two with one ``order``, or
one without registered ids, is an ``OracleDiscoveryError`` at discovery.

``Oracles`` keeps no oracle state: the ground truth is the ``RunContext``'s,
the rest each oracle's own. Each hook is bound once, at construction, to the
oracles overriding it (one: its bound method itself), so a report costs no
call more than one to the oracle that judges it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any, Callable, Iterable, Sequence, TypeVar

from kvproof import VLLM_SIDE
from kvproof.consumer.efficiency import Efficiency  # noqa: F401  (re-exported: result, judge, tests)
from kvproof.consumer.observations import MAX_OBS_PER_ORACLE, Observation, Recorder  # noqa: F401  (re-exported)
from kvproof.consumer.oracle import HOOKS, Oracle, RunContext
from kvproof.judging.oracle_ids import OracleId

T = TypeVar("T", bound=Oracle)

PLUGIN_PACKAGE = "kvproof.consumer"
PLUGIN_SUFFIX = "_oracle"  # a plug-in module's name ends so


class OracleDiscoveryError(TypeError):
    """A standard oracle's declaration is wrong: an ``order`` two share, or ids not registered."""


def plugin_modules(package: str = PLUGIN_PACKAGE) -> list[str]:
    """The plug-in modules of ``package`` (names ending in ``_oracle``), sorted by name."""
    pkg = importlib.import_module(package)
    return sorted(f"{package}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)
                  if m.name.endswith(PLUGIN_SUFFIX) and not m.ispkg)


def declared(cls: type) -> bool:
    """Whether ``cls`` declares itself standard: an ``order`` set on its own class (not inherited)."""
    return vars(cls).get("order") is not None


def checked(classes: Iterable[type[Oracle]]) -> tuple[type[Oracle], ...]:
    """``classes`` in ascending ``order``; ``OracleDiscoveryError`` for an order that is no int or
    that two share, or ids that are empty or hold anything but ``OracleId`` members."""
    by_order: dict[int, type[Oracle]] = {}
    for cls in classes:
        where = f"{cls.__module__}.{cls.__qualname__}"
        order = cls.order
        if not isinstance(order, int) or isinstance(order, bool):
            raise OracleDiscoveryError(f"{where}: order {order!r} is not an int")
        ids = cls.ids
        if not isinstance(ids, tuple) or not ids or any(not isinstance(i, OracleId) for i in ids):
            raise OracleDiscoveryError(f"{where}: ids {ids!r} must be a non-empty tuple of OracleId members "
                                       "(kvproof.judging.oracle_ids)")
        other = by_order.setdefault(order, cls)
        if other is not cls:
            raise OracleDiscoveryError(f"{where}: order {order} is also {other.__module__}.{other.__qualname__}'s")
    return tuple(by_order[o] for o in sorted(by_order))


@functools.cache
def standard_classes(package: str = PLUGIN_PACKAGE) -> tuple[type[Oracle], ...]:
    """The standard oracle classes, in the order they hear a report: each ``Oracle`` subclass a
    plug-in module of ``package`` defines and declares standard (``declared``). Imports the
    plug-in modules once; a plug-in module imports no vLLM (it is never in ``VLLM_SIDE``)."""
    found = []
    for name in plugin_modules(package):
        if name in VLLM_SIDE:
            raise OracleDiscoveryError(f"{name}: a plug-in module imports no vLLM (it is in kvproof.VLLM_SIDE); "
                                       "an oracle needing a vLLM object is built by consumer.wiring")
        mod = importlib.import_module(name)
        found += [c for c in vars(mod).values() if isinstance(c, type) and issubclass(c, Oracle)
                  and c.__module__ == name and declared(c)]
    return checked(found)


def standard(ctx: RunContext, rec: Recorder) -> list[Oracle]:
    """The oracles every run has, in the order they hear a report (none needs a vLLM object;
    ``wiring`` adds the shadow and the BlockRemoved oracle after them)."""
    return [cls(ctx, rec) for cls in standard_classes()]


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
