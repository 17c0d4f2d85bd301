"""Reading what a user hands kvproof, safely: JSON text, files, folders of files.

The bottom of the input layers (stdlib and kvproof.errors only): the input
types (Layout, Config, Stream) parse through it, and :mod:`kvproof.inputs.files`
adds the loaders that name those types. Whatever arrives (not UTF-8,
integers of thousands of digits, JSON nested 100,000 deep, a folder with no
layouts, a file that vanished) becomes one ``KvproofError`` line, never a
traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from kvproof.errors import CorpusError, LayoutError

MAX_BYTES = 16 << 20  # a Layout or Config is a few hundred bytes; refuse what cannot be one
T = TypeVar("T")


def parse_json(text: str, where: str, error: type[Exception] = LayoutError) -> Any:
    """``json.loads`` whose every failure is one line naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{where}: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None
    except ValueError as err:  # e.g. an integer literal past Python's digit limit
        raise error(f"{where}: not usable JSON ({' '.join(str(err).split())[:120]})") from None


def parse_json_as(text: str, where: str, parse: Callable[[Any], T]) -> T:
    """``parse_json``, then ``parse``: every LayoutError names ``where`` once."""
    data = parse_json(text, where)
    try:
        return parse(data)
    except LayoutError as err:
        raise LayoutError(f"{where}: {err}") from None


def read_text(path: Path | str) -> str:
    """A UTF-8 text file, or one line saying why not."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_BYTES:
            raise CorpusError(f"{p}: {p.stat().st_size} bytes is too large for a kvproof input")
        data = p.read_bytes()
    except OSError as err:
        raise CorpusError(f"{p}: cannot read ({err.strerror or err})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LayoutError(f"{p}: not UTF-8 text (byte {err.start})") from None


def load_files(paths: Sequence[str], parse: Callable[[str, str], T]) -> list[tuple[str, T]]:
    """Files (or folders of ``*.json``) -> (name, parse(text, name)); one-line errors."""
    out: list[tuple[str, T]] = []
    for p in map(Path, paths):
        files = sorted(p.glob("*.json")) if p.is_dir() else [p]
        if p.is_dir() and not files:
            raise LayoutError(f"{p}: folder holds no *.json files")
        for f in files:
            out.append((str(f), parse(read_text(f), str(f))))
    return out
