"""The one argument-parser base, the shared flags and the one error printer of every command.

Every usage or input error is one line on stderr and exit code 2, never a
traceback (kvproof.errors.KvproofError carries the line).

``--vllm`` and the tier flag are defined here once (:func:`add_vllm`, :func:`add_tier`);
every parser calls them, and each action they add carries ``SHARED`` (the
parser-walking test in tests/unit/test_cli_shared_flags.py fails on a hand-rolled one).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Sequence

from kvproof.errors import KvproofError, UsageError
from kvproof.verdicts import Tier

EXIT_USAGE = 2

# Set on every action add_vllm / add_tier add: "vllm" or "tier".
SHARED = "kvproof_shared"
# The tiers a command can run (MODEL is the proof's, never run); a command names its subset.
RUN_TIERS = (Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER, Tier.ENGINE)
ALL = "all"


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def print_error(prog: str, err: BaseException) -> None:
    """One line: ``kvproof check: <message>``; multi-line messages are folded."""
    text = " ".join(str(err).split()) or type(err).__name__
    if not text.startswith(prog):
        text = f"{prog}: {text}"
    sys.stderr.write(text[:2000] + "\n")


def guarded(prog: str, body: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None) -> int:
    """Run a command body; KvproofError -> one line + its exit code."""
    try:
        return body(argv)
    except KvproofError as err:
        print_error(prog, err)
        return err.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130


def add_vllm(parser: argparse.ArgumentParser, *, many: bool = True, default: Any = None,
             required: bool = False, help: str | None = None, metavar: str = "RELEASE") -> argparse.Action:
    """``--vllm RELEASE``: repeatable (a list, ``many``) or one value; the one definition of it."""
    action = parser.add_argument("--vllm", action="append" if many else "store", default=default,
                                 required=required, metavar=metavar, help=help)
    setattr(action, SHARED, "vllm")
    return action


def add_skips(parser: argparse.ArgumentParser, skips: dict[Tier, str]) -> None:
    """``--no-<tier>`` for each tier of ``skips`` (tier -> help): drop it from the chosen tiers."""
    for tier, text in sorted(skips.items()):
        parser.add_argument(f"--no-{tier}", dest=f"no_{tier}", action="store_true", help=text)


def skipped(args: argparse.Namespace, tiers: Sequence[Tier]) -> set[Tier]:
    """The tiers of ``tiers`` whose ``--no-<tier>`` flag ``args`` holds."""
    return {t for t in tiers if getattr(args, f"no_{t}", False)}


class _TierAction(argparse.Action):
    """Parses ``--tier`` values into Tiers: names of ``choices`` (or ``all``), comma-separated
    and repeatable when ``many`` (a tuple in ladder order), else one name (a Tier)."""

    def __init__(self, option_strings, dest, *, tiers: tuple[Tier, ...], many: bool,
                 refused: dict[Tier, str], base: Any, **kw):
        super().__init__(option_strings, dest, **kw)
        self.tiers, self.many, self.refused, self.base = tiers, many, refused, base

    def __call__(self, parser, namespace, values, option_string=None):
        names = {str(t): t for t in self.tiers}
        say = ", ".join(names) + (f" or {ALL}" if self.many else "")
        words = [w.strip() for w in str(values).split(",")] if self.many else [str(values).strip()]
        chosen: list[Tier] = []
        for word in words:
            if self.many and word == ALL:
                chosen.extend(self.tiers)
                continue
            if word not in names:
                hint = next((why for t, why in self.refused.items() if str(t) == word), None)
                raise argparse.ArgumentError(self, hint or f"{word!r} is not a tier (say {say})")
            chosen.append(names[word])
        if not self.many:
            setattr(namespace, self.dest, chosen[0])
            return
        before = getattr(namespace, self.dest, None)
        if before is self.base:  # the first --tier of a parse replaces the default; later ones add
            before = None
        setattr(namespace, self.dest, tuple(sorted(set(before or ()) | set(chosen))))


def add_tier(parser: argparse.ArgumentParser, tiers: Sequence[Tier] = RUN_TIERS, *, many: bool = True,
             default: Any = None, refused: dict[Tier, str] | None = None, help: str = "") -> argparse.Action:
    """``--tier``, the one spelling of a tier choice.

    ``many``: repeatable and comma-separated (``--tier function,manager --tier consumer``), ``all``
    for every one of ``tiers``; the value is a tuple of Tiers in ladder order (``default`` when not
    given). Else one tier name; the value is a Tier. A name outside ``tiers`` is a usage error
    (one line, exit 2); ``refused`` gives the line for a tier the command knows but does not run."""
    tiers = tuple(sorted(tiers))
    default = tuple(sorted(default)) if many and default is not None else default
    names = ", ".join(str(t) for t in tiers)
    if many:
        text = f"tiers to run, repeatable or comma-separated: {names} or {ALL}"
    else:
        text = f"the tier: {names}"
    if default is not None:
        shown = (ALL if tuple(default) == tiers else ",".join(str(t) for t in default)) if many else str(default)
        text += f" (default {shown})"
    common = {"dest": "tier", "tiers": tiers, "many": many, "refused": dict(refused or {}), "base": default,
              "metavar": "TIER"}
    action = parser.add_argument("--tier", action=_TierAction, default=default,
                                 help=text + (f"; {help}" if help else ""), **common)
    setattr(action, SHARED, "tier")
    return action

