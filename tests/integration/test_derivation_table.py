"""The checked-in derivation tables (spec/derived/) against real vLLM and the engine premise.

The tables are what `verify` searches for witness Configs and what the
engine premise (spec/premise.py) was read from; they must stay true:
- every derived layout is inside the engine premise (the premise
  over-approximates what users reach, so a fact that a real derivation
  breaks is a wrong fact);
- re-deriving entries live gives the same layout and resolver result, for a
  seeded sample and for every Config the proof run cites as a reachable
  witness. fp8 KV caches derive only on CPUs with AVX-512 or AMX, so an fp8
  row is compared only when both sides derived it.
"""

from __future__ import annotations

import json
import random

import pytest

from kvproof import derivation
from kvproof.layout import Layout
from kvproof.spec import premise
from kvproof.spec.properties import BY_KEY
from kvproof.spec.revisions import revision_for
from conftest import worker_for

RELEASES = ("0.27.0", "0.28.0", "0.32.0")
SAMPLE = 5


def _rows(release):
    rows = derivation.load_table(release)
    if not rows:
        pytest.fail(f"no derivation table for {release} in {derivation.table_dir()} "
                    f"(kvproof derive --enumerate --vllm {release})")
    return rows


@pytest.mark.parametrize("release", RELEASES)
def test_every_derived_layout_is_inside_the_engine_premise(release):
    revision = revision_for(release)
    outside = [(r.config.describe(), premise.derivable(r.layout, revision)) for r in _rows(release)
               if r.layout is not None and premise.derivable(r.layout, revision)]
    assert not outside, outside[:3]


def _cpu_dependent(row) -> bool:
    return row.config.kv_cache_dtype == "fp8"


def _witness_rows(release):
    """Every Config the proof run's baseline cites as a reachable witness on this release."""
    import kvproof.verify
    from pathlib import Path
    baseline = json.loads((Path(kvproof.verify.__file__).parent / "baseline.json").read_text())
    out = []
    for revision, props in baseline["revisions"].items():
        for key, e in props.items():
            if e.get("reachability") != "reachable":
                continue
            row = derivation.find_config(revision, key)
            assert row is not None, f"the baseline says {revision} {key} is reachable; no table row violates it"
            if row.release == release:
                out.append(row)
    return out


def test_the_baseline_cites_reachable_findings():
    assert sum(len(_witness_rows(r)) for r in RELEASES) >= 3


@pytest.mark.integration
@pytest.mark.parametrize("release", RELEASES)
def test_table_entries_derive_the_same_on_real_vllm(release, workers):
    rows = _rows(release)
    rng = random.Random(release)
    plain = [r for r in rows if not _cpu_dependent(r)]
    chosen = {r.config: r for r in rng.sample(plain, min(SAMPLE, len(plain))) + _witness_rows(release)}
    live = worker_for(release).derive(list(chosen))
    for d in live:
        row = chosen[d.config]
        if _cpu_dependent(row) and (row.layout is None or d.layout is None):
            continue
        assert (d.layout.to_dict() if d.layout else None) == (row.layout.to_dict() if row.layout else None), \
            d.config.describe()
        assert (d.scheduler_block_size, d.hash_block_size) == (row.scheduler_block_size, row.hash_block_size)
        assert (d.error is None) == (row.error is None), (d.config.describe(), d.error, row.error)


def test_find_config_cites_a_violating_derived_layout():
    row = derivation.find_config("0.27", "hybrid.group_multiple_of_hash[align]")
    assert row is not None, ("no 0.27 table row violates hybrid.group_multiple_of_hash[align]: the reachable "
                             "witness is missing (kvproof derive --enumerate --vllm 0.27.0)")
    assert isinstance(row.layout, Layout) and row.release.startswith("0.27")
    from kvproof.spec.query import concrete_holds
    assert concrete_holds(row.layout, "0.27", BY_KEY["hybrid.group_multiple_of_hash[align]"], "free")
