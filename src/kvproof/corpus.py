"""corpus/: one Layout JSON per file, named by its content hash. Pure Python.

Every writer (the proof run with --record, the fuzzer, replay --record) goes
through here, and through the one atomic-write helper (kvproof.fsio), so a
reader never sees half a file:

- ``publish`` writes a new file and never overwrites (a concurrent writer of
  the same content simply loses the race);
- ``rewrite`` replaces an existing file's annotations (its meta). The layout,
  hence the name, is unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvproof.errors import CorpusError
from kvproof.fsio import atomic_create, atomic_write
from kvproof.layout import Layout


def _text(layout: Layout) -> str:
    return json.dumps(layout.to_dict(with_meta=True), indent=2, sort_keys=True) + "\n"


def publish(layout: Layout, folder: Path) -> tuple[Path, bool]:
    """Write ``layout`` (with meta) as ``folder/<hash>.json`` unless present; (path, written)."""
    final = Path(folder) / f"{layout.content_hash()}.json"
    return final, atomic_create(final, _text(layout))


def rewrite(path: Path, layout: Layout) -> None:
    """Atomically replace ``path`` with ``layout`` (same content hash, new meta)."""
    path = Path(path)
    if path.stem != layout.content_hash():
        raise CorpusError(f"{path}: refusing to store a different layout under this name")
    atomic_write(path, _text(layout))
