"""``--vllm`` and the tier flag are defined once (issue 43 items 1 and 5): every parser gets them
from kvproof.cliutil (add_vllm, add_tier), whose actions carry ``cliutil.SHARED``.

(a) Every parser of every command, walked as argparse objects: each module of the kvproof
    packages that builds a ``Parser`` is found in the source, its ``main`` is called with the
    parse intercepted, and the parser it built (with its subcommands) is walked. A ``--vllm``,
    ``--tier`` or ``--tiers`` action without the marker fails.
(b) The source of the package, bench/ and gpu/: no ``add_argument("--vllm" | "--tier" | "--tiers")``
    outside kvproof.cliutil (the bench scripts are scripts, not walked in (a)).
(c) What the shared tier flag parses: one spelling, comma-separated and repeatable, ``all``,
    a bad name one line and exit 2; the old ``--tiers`` is gone (a usage error).
"""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import pytest
from test_vllm_side import _modules

from kvproof.commands import cli
from kvproof import cliutil
from kvproof.cliutil import SHARED, Parser, add_tier, add_vllm
from kvproof.errors import UsageError
from kvproof.verdicts import Tier

ROOT = Path(__file__).resolve().parents[2]
SHARED_FLAGS = {"--vllm": "vllm", "--tier": "tier", "--tiers": "tier"}


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _builds_parser(path: Path) -> bool:
    """The module calls ``Parser(...)`` (kvproof.cliutil's base) somewhere."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Parser"
               for n in ast.walk(ast.parse(path.read_text(), str(path))))


def _command_modules() -> list[str]:
    return sorted(name for name, path in _modules() if name != "kvproof.cliutil" and _builds_parser(path))


def _built_parser(module: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser ``module.main`` builds: its first parse raises instead of parsing."""
    def intercept(self, args=None, namespace=None):
        raise _Built(self)

    monkeypatch.setattr(Parser, "parse_known_args", intercept)
    with pytest.raises(_Built) as built:
        importlib.import_module(module).main([])
    return built.value.parser


def _walk(parser: argparse.ArgumentParser, path: str = ""):
    """(command path, action) of the parser and of every subcommand under it."""
    for action in parser._actions:
        yield path or parser.prog, action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path or parser.prog} {name}")


def test_every_command_module_is_walked():
    found = _command_modules()
    for must in ("kvproof.commands.cli", "kvproof.replay.cli", "kvproof.replay.bisect", "kvproof.findings.cli",
                 "kvproof.commands.compare", "kvproof.fuzz.run", "kvproof.selftest.run", "kvproof.verify.drift",
                 "kvproof.commands.consume"):
        assert must in found, found


@pytest.mark.parametrize("module", _command_modules())
def test_vllm_and_the_tier_flag_come_from_the_shared_helpers(module, monkeypatch):
    parser = _built_parser(module, monkeypatch)
    hand_rolled = [f"{where}: {flag}" for where, action in _walk(parser) for flag in action.option_strings
                   if flag in SHARED_FLAGS and getattr(action, SHARED, None) != SHARED_FLAGS[flag]]
    assert not hand_rolled, f"define these with kvproof.cliutil.add_vllm / add_tier: {hand_rolled}"
    for where, action in _walk(parser):
        if getattr(action, SHARED, None) == "tier":
            assert set(action.tiers) <= set(cliutil.RUN_TIERS), (where, action.tiers)


def test_the_commands_that_take_a_release_or_a_tier_still_do(monkeypatch):
    """The walk above sees the flags where they are (a sanity floor, not a list to keep)."""
    seen: dict[str, set[str]] = {}
    for module in _command_modules():
        for where, action in _walk(_built_parser(module, monkeypatch)):
            if getattr(action, SHARED, None):
                seen.setdefault(getattr(action, SHARED), set()).add(where)
    assert {"kvproof check", "kvproof explain", "kvproof derive", "kvproof replay", "kvproof bisect",
            "kvproof compare", "kvproof fuzz", "kvproof selftest", "kvproof findings report",
            "kvproof findings remeasure", "kvproof findings witness", "kvproof findings add",
            "kvproof findings key", "kvproof consumer", "python -m kvproof.verify.drift"} <= seen["vllm"]
    assert {"kvproof check", "kvproof replay", "kvproof bisect", "kvproof findings add",
            "kvproof findings key"} <= seen["tier"]


def _hand_rolled_in(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value in SHARED_FLAGS for a in node.args)):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def test_no_source_adds_vllm_or_a_tier_flag_by_hand():
    files = [p for _, p in _modules()] + sorted((ROOT / "bench").rglob("*.py")) + sorted((ROOT / "gpu").rglob("*.py"))
    cliutil_path = Path(cliutil.__file__).resolve()
    hand_rolled = [hit for p in files if p.resolve() != cliutil_path for hit in _hand_rolled_in(p)]
    assert not hand_rolled, f"define these with kvproof.cliutil.add_vllm / add_tier: {hand_rolled}"


# --- what the shared flags parse ----------------------------------------------------------

def _parser(**kw) -> Parser:
    p = Parser(prog="t")
    add_tier(p, **kw)
    add_vllm(p)
    return p


@pytest.mark.parametrize("argv, tiers", [
    ([], (Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER, Tier.ENGINE)),
    (["--tier", "engine"], (Tier.ENGINE,)),
    (["--tier", "consumer, function"], (Tier.FUNCTION, Tier.CONSUMER)),
    (["--tier", "manager", "--tier", "function"], (Tier.FUNCTION, Tier.MANAGER)),
    (["--tier", "manager", "--tier", "function,manager"], (Tier.FUNCTION, Tier.MANAGER)),
    (["--tier", "function", "--tier", "all"], (Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER, Tier.ENGINE)),
])
def test_one_spelling_repeatable_or_comma_separated(argv, tiers):
    p = _parser(default=cliutil.RUN_TIERS)
    assert p.parse_args(argv).tier == tiers
    assert p.parse_args(argv).tier == tiers  # a second parse starts from the default again


def test_one_tier_and_a_release_list():
    p = Parser(prog="t")
    add_tier(p, (Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER), many=False, default=Tier.MANAGER)
    add_vllm(p)
    assert p.parse_args([]).tier == Tier.MANAGER and p.parse_args([]).vllm is None
    args = p.parse_args(["--tier", "consumer", "--vllm", "0.27.0", "--vllm", "0.28.0"])
    assert args.tier == Tier.CONSUMER and args.vllm == ["0.27.0", "0.28.0"]


@pytest.mark.parametrize("argv, needle", [
    (["--tier", "consumers"], "argument --tier: 'consumers' is not a tier (say function, manager, consumer or all)"),
    (["--tier", "function,"], "argument --tier: '' is not a tier"),
    (["--tier", "engine"], "argument --tier: run the engine tier elsewhere"),
])
def test_a_bad_tier_is_one_usage_error(argv, needle):
    p = _parser(tiers=(Tier.FUNCTION, Tier.MANAGER, Tier.CONSUMER), refused={Tier.ENGINE: "run the engine tier elsewhere"})
    with pytest.raises(UsageError) as err:
        p.parse_args(argv)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_tiers_are_spelled_one_way():
    """``--tier`` only: the old ``--tiers`` is neither shown nor parsed."""
    text = cli._parser()._subparsers._group_actions[0].choices["check"].format_help()
    assert "--tier TIER" in text and "--tiers" not in text
    for p in (_parser(), cli._parser()):
        argv = ["--tiers", "manager"] if p.prog == "t" else ["check", "--groups", "mla:16", "--tiers", "manager"]
        with pytest.raises(UsageError, match="--tiers"):
            p.parse_args(argv)
