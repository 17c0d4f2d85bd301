"""Hits per release for the reference models under their speculative flag sets (``make matrix``).

    kvproof compare --models [--vllm R ...]

Each release derives the speculative reference Configs itself (MTP at every depth for the MTP
architectures, EAGLE-3 with the reference drafts: ``derivation.model_flag_sets``), one worker
call per release, or reads them from its checked-in model table when that was derived on this CPU
kind (``--derive`` derives anew); every Config that derives runs at the consumer tier under ONE stream on every
release (``default_stream`` of the largest layout any release derived for it), so a column is
the same configuration and traffic on another release. The differential of
:mod:`kvproof.commands.compare` then judges consecutive releases admission by admission: a release
that hits less than the one before is a regression class named by its first bad release.
No vLLM import here.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from kvproof.inputs.config import Config, reference_models
from kvproof.bridge.client import Worker
from kvproof.consumer.stream import default_stream
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.stream import Stream
from kvproof.derivation import MODEL_FLAG_SETS, Derived, config_key, model_flag_sets, model_rows_here
from kvproof.inputs.layout import Layout
from kvproof.tiers import client


def speculative_configs() -> list[Config]:
    """The reference Configs under the speculative flag sets a model has beyond the common ones
    (``derivation.model_flag_sets``: drafts with prefix caching on)."""
    return [Config(model=m, flags=f) for m in reference_models() for f in model_flag_sets(m)[len(MODEL_FLAG_SETS):]]


@dataclass(frozen=True)
class Cell:
    layout: Layout | None  # None: the release refused the configuration
    result: ConsumerResult | None = None

    def text(self) -> str:
        if self.layout is None:
            return "refused"
        r = self.result
        if r is None or r.setup_error or r.harness_error or r.not_expressible:
            return "not run"
        e = r.efficiency
        return f"{e.hit_tokens}/{e.reusable_tokens} ({100 * e.recomputed_fraction:.1f}%) B={r.scheduler_block_size}"


def _label(c: Config) -> str:
    spec = json.loads(c.flags[c.flags.index("--speculative-config") + 1])
    return f"{c.model} {spec['method']} k={spec['num_speculative_tokens']}"


def derived_on(release: str, configs: Sequence[Config], fresh: bool = False, worker: Worker | None = None
               ) -> list[Derived]:
    """Each Config's derivation on ``release``: the checked-in model table's row where it was
    derived on this CPU kind (``derivation.model_rows_here``; the table tests re-derive samples of
    it on the real release), the release's worker for the rest (all of them with ``fresh``);
    ``worker``: a live one of the release's (else one is started for the call)."""
    from kvproof.running.checking import derive_all
    rows = {} if fresh else model_rows_here(release)
    todo = [c for c in configs if config_key(c) not in rows]
    new = iter(derive_all(release, todo, worker) if todo else [])
    out = []
    for c in configs:
        row = rows.get(config_key(c))
        out.append(next(new) if row is None else
                   Derived(c, row.layout, None, row.scheduler_block_size, row.hash_block_size))
    return out


def build(releases: Sequence[str], fresh: bool = False, jobs: int | None = None
          ) -> tuple[list[Config], dict[str, list[Cell]], list[Stream | None]]:
    """Derive on every release, pick one stream per Config, run the consumer tier per release.

    One worker per release does both (vLLM imported once, not once per phase), ``jobs`` releases
    at a time (default: the cores): the derivations are most of the time, the consumer runs under
    a second per release. A worker stays up between the phases: the stream of a Config needs
    every release's derivation."""
    from kvproof import envs
    configs = speculative_configs()
    workers: dict[str, Worker] = {}
    derived: dict[str, list[Derived]] = {}

    def derive_one(rel: str) -> list[Derived]:
        [w] = client.start([envs.find(rel)])
        workers[rel] = w
        return derived_on(rel, configs, fresh, w)

    try:
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            for rel, ds in zip(releases, pool.map(derive_one, releases)):
                derived[rel] = ds
        streams: list[Stream | None] = []
        for i in range(len(configs)):
            lays = [derived[rel][i].layout for rel in releases if derived[rel][i].layout is not None]
            streams.append(default_stream(max(lays, key=lambda lay: lay.largest_block))
                           if lays else None)
        cells: dict[str, list[Cell]] = {}
        for rel in releases:
            todo = [(i, d.layout) for i, d in enumerate(derived[rel]) if d.layout is not None and streams[i]]
            results = client.consumed(workers[rel], [lay.with_stream(streams[i]) for i, lay in todo]) if todo else []
            by_i = {i: res for (i, _), res in zip(todo, results)}
            cells[rel] = [Cell(d.layout, by_i.get(i)) for i, d in enumerate(derived[rel])]
    finally:
        for w in workers.values():
            w.close()
    return configs, cells, streams


def print_matrix(configs: Sequence[Config], cells: dict[str, list[Cell]]) -> None:
    rels = list(cells)
    print("hits per release (hit/reusable shared-prefix tokens, recomputed share, scheduler block), "
          "one stream per configuration:")
    width = max(len(_label(c)) for c in configs)
    print(f"  {'configuration':<{width}}  " + "  ".join(f"{r:>24}" for r in rels))
    for i, c in enumerate(configs):
        print(f"  {_label(c):<{width}}  " + "  ".join(f"{cells[r][i].text():>24}" for r in rels))
