"""`kvproof check` / `explain` end to end against real releases (integration)."""

import json
import subprocess
import sys

import pytest

from kvproof import envs

pytestmark = pytest.mark.integration
from conftest import CPU_RELEASES as RELEASES  # noqa: E402  (the one release list, src/kvproof/facts/__init__.py)
SEED_LINE = ("AssertionError: Each KV cache group's real block_size must be divisible by hash_block_size. "
             "block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464")


def kvproof(*args):
    return subprocess.run([sys.executable, "-m", "kvproof", *args], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def seed_rows(tmp_path_factory):
    from conftest import require_env
    for r in RELEASES:
        require_env(r)
    f = tmp_path_factory.mktemp("layouts") / "seed.json"
    f.write_text(json.dumps({"groups": [{"kind": "mamba", "block_size": 544, "count": 4, "mamba_cache_mode": "align"},
                                        {"kind": "hidden_state", "block_size": 181}],
                             "cache": {"block_size": 181, "enable_prefix_caching": True}}))
    args = ["check", str(f), "--json"] + [a for r in RELEASES for a in ("--vllm", r)]
    proc = kvproof(*args)
    return proc, json.loads(proc.stdout)


def test_check_file_json_gives_the_issue_table(seed_rows):
    proc, data = seed_rows
    assert proc.returncode == 1  # a FAIL on 0.27.0
    bridge = [r for r in data["results"] if r["tier"] != "consumer"]
    got = {r["vllm"]: (r["scheduler_block_size"], r["hash_block_size"], r["verdict"]) for r in bridge}
    assert got == {"0.27.0": (98464, 98464, "FAIL"), "0.28.0": (98464, 1, "WARN"), "0.32.0": (98464, 1, "WARN")}
    fail = next(r for r in bridge if r["vllm"] == "0.27.0")
    assert fail["violations"][0]["contract"] == "hybrid.group_multiple_of_hash"
    assert "hash_block_size=98464" in fail["outcome"]["manager_error"]["message"]
    # a Layout file goes through the consumer tier too (issue 24 item 3): the real Scheduler
    # raises the same assertion on 0.27.0; later releases run the stream, and hits of whole
    # 544-token Mamba blocks where hash blocks of 1 token would allow more are a WARN
    consumer = {r["vllm"]: r for r in data["results"] if r["tier"] == "consumer"}
    assert set(consumer) == set(got), data["results"]
    assert consumer["0.27.0"]["verdict"] == "FAIL" and consumer["0.27.0"]["outcome"] is None
    assert consumer["0.27.0"]["violations"][0]["contract"] == "hybrid.group_multiple_of_hash"
    assert "hash_block_size=98464" in consumer["0.27.0"]["message"]
    assert {consumer[r]["verdict"] for r in ("0.28.0", "0.32.0")} == {"WARN"}


def test_explain_lists_every_reproducing_choice_per_release():
    proc = kvproof("explain", SEED_LINE, "--json", *[a for r in RELEASES for a in ("--vllm", r)])
    assert proc.returncode == 1, proc.stderr
    by = {r["vllm"]: r for r in json.loads(proc.stdout)["releases"]}
    # 0.27: the align fallback (the seed) and mode "all" both print it; the line cannot tell them apart
    modes_027 = {c["layout"]["cache"]["mamba_cache_mode"] for c in by["0.27.0"]["reproducing"]}
    assert modes_027 == {"align", "all"} and by["0.27.0"]["ambiguous"]
    # 0.28 fixed align, but a user who sets mamba_cache_mode="all" still gets the same line
    assert {c["layout"]["cache"]["mamba_cache_mode"] for c in by["0.28.0"]["reproducing"]} == {"all"}
    assert not by["0.32.0"]["reproducing"]  # 0.32 accepts no "all" and hashes at the GCD in align
    assert all(c["message"].endswith("block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464")
               for r in by.values() for c in r["reproducing"])
    assert any(c["derived_by"] for c in by["0.28.0"]["reproducing"])  # a real model reaches the 0.28 class


def test_user_interpreter_via_python_flag():
    env = envs.find("0.32.0")
    proc = kvproof("check", "--groups", "full_attention:16,mamba:16", "--python", str(env.python), "--json")
    assert proc.returncode == 0, proc.stderr
    row, consumer = json.loads(proc.stdout)["results"]
    assert row["vllm"] == "0.32.0" and row["verdict"] == "OK" and row["hash_block_size"] == 16
    assert (consumer["tier"], consumer["vllm"], consumer["consumer"]["vllm_version"]) == ("consumer", "0.32.0", "0.32.0")


def test_check_on_a_by_design_refusal_is_unsupported_and_exits_0():
    """DCP with a sliding-window group beside full attention: the hybrid coordinator refuses it by
    design on every release (a bare assert at startup, shown with its message), never a FAIL."""
    from conftest import require_env
    release = RELEASES[-1]
    require_env(release)
    proc = kvproof("check", "--groups", "full_attention:64,sliding_window:64", "--dcp", "2", "--prefix-caching",
                   "--json", "--vllm", release)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["results"][0]
    assert row["verdict"] == "UNSUPPORTED" and row["by_design"], row
    assert "DCP" in row["outcome"]["manager_error"]["message"]
