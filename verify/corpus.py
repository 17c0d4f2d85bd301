"""Counterexamples into corpus/: one Layout JSON per file, named by content hash.

Writes are atomic (a temporary file in the same folder, then ``os.replace``)
and never overwrite: an existing ``<hash>.json`` already holds this layout.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kvproof.layout import Layout


def write(folder: Path, layout: Layout) -> tuple[Path, bool]:
    """Write ``layout`` (with its meta) as ``folder/<content_hash>.json``; (path, written?)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{layout.content_hash()}.json"
    if path.exists():
        return path, False
    text = json.dumps(layout.to_dict(with_meta=True), indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        if path.exists():  # lost a race: keep the first
            os.unlink(tmp)
            return path, False
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path, True
