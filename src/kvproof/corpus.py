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
from kvproof.inputs.layout import Layout


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


# --- recorded expectations ------------------------------------------------------------------
# A file's meta ``kvproof.expect = {release: {tier: verdict}}`` (written by ``kvproof replay
# --record``) is what tests/replay checks against real vLLM. Every managed release (the one
# release list, src/kvproof/facts/__init__.py, as `kvproof env releases` prints it) must have one for the tiers
# below; a release outside the list (an overlay, a patched checkout) need not.

def required_tiers(layout: Layout, release: str) -> tuple[str, ...]:
    """The tiers ``layout`` must record an expectation for on ``release`` (each member's
    ``expected``: the bridge tiers on every managed release; the engine tier, for a file with an
    engine recipe, on the managed releases with their own CPU wheel). None for a release outside
    the release list."""
    from kvproof import facts
    from kvproof.tiers import registry
    if release not in facts.MANAGED_RELEASES:
        return ()
    return tuple(str(m.tier) for m in registry.runners() if m.expected(layout, release))


def missing_expectations(named: list[tuple[str, Layout]]) -> list[str]:
    """``"NAME: vLLM R TIER"`` for each (file, managed release, required tier) without an expectation."""
    from kvproof import facts
    out = []
    for name, lay in named:
        expect = (lay.meta or {}).get("expect") or {}
        for release in facts.MANAGED_RELEASES:
            for tier in required_tiers(lay, release):
                if (expect.get(release) or {}).get(tier) is None:
                    out.append(f"{name}: vLLM {release} {tier}")
    return out
