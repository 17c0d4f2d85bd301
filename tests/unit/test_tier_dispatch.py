"""Tier names are dispatched in the registry and the shared CLI parser only, and ``--vllm`` is
written once (issue 43, "Done when"), found in the source (ast), not listed by hand.

(a) A reference to a tier member (``Tier.FUNCTION``, ``Tier.MANAGER``, ``Tier.CONSUMER``,
    ``Tier.ENGINE``) in a module of the kvproof packages sits in the Tier family
    (``kvproof.tiers``), the shared CLI parser (``kvproof.cliutil``) or the rules
    (``kvproof.judging.contracts``: each contract's tier; ``kvproof.judging.judge``: the tier a judgement is
    made at), or in a file of ``STILL_NAMING`` (each with its reason). A new branch or table on
    a tier elsewhere fails: ask the registry (a member's attribute or a query such as
    ``registry.through``, ``default``, ``streamed``, ``top``, ``skips``, ``refused``).
(b) The string ``"--vllm"`` occurs in the package's source in ``cliutil.add_vllm`` only.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from test_vllm_side import _modules

MEMBERS = {"FUNCTION", "MANAGER", "CONSUMER", "ENGINE"}
FAMILY = ("kvproof.tiers",)
ALLOWED = {"kvproof.cliutil", "kvproof.judging.contracts", "kvproof.judging.judge"}
# Files that still name a tier, and why; shrink it, never grow it.
STILL_NAMING = {
    # the contracts fuzz target escalates to the real manager when a manager-tier contract
    # predicts a violation (a rule on the contract's tier); it runs in the release's python,
    # where the registry (and the consumer tier behind it) is not imported
    "kvproof.fuzz.harness",
}


def _tier_refs(path: Path) -> int:
    return sum(1 for n in ast.walk(ast.parse(path.read_text(), str(path)))
               if isinstance(n, ast.Attribute) and n.attr in MEMBERS
               and isinstance(n.value, ast.Name) and n.value.id == "Tier")


def _naming() -> Counter:
    return Counter({name: k for name, path in _modules()
                    if not any(name == f or name.startswith(f + ".") for f in FAMILY) and name not in ALLOWED
                    and (k := _tier_refs(path))})


def test_tiers_are_dispatched_by_the_registry_and_the_shared_parser_only():
    naming = _naming()
    assert set(naming) == STILL_NAMING, (
        f"tier members named outside kvproof.tiers, cliutil, contracts and judge: {dict(naming)}; "
        "ask the registry instead (or, for a file that no longer names one, shrink STILL_NAMING)")


def test_the_count_sees_a_tier_member(tmp_path):
    """The counter is not blind: a branch on a tier member is one reference."""
    f = tmp_path / "m.py"
    f.write_text("from kvproof.verdicts import Tier\n"
                 "def f(t):\n    return 1 if t == Tier.MANAGER else Tier.CONSUMER\n")
    assert _tier_refs(f) == 2


def _vllm_literals(path: Path) -> list[tuple[int, str]]:
    """(line, innermost enclosing function) of each ``"--vllm"`` string constant in ``path``."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = node.name
        if isinstance(node, ast.Constant) and node.value == "--vllm":
            out.append((node.lineno, where))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(path.read_text(), str(path)), "<module>")
    return out


def test_vllm_is_written_once():
    found = [(name, line, where) for name, path in _modules() for line, where in _vllm_literals(path)]
    assert [(name, where) for name, _, where in found] == [("kvproof.cliutil", "add_vllm")], found


def test_a_fix_check_measures_each_entry_at_its_parts_top_tier(monkeypatch, tmp_path):
    """findings/fix._verdicts groups by the registry (``top``, ``default``) as it did by name: a
    consumer entry at the consumer tier, a function or manager entry and every corpus/ layout at
    the manager tier (function and manager), the consumer group first."""
    import contextlib
    from types import SimpleNamespace

    from kvproof.running import checking
    from kvproof import envs, settings
    from kvproof.inputs import files as inputs
    from kvproof.findings import fix, measure
    from kvproof.inputs.layout import Layout

    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}], "cache": {"block_size": 16}})
    (tmp_path / "c.json").write_text("{}")
    calls = []

    def judge_all(items, found, tier, workers=None):
        calls.append((tier, [label for label, _ in items]))
        return [{label: SimpleNamespace(verdict=f"{tier}@{e.name}") for label, _ in items} for e in found]

    monkeypatch.setattr(measure, "judge_all", judge_all)
    monkeypatch.setattr(checking.Workers, "start", lambda found, live=None: contextlib.nullcontext(
        SimpleNamespace(by_env={})))
    monkeypatch.setattr(envs, "find", lambda name: SimpleNamespace(name=name))
    monkeypatch.setattr(inputs, "load_layouts", lambda files: [(f, lay) for f in files])
    monkeypatch.setattr(settings, "settings", lambda: SimpleNamespace(corpus=tmp_path))

    def entry(tier):
        return SimpleNamespace(key=SimpleNamespace(tier=tier), layout=lay.to_dict(), stream=None)

    named = [("f", entry("function")), ("c", entry("consumer")), ("m", entry("manager"))]
    out = fix._verdicts(named, ["0.32.0"])
    assert calls == [("consumer", ["c"]), ("manager", ["f", "m", "corpus/c.json"])]
    assert out == [{"c": "consumer@0.32.0", "f": "manager@0.32.0", "m": "manager@0.32.0",
                    "corpus/c.json": "manager@0.32.0"}]
