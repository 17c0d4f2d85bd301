"""Start-up check of the vLLM APIs an in-environment harness relies on. No vLLM import.

A harness (the consumer harness, its spies and fake worker; the bridge; the
derive step) calls vLLM by signature: it builds objects with keyword
arguments, wraps methods and calls them back. When a release changes one of
those signatures the harness breaks, and an exception raised there must never
read as a vLLM bug. So each harness lists what it needs as ``Need`` rows and
checks them against the installed release with ``inspect.signature`` before
its first run; a mismatch is one line naming the kvproof frame that relies on
the API and the vLLM API that changed (the run is then a harness error, ERROR,
never FAIL).

    problems = check([Need("kvproof/consumer/spies.py:spy_lookups",
                           KVCacheManager.get_computed_blocks, positional=("request",))])
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Sequence

_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


@dataclass(frozen=True)
class Need:
    """What ``frame`` (kvproof ``file:function``) needs of the vLLM callable ``api``.

    - ``provides``: the keyword arguments the frame may pass; every required parameter of
      ``api`` must be among them (the frame passes only those ``api`` accepts, by introspection);
    - ``accepts_any``: at least one of these names must be a parameter (or ``**kwargs``);
    - ``accepts_all``: every one of these names must be a parameter (or ``**kwargs``);
    - ``positional``: ``api`` is called with these positional arguments first (after ``self``);
      unless ``forwards`` (a spy that passes on whatever else vLLM's caller gives), nothing else
      may be required;
    - ``takes``: vLLM calls kvproof's wrapper of ``api`` the way it calls ``api``, so ``api`` may
      have at most this many positional parameters (a wrapper ``lookup(request)`` broke on 0.33's
      ``get_computed_blocks(request, max_cache_hit_length)``).
    """

    frame: str
    api: Any
    provides: Sequence[str] | None = None
    accepts_any: Sequence[str] = ()
    accepts_all: Sequence[str] = ()
    positional: Sequence[str] | None = None
    forwards: bool = False
    takes: int | None = None  # positional arguments the kvproof wrapper of ``api`` accepts (None: any)

    def problem(self) -> str | None:
        """One line when ``api`` does not fit, else None."""
        name = api_name(self.api)
        try:
            sig = inspect.signature(self.api)
        except (TypeError, ValueError) as err:
            return f"{self.frame} relies on {name}, which has no readable signature ({err})"
        params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
        named = {p.name for p in params if p.kind not in _VAR}
        var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)
        var_pos = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
        required = [p.name for p in params if p.kind not in _VAR and p.default is inspect.Parameter.empty]
        shown = f"{name}{sig}"
        if self.provides is not None:
            missing = [r for r in required if r not in self.provides]
            if missing:
                return f"{self.frame}: {shown} requires {', '.join(missing)}, which kvproof does not pass"
        if self.accepts_any and not var_kw and not any(n in named for n in self.accepts_any):
            return f"{self.frame}: {shown} takes none of {', '.join(self.accepts_any)}"
        lost = [n for n in self.accepts_all if n not in named]
        if lost and not var_kw:
            return f"{self.frame}: {shown} no longer takes {', '.join(lost)}"
        if self.positional is not None:
            pos = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                   inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            n = len(self.positional)
            if len(pos) < n and not var_pos:
                return f"{self.frame}: {shown} takes fewer than {n} positional arguments ({', '.join(self.positional)})"
            if self.takes is not None and len(pos) > self.takes and not var_pos:
                return (f"{self.frame}: {shown} takes {len(pos)} positional arguments, kvproof's wrapper "
                        f"{self.takes}")
            extra = [r for r in required if r not in {p.name for p in pos[:n]}]
            if extra and not self.forwards:
                return f"{self.frame}: {shown} also requires {', '.join(extra)}, which kvproof does not pass"
        return None


def api_name(api: Any) -> str:
    mod = getattr(api, "__module__", None) or ""
    return f"{mod}.{getattr(api, '__qualname__', repr(api))}" if mod else getattr(api, "__qualname__", repr(api))


def check(needs: Sequence[Need]) -> list[str]:
    """The problems of ``needs`` on the installed release, one line each (empty: compatible)."""
    return [p for p in (n.problem() for n in needs) if p is not None]


def first_problem(needs: Sequence[Need]) -> str | None:
    got = check(needs)
    if not got:
        return None
    more = f" (and {len(got) - 1} more)" if len(got) > 1 else ""
    return f"harness incompatible with this vLLM: {got[0]}{more}"


def kwargs_for(fn: Any, **candidates: Any) -> dict[str, Any]:
    """The ``candidates`` that ``fn`` accepts by name (a release's signature decides)."""
    params = _parameters(fn)
    return {k: v for k, v in candidates.items() if k in params}


@functools.lru_cache(maxsize=1024)
def _parameters(fn: Any) -> frozenset[str]:
    """A callable's parameter names, read once: a campaign asks for the same few constructors
    thousands of times (inspect.signature was 5% of a consumer campaign's time on 0.33.0)."""
    return frozenset(inspect.signature(fn).parameters)
