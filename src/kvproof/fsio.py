"""The one atomic-write helper: a reader never sees half a file.

Write a temporary file in the target folder, fsync it, then ``os.replace``
(overwrite) or ``os.link`` (create only, never overwrite) onto the name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _temp(path: Path, data: bytes, mode: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write(path: Path | str, text: str | bytes, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``text`` atomically (fsynced); returns the path."""
    path = Path(path)
    data = text.encode() if isinstance(text, str) else text
    tmp = _temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_create(path: Path | str, text: str | bytes, mode: int = 0o644) -> bool:
    """Create ``path`` atomically unless it exists; False when someone else has it."""
    path = Path(path)
    if path.exists():
        return False
    data = text.encode() if isinstance(text, str) else text
    tmp = _temp(path, data, mode)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
