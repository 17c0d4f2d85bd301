"""The steps of docs/recipes.md, each checked: a release, an oracle or a speculative method added
with a step missed fails here. No vLLM: sources are read statically where they import it.

Each check is a function returning the problems it finds (empty: the step is done); the tests
assert it finds none in the tree, and that it does find the missed step when one is taken away.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kvproof import contracts, facts, judge, revisions
from kvproof.outcome import StageError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "kvproof"
SCANNED = (SRC, ROOT / "fuzz", ROOT / "findings")  # where oracle ids are recorded or read
BASELINE = ROOT / "verify" / "baseline.json"
CONSUMER_RECORD = ROOT / "spec" / "derived" / "consumer_fingerprints.json"
BRANCHES = set(facts.RESOLVER_BRANCHES)


def _minor(release: str) -> str:
    return ".".join(release.split("+")[0].split(".")[:2])


# --- recipe 1: add a release ---------------------------------------------------------------

def release_problems() -> list[str]:
    """Every managed release runs a revision that has a record; no record names a release twice."""
    out = []
    for release in facts.MANAGED_RELEASES:
        try:
            rev = revisions.revision_for(release)
        except KeyError:
            out.append(f"{release}: no RevisionFacts record lists {_minor(release)} (facts.REVISION_FACTS)")
            continue
        if rev not in facts.REVISION_FACTS or rev not in revisions.REVISIONS:
            out.append(f"{release}: revision {rev} has no record")
    minors = [m for rec in facts.REVISION_FACTS.values() for m in rec.releases]
    out += [f"{m}: in two revision records" for m in sorted({m for m in minors if minors.count(m) > 1})]
    return out


def record_problems(baseline: dict) -> list[str]:
    """Every record is the model's (revisions.REVISIONS, a known branch set, an evaluable Outcome),
    has a resolver fingerprint, and has a proof baseline (verify/baseline.json)."""
    from kvproof.layout import Layout
    from kvproof.spec import evaluate
    lay = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                            "cache": {"block_size": 16, "enable_prefix_caching": True}})
    out, seen = [], {}
    for name, rec in facts.REVISION_FACTS.items():
        if name not in revisions.REVISIONS or revisions.REVISIONS[name].branches != rec.branches:
            out.append(f"{name}: revisions.REVISIONS is not this record's view")
        if not facts.BASE_BRANCHES <= rec.branches or not rec.branches <= BRANCHES:
            out.append(f"{name}: branches {sorted(rec.branches - BRANCHES)} unknown to the model, or base missing")
        if not rec.fingerprints or not all(re.fullmatch(r"[0-9a-f]{16}", f) for f in rec.fingerprints):
            out.append(f"{name}: no resolver fingerprint (kvproof.spec.fingerprint: 16 hex digits)")
        for f in rec.fingerprints:
            if seen.setdefault(f, name) != name:
                out.append(f"{name}: fingerprint {f} is also {seen[f]}'s")
        if name not in (baseline.get("revisions") or {}):
            out.append(f"{name}: no proof baseline (kvproof verify --revisions {name}, then accept it)")
        elif name in revisions.REVISIONS and evaluate(lay, name).hash_block_size != 16:
            out.append(f"{name}: the model does not resolve the plainest layout")
    return out


def test_every_managed_release_runs_a_recorded_revision():
    assert release_problems() == []


def test_a_release_without_its_revision_record_is_reported(monkeypatch):
    monkeypatch.setattr(facts, "MANAGED_RELEASES", facts.MANAGED_RELEASES + ("0.99.0",))
    assert release_problems() == ["0.99.0: no RevisionFacts record lists 0.99 (facts.REVISION_FACTS)"]


def test_every_revision_record_is_modelled_fingerprinted_and_baselined():
    assert record_problems(json.loads(BASELINE.read_text())) == []


def test_a_record_missed_by_the_model_or_the_baseline_is_reported(monkeypatch):
    newest = facts.REVISION_FACTS[revisions.NEWEST_REVISION]
    rec = facts.RevisionFacts(**{**vars(newest), "releases": ("0.99",), "fingerprints": ()})
    monkeypatch.setitem(facts.REVISION_FACTS, "0.99", rec)  # a record REVISIONS was not derived from
    got = record_problems(json.loads(BASELINE.read_text()))
    assert got == ["0.99: revisions.REVISIONS is not this record's view",
                   "0.99: no resolver fingerprint (kvproof.spec.fingerprint: 16 hex digits)",
                   "0.99: no proof baseline (kvproof verify --revisions 0.99, then accept it)"]


def test_every_managed_release_has_a_reviewed_consumer_record():
    """Step 4 of recipe 1 (also tests/unit/test_consumer_fingerprint.py, in depth)."""
    recorded = json.loads(CONSUMER_RECORD.read_text())["releases"]
    assert [r for r in facts.MANAGED_RELEASES if r not in recorded] == []


def test_every_refusal_has_a_release_range():
    """Each refusal by design names its releases as fields (read back by tests/integration/test_facts.py)."""
    for r in contracts.UNSUPPORTED_BY_DESIGN:
        assert re.fullmatch(r"\d+\.\d+", r.since) and (r.until is None or re.fullmatch(r"\d+\.\d+", r.until)), r
        assert r.until is None or facts.release_key(r.since) <= facts.release_key(r.until), r


def test_a_refusal_outside_its_range_is_no_refusal():
    err = StageError("AssertionError", "PCP not support hybrid attn", "vllm/v1/core/kv_cache_coordinator.py")
    assert contracts.refused_by_design(None, err, "0.30.0+cpu") and contracts.refused_by_design(None, err)
    assert not contracts.refused_by_design(None, err, "0.31.0")  # the assert left in 0.31 (until="0.30")


# --- recipe 2: add an oracle ---------------------------------------------------------------

def _calls_and_compares(tree: ast.AST):
    """(oracle ids recorded: ``<...>.rec.add("id", ...)``, ids read: ``o.oracle == "id"``, ``in (...)``, ``.by("id")``)."""
    recorded, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            recv = node.func.value
            recv_name = recv.attr if isinstance(recv, ast.Attribute) else getattr(recv, "id", "")
            if node.func.attr == "add" and recv_name == "rec":
                recorded.add(node.args[0].value)
            elif node.func.attr == "by" and recv_name in ("r", "res", "result"):
                read.add(node.args[0].value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "oracle":
            for c in node.comparators:
                elts = c.elts if isinstance(c, (ast.Tuple, ast.List, ast.Set)) else [c]
                read |= {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return recorded, read


def oracle_ids() -> tuple[set[str], set[str]]:
    recorded, read = set(), set()
    for root in SCANNED:
        for path in sorted(root.rglob("*.py")):
            got = _calls_and_compares(ast.parse(path.read_text(), str(path)))
            recorded |= got[0]
            read |= got[1]
    return recorded, read


def documented_oracles() -> set[str]:
    """The ids the oracle table in consumer/oracles.py's docstring lists."""
    doc = ast.get_docstring(ast.parse((SRC / "consumer" / "oracles.py").read_text())) or ""
    return set(re.findall(r"^([a-z_]+) {2,}\S", doc, re.M))


def oracle_problems(recorded: set[str], read: set[str], documented: set[str]) -> list[str]:
    hard, soft = set(judge._HARD_ORACLES), set(judge._SOFT_ORACLES)
    out = [f"{o}: recorded but neither hard nor soft in kvproof.judge" for o in sorted(recorded - hard - soft)]
    out += [f"{o}: read but never recorded" for o in sorted(read - recorded - soft)]
    out += [f"{o}: hard in kvproof.judge but no oracle records it" for o in sorted(hard - recorded)]
    out += [f"{o}: not in consumer/oracles.py's table" for o in sorted((recorded | hard | soft) - documented)]
    out += [f"{o}: in consumer/oracles.py's table, unknown to kvproof.judge" for o in sorted(documented - hard - soft)]
    out += [f"{o}: both hard and soft" for o in sorted(hard & soft)]
    return out


def test_every_oracle_id_is_known_to_the_judge_and_documented():
    recorded, read = oracle_ids()
    assert {"exception", "prefix_hit", "kv_event", "stalled"} <= recorded  # the scan sees the modules
    assert oracle_problems(recorded, read, documented_oracles()) == []


def test_an_oracle_the_judge_does_not_know_is_reported(monkeypatch):
    recorded, read = oracle_ids()
    assert oracle_problems(recorded | {"new_oracle"}, read, documented_oracles()) == [
        "new_oracle: recorded but neither hard nor soft in kvproof.judge",
        "new_oracle: not in consumer/oracles.py's table"]
    monkeypatch.setattr(judge, "_HARD_ORACLES", judge._HARD_ORACLES + ("ghost",))
    assert "ghost: hard in kvproof.judge but no oracle records it" in \
        oracle_problems(recorded, read, documented_oracles())


# --- recipe 3: add a speculative method ------------------------------------------------------

def _drafters() -> tuple[set[str], set[str]]:
    """consumer/drafters.py (a vLLM-side module, read statically): the methods with a draft config
    (DRAFT_HF_CONFIGS) and those ``build`` handles without one (``drafts.method == "..."``)."""
    tree = ast.parse((SRC / "consumer" / "drafters.py").read_text())
    configs, handled = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DRAFT_HF_CONFIGS" for t in node.targets):
            configs = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if isinstance(node, ast.FunctionDef) and node.name == "build":
            for c in ast.walk(node):
                if isinstance(c, ast.Compare) and isinstance(c.left, ast.Attribute) and c.left.attr == "method":
                    handled |= {e.value for e in c.comparators if isinstance(e, ast.Constant)}
    return configs, handled


def spec_method_problems(configs: set[str], handled: set[str]) -> list[str]:
    out = []
    for m in facts.SPEC_METHODS:
        if m not in facts.SPEC_LOOKAHEAD_EXTRA:
            out.append(f"{m}: no lookahead fact (facts.SPEC_LOOKAHEAD_EXTRA)")
        if m not in configs and m not in handled:
            out.append(f"{m}: no drafter (consumer/drafters.py DRAFT_HF_CONFIGS, or a case in build)")
        since = facts.SPEC_METHODS_SINCE.get(m)
        if since is None or not any(since in rec.releases for rec in facts.REVISION_FACTS.values()):
            out.append(f"{m}: no release range (facts.SPEC_METHODS_SINCE, a modelled major.minor)")
    for name in ("EAGLE_METHODS", "PARALLEL_DRAFT_METHODS", "V2_RUNNER_SPEC_METHODS", "GENERATED_SPEC_METHODS"):
        out += [f"{m}: in facts.{name} but not in facts.SPEC_METHODS" for m in getattr(facts, name)
                if m not in facts.SPEC_METHODS]
    out += [f"{m}: a draft config for no method in facts.SPEC_METHODS" for m in sorted(configs - set(facts.SPEC_METHODS))]
    return out


def test_every_speculative_method_has_its_facts_and_drafter():
    configs, handled = _drafters()
    assert {"eagle", "dflash"} <= configs and {"ngram", "mtp"} <= handled  # the scan reads the module
    assert spec_method_problems(configs, handled) == []


@pytest.mark.parametrize("missed, problem", [
    ("SPEC_LOOKAHEAD_EXTRA", "suffix: no lookahead fact (facts.SPEC_LOOKAHEAD_EXTRA)"),
    ("SPEC_METHODS_SINCE", "suffix: no release range (facts.SPEC_METHODS_SINCE, a modelled major.minor)"),
    ("drafter", "suffix: no drafter (consumer/drafters.py DRAFT_HF_CONFIGS, or a case in build)"),
])
def test_a_speculative_method_with_a_step_missed_is_reported(monkeypatch, missed, problem):
    configs, handled = _drafters()
    monkeypatch.setattr(facts, "SPEC_METHODS", facts.SPEC_METHODS + ("suffix",))
    if missed != "SPEC_LOOKAHEAD_EXTRA":
        monkeypatch.setitem(facts.SPEC_LOOKAHEAD_EXTRA, "suffix", 0)
    if missed != "SPEC_METHODS_SINCE":
        monkeypatch.setitem(facts.SPEC_METHODS_SINCE, "suffix", "0.32")
    assert spec_method_problems(configs | ({"suffix"} if missed != "drafter" else set()), handled) == [problem]
