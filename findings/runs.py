"""Running a reproducer on real releases: the standalone script and the pytest, each with a
release environment's own python (never kvproof's). Nothing here imports vLLM.

A run says something about vLLM only when the reproducer ran: exit 1 (``BUG``) or 0 (``OK``).
Any other exit (2: python could not open the file, a traceback before the script's own
verdict, 124: timed out, 127: no environment for the release) is the machine's, never a
verdict: :func:`did_not_run` names such runs and :func:`require_ran` refuses them."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvproof.errors import EnvError, EnvironmentFailure, UsageError
from kvproof.findings.ledger import Entry

if TYPE_CHECKING:
    from kvproof.bridge.warm import Hosts
    from kvproof.envs import Env

RUN_TIMEOUT_S = 300
EXIT_BUG, EXIT_OK = 1, 0
EXIT_TIMEOUT = 124
EXIT_NO_ENV = 127  # the release's environment (or its python) is not there
_RESULT = {EXIT_BUG: "BUG", EXIT_OK: "OK"}


class ReproducerDidNotRun(EnvironmentFailure):
    """A reproducer exited neither 0 nor 1 on some release: the machine's failure, never a
    verdict about vLLM (exit 3). Nothing of the report is written."""


@dataclass
class Run:
    release: str
    python: str
    rc: int
    last: str
    expected: str | None  # "BUG" where the ledger measured the class, "OK" where not; None: not in the ledger
    kind: str = "script"  # "script": repro.py, whose last line says BUG:/OK:; "pytest": the pytest reproducer

    @property
    def ran(self) -> bool:
        """It reached its own verdict: exit 0 or 1, and for the script the last line that says so
        (python exits 1 on an uncaught traceback too: an import error is not a BUG)."""
        if self.rc not in _RESULT:
            return False
        return self.kind == "pytest" or self.last.startswith(_RESULT[self.rc] + ":")

    @property
    def result(self) -> str | None:
        """"BUG" or "OK" as run; None where it did not run."""
        return _RESULT[self.rc] if self.ran else None

    @property
    def as_expected(self) -> bool:
        """It ran and agrees with the ledger (a release the ledger has not measured agrees by
        definition: its result is what is known of it)."""
        return self.ran and (self.expected is None or self.result == self.expected)

    def expectation(self) -> str:
        """``expected BUG`` or, for a release the ledger has not measured, ``not in the ledger
        yet: BUG as run``."""
        if self.expected is None:
            return f"not in the ledger yet: {self.result or 'did not run'} as run"
        return f"expected {self.expected}"

    def to_dict(self) -> dict:
        return {"release": self.release, "python": self.python, "rc": self.rc, "last_line": self.last,
                "expected": self.expected, "in_ledger": self.expected is not None, "result": self.result,
                "as_expected": self.as_expected}


def affected(entry: Entry) -> list[str]:
    """The releases the ledger measured the class on (FAIL/ERROR there)."""
    return sorted((r for r, v in entry.releases.items() if v in ("FAIL", "ERROR")), key=release_key)


def release_key(r: str) -> tuple:
    try:
        return tuple(int(p) for p in r.split(".")[:3])
    except ValueError:
        return (1 << 30,)


def expected_on(entry: Entry, release: str) -> str | None:
    """"BUG" where the ledger measured the class on ``release``, "OK" where it measured
    something else, None where it has not measured ``release``."""
    if release not in entry.releases:
        return None
    return "BUG" if entry.releases[release] in ("FAIL", "ERROR") else "OK"


def installed_releases(entry: Entry | None = None) -> list[str]:
    """Every managed release (src/kvproof/facts/__init__.py) whose environment is built, and every
    release ``entry`` measured whose environment is built, oldest first: where a report runs
    its reproducer unless told otherwise."""
    from kvproof import envs, facts

    wanted = list(facts.MANAGED_RELEASES) + sorted(entry.releases if entry else (), key=release_key)
    have = []
    for r in dict.fromkeys(wanted):
        try:
            envs.find(r)
        except (EnvError, UsageError):
            continue
        have.append(r)
    return sorted(have, key=release_key)


def _tail(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _side_by_side(fn, items: list, jobs: int | None) -> list:
    """``fn`` over ``items``, ``jobs`` at a time (default: one per core); results in order."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = max(1, min(len(items), jobs or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, items))


def _env_of(r: str | Env) -> Env:
    """A release (or overlay) name's environment; an Env (a cached fix overlay) as it is."""
    from kvproof import envs

    return r if isinstance(r, envs.Env) else envs.find(r)


def _name(r: str | Env) -> str:
    return r if isinstance(r, str) else r.name


def run_env(env: Env, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a reproducer runs under (kvproof.bridge.warm.host_env), plus ``extra``."""
    from kvproof.bridge.warm import host_env

    return {**host_env(env), **(extra or {})}


def run_script(path: Path, releases: list[str | Env], entry: Entry, timeout: float = RUN_TIMEOUT_S,
               jobs: int | None = None, hosts: Hosts | None = None) -> list[Run]:
    """``path`` run with each release's python; the last line it printed and its exit code.
    A release without an environment is a run with exit 127 and the reason, not an exception,
    so every release's outcome is known (:func:`require_ran` then refuses the lot). The releases
    run side by side, ``jobs`` at a time (default: one per core); the runs come back in order.
    A release may be given as an Env (a cached fix overlay, kvproof.findings.fixenv). With
    ``hosts`` (kvproof.bridge.warm), each release's run forks from its warm python."""
    path = Path(path).resolve()  # absolute: the working directory is the script's folder
    return _side_by_side(lambda r: _run_one(path, r, timeout, "script", hosts, entry), list(releases), jobs)


def _run_one(path: Path, r: str | Env, timeout: float, kind: str, hosts: Hosts | None,
             entry: Entry | None = None, shim: str | None = None) -> Run:
    """One run of ``path`` (kind "script": ``python path``; "pytest": ``python -m pytest ... path``
    with pytest on PYTHONPATH from ``shim``) with ``r``'s python, in the file's folder."""
    from kvproof.bridge.warm import run

    name = _name(r)
    expected = expected_on(entry, name) if entry is not None else None
    try:
        env = _env_of(r)
        py = str(env.python)
    except (EnvError, UsageError) as err:
        return Run(name, "-", EXIT_NO_ENV, str(err), expected, kind)
    cwd = str(path.parent)
    if kind == "pytest":  # python -m puts the working directory first, then PYTHONPATH
        argv, variables, first = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(path)], \
            run_env(env, {"PYTHONPATH": shim}), [cwd, shim]
    else:
        argv, variables, first = [str(path)], run_env(env), [cwd]
    try:
        rc, out, err = run(hosts, env, argv, cwd, variables, first, timeout)
        # the script's own word (BUG/OK/OTHER) is its last stdout line; where it did not reach
        # one, the cause is stderr's last line (python's message, a traceback's last line)
        own, err = _tail(out), _tail(err)
        if kind == "pytest":
            last = own or err
        else:
            last = own if own.startswith(("BUG:", "OK:", "OTHER:")) else (err or own)
    except subprocess.TimeoutExpired:
        rc, last = EXIT_TIMEOUT, f"timed out after {timeout:.0f} s"
    except OSError as err:  # the environment's python is gone or not executable
        rc, last = EXIT_NO_ENV, f"{py}: {err.strerror or err}"
    return Run(name, py, rc, last, expected, kind)


def did_not_run(runs: list[Run]) -> list[Run]:
    return [r for r in runs if not r.ran]


def why_not(run: Run) -> str:
    """The cause of a run that did not run, in one line."""
    if run.rc in (EXIT_TIMEOUT, EXIT_NO_ENV):
        return run.last  # "timed out after N s", the missing environment's message
    return f"exit {run.rc}: {run.last or 'no output'}"


def require_ran(runs: list[Run], what: str = "the reproducer") -> None:
    """Raise :class:`ReproducerDidNotRun` naming each release where ``what`` did not run."""
    bad = did_not_run(runs)
    if bad:
        raise ReproducerDidNotRun(f"{what} did not run on " + "; ".join(
            f"vLLM {r.release} ({why_not(r)})" for r in bad)
            + ": an environment failure, not a verdict about vLLM; nothing written")


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


def run_pytest(path: Path, releases: list[str | Env], timeout: float = RUN_TIMEOUT_S,
               jobs: int | None = None, hosts: Hosts | None = None) -> list[Run]:
    """``path`` run by pytest with each environment's python: exit 1 (a test failed: the bug
    shows), 0 (passed), anything else (it did not run: pytest's 2-5, 124 timed out, 127 no
    environment). ``Run.expected`` is None: a pytest has no ledger expectation of its own.
    Side by side like :func:`run_script`, runs in order."""
    path = Path(path).resolve()
    shim = str(pytest_shim())
    return _side_by_side(lambda r: _run_one(path, r, timeout, "pytest", hosts, shim=shim), list(releases), jobs)
