"""``kvproof findings report``'s speed-ups keep what it reports (issue 45 item 5).

A cached fix overlay (kvproof.findings.fixenv) is used only for the same content key: the
same release environment, the same diff bytes, the same overlay builder; a changed diff, a
damaged overlay or another builder version builds anew. The reproducer's runs side by side
give each release the verdict the one-at-a-time runs give. Real releases, real vLLM files;
the overlays go to a private folder under the user's cache (same filesystem as the
environments, for hard links), removed at the end."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import RELEASES, require_env

from kvproof import envs
from kvproof.envs import overlay
from kvproof.findings import fixenv
from kvproof.findings.fix import diff_path, files_of, patched
from kvproof.findings.ledger import Ledger
from kvproof.findings.reproducers import script
from kvproof.findings.runs import run_script
from kvproof.fsio import atomic_write
from kvproof.settings import settings

pytestmark = pytest.mark.integration
ENTRY = "9a8b69482973"  # the SimpleCPUOffload event mispairing: a fix diff, affected 0.30.0+
FIX_RELEASE = "0.33.0"


@pytest.fixture
def where():
    d = settings().cache_home / f"test-fixenv-{os.getpid()}"
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _changed(diff: str) -> str:
    """The diff with one added line's bytes changed (it still applies: the context is the same)."""
    lines = diff.splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if ln.startswith("+") and not ln.startswith("+++") and ln.strip("+\n"))
    lines[i] = lines[i].rstrip("\n") + "  # changed\n"
    return "".join(lines)


def test_a_cached_fix_overlay_is_used_only_for_the_same_content(where, monkeypatch):
    require_env(FIX_RELEASE)
    diff = diff_path(ENTRY).read_text()
    rel = files_of(diff)[0]
    base_file = envs.site_packages(envs.find(FIX_RELEASE).root) / rel
    base_bytes = base_file.read_bytes()

    first, hit = fixenv.fixed_env(ENTRY, FIX_RELEASE, diff, patched(diff, FIX_RELEASE), where)
    assert not hit
    assert (envs.site_packages(first.root) / rel).read_bytes() == patched(diff, FIX_RELEASE)[rel] != base_bytes
    again, hit = fixenv.fixed_env(ENTRY, FIX_RELEASE, diff, patched(diff, FIX_RELEASE), where)
    assert hit and again.root == first.root

    other = _changed(diff)
    assert fixenv.content_key(FIX_RELEASE, other) != fixenv.content_key(FIX_RELEASE, diff)
    moved, hit = fixenv.fixed_env(ENTRY, FIX_RELEASE, other, patched(other, FIX_RELEASE), where)
    assert not hit and moved.root == first.root  # rebuilt in its place
    assert envs.manifest_of(moved.root)["overlay"]["cache_key"] == fixenv.content_key(FIX_RELEASE, other)
    assert (envs.site_packages(moved.root) / rel).read_bytes() == patched(other, FIX_RELEASE)[rel]

    # a damaged overlay (its patched file edited) under the right key is not used
    atomic_write(envs.site_packages(moved.root) / rel, b"# edited\n")
    rebuilt, hit = fixenv.fixed_env(ENTRY, FIX_RELEASE, other, patched(other, FIX_RELEASE), where)
    assert not hit and (envs.site_packages(rebuilt.root) / rel).read_bytes() == patched(other, FIX_RELEASE)[rel]

    # another builder version is another key
    monkeypatch.setattr(overlay, "BUILDER_VERSION", overlay.BUILDER_VERSION + 1)
    _, hit = fixenv.fixed_env(ENTRY, FIX_RELEASE, other, patched(other, FIX_RELEASE), where)
    assert not hit
    assert base_file.read_bytes() == base_bytes  # nothing was written through a hard link


def test_side_by_side_runs_give_the_serial_verdicts(tmp_path):
    entry = Ledger.load().find(ENTRY)
    rels = [r for r in ("0.28.0", "0.32.0") if r in RELEASES]  # OK there, BUG here
    if len(rels) < 2:
        pytest.skip(f"needs 0.28.0 and 0.32.0 under test, have {RELEASES}")
    for r in rels:
        require_env(r)
    path = tmp_path / "repro.py"
    path.write_text(script(entry))
    serial = run_script(path, rels, entry, jobs=1)
    parallel = run_script(path, rels, entry, jobs=len(rels))
    assert [(r.release, r.rc, r.last) for r in parallel] == [(r.release, r.rc, r.last) for r in serial]
    assert [r.result for r in parallel] == ["OK", "BUG"], [r.last for r in parallel]
