"""The package docstring's claim: only ``kvproof.VLLM_SIDE`` imports vLLM (found in the source, not listed by hand)."""

from __future__ import annotations

import ast
from pathlib import Path

import kvproof


def _mapped_packages() -> list[str]:
    """kvproof and every package pyproject maps from its own folder (kvproof.spec -> spec/, ...)."""
    import tomllib
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    mapped = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return ["kvproof", *sorted(k for k in mapped if k)]


def _modules():
    """(module name, source path) of every module of the installed kvproof packages."""
    import importlib
    pkgs = _mapped_packages()
    roots = {pkg: Path(importlib.import_module(pkg).__file__).parent for pkg in pkgs}
    assert "kvproof.findings" in roots, roots  # every mapped folder is scanned, findings/ included
    for pkg, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            if pkg == "kvproof" and ".".join(["kvproof", rel.parts[0]]) in roots:
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([pkg, *parts]), path


def _imports_vllm(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        if any(n == "vllm" or n.startswith("vllm.") for n in names):
            return True
    return False


def test_only_the_listed_modules_import_vllm():
    found = {name for name, path in _modules() if _imports_vllm(path)}
    assert found == set(kvproof.VLLM_SIDE), (f"import vLLM but are not in kvproof.VLLM_SIDE: {found - set(kvproof.VLLM_SIDE)}; "
                                             f"listed but import no vLLM: {set(kvproof.VLLM_SIDE) - found}")


def test_the_scan_sees_an_import():
    assert _imports_vllm(Path(kvproof.__file__).parent / "bridge" / "runtime.py")
