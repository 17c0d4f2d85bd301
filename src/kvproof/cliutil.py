"""The one argument-parser base and the one error printer of every command.

Every usage or input error is one line on stderr and exit code 2, never a
traceback (kvproof.errors.KvproofError carries the line).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from kvproof.errors import KvproofError, UsageError

EXIT_USAGE = 2


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
