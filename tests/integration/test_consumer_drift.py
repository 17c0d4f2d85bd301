"""The consumer drift alarm on the installed releases (kvproof.verify.consumer_drift).

A managed release whose consumer functions no longer match the reviewed
record (spec/derived/consumer_fingerprints.json) fails here until someone
reviews the change and records it with ``--write``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import RELEASES, require_env
from kvproof import envs
from kvproof.errors import EnvError
from kvproof.spec import consumer_fingerprint as cf

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("release", RELEASES)
def test_installed_consumers_match_the_reviewed_record(release):
    env = require_env(release)
    got = cf.fingerprints(envs.site_packages(env.root))
    want = cf.recorded(cf.load(), release)
    assert want is not None, f"{release}: no reviewed consumer record; `python -m kvproof.verify.consumer_drift --write`"
    drift = [f"{kind(o, n)} {key}" for _, key, o, n, _ in cf.diff(want, got)]
    assert not drift, f"{release}: consumer code differs from the reviewed record: {drift[:10]}"


def kind(old, new) -> str:
    return "appeared" if old is None else "vanished" if new is None else "changed"


def test_the_readme_command_reports_0_34_drift():
    for r in ("0.33.0", "0.34.0"):
        try:
            envs.find(r)
        except EnvError as err:
            if os.environ.get("KVPROOF_REQUIRE_ENVS") == "1":
                pytest.fail(str(err))
            pytest.skip(str(err))
    p = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "kvproof.verify.consumer_drift",
                        "--from", "0.33.0", "--to", "0.34.0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("consumer drift 0.33.0 -> 0.34.0: ")
    assert "installed env vllm-0.33.0" in lines[1] and "installed env vllm-0.34.0" in lines[2]
    assert "(identical)" in lines[3]  # the resolver's alarm stays quiet: this one is the only one
    appeared = "  appeared  vllm/distributed/kv_transfer/kv_connector/v1/base.py:KVConnectorBase_V1." \
               "supports_lookahead_block_hashes  (modelled as 0.33.0)"
    assert appeared in lines
    assert "connectors" in lines and "speculative" in lines
