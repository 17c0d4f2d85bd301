"""The witness search over several ledger classes on real vLLM (issue 42 item 4).

Sharing one derivation per (release, model, flags) across classes must change nothing but the
number of derivations: the same witnesses as searching class by class. A search that finds no
witness is still recorded in the entry, with its models and releases.
"""

from __future__ import annotations

import json
import shutil

import pytest

from kvproof.running import checking
from kvproof.findings import cli as findings_cli
from kvproof.findings.ledger import HERE, Ledger
from kvproof.findings.witness_search import search_many

from conftest import RELEASES, require_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

# two bug classes of one flag set (prefix caching + SimpleCPUOffloadConnector), each with its witness
SHARED = ("9a8b69482973", "f2216f93e1a4")
MODELS = ("gpt_oss", "mistral")


def _counting(monkeypatch) -> list[int]:
    """Count the Configs each derive_all call derives (kvproof's own call, wrapped, not replaced)."""
    counts: list[int] = []
    real = checking.derive_all

    def derive_all(release, configs, *a, **kw):
        counts.append(len(configs))
        return real(release, configs, *a, **kw)
    monkeypatch.setattr(checking, "derive_all", derive_all)
    return counts


def test_sharing_derivations_across_classes_finds_the_one_by_one_witnesses(monkeypatch):
    led = Ledger.load()
    entries = [led.find(i) for i in SHARED]
    release = next((r for r in reversed(RELEASES) if all(e.releases.get(r) == "FAIL" for e in entries)), None)
    if release is None:
        pytest.skip(f"no release of {RELEASES} where both {SHARED} fail")
    require_env(release)
    counts = _counting(monkeypatch)
    alone = [search_many([(e, release)], MODELS)[0] for e in entries]
    shared = search_many([(e, release) for e in entries], MODELS)
    assert counts == [2, 2, 2]  # one by one each class derives both models; shared, once for both

    def found(s):
        return [(w.config.model, w.config.flags) for w in s.witnesses]
    assert [found(s) for s in shared] == [found(s) for s in alone]
    for e, s in zip(entries, shared):
        assert e.witness_config["model"] in [m for m, _ in found(s)], (e.id, s.record()["shaped"])
        assert s.record()["result"].startswith("witness ")


def test_a_search_that_finds_nothing_is_recorded_with_its_models_and_releases(tmp_path, capsys):
    for r in ("0.33.0", "0.34.0"):  # 6af601441c48 regressed on 0.34.0: its pair is 0.33.0 -> 0.34.0
        if r not in RELEASES:
            pytest.skip(f"{r} is not among {RELEASES}")
        require_env(r)
    shutil.copy(HERE / "6af601441c48.json", tmp_path)
    argv = ["--ledger", str(tmp_path), "witness", "6af601441c48", "--model", "gemma2", "--write"]
    assert findings_cli.main(argv) == 1  # no witness
    assert "no reference model reaches it" in capsys.readouterr().out
    entry = json.loads((tmp_path / "6af601441c48.json").read_text())
    assert entry["status"] == "latent" and entry["witness_config"] is None
    rec, = entry["searches"]
    assert (rec["release"], rec["compared_with"], rec["models"]) == ("0.34.0", "0.33.0", ["gemma2"])
    assert rec["result"] == "no reference model reaches it" and rec["flag_sets"][0]["models"] == 1
    # gemma2 (full attention + sliding window) has the class's kinds: it ran, and did not regress
    assert [x["model"] for x in rec["shaped"]] == ["gemma2"] and "OK" in rec["shaped"][0]["got"]
