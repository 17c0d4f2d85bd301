"""CLI edges that need no vLLM: bad input is one line and exit 2."""

import subprocess
import sys

import pytest

from kvproof.commands import cli, explain
from kvproof.errors import UsageError


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "kvproof", *args], capture_output=True, text=True, input=stdin)


@pytest.mark.parametrize("args, needle", [
    (["check"], "give layout files or --groups"),
    (["check", "--groups", "mamba:x"], "block size and count must be integers"),
    (["check", "--groups", "weird:16"], "kind must be one of"),
    (["check", "--groups", "mamba:16", "--dcp", "0"], "dcp must be >= 1"),
    (["check", "--groups", "mamba:16", "--dcp", "two"], "invalid int value"),
    (["check", "/no/such/file.json"], "cannot read"),
    (["check", "--groups", "mamba:16", "--vllm", "banana"], "not understood"),
    (["explain", "nothing to see"], "no 'block_sizes=[...], hash_block_size=N'"),
    (["frobnicate"], "invalid choice"),
])
def test_usage_errors_are_one_line_exit_2(args, needle):
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_layout_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"groups": [{"kind": "mamba", "block_size": -4}]}')
    proc = run("check", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"kvproof: error: {bad}: groups[0].block_size must be >= 1, got -4"


def test_explain_candidates_cover_every_mode_caching_and_connector():
    sizes = [544, 544, 544, 544, 181]
    choices = explain.candidates(sizes, 98464, "0.27.0")
    mamba = [c for c in choices if c.mamba_block_size == 544]
    assert {c.mamba_cache_mode for c in mamba} == {"align", "all", "none"}
    assert {(c.prefix_caching, c.connector) for c in mamba} == {(True, False), (True, True), (False, True),
                                                                 (False, False)}
    assert all(c.layout.cache.block_size == 181 for c in choices)  # the engine's cache block size
    assert not [c for c in explain.candidates(sizes, 98464, "0.32.0") if c.mamba_cache_mode == "all"]


def test_explain_reads_a_non_lcm_non_gcd_hash_as_prefix_match_unit():
    choices = explain.candidates([16, 48], 32, "0.32.0")
    assert any(c.prefix_match_unit == 32 for c in choices)


def test_contracts_listing_names_every_contract(capsys):
    assert cli.main(["contracts"]) == 0
    out = capsys.readouterr().out
    assert "hybrid.group_multiple_of_hash" in out and "HybridKVCacheCoordinator" in out


def test_in_process_usage_error_is_raised_as_kvproof_error():
    with pytest.raises(UsageError):
        cli._parser().parse_args(["check", "--dcp", "x"])


@pytest.mark.parametrize("content, needle", [
    (b'{"groups": [{"kind": "mamba", "block_size": 1\xff}]}', "not UTF-8"),
    (b'{"groups": [{"kind": "mamba", "block_size": ' + b"9" * 5000 + b"}]}", "not usable JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"groups": [{"kind": "mamba", "block_size": 16}], "kv_connector": "NoSuchConnector"}',
     "is not a vLLM connector (registered: "),
    (b"", "not JSON"),
])
def test_hostile_layout_files_are_one_line_exit_2(tmp_path, content, needle):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    proc = run("check", str(bad))
    assert proc.returncode == 2, proc.stderr[-500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr[-500:]


def test_unknown_connector_inline_names_the_registered_ones():
    proc = run("check", "--groups", "mamba:16", "--kv-connector", "Bogus")
    assert proc.returncode == 2 and "OffloadingConnector" in proc.stderr and len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("cmd", [["check", "--config", "qwen3_5"], ["derive", "qwen3_5"]])
@pytest.mark.parametrize("argv, flags", [
    (["--flags", "--enable-prefix-caching"], "--enable-prefix-caching"),  # one flag: argparse read it as an option
    (["--flags", "--enable-prefix-caching --mamba-cache-mode align"], "--enable-prefix-caching --mamba-cache-mode align"),
    (["--flags=--enable-prefix-caching"], "--enable-prefix-caching"),
    (["--flags", "-O3", "--vllm", "0.28.0"], "-O3"),  # the options after it are still options
    (["--vllm", "0.28.0", "--", "--enable-prefix-caching", "--hf-overrides", '{"a": 1}'],
     "--enable-prefix-caching --hf-overrides '{\"a\": 1}'"),
    (["--"], ""),
])
def test_flags_take_any_serve_line_a_single_flag_included(cmd, argv, flags):
    args = cli._parse(cmd + argv)
    assert args.cmd == cmd[0] and args.flags == flags
    if "--vllm" in argv:
        assert args.vllm == ["0.28.0"]
    import shlex
    (_, config), = cli.load_configs(["qwen3_5"], args.flags)
    assert config.flags == tuple(shlex.split(flags))


def test_flags_after_a_bare_double_dash_keep_every_word():
    args = cli._parse(["check", "--config", "qwen3_5", "--", "--enable-prefix-caching", "--hf-overrides", '{"a": 1}'])
    (_, config), = cli.load_configs(args.config, args.flags)
    assert config.flags == ("--enable-prefix-caching", "--hf-overrides", '{"a": 1}')


def test_other_commands_keep_their_argv():
    assert cli._serve_flags_argv(["explain", "--flags", "-x", "--", "y"]) == ["explain", "--flags", "-x", "--", "y"]


@pytest.mark.parametrize("args, needle", [
    # parsed now; refused by the command itself (no vLLM needed): before, "expected one argument"
    (["check", "--groups", "mamba:16", "--flags", "--enable-prefix-caching"], "check: --flags go with --config"),
    (["check", "--groups", "mamba:16", "--", "--enable-prefix-caching"], "check: --flags go with --config"),
    (["derive", "--flags", "--enable-prefix-caching"], "derive: give a Config"),
    # bad input
    (["check", "--config", "qwen3_5", "--flags"], "argument --flags: expected one argument"),
    (["check", "--config", "qwen3_5", "--flags", "-O3", "--", "--enforce-eager"], "not both"),
    (["derive", "qwen3_5", "--flags", "'unbalanced"], "--flags: No closing quotation"),
])
def test_flags_edges_are_one_line_exit_2(args, needle):
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr
