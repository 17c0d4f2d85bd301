"""Frames, one way: an exception's traceback walked, and ``path:line in function`` written and read.

Walks ``tb_next`` itself: ``traceback.extract_tb`` reads source lines through
linecache (a stat per frame), which a fuzz campaign pays per input. Stdlib only.
"""

from __future__ import annotations

import re
import sys
from types import TracebackType
from typing import NamedTuple

SITE = "site-packages/"  # a written frame's path starts after it (vllm/v1/...)
CALLED_FROM = " <- "  # a bare assert's frame: the raising function <- the function that called it
_FRAME = re.compile(r"^(?P<path>.*?):(?P<line>\d+) in (?P<function>.+)$")


class Frame(NamedTuple):
    path: str
    line: str
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}"


def text(filename: str, line: object, function: str) -> str:
    """``path:line in function``, the path cut after ``site-packages/``."""
    return f"{filename.split(SITE)[-1]}:{line} in {function}"


def where(tb: TracebackType) -> str:
    """``text`` of one traceback entry."""
    code = tb.tb_frame.f_code
    return text(code.co_filename, tb.tb_lineno, code.co_name)


def innermost(err: BaseException) -> TracebackType | None:
    """The last entry of ``err``'s traceback (where it was raised), or None."""
    tb, last = err.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last


def raising(err: BaseException, vllm_only: bool = True) -> tuple[TracebackType | None, TracebackType | None]:
    """The entry ``vllm_frame`` names (the innermost vLLM frame, else the innermost; with
    ``vllm_only`` False, the innermost) and the vLLM entry that called it (or None)."""
    tb, chosen, before, last, prev = err.__traceback__, None, None, None, None
    while tb is not None:
        if "/vllm/" in tb.tb_frame.f_code.co_filename:
            chosen, before = tb, prev
            prev = tb
        last = tb
        tb = tb.tb_next
    if vllm_only and chosen is not None:
        return chosen, before
    return last, (prev if prev is not last else before)


def vllm_frame(err: BaseException) -> str:
    """``path:line in function`` of the innermost vLLM frame of ``err`` (else its innermost)."""
    pick = raising(err)[0]
    return "" if pick is None else where(pick)


def own_frame(err: BaseException, package_dir: str) -> str | None:
    """``kvproof/x.py:function`` when ``err``'s innermost frame lies under ``package_dir``
    (kvproof's own code: the harness raised it, not vLLM), else None."""
    last = innermost(err)
    if last is None:
        return None
    code = last.tb_frame.f_code
    if not code.co_filename.startswith(package_dir):
        return None
    return f"kvproof/{code.co_filename[len(package_dir):].lstrip('/')}:{code.co_name}"


def stack_vllm(skip: int) -> str:
    """``path:line in function`` of the innermost vLLM frame of the running stack, leaving
    out the caller's frame and the ``skip - 1`` above it; "" when there is none."""
    try:
        f = sys._getframe(skip + 1)
    except ValueError:
        return ""
    while f is not None:
        code = f.f_code
        if "/vllm/" in code.co_filename:
            return text(code.co_filename, f.f_lineno, code.co_name)
        f = f.f_back
    return ""


def parse(frame: str) -> Frame | None:
    """``path:line in function`` read back (surrounding blanks dropped); None if it is not one."""
    m = _FRAME.match(frame.strip())
    return Frame(*m.groups()) if m else None


def key_of(path: str, function: str) -> str:
    """``path:function``, the path from its last ``vllm/`` on (unless kvproof's own file)."""
    cut = path.rfind("vllm/")
    if cut > 0 and "kvproof/" not in path[cut:]:
        path = path[cut:]
    return f"{path}:{function}"


def key(frame: str) -> str:
    """``vllm/v1/x.py:123 in fn`` -> ``vllm/v1/x.py:fn``: a frame without its line number
    (line numbers move between releases; the function does not)."""
    f = parse(frame)
    return frame.strip() if f is None else key_of(f.path, f.function)


def path_of(frame: str) -> str:
    """The path of a written frame or key (paths hold no ``:``)."""
    return frame.split(":", 1)[0]


def function_of(frame: str) -> str:
    """The function of a written frame ("" if it names none)."""
    return frame.partition(" in ")[2]


def is_own(frame: str) -> bool:
    """A written frame in kvproof's own code (spies, fake worker, setup), not vLLM's
    (``vllm_frame`` names a kvproof frame only when no vLLM frame lies under it)."""
    path = path_of(frame)
    return "kvproof/" in path and "vllm/" not in path
