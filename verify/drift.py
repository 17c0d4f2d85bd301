"""Drift alarm: is the installed vLLM's resolver one the model knows?

The fingerprint (kvproof.spec.fingerprint) is computed from the
environment's installed sources without importing vLLM, which gives the
same value as ``inspect.getsource`` inside the environment (checked against
0.27.0, 0.28.0 and 0.32.0).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvproof.spec import fingerprint
from kvproof.spec import revisions as R


def site_packages(root: Path) -> Path | None:
    for sp in sorted(Path(root).glob("lib/python*/site-packages")):
        if (sp / "vllm" / "v1" / "core" / "kv_cache_utils.py").exists():
            return sp
    return None


def check_fingerprint(fp: str, vllm_version: str = "") -> dict:
    """The verdict for one installed resolver fingerprint."""
    message = R.drift(fp, vllm_version)
    rev = R.revision_for_fingerprint(fp)
    return {"vllm": vllm_version, "fingerprint": fp, "revision": rev, "stale": message is not None,
            "message": message or f"vLLM {vllm_version or '?'}: resolver fingerprint {fp} is revision {rev} (modelled)"}


def check_envs() -> list[dict]:
    """Every managed environment (kvproof.envs) that has vLLM sources on disk."""
    try:
        from kvproof import envs
        rows = envs.installed()
    except Exception:  # noqa: BLE001 -- no managed environments: no drift rows
        return []
    out = []
    for row in rows:
        sp = site_packages(Path(row["path"]))
        if sp is None:
            continue
        version = row.get("vllm") or ""
        if version in ("", "-"):
            try:
                meta = json.loads((Path(row["path"]) / envs.MANIFEST).read_text())
                version = meta.get("vllm", "")
            except (OSError, ValueError):
                version = row["name"].rsplit("-", 1)[-1]
        fp = fingerprint.of_source_files(sp)
        out.append(dict(check_fingerprint(fp, version), env=row["name"]))
    return out
