"""A release's model registry, read from its source without importing vLLM. Stdlib only.

``registered``: architecture -> (module, class), from the dict literals of
``vllm/model_executor/models/registry.py`` (a module is ``qwen3_next`` under
model_executor/models, or ``vllm.models.glm5next`` for 0.33's own package).
``drafters``: the architectures of its speculative-decoding table (``_SPECULATIVE_DECODING_MODELS``:
MTP, EAGLE, EAGLE-3, DFlash, DSpark heads). ``families``: the ``vllm/models/`` packages (0.33+)
and the architectures each registers. The registry-coverage test and bench/bench_derive.py read them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "vllm.models."


SPECULATIVE_TABLE = "_SPECULATIVE_DECODING_MODELS"


def registered(vllm: Path, table: str | None = None) -> dict[str, tuple[str, str]]:
    """architecture -> (module, class) of the release whose package folder is ``vllm``: every
    table of its registry, or the one dict literal named ``table``."""
    tree = ast.parse((vllm / "model_executor" / "models" / "registry.py").read_text())
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(value, ast.Dict):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if table is not None and not any(isinstance(t, ast.Name) and t.id == table for t in targets):
            continue
        for k, v in zip(value.keys, value.values):
            if (isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Tuple)
                    and len(v.elts) >= 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                 for e in v.elts[:2])):
                out[k.value] = (v.elts[0].value, v.elts[1].value)
    return out


def drafters(vllm: Path) -> dict[str, tuple[str, str]]:
    """The drafter architectures (speculative-decoding table) -> (module, class)."""
    return registered(vllm, SPECULATIVE_TABLE)


def families(vllm: Path) -> dict[str, tuple[str, ...]]:
    """``vllm/models/<family>`` -> the architectures the registry maps into it (empty before 0.33)."""
    root = vllm / "models"
    if not root.is_dir():
        return {}
    archs = registered(vllm)
    out: dict[str, tuple[str, ...]] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "common"):
        out[d.name] = tuple(sorted(a for a, (mod, _) in archs.items()
                                   if mod == PACKAGE + d.name or mod.startswith(PACKAGE + d.name + ".")))
    return out
