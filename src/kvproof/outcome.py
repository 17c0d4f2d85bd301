"""The Outcome: what one vLLM release did with one Layout.

Produced by the bridge worker inside a vLLM environment (or by the Z3 model
evaluated concretely), consumed by the contracts. Plain JSON both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvproof import frames


@dataclass(frozen=True)
class StageError:
    """An exception a real vLLM stage raised, verbatim."""

    type: str
    message: str
    frame: str = ""  # "file:line in function" of the raising frame
    # a bare ``assert`` (AssertionError with no message): its condition, read from the raising
    # frame's source line in the release's own file (``bare_assert``); "" otherwise
    condition: str = ""
    caller: str = ""  # with a condition: the vLLM frame that called the raising one (file:line in function)

    def line(self) -> str:
        if self.condition and not self.message.strip():
            return f"{self.type}: assert {self.condition}"
        return f"{self.type}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        d = dict(self.__dict__)
        for k in ("condition", "caller"):  # the common case: the dict as before the fields existed
            if not d[k]:
                del d[k]
        return d


_ERRORS = ("resolver_error", "manager_error", "run_error")


@dataclass(frozen=True)
class Outcome:
    layout_hash: str
    vllm_version: str
    source: str = "vllm"  # "vllm" for the real code, "model:<revision>" for the Z3 model
    fingerprint: str = ""  # sha256 prefix of the installed resolver's source
    expressible: bool = True
    not_expressible: str = ""  # why the release cannot express the layout
    scheduler_block_size: int | None = None
    hash_block_size: int | None = None
    resolver_error: StageError | None = None
    manager_attempted: bool = False
    manager_error: StageError | None = None
    coordinator: str = ""  # class name of the coordinator vLLM picked
    group_block_sizes: list[int] = field(default_factory=list)  # as the resolver sees them (dcp applied)
    extra: dict[str, Any] = field(default_factory=dict)
    run_error: StageError | None = None  # the run failed for a reason unrelated to block sizes (-> ERROR)

    @property
    def resolved(self) -> bool:
        return self.resolver_error is None and self.hash_block_size is not None

    def to_dict(self) -> dict[str, Any]:
        # Hand-written: dataclasses.asdict deep-copies and costs ~200 µs here,
        # more than the resolver call it reports on.
        d = dict(self.__dict__)
        for key in _ERRORS:
            if d[key] is not None:
                d[key] = d[key].to_dict()
        d["group_block_sizes"] = list(self.group_block_sizes)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Outcome":
        d = dict(d)
        for key in _ERRORS:
            if d.get(key) is not None:
                d[key] = StageError(**d[key])
        return cls(**d)


CONDITION_CHARS = 200  # a condition longer than this is cut (a key, not a listing)


def source_condition(lines: list[str], lineno: int) -> str:
    """The condition of the ``assert`` statement at 1-based line ``lineno`` of ``lines`` (the
    statement may span lines, and a traceback may point at any of them), as ``ast.unparse``
    writes it: whitespace, line breaks and redundant parentheses normalised, so one condition
    reads the same in every release whatever its layout. "" when no assert is found there."""
    import ast
    import textwrap
    if not 1 <= lineno <= len(lines):
        return ""
    for start in range(lineno - 1, max(-1, lineno - 12), -1):  # the statement's first line
        if not lines[start].lstrip().startswith("assert"):
            continue
        for end in range(max(start, lineno - 1), min(len(lines), start + 40)):
            text = textwrap.dedent("".join(lines[start:end + 1]))
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            node = tree.body[0] if tree.body else None
            if isinstance(node, ast.Assert):
                return ast.unparse(node.test)[:CONDITION_CHARS]
            return ""
        return ""
    return ""


def bare_assert(err: BaseException, vllm_only: bool = True) -> tuple[str, str]:
    """A bare assert (``AssertionError`` with an empty message): its condition, read from the
    source line of its raising frame in the installed file (linecache: called only for bare
    asserts, never per input), and the vLLM frame that called the raising function
    (``file:line in function``: the condition names that function's own variables, whose values
    its caller chose). ("", "") for any other exception or when the source cannot be read.
    ``vllm_only``: the raising frame is the innermost vLLM frame (``frames.vllm_frame``), else the
    innermost frame (``bridge.runtime.stage_error``)."""
    if not isinstance(err, AssertionError) or str(err).strip():
        return "", ""
    pick, caller = frames.raising(err, vllm_only)
    if pick is None:
        return "", ""
    cond = condition_at(pick.tb_frame.f_code.co_filename, pick.tb_lineno)
    return (cond, frames.where(caller) if caller is not None else "") if cond else ("", "")


def condition_at(filename: str, lineno: int) -> str:
    """``source_condition`` of the file ``filename`` (read through linecache)."""
    import linecache
    try:
        return source_condition(linecache.getlines(filename), lineno)
    except (ValueError, RecursionError, MemoryError):  # an unparsable file: no condition, never a crash
        return ""

