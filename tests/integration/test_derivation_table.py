"""The checked-in derivation tables (spec/derived/) against real vLLM and the engine premise.

The tables (the tiny families' spec/derived/R.json and the reference
architectures' spec/derived/models/R.json) are what `verify` searches for
witness Configs, real architectures first, and what the engine premise
(spec/premise.py, the per-kind facts of src/kvproof/facts/__init__.py) was read from; they
must stay true:
- every derived layout, toy or real architecture, is inside the engine
  premise (the premise over-approximates what users reach, so a fact that a
  real derivation breaks is a wrong fact);
- per-state compression (tokens_per_state) appears only on the kinds and at
  the ratios kvproof.facts names, on blocks of whole states, and the real group
  counts stay within what the layout generator draws;
- re-deriving entries live gives the same layout and resolver result, for a
  seeded sample and for every Config the proof run cites as a reachable
  witness. fp8 KV caches derive only on CPUs with AVX-512 or AMX, so an fp8
  row is compared only when both sides derived it.
"""

from __future__ import annotations

import functools
import json
import random

import pytest

from kvproof import derivation
from kvproof.inputs.layout import Layout
from kvproof import facts
from kvproof.spec import premise
from kvproof.spec.properties import BY_KEY
from kvproof.revisions import revision_for
from kvproof.tiers.client import derive
from conftest import RELEASES as TEST_RELEASES, worker_for

RELEASES = ("0.27.0", "0.28.0", "0.32.0")  # tiny-family tables
# the releases with a checked-in reference-model table (spec/derived/models/R.json)
MODEL_RELEASES = tuple(sorted((p.stem for p in (derivation.table_dir() / "models").glob("*.json")),
                              key=lambda r: tuple(int(x) for x in r.split("."))))
SAMPLE = 5


def _rows(release, models: bool = False):
    rows = derivation.load_model_table(release) if models else derivation.load_table(release)
    if not rows:
        where = derivation.table_dir() / ("models" if models else "")
        pytest.fail(f"no {'reference-model' if models else 'derivation'} table for {release} in {where} "
                    f"(kvproof derive --enumerate{' --models' if models else ''} --vllm {release})")
    return rows


def _model_rows(release):
    return _rows(release, models=True)


@pytest.mark.parametrize("release, real", [(r, False) for r in RELEASES] + [(r, True) for r in MODEL_RELEASES])
def test_every_derived_layout_is_inside_the_engine_premise(release, real):
    revision = revision_for(release)
    rows = _model_rows(release) if real else _rows(release)
    layouts = [r for r in rows if r.layout is not None]
    assert layouts, f"no {release} row derived a layout"
    outside = [(r.config.describe(), premise.derivable(r.layout, revision)) for r in layouts
               if premise.derivable(r.layout, revision)]
    assert not outside, outside[:3]


def test_real_architectures_compress_only_where_the_premise_says():
    """facts.COMPRESSED_KINDS / COMPRESS_RATIOS / COMPRESSED_BLOCK_MULTIPLE_OF_RATIO against what
    the release's own model code built at real dimensions."""
    seen = {(r.release, r.config.model, g.kind, g.tokens_per_state, g.block_size)
            for rel in MODEL_RELEASES for r in _model_rows(rel) if r.layout is not None
            for g in r.layout.groups if g.tokens_per_state is not None}
    assert {kind for _, _, kind, _, _ in seen} <= set(facts.COMPRESSED_KINDS), seen
    assert {tps for _, _, _, tps, _ in seen} <= set(facts.COMPRESS_RATIOS), seen
    assert all(bs % tps == 0 for _, _, _, tps, bs in seen), seen
    # the field exists from 0.29: DeepSeek-V4's compressed MLA must show it there (a derivation that
    # drops the field would make the lines above pass on nothing)
    assert any(model == "deepseek_v4" and rel == "0.32.0" for rel, model, *_ in seen), seen


def test_real_group_counts_fit_the_layout_generator():
    from kvproof.fuzz.decode import MAX_GROUPS
    counts = {r.config.describe(): len(r.layout.groups) for rel in MODEL_RELEASES for r in _model_rows(rel)
              if r.layout is not None}
    assert max(counts.values()) <= MAX_GROUPS, max(counts.items(), key=lambda kv: kv[1])


def _table_cpu(release):
    path = derivation.table_dir() / "models" / f"{release}.json"
    return json.loads(path.read_text()).get("cpu", "unknown") if path.exists() else "unknown"


def _cpu_dependent(row) -> bool:
    """fp8 KV caches derive only on AVX-512/AMX CPUs; a real hybrid model's unpinned SSM state dtype
    (so its Mamba page and the attention block sized from it) follows the CPU (derivation.host_cpu):
    such a row is compared only on a CPU like the one that derived it."""
    if row.config.kv_cache_dtype == "fp8":
        return True
    return (row.real and row.layout is not None and row.layout.has_mamba
            and _table_cpu(row.release) != derivation.host_cpu())


@functools.lru_cache(maxsize=1)
def _all_witness_rows() -> tuple:
    """Every Config the proof run's baseline cites as a reachable witness (found once per process:
    each is a search of the tables; the tests ask for every release's share)."""
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
            out.append(row)
    return tuple(out)


def _witness_rows(release):
    """Every Config the proof run's baseline cites as a reachable witness on this release."""
    return [row for row in _all_witness_rows() if row.release == release]


ALL_RELEASES = tuple(sorted(set(RELEASES) | set(MODEL_RELEASES)))


def test_the_baseline_cites_reachable_findings():
    witnesses = [row for r in ALL_RELEASES for row in _witness_rows(r)]
    assert len(witnesses) >= 3
    # the search takes real architectures first: some finding is reached by one
    assert any(row.real for row in witnesses), [row.config.describe() for row in witnesses]


# A reference-model row the sample may pick: one whose recorded derivation was quick. Some
# architectures allocate real scratch buffers on old releases (hy_v4 on 0.27.0: 91 s at a 12.6 GB
# peak RSS, flint 86 s): re-deriving one here would cost make test minutes and, beside a second
# worker, half the machine's memory. The bench and the table runs derive every row.
QUICK_SECONDS = 30


@pytest.mark.integration
# re-derived on the releases the tests run on (KVPROOF_RELEASES: make test builds those); the
# static checks above read every table
@pytest.mark.parametrize("release", [r for r in ALL_RELEASES if r in TEST_RELEASES])
def test_table_entries_derive_the_same_on_real_vllm(release, workers):
    # a seeded sample of the toy table (where the release has one), one reference-model row that
    # derived a layout on any CPU, and every baseline witness on this release
    rng = random.Random(release)
    plain = [r for r in derivation.load_table(release) if not _cpu_dependent(r)]
    real = [r for r in derivation.load_model_table(release)
            if r.layout is not None and not r.config.flags and not r.layout.has_mamba
            and (r.seconds or 0) < QUICK_SECONDS]
    chosen = {r.config: r for r in rng.sample(plain, min(SAMPLE, len(plain))) + rng.sample(real, min(1, len(real)))
              + _witness_rows(release)}
    assert chosen, f"nothing to re-derive on {release}: no toy table, no reference-model table, no witness"
    live = derive(worker_for(release), list(chosen))
    compared = 0
    for d in live:
        row = chosen[d.config]
        if _cpu_dependent(row) and (row.layout is None or d.layout is None or row.real):
            continue
        compared += 1
        assert (d.layout.to_dict() if d.layout else None) == (row.layout.to_dict() if row.layout else None), \
            d.config.describe()
        assert (d.scheduler_block_size, d.hash_block_size) == (row.scheduler_block_size, row.hash_block_size)
        assert (d.error is None) == (row.error is None), (d.config.describe(), d.error, row.error)
    assert compared, f"every chosen row of {release} is CPU-dependent here ({derivation.host_cpu()})"


def test_find_config_cites_a_violating_derived_layout():
    row = derivation.find_config("0.27", "hybrid.group_multiple_of_hash[align]")
    assert row is not None, ("no 0.27 table row violates hybrid.group_multiple_of_hash[align]: the reachable "
                             "witness is missing (kvproof derive --enumerate --vllm 0.27.0)")
    assert isinstance(row.layout, Layout) and row.release.startswith("0.27")
    from kvproof.spec.query import concrete_holds
    assert concrete_holds(row.layout, "0.27", BY_KEY["hybrid.group_multiple_of_hash[align]"], "free")
