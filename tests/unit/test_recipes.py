"""The steps of docs/recipes.md, each checked: a release, an oracle or a speculative method added
with a step missed fails here. No vLLM: sources are read statically where they import it.

Each check is a function returning the problems it finds (empty: the step is done); the tests
assert it finds none in the tree, and that it does find the missed step when one is taken away.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

import pytest

from kvproof.judging import contracts, judge
from kvproof import facts, revisions
from kvproof.judging.oracle_ids import OracleId, UnknownOracle
from kvproof.outcome import StageError
from kvproof.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "kvproof"
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
    from kvproof.inputs.layout import Layout
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

def _recorded_ids(tree: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(ids recorded, as ``OracleId.NAME`` member names or string literals; ids raised): the first
    argument of every ``<...>.rec.add(...)`` and ``<...>.report(...)`` call, and the members whose
    ``.check`` is a ``StageError(...)``'s first argument (the judge's and the engine tier's own)."""
    members, literals, raised = set(), set(), set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        a = node.args[0]
        if isinstance(a, ast.Attribute) and a.attr == "check" and isinstance(a.value, ast.Attribute):
            a = a.value  # StageError(OracleId.NAME.check, ...)
        member = a.attr if isinstance(a, ast.Attribute) and getattr(a.value, "id", "") == "OracleId" else None
        if getattr(node.func, "id", getattr(node.func, "attr", "")) == "StageError":
            raised |= {member} if member else set()
            continue
        if isinstance(node.func, ast.Attribute):
            recv = node.func.value
            recv_name = recv.attr if isinstance(recv, ast.Attribute) else getattr(recv, "id", "")
            if not ((node.func.attr == "add" and recv_name == "rec") or node.func.attr == "report"):
                continue
            if member:
                members.add(member)
            elif isinstance(a, ast.Constant) and isinstance(a.value, str):
                literals.add(a.value)
    return members, literals, raised


def _built() -> list[type]:
    from kvproof.consumer import oracles
    return [type(p) for p in oracles.standard(None, None)]  # type: ignore[arg-type]


def oracle_problems(root: Path = SRC, classes: list[type] | None = None, built: list[type] | None = None,
                    ids: list[OracleId] | None = None) -> list[str]:
    """Recipe 2's missed steps: an id recorded that the registry does not hold; a registered id
    (``ids``: every member) no oracle reports (no plug-in's ``ids``, no ``rec.add``, no
    ``StageError``), a hard one nothing records; an Oracle plug-in (``classes``: every one in
    kvproof.consumer) with unregistered ids, that no run builds (``built``: ``oracles.standard``,
    or ``wiring``), that declares an ``order`` but ``standard()`` does not build it, or outside a
    ``*_oracle`` module; the standard oracles built out of their order."""
    from kvproof.consumer.oracle import Oracle
    from kvproof.consumer.oracles import PLUGIN_SUFFIX, declared

    members, literals, raised = set(), set(), set()
    for path in sorted(root.rglob("*.py")):
        got = _recorded_ids(ast.parse(path.read_text(), str(path)))
        members |= got[0]
        literals |= got[1]
        raised |= got[2]
    names = {o.name for o in OracleId}
    out = [f"OracleId.{m}: recorded but not registered" for m in sorted(members - names)]
    out += [f"{v!r}: recorded as a bare string, not an OracleId member" for v in sorted(literals)]
    recorded = {OracleId[m] for m in members & names}
    # ids the judge itself or another tier raises (not recorded as observations)
    elsewhere = {OracleId.IDEAL, OracleId.PREFIX_CACHING_OUTPUT, OracleId.EFFICIENCY}
    out += [f"{o}: hard but no oracle records it" for o in OracleId if o.hard and o not in recorded | elsewhere]
    classes = _subclasses(Oracle) if classes is None else classes
    built = _built() if built is None else built
    wiring = (root / "consumer" / "wiring.py").read_text()
    for cls in classes:
        if not cls.ids or any(not isinstance(i, OracleId) for i in cls.ids):
            out.append(f"{cls.__name__}: no registered ids")
        if cls not in built and not re.search(rf"\b{cls.__name__}\(", wiring):
            out.append(f"{cls.__name__}: no run builds it (no order, not in consumer/wiring.py)")
        if declared(cls) and cls not in built:
            out.append(f"{cls.__name__}: order {cls.order} but standard() does not build it")
        if declared(cls) and not cls.__module__.endswith(PLUGIN_SUFFIX):
            out.append(f"{cls.__name__}: an order outside a plug-in module (kvproof.consumer.<name>{PLUGIN_SUFFIX})")
    if [c.order for c in built] != sorted(c.order for c in built):
        out.append(f"standard() builds {[c.__name__ for c in built]}: not in ascending order")
    reporting = {i for c in classes for i in c.ids if isinstance(i, OracleId)} | recorded
    reporting |= {OracleId[m] for m in raised & names}
    out += [f"{o}: registered but no oracle reports it" for o in (list(OracleId) if ids is None else ids)
            if o not in reporting]
    return out


def _subclasses(cls: type) -> list[type]:
    """Every Oracle plug-in of kvproof.consumer (its no-vLLM modules imported first)."""
    import importlib
    import pkgutil

    import kvproof.consumer as pkg
    from kvproof import VLLM_SIDE
    for m in pkgutil.iter_modules(pkg.__path__):
        name = f"kvproof.consumer.{m.name}"
        if name not in VLLM_SIDE and m.name not in ("__main__", "harness", "worker"):
            importlib.import_module(name)
    out, todo = [], list(cls.__subclasses__())
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return [c for c in out if c.__module__.startswith("kvproof.consumer.")]


def test_every_recorded_oracle_id_is_registered_and_every_oracle_is_built():
    assert oracle_problems() == []


def test_the_standard_oracles_are_found_in_their_order():
    """No list: ``standard()`` builds what the plug-in modules declare; today's six keep their order
    (a new oracle may sit anywhere among them), and the shadow and the BlockRemoved oracle are wiring's."""
    from kvproof.consumer import oracles

    names = [c.__name__ for c in _built()]
    today = ["HitOracle", "EfficiencyOracle", "ChainOracle", "ConnectorOracle", "EventOracle", "CoordOracle"]
    assert [n for n in names if n in today] == today
    assert "Shadow" not in names and "RemovalOracle" not in names
    assert oracles.standard_classes() is oracles.standard_classes()  # found once
    assert all(m.endswith("_oracle") for m in {c.__module__ for c in oracles.standard_classes()})


def test_an_unbuilt_or_unregistered_oracle_is_reported(tmp_path):
    from kvproof.consumer.oracle import Oracle

    (tmp_path / "consumer").mkdir()
    (tmp_path / "consumer" / "wiring.py").write_text("")
    (tmp_path / "consumer" / "ghost_oracle.py").write_text(
        "def f(self):\n    self.report(OracleId.GHOST, 'x', cause='')\n    st.rec.add('stalled', 'y')\n")

    class Ghost(Oracle):
        ids = ()
    got = oracle_problems(tmp_path, [Ghost], built=[])
    assert "OracleId.GHOST: recorded but not registered" in got
    assert "'stalled': recorded as a bare string, not an OracleId member" in got
    assert "Ghost: no registered ids" in got and "Ghost: no run builds it (no order, not in consumer/wiring.py)" in got
    assert f"{OracleId.KV_EVENT}: hard but no oracle records it" in got  # nothing under tmp_path records it


def test_a_registered_id_no_oracle_reports_is_reported(tmp_path):
    """Step 2 missed (the id registered, no module written): even a soft id, which no hard-only check sees."""
    from kvproof.consumer.efficiency_oracle import EfficiencyOracle

    (tmp_path / "consumer").mkdir()
    (tmp_path / "consumer" / "wiring.py").write_text("")
    ids = [OracleId.EFFICIENCY, OracleId.KV_EVENT]
    got = oracle_problems(tmp_path, [], built=[], ids=ids)
    assert [p for p in got if "registered but" in p] == ["efficiency: registered but no oracle reports it",
                                                        "kv_event: registered but no oracle reports it"]
    got = oracle_problems(tmp_path, [EfficiencyOracle], built=[EfficiencyOracle], ids=ids)
    assert [p for p in got if "registered but" in p] == ["kv_event: registered but no oracle reports it"]


def test_an_ordered_oracle_standard_does_not_build_is_reported(tmp_path):
    """A plug-in that declares an order must be built by standard(), in its order; an order belongs
    in a ``*_oracle`` module."""
    from kvproof.consumer.chain_oracle import ChainOracle
    from kvproof.consumer.hit_oracle import HitOracle
    from kvproof.consumer.oracle import Oracle

    (tmp_path / "consumer").mkdir()
    (tmp_path / "consumer" / "wiring.py").write_text("")

    class Stray(Oracle):  # defined here: its module is no plug-in module
        ids, order = (OracleId.HASH_CHAIN,), 5
    got = oracle_problems(tmp_path, [HitOracle, ChainOracle, Stray], built=[ChainOracle, HitOracle])
    assert "HitOracle: order 10 but standard() does not build it" not in got
    assert "standard() builds ['ChainOracle', 'HitOracle']: not in ascending order" in got
    assert "Stray: order 5 but standard() does not build it" in got
    assert "Stray: an order outside a plug-in module (kvproof.consumer.<name>_oracle)" in got
    got = oracle_problems(tmp_path, [HitOracle, ChainOracle], built=[HitOracle])
    assert "ChainOracle: order 30 but standard() does not build it" in got


def _plugin_package(tmp_path, monkeypatch, name: str, files: dict[str, str]) -> str:
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for f, text in files.items():
        (pkg / f).write_text("from kvproof.consumer.oracle import Oracle\nfrom kvproof.judging.oracle_ids import OracleId\n"
                             + text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_new_plugin_module_is_found(tmp_path, monkeypatch):
    """The recipe's whole change is a module (and an id): discovery builds the ordered class of a
    ``*_oracle`` module, not one of another module, not one without an order of its own."""
    from kvproof.consumer import oracles

    pkg = _plugin_package(tmp_path, monkeypatch, "kvproof_plugins_found", {
        "late_oracle.py": "class Late(Oracle):\n    ids, order = (OracleId.KV_EVENT,), 20\n"
                          "class Heir(Late):\n    pass\n"
                          "class Wired(Oracle):\n    ids = (OracleId.KV_EVENT,)\n",
        "early_oracle.py": "class Early(Oracle):\n    ids, order = (OracleId.HASH_CHAIN,), 10\n",
        "helper.py": "class Elsewhere(Oracle):\n    ids, order = (OracleId.HASH_CHAIN,), 30\n"})
    assert [c.__name__ for c in oracles.standard_classes(pkg)] == ["Early", "Late"]


@pytest.mark.parametrize("decl, error", [
    ("ids, order = (OracleId.KV_EVENT,), 10", "order 10 is also"),
    ("ids, order = (), 20", "ids () must be a non-empty tuple of OracleId members"),
    ("ids, order = ('kv_event',), 20", "ids ('kv_event',) must be a non-empty tuple of OracleId members"),
    ("ids, order = (OracleId.KV_EVENT,), '20'", "order '20' is not an int"),
])
def test_a_wrong_declaration_is_an_error_at_discovery(tmp_path, monkeypatch, decl, error):
    from kvproof.consumer import oracles

    pkg = _plugin_package(tmp_path, monkeypatch, "kvproof_plugins_bad_" + hashlib.sha1(decl.encode()).hexdigest()[:8], {
        "a_oracle.py": "class A(Oracle):\n    ids, order = (OracleId.KV_EVENT,), 10\n",
        "b_oracle.py": f"class B(Oracle):\n    {decl}\n"})
    with pytest.raises(oracles.OracleDiscoveryError, match=re.escape(error)):
        oracles.standard_classes(pkg)


def _judged(oracle: str):
    from kvproof.consumer.observations import Recorder
    from kvproof.consumer.result import ConsumerResult

    res = ConsumerResult("x", "v", scheduler_block_size=16, hash_block_size=16)
    Recorder(res.observations, res.counts).add(oracle, "KeyError: 'x' @ vllm/v1/core/f.py:1 in g", cause="r|p")
    return judge.judge_consumer(res)


@pytest.mark.parametrize("oracle", [o.value for o in OracleId])
def test_every_registered_oracle_is_judged_as_the_registry_says(oracle):
    """The judge reads hard or soft from the registry: an observation of a hard id fails the run
    (the observed check is the id's), one of a soft id never does."""
    j = _judged(oracle)
    if OracleId(oracle).hard:
        assert j.verdict == Verdict.FAIL, (oracle, j.line())
        assert oracle == OracleId.EXCEPTION or j.observed.type == OracleId(oracle).check
    else:
        assert j.verdict != Verdict.FAIL, (oracle, j.line())


def test_an_unregistered_oracle_id_is_an_error():
    from kvproof.consumer.observations import Observation
    from kvproof.consumer.result import ConsumerResult

    with pytest.raises(UnknownOracle):
        _judged("ghost")  # the recorder refuses it
    res = ConsumerResult("x", "v", scheduler_block_size=16, hash_block_size=16)
    res.observations.append(Observation("ghost", 0, "read back from a result's JSON"))
    with pytest.raises(UnknownOracle):
        judge.judge_consumer(res)  # the judge too, never a silent non-failure


# --- recipe 3: add a speculative method ------------------------------------------------------

def _drafters() -> tuple[set[str], set[str]]:
    """consumer/drafters.py (a vLLM-side module, read statically): the methods with a draft config
    (DRAFT_HF_CONFIGS) and those ``build`` handles without one (``drafts.method == "..."``; the
    construction is its ``_build``, which ``build`` memoises)."""
    tree = ast.parse((SRC / "consumer" / "drafters.py").read_text())
    configs, handled = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DRAFT_HF_CONFIGS" for t in node.targets):
            configs = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if isinstance(node, ast.FunctionDef) and node.name in ("build", "_build"):
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
