"""Every "not supported" refusal a connector makes, per installed release, and how kvproof classes it
(issue 44 item 2): read from the release's own kv_connector sources (no import), each raise turned
into the StageError the worker would record (its type, message, ``file:line in function``) and
judged by ``contracts.refused_by_design``. A refusal in a builder (``__init__``, ``check``,
``validate``, ``verify``) is UNSUPPORTED with vLLM's message; one raised while serving (a method a
step calls) stays a failure the judge may class. The test fails when a release adds a builder's
refusal that kvproof would not class as by design, and prints the listing (``-s``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvproof.judging import contracts
from kvproof import envs
from kvproof.outcome import StageError

from conftest import RELEASES, require_env

pytestmark = pytest.mark.integration
CONNECTORS = Path("vllm/distributed/kv_transfer/kv_connector")


def _text(node: ast.AST) -> str:
    """A raise's message as written: the literal parts of a string or f-string, ``{}`` for the rest."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return ""


def _builds(name: str) -> bool:
    """Whether a function builds or validates a connector (so its refusal is a configuration's),
    by this test's own reading of vLLM's names: constructors and their _init_* helpers, the factory,
    check/validate/verify methods (leading underscores allowed)."""
    bare = name.lstrip("_")
    return name == "__init__" or name == "create_connector" or bare.startswith(("init_", "check", "validate", "verify"))


def refusals(site: Path) -> list[tuple[StageError, bool]]:
    """(the StageError a raise would give, whether it is raised in a builder) for every
    ``raise ValueError/NotImplementedError("... not supported ...")`` under the release's connectors."""
    out = []
    for path in sorted((site / CONNECTORS).rglob("*.py")):
        rel = path.relative_to(site).as_posix()
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                        and isinstance(node.exc.func, ast.Name) and node.exc.func.id in contracts.REFUSING_TYPES
                        and node.exc.args):
                    continue
                message = _text(node.exc.args[0])
                if not contracts._NOT_SUPPORTED.search(message):
                    continue
                err = StageError(node.exc.func.id, message, f"{rel}:{node.lineno} in {fn.name}")
                out.append((err, _builds(fn.name)))
    return out


@pytest.mark.parametrize("release", RELEASES)
def test_every_builder_refusal_of_a_connector_is_unsupported_by_design(release):
    env = require_env(release)
    found = refusals(envs.site_packages(env.root))
    assert found, f"{release}: no connector refuses anything as not supported? (the scan is broken)"
    listing = []
    for err, builder in found:
        classed = contracts.refused_by_design(None, err, release)
        listing.append(f"{release} {err.frame}: {err.type}: {err.message[:90]} -> "
                       f"{'UNSUPPORTED (by design)' if classed else 'judged as a failure'}")
        assert classed == builder, listing[-1]
    print("\n".join(listing))
