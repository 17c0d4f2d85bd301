"""Layers point down: import circles and the input types' imports, found in the source (ast), not listed by hand.

Every module of the kvproof package is scanned, the folders pyproject maps
into it included (spec/, verify/, fuzz/, findings/ as kvproof.spec, ...).
Every import counts, a lazy one inside a function too: a lazy import is
still a dependency, only a hidden one (the inputs <-> layout circle was one).

(a) Circles.
    * File level, every module its own node: no circle at all.
    * Folder level, each subpackage (the concept folders kvproof.inputs, kvproof.facts,
      kvproof.judging, kvproof.tiers, kvproof.running, kvproof.envs, kvproof.commands, ...,
      and kvproof.spec, kvproof.fuzz, kvproof.findings) one node and each top-level module
      (kvproof.verdicts, kvproof.outcome, kvproof.derivation, ...) one node: no
      circle either (the facts in spec/ made layout -> spec -> layout one). (The tangle was 12 edges: spec/strategies imported fuzz,
      consumer.fuzz sat below fuzz, bridge imported consumer.compat, the tier
      runner read the ledger that findings' reports run it for.)
(b) The input types' modules (``INPUT_TYPES``: Layout, Config, Stream with
    its Drafts, and ``kvproof.inputs.reading`` they parse through) import only the
    standard library, ``kvproof.errors``, ``kvproof.facts`` and each
    other. ``kvproof.inputs.files`` (the loaders that name a type) sits above them:
    it may import them and nothing else of kvproof, and none of them may
    import it. Importing layout, config, reading or inputs loads no z3 and no
    kvproof module beyond those (plus the package's ``__init__``: no
    ``spec/__init__`` any more, since the facts and the revision table left
    spec/ for ``kvproof.facts`` and ``kvproof.revisions``); checked in a
    fresh interpreter (the ``kvproof.inputs`` package's ``__init__`` is a docstring). Stream and
    the drafts' acceptance are input types (``kvproof.inputs.stream``, ``kvproof.inputs.drafts``:
    a Layout holds its Stream and records its speculation, issue 43 item 2); the consumer tier's
    ``kvproof.consumer.stream`` (which draws, shrinks and defaults streams) is only checked for
    z3: importing it runs ``consumer/__init__``, which loads the consumer result type.
"""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys
from pathlib import Path

from test_vllm_side import _modules

INPUT_TYPES = ("kvproof.inputs.layout", "kvproof.inputs.config", "kvproof.inputs.stream", "kvproof.inputs.drafts", "kvproof.inputs.reading")
INPUT_FLOOR = ("kvproof.errors", "kvproof.facts")
EDGE = "kvproof.inputs.files"
# Loaded by the package __init__ files on the way to an input type (see the docstring).
PACKAGE_INITS = ("kvproof", "kvproof.inputs")

def _all() -> dict[str, Path]:
    return dict(_modules())


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The names ``name`` imports anywhere in its source: kvproof modules resolved, others by top-level name."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base != "kvproof" and not base.startswith("kvproof."):
                out.add(base)
                continue
            for a in node.names:  # ``from kvproof import facts`` is the module kvproof.facts
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return out


def _kvproof(names: set[str]) -> set[str]:
    return {n for n in names if n == "kvproof" or n.startswith("kvproof.")}


def _folder(name: str, known: dict[str, Path]) -> str | None:
    """The subpackage a module lives in (kvproof.facts -> kvproof.spec); None for a top-level module."""
    top = ".".join(name.split(".")[:2])
    return top if top in known and known[top].name == "__init__.py" else None


def _edges(node_of) -> dict[str, set[str]]:
    known = _all()
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        for target in _kvproof(_imports(name, path, known)):
            a, b = node_of(name), node_of(target)
            if a != b and a is not None and b is not None:
                edges.setdefault(a, set()).add(b)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[set[str]] = []
    counter = itertools.count()

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _on_circles(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for comp in _circles(edges) for a in comp for b in edges.get(a, ()) if b in comp}


def test_no_file_level_circle():
    edges = _edges(lambda m: m)
    assert not _on_circles(edges), f"modules that import each other in a circle: {sorted(_on_circles(edges))}"


def test_no_folder_level_circle():
    known = _all()
    found = _on_circles(_edges(lambda m: _folder(m, known) or m))
    assert not found, f"folder -> folder edges on a circle: {sorted(found)}"


def test_input_types_import_only_the_floor_and_each_other():
    known = _all()
    assert set(INPUT_TYPES) | {EDGE} <= set(known), set(INPUT_TYPES) - set(known)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for name in INPUT_TYPES:
        got = _imports(name, known[name], known)
        bad = {n for n in got if n.split(".")[0] not in stdlib and n not in INPUT_FLOOR and n not in INPUT_TYPES}
        assert not bad, f"{name} imports {sorted(bad)}; an input type imports only the stdlib, {INPUT_FLOOR} and {INPUT_TYPES}"
    edge = _kvproof(_imports(EDGE, known[EDGE], known))
    assert edge <= set(INPUT_TYPES) | set(INPUT_FLOOR), f"{EDGE} imports {sorted(edge - set(INPUT_TYPES))}"


def _loaded_by(module: str) -> dict:
    code = (f"import json, sys, {module}\n"
            "print(json.dumps({'z3': 'z3' in sys.modules, "
            "'kvproof': sorted(m for m in sys.modules if m == 'kvproof' or m.startswith('kvproof.'))}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_an_input_type_loads_no_z3_and_nothing_above():
    allowed = set(INPUT_TYPES) | set(INPUT_FLOOR) | set(PACKAGE_INITS) | {EDGE}
    for module in ("kvproof.inputs.layout", "kvproof.inputs.config", "kvproof.inputs.stream", "kvproof.inputs.reading", EDGE):
        got = _loaded_by(module)
        assert got["z3"] is False, f"import {module} loads z3"
        assert set(got["kvproof"]) <= allowed, f"import {module} loads {sorted(set(got['kvproof']) - allowed)}"
    assert _loaded_by("kvproof.consumer.stream")["z3"] is False, "import kvproof.consumer.stream loads z3"


# The one result record every tier makes (issue 43 item 1) sits on the ground floor beside Outcome:
# the tiers' own records (Outcome, ConsumerResult, EngineRun) ride in it, it names none of them.
RESULT = "kvproof.result"
RESULT_FLOOR = ("kvproof.verdicts",)  # standard library only


def test_the_result_record_is_on_the_ground_floor():
    known = _all()
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for name, floor in ((RESULT, set(RESULT_FLOOR)), *((f, set()) for f in RESULT_FLOOR)):
        got = _imports(name, known[name], known)
        bad = {n for n in got if n.split(".")[0] not in stdlib and n not in floor}
        assert not bad, f"{name} imports {sorted(bad)}; the result record's floor is the stdlib and {sorted(floor)}"
    loaded = _loaded_by(RESULT)
    assert loaded["z3"] is False and set(loaded["kvproof"]) <= {RESULT, *RESULT_FLOOR, *PACKAGE_INITS}, loaded


def test_the_scan_sees_a_lazy_import_and_a_circle():
    known = _all()
    assert "kvproof.inputs.reading" in _imports("kvproof.inputs.config", known["kvproof.inputs.config"], known)  # lazy, inside a function
    assert _on_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {("a", "b"), ("b", "c"), ("c", "a")}


MAX_CLASS_LINES = 200  # issue 43: small modules, one concept each; no class over about 200 lines


def _long_classes(modules) -> list[tuple[str, str, int]]:
    out = []
    for name, path in modules:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                out.append((name, node.name, node.end_lineno - node.lineno + 1))
    return out


def test_no_class_is_over_200_lines(tmp_path):
    assert _long_classes(_all().items()) == []
    big = tmp_path / "big.py"  # the scan sees one
    big.write_text("class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES)
    assert _long_classes([("big", big)]) == [("big", "Big", MAX_CLASS_LINES + 1)]
