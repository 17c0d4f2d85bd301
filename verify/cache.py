"""The proof run's result cache: a result is reused only where nothing it depends on changed.

Lives under the user's cache folder (``<cache_home>/verify/results.json``,
kvproof.settings), never in the checkout. An entry is keyed by

- its kind (``query``: one bounded or induction task of the worker pool;
  ``label``: one finding's reachability label),
- the whole task as the run hands it over (revision, property, N, premise,
  seed, timeout, block-size bound, dcp set, obligations, ...),
- the z3-solver version, the Python version, and where the kvproof package
  is imported from (another clone never reads this clone's entries as its own),

and it records the *dependencies* of the result: every kvproof source file
loaded in the process that computed it (the worker's modules after the
task: the model, the premise, the properties, the induction, the concrete
replay and shrinking; for labels the parent's modules and the derivation
tables under ``spec/derived/``), each with its sha256. An entry is used only
while every one of those files has the same content; otherwise it is a miss
and the next save drops it.

What is never stored: an UNKNOWN (Z3 "unknown", a timeout, a killed or dead
worker; any UNKNOWN obligation inside an induction task), so a run that ran
out of time asks Z3 again next time. An entry that does say UNKNOWN (an
older format, a hand edit) is returned as it is: UNKNOWN, never PROVED.
A hit carries ``"cached": True``; its ``seconds`` are the original solver's.

``kvproof verify --no-cache`` neither reads nor writes it.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Any, Iterable

FORMAT = 2


def _z3_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("z3-solver")
    except metadata.PackageNotFoundError:  # pragma: no cover -- z3 from elsewhere: its own version string
        import z3
        return z3.get_full_version()


def _package_roots() -> list[str]:
    import kvproof
    import kvproof.spec
    # this module's own folder is kvproof.verify's (importing the package here would be a circle:
    # its __init__ reaches the cli, which reaches this cache)
    here = Path(__file__).resolve().parent
    return sorted({str(Path(m.__file__).resolve().parent) for m in (kvproof, kvproof.spec)} | {str(here)})


def loaded_sources() -> list[str]:
    """The source files of every kvproof module this process has imported (a task's dependencies)."""
    out = set()
    for name, mod in list(sys.modules.items()):
        if name == "kvproof" or name.startswith("kvproof."):
            f = getattr(mod, "__file__", None)
            if f and f.endswith(".py"):
                out.add(str(Path(f).resolve()))
    return sorted(out)


def default_path() -> Path:
    from kvproof.settings import settings
    return settings().cache_home / "verify" / "results.json"


def plain(x: Any) -> Any:
    """JSON-able with every enum as its name (ProofStatus is an IntEnum: json alone writes 0)."""
    if isinstance(x, enum.Enum):
        return x.name
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


def _definite(result: dict) -> bool:
    """True when neither the result nor any obligation in it is UNKNOWN (only those are stored)."""
    def bad(s) -> bool:
        return plain(s) not in ("PROVED", "COUNTEREXAMPLE", "WARNING", "LABELLED", "MINIMISED")
    if bad(result.get("status")):
        return False
    return not any(bad(o.get("status")) for o in result.get("obligations") or [])


class Cache:
    """Load once, look up and store in memory, :meth:`save` once at the end of the run."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.data = self._load(self.path)
        self._sha: dict[str, str | None] = {}
        self._valid: dict[str, bool] = {}
        self.context = {"format": FORMAT, "z3": _z3_version(), "python": platform.python_version(),
                        "package": _package_roots()}
        self.hits = self.misses = self.stored = 0
        self.dirty = False

    @staticmethod
    def _load(path: Path) -> dict:
        try:
            data = json.loads(path.read_text())
            if data.get("format") == FORMAT and isinstance(data.get("entries"), dict):
                return data
        except (OSError, ValueError, AttributeError):
            pass
        return {"format": FORMAT, "deps": {}, "entries": {}}

    # --- keys and dependencies -------------------------------------------------------------

    def key(self, kind: str, task: dict) -> str:
        text = json.dumps(plain({"kind": kind, "task": task, "context": self.context}), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def sha(self, path: str) -> str | None:
        if path not in self._sha:
            try:
                self._sha[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError:
                self._sha[path] = None
        return self._sha[path]

    def _deps_valid(self, dep_id: str) -> bool:
        if dep_id not in self._valid:
            deps = self.data["deps"].get(dep_id)
            self._valid[dep_id] = isinstance(deps, dict) and all(
                self.sha(p) is not None and self.sha(p) == h for p, h in deps.items())
        return self._valid[dep_id]

    def _dep_id(self, files: Iterable[str]) -> str | None:
        deps = {}
        for f in sorted(set(files)):
            h = self.sha(f)
            if h is None:
                return None  # a dependency that cannot be read cannot be checked later either
            deps[f] = h
        dep_id = hashlib.sha256(json.dumps(deps, sort_keys=True).encode()).hexdigest()[:32]
        self.data["deps"][dep_id] = deps
        self._valid[dep_id] = True
        return dep_id

    # --- lookups ---------------------------------------------------------------------------

    def get(self, kind: str, task: dict) -> dict | None:
        e = self.data["entries"].get(self.key(kind, task))
        if e is None or not self._deps_valid(e.get("deps", "")):
            self.misses += 1
            return None
        self.hits += 1
        out = copy.deepcopy(e["result"])
        out["cached"] = True
        return out

    def put(self, kind: str, task: dict, result: dict, files: Iterable[str]) -> bool:
        """Store a definite result (never an UNKNOWN); returns whether it was stored."""
        if not _definite(result) or result.get("cached"):
            return False
        dep_id = self._dep_id(files)
        if dep_id is None:
            return False
        self.data["entries"][self.key(kind, task)] = {"deps": dep_id, "result": plain(result)}
        self.stored += 1
        self.dirty = True
        return True

    def save(self) -> None:
        """Merge with what another run saved meanwhile, drop entries whose dependencies changed, write."""
        if not self.dirty:
            return
        from kvproof.fsio import atomic_write
        disk = self._load(self.path)
        deps = dict(disk.get("deps", {}))
        deps.update(self.data["deps"])
        entries = dict(disk.get("entries", {}))
        entries.update(self.data["entries"])
        self.data = {"format": FORMAT, "deps": deps, "entries": entries}
        live = {k: e for k, e in entries.items() if self._deps_valid(e.get("deps", ""))}
        used = {e["deps"] for e in live.values()}
        self.data = {"format": FORMAT, "deps": {d: v for d, v in deps.items() if d in used}, "entries": live}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(self.data, sort_keys=True, separators=(",", ":")))
        except OSError as err:  # a read-only cache folder costs time, never the run
            sys.stderr.write(f"kvproof verify: result cache not saved ({err})\n")
        self.dirty = False

    def line(self) -> str:
        return f"{self.hits} result(s) from the cache, {self.misses} computed, {self.stored} stored ({self.path})"


def label_sources() -> list[str]:
    """What a reachability label depends on besides code: the derivation tables (spec/derived/)."""
    from kvproof.derivation import table_dir
    root = table_dir()
    return sorted(str(p.resolve()) for p in root.rglob("*") if p.is_file())


__all__ = ["Cache", "default_path", "label_sources", "loaded_sources"]
