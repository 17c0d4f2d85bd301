"""The input edge: files a user hands kvproof, read safely into the input types.

The text-level helpers (``parse_json``, ``parse_json_as``, ``read_text``,
``load_files``, ``MAX_BYTES``) live in :mod:`kvproof.inputs.reading`, below the input
types that parse through them; they are re-exported here for callers of the
edge. This module adds the loaders that name a type (``load_layouts``), so it
sits above :mod:`kvproof.inputs.layout` and nothing below imports it.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvproof.inputs.layout import Layout
from kvproof.inputs.reading import MAX_BYTES, load_files, parse_json, parse_json_as, read_text

__all__ = ["MAX_BYTES", "load_files", "load_layouts", "parse_json", "parse_json_as", "read_text"]


def load_layouts(paths: Sequence[str]) -> list[tuple[str, Layout]]:
    """Layout files (or folders of them) -> (name, Layout)."""
    return load_files(paths, lambda text, where: Layout.from_json(text, where=where))
