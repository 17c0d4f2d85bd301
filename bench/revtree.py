"""A commit's kvproof, unpacked to run beside this checkout (the bench scripts' ``--before``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kvproof.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
MAPPED = ("spec", "verify", "fuzz", "findings")  # the folders pyproject maps into the package


def tree_of(rev: str, dest: Path) -> tuple[Path, str]:
    """(working directory, PYTHONPATH) that run commit ``rev``'s kvproof: its files, unpacked
    into ``dest``, with an import folder that maps them into the package as pyproject does."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                      capture_output=True).returncode != 0:
        raise UsageError(f"--before {rev}: no such commit in {ROOT}")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    pkg = dest / ".import" / "kvproof"
    pkg.mkdir(parents=True)
    for p in (dest / "src" / "kvproof").iterdir():
        (pkg / p.name).symlink_to(p)
    for name in MAPPED:
        (pkg / name).symlink_to(dest / name)
    return dest, str(dest / ".import")


def short(rev: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", rev], capture_output=True,
                          text=True).stdout.strip() or rev
