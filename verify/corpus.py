"""Counterexamples into corpus/ (see kvproof.corpus: atomic, never overwritten)."""

from __future__ import annotations

from pathlib import Path

from kvproof import corpus
from kvproof.layout import Layout


def write(folder: Path, layout: Layout) -> tuple[Path, bool]:
    """Write ``layout`` (with its meta) as ``folder/<content_hash>.json``; (path, written?)."""
    return corpus.publish(layout, Path(folder))
