"""Every ledger bug a real model reaches names it, and the name holds on real vLLM (issue 27 item 4).

A bug entry's ``witness_config`` is the reference model (spec/models/) and serve flags
``kvproof findings witness`` found; here the search, restricted to that model, runs again on
the newest release the entry fails on that ``make test`` builds: the model derives to the
entry's shape and, at the entry's tier (a consumer class under its stream scaled to the
model's blocks), falls in the entry's class.
"""

from __future__ import annotations

import pytest

from kvproof.findings.ledger import Ledger, Status
from kvproof.findings.witness_search import search

from conftest import RELEASES, require_env

pytestmark = [pytest.mark.integration, pytest.mark.consumer]

WITNESSED = [e for e in Ledger.load().entries() if e.status == Status.BUG and e.witness_config]


def test_the_bug_entries_name_their_witnesses():
    assert WITNESSED, "no bug entry names the real model that reaches it"


@pytest.mark.parametrize("entry", WITNESSED, ids=lambda e: e.id)
def test_the_named_model_reaches_the_class(entry):
    bad = [r for r in RELEASES if entry.releases.get(r) in ("FAIL", "ERROR", "UNSUPPORTED")]
    if not bad:
        pytest.skip(f"{entry.id} fails on none of {RELEASES}")
    require_env(bad[-1])
    model = entry.witness_config["model"]
    hits = search(entry, bad[-1], models=(model,))
    assert [w.config.model for w in hits] == [model], (entry.id, bad[-1])
    assert list(hits[0].config.flags) == entry.witness_config["flags"], hits[0].config.flags
