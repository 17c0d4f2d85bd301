"""Running a reproducer on real releases: the standalone script and the pytest, each with a
release environment's own python (never kvproof's). Nothing here imports vLLM."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvproof.errors import UsageError
from kvproof.findings.ledger import Entry

RUN_TIMEOUT_S = 300
EXIT_BUG, EXIT_OK = 1, 0


@dataclass
class Run:
    release: str
    python: str
    rc: int
    last: str
    expected: str  # "BUG" on an affected release, "OK" where fixed / unaffected

    @property
    def as_expected(self) -> bool:
        return self.rc == (EXIT_BUG if self.expected == "BUG" else EXIT_OK)

    def to_dict(self) -> dict:
        return {"release": self.release, "python": self.python, "rc": self.rc, "last_line": self.last,
                "expected": self.expected, "as_expected": self.as_expected}


def affected(entry: Entry) -> list[str]:
    """The releases the ledger measured the class on (FAIL/ERROR there)."""
    return sorted((r for r, v in entry.releases.items() if v in ("FAIL", "ERROR")), key=release_key)


def release_key(r: str) -> tuple:
    try:
        return tuple(int(p) for p in r.split(".")[:3])
    except ValueError:
        return (1 << 30,)


def expected_on(entry: Entry, release: str) -> str:
    return "BUG" if entry.releases.get(release) in ("FAIL", "ERROR") else "OK"


def run_script(path: Path, releases: list[str], entry: Entry, timeout: float = RUN_TIMEOUT_S) -> list[Run]:
    """``path`` run with each release's python; the last line it printed and its exit code."""
    from kvproof import envs

    out = []
    for r in releases:
        py = str(envs.find(r).python)
        try:
            proc = subprocess.run([py, str(path)], capture_output=True, text=True, timeout=timeout,
                                  cwd=str(path.parent))
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            stdout = [ln for ln in proc.stdout.splitlines() if ln.strip()]
            last = (stdout or lines or [""])[-1].strip()
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc, last = 124, f"timed out after {timeout:.0f} s"
        out.append(Run(r, py, rc, last, expected_on(entry, r)))
    return out


def pytest_shim() -> Path:
    """A folder holding only pytest and what it imports, from the interpreter kvproof runs in,
    for PYTHONPATH: the release environments do not install pytest, and the rest of kvproof's
    environment must not shadow theirs."""
    import importlib.util
    import tempfile

    shim = Path(tempfile.gettempdir()) / "kvproof-pytest-shim"
    shim.mkdir(exist_ok=True)
    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "py", "pygments"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            if name in ("pytest", "_pytest", "pluggy", "iniconfig"):
                raise UsageError("pytest is not installed with kvproof (pip install pytest) to run the pytest reproducer")
            continue
        src = Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)
        link = shim / src.name
        if not link.exists():
            link.symlink_to(src)
    return shim


def run_pytest(path: Path, releases: list[str], timeout: float = RUN_TIMEOUT_S) -> list[int]:
    """``path`` run by pytest with each environment's python: 1 (a test failed: the bug shows),
    0 (passed), anything else (it did not run)."""
    import os

    from kvproof import envs

    env = {**os.environ, "PYTHONPATH": str(pytest_shim())}
    out = []
    for r in releases:
        try:
            proc = subprocess.run([str(envs.find(r).python), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                   path.name], capture_output=True, text=True, timeout=timeout, cwd=str(path.parent),
                                  env=env)
            out.append(proc.returncode)
        except subprocess.TimeoutExpired:
            out.append(124)
    return out
