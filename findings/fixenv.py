"""Fix overlays cached by content, for ``kvproof findings report``'s fix check.

A release with ``findings/fixes/<id>.diff`` laid over it (``kvproof.envs.overlay.make``: hard links,
the patched files written anew) is kept under ``<cache>/fix-overlays/`` (``kvproof.settings``),
never in the checkout and never among the environments ``kvproof env list`` and verify's drift
check read. Its content key is the release environment (its name and manifest bytes: a rebuilt
environment has another), the diff's bytes and the overlay builder's version
(``kvproof.envs.overlay.BUILDER_VERSION``). A later report with the same key uses the overlay as it
is (its .pyc and vLLM model-registry cache already warm: no minutes of rebuilding and removing
hard-link trees); any other key is a miss that builds anew in its place (one overlay per
entry and release). A hit is used only when its manifest carries the same key and its
patched files hold exactly the bytes the diff gives now. The cache must share a filesystem with
the release environments (hard links); the default layout (``<cache>/envs``) does. Removing
the folder is always safe: the next report builds what it needs again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kvproof import envs
from kvproof.errors import EnvError, UsageError

CACHE = "fix-overlays"


def home() -> Path:
    from kvproof.settings import settings

    return settings().cache_home / CACHE


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_key(release: str, diff: str | bytes) -> str:
    """The overlay's key: release environment + the diff's bytes + the builder's version."""
    from kvproof.envs.overlay import BUILDER_VERSION

    env = envs.find(release)
    try:
        manifest = (Path(env.root) / envs.MANIFEST).read_bytes()
    except (OSError, TypeError) as err:
        raise EnvError(f"vLLM {release}: no manifest to key a fix overlay by ({err})") from None
    data = diff.encode() if isinstance(diff, str) else diff
    parts = {"env": env.name, "manifest": _sha(manifest), "diff": _sha(data), "builder": BUILDER_VERSION}
    return _sha(json.dumps(parts, sort_keys=True).encode())


def _name(entry_id: str, release: str) -> str:
    """One overlay per entry and release, its key in its manifest: a stable name keeps its
    VLLM_CACHE_ROOT (kvproof.settings.vllm_cache_root, by name) warm across rebuilds."""
    return f"fix-{entry_id[:8]}-{release}"


def _hit(root: Path, key: str, files: dict[str, bytes]) -> envs.Env | None:
    """The cached overlay at ``root`` if it is exactly the one ``key`` and ``files`` describe."""
    m = envs.manifest_of(root)
    if not m or (m.get(envs.OVERLAY_KEY) or {}).get("cache_key") != key:
        return None
    try:
        sp = envs.site_packages(root)
        if any((sp / rel).read_bytes() != data for rel, data in files.items()):
            return None
    except (EnvError, OSError):
        return None
    return envs.Env(root.name, root / "bin" / "python", root)


def fixed_env(entry_id: str, release: str, diff: str, files: dict[str, bytes],
              where: Path | None = None) -> tuple[envs.Env, bool]:
    """``release`` with the fix laid over it: (its environment, True when the cache had it).
    ``files``: the diff applied to the release's files now (kvproof.findings.fix.patched, a
    second's work), what the overlay must hold."""
    from kvproof.envs import overlay as ov

    where = Path(where or home())
    key = content_key(release, diff)
    name = _name(entry_id, release)
    got = _hit(where / name, key, files)
    if got is not None:
        return got, True
    source = {"fix": f"findings/fixes/{entry_id}.diff"}
    extra = {"cache_key": key, "builder": ov.BUILDER_VERSION}
    try:
        # force only over a folder of ours that is not this key's overlay (another diff, a damaged one)
        made = ov.make(name, release, files, source, where=where, force=(where / name).exists(), extra=extra)
    except UsageError:
        got = _hit(where / name, key, files)  # another report built it meanwhile
        if got is None:
            raise
        return got, True
    return made.env, False
