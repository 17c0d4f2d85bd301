"""corpus/: one Layout JSON per file, named by its content hash. Pure Python.

Every writer (the proof run, the fuzzer, replay --record) goes through here,
so a reader never sees half a file:

- ``publish`` writes a new file: temporary file in the same folder, fsync,
  then ``os.link`` (atomic like ``os.replace``, but it never overwrites, so a
  concurrent writer of the same content simply loses the race);
- ``rewrite`` replaces an existing file's annotations (its meta): temporary
  file, fsync, ``os.replace``. The layout, hence the name, is unchanged.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kvproof.errors import CorpusError
from kvproof.layout import Layout


def _text(layout: Layout) -> str:
    return json.dumps(layout.to_dict(with_meta=True), indent=2, sort_keys=True) + "\n"


def _temp(folder: Path, name: str, text: str) -> Path:
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    os.fchmod(fd, 0o644)  # mkstemp makes 0600; a corpus file is for everyone to read
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(tmp_name)


def publish(layout: Layout, folder: Path) -> tuple[Path, bool]:
    """Write ``layout`` (with meta) as ``folder/<hash>.json`` unless present; (path, written)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{layout.content_hash()}.json"
    if final.exists():
        return final, False
    tmp = _temp(folder, final.name, _text(layout))
    try:
        os.link(tmp, final)
        written = True
    except FileExistsError:
        written = False
    finally:
        os.unlink(tmp)
    return final, written


def rewrite(path: Path, layout: Layout) -> None:
    """Atomically replace ``path`` with ``layout`` (same content hash, new meta)."""
    path = Path(path)
    if path.stem != layout.content_hash():
        raise CorpusError(f"{path}: refusing to store a different layout under this name")
    tmp = _temp(path.parent, path.name, _text(layout))
    os.replace(tmp, path)
