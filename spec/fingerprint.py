"""The resolver's source fingerprint: which vLLM code is installed.

Definition (shared with the bridge worker, which runs it inside a vLLM
environment): the sha256 hex digest, first 16 characters, of
``"\\n".join(inspect.getsource(f))`` over the functions of
``vllm.v1.core.kv_cache_utils`` named in :data:`FUNCTIONS` that exist on that
module (imported names count: ``iter_layer_specs`` lives in
``kv_cache_interface`` from 0.29 on and is imported into ``kv_cache_utils``),
in that order.

Pure stdlib; it never imports vLLM itself. ``of_module`` takes the imported
module, ``of_source_files`` recomputes the same value from unpacked wheel
sources (what ``inspect.getsource`` returns is the def's text lines,
decorators included, ending with a newline).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from pathlib import Path
from types import ModuleType
from typing import Iterable, Sequence

FUNCTIONS = ("resolve_kv_cache_block_sizes", "resolve_dcp_kv_block_size",
             "partial_hash_hits_enabled", "iter_layer_specs")


def of_sources(sources: Iterable[str]) -> str:
    """Fingerprint of the function source texts, already in FUNCTIONS order."""
    return hashlib.sha256("\n".join(sources).encode()).hexdigest()[:16]


def of_module(kv_cache_utils: ModuleType) -> str:
    """Fingerprint of an imported ``vllm.v1.core.kv_cache_utils``."""
    return of_sources(inspect.getsource(getattr(kv_cache_utils, name))
                      for name in FUNCTIONS if hasattr(kv_cache_utils, name))


def _defs(path: Path) -> dict[str, str]:
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            out[node.name] = "".join(lines[start:node.end_lineno])
    return out


def of_source_files(vllm_root: str | Path, extra: Sequence[str] = ("vllm/v1/kv_cache_interface.py",)) -> str:
    """The same fingerprint from an unpacked wheel (``vllm_root`` holds ``vllm/``).

    Names not defined in ``kv_cache_utils.py`` are looked up in ``extra``
    modules, which must be the ones kv_cache_utils imports them from.
    """
    root = Path(vllm_root)
    local = _defs(root / "vllm/v1/core/kv_cache_utils.py")
    text = (root / "vllm/v1/core/kv_cache_utils.py").read_text()
    imported: dict[str, str] = {}
    for rel in extra:
        p = root / rel
        if p.exists():
            imported.update(_defs(p))
    sources = []
    for name in FUNCTIONS:
        if name in local:
            sources.append(local[name])
        elif name in imported and _imports(text, name):
            sources.append(imported[name])
    return of_sources(sources)


def _imports(module_text: str, name: str) -> bool:
    for node in ast.parse(module_text).body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False
