"""The commands the README and the Makefile offer, typed exactly as a user types them.

Each test runs in the checkout root of a fresh ``git clone`` of this repository
(into a temporary folder), with default paths (no ``--workdir``, ``--crash-dir``,
no ``KVPROOF_*`` folder variables), time-boxed where the command runs long. The
clone runs its own code: its ``.venv`` is a new virtual environment holding an
editable install of the clone alone, whose third-party packages come from the dev
environment's site-packages (a path in a ``.pth`` file: the dev install of kvproof
there is not loaded), and it shares the release environments
(``~/.cache/kvproof/envs``); ``.venv/.stamp`` is newer than ``pyproject.toml``, so
make does not rebuild the venv. Each command
must exit with its documented code, print no traceback, and leave
``git status --porcelain`` empty (findings go to ``out/``, never ``corpus/``).

The fuzz commands are marked ``integration``; ``make replay`` and ``make matrix``
(corpus replay, a bisect over every managed release) are in test_readme_replay.py,
marked ``engine`` (a file of their own: the test runner spreads files over its workers).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import require_env

ROOT = Path(__file__).resolve().parents[2]
SEED_LINE = "AssertionError: ... block_sizes=[544, 544, 544, 544, 181], hash_block_size=98464"


def _user_env() -> dict[str, str]:
    """The environment of a user's shell: no test-only KVPROOF_* folder overrides."""
    keep = {"KVPROOF_CACHE_HOME"}  # where the shared release environments live
    return {k: v for k, v in os.environ.items() if not k.startswith("KVPROOF_") or k in keep}


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    for release in ("0.27.0", "0.28.0", "0.32.0"):
        require_env(release)
    where = tmp_path_factory.mktemp("clone") / "kvproof"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    venv = where / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (purelib / "kvproof-dev-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", "-e", str(where)], check=True, cwd=where)
    (venv / ".stamp").touch()
    os.utime(where / "pyproject.toml", (0, 0))  # older than .venv/.stamp: make reuses the venv
    code = subprocess.run([str(venv / "bin" / "python"), "-c", "import kvproof.fuzz.run as r; print(r.__file__)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert code == str(where / "fuzz" / "run.py"), f"the clone runs {code}, not its own code"
    assert _porcelain(where) == ""
    return where


def _porcelain(where: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=where, capture_output=True, text=True,
                          check=True).stdout


def _run(where: Path, cmd: str, timeout: float = 600, interrupt_after: float | None = None,
         sig: int = signal.SIGINT) -> tuple[int, str]:
    """Run ``cmd`` through the shell in ``where``; optionally send ``sig`` to its process group
    after ``interrupt_after`` seconds, as a terminal's Ctrl-C (SIGINT) or a supervisor (SIGTERM)."""
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=where, env=_user_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        if interrupt_after is not None:
            try:
                out, _ = proc.communicate(timeout=interrupt_after)
                return proc.returncode, out
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, sig)
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{cmd!r} ran past {timeout} s:\n{out[-3000:]}")
    return proc.returncode, out


def _tool_rc(cmd: str, rc: int, out: str) -> int:
    """kvproof's own exit code: make exits 2 for any failed recipe and names the recipe's code."""
    if not cmd.startswith("make ") or rc != 2:
        return rc
    m = re.search(r"^make(?:\[\d+\])?: \*\*\* \[.*\] Error (\d+)$", out, re.M)  # make[1] under a parent make
    return int(m.group(1)) if m else rc


def _check(where: Path, cmd: str, rc: int, out: str, allowed: tuple[int, ...]) -> None:
    rc = _tool_rc(cmd, rc, out)
    assert "Traceback" not in out, f"{cmd!r} printed a traceback:\n{out[-4000:]}"
    assert rc in allowed, f"{cmd!r} exited {rc} (documented: {allowed}):\n{out[-4000:]}"
    assert _porcelain(where) == "", f"{cmd!r} left the checkout dirty:\n{_porcelain(where)}"


def _typed(where: Path, cmd: str, allowed: tuple[int, ...], timeout: float = 300) -> str:
    """Run a README command as typed and check it exits as documented; its output."""
    rc, out = _run(where, cmd, timeout=timeout)
    _check(where, cmd, rc, out, allowed)
    return out


def _fuzz_verdict(cmd: str, rc: int, out: str) -> None:
    """Exit 1 exactly when the report lists a NEW class; 0 when nothing new."""
    rc = _tool_rc(cmd, rc, out)
    new = re.search(r"^NEW\b", out, re.M) is not None
    assert (rc == 1) == new, f"{cmd!r} exited {rc} but the report {'lists' if new else 'lists no'} NEW class:\n{out[-3000:]}"


@pytest.mark.integration
@pytest.mark.parametrize("cmd", ["make fuzz FUZZ_SECONDS=5", "make fuzz VLLM=0.27.0 FUZZ_SECONDS=5",
                                 ".venv/bin/kvproof fuzz --vllm 0.32.0 --seconds 5"])
def test_fuzz_time_boxed(clone, cmd):
    rc, out = _run(clone, cmd, timeout=300)
    _check(clone, cmd, rc, out, (0, 1))
    _fuzz_verdict(cmd, rc, out)
    assert "execs=" in out


@pytest.mark.integration
def test_fuzz_relative_workdir(clone):
    cmd = ".venv/bin/kvproof fuzz --vllm 0.32.0 --seconds 5 --workdir out/fz"
    rc, out = _run(clone, cmd, timeout=300)
    _check(clone, cmd, rc, out, (0, 1))
    assert (clone / "out" / "fz" / "stats").is_dir()


@pytest.mark.integration
def test_fuzz_continuous_interrupted(clone):
    # Ctrl-C in a terminal: SIGINT reaches make and kvproof; make re-raises it (rc -2/130),
    # kvproof stops the campaign cleanly and prints its final status.
    cmd = "make fuzz-continuous FUZZ_JOBS=1"
    rc, out = _run(clone, cmd, timeout=120, interrupt_after=45, sig=signal.SIGINT)
    _check(clone, cmd, rc, out, (0, 1, -signal.SIGINT, 128 + signal.SIGINT))
    assert "interrupted" in out and "(final)" in out
    # A supervisor's SIGTERM to kvproof itself: the documented exit code.
    cmd = ".venv/bin/kvproof fuzz --vllm 0.32.0 --continuous --jobs 1"
    rc, out = _run(clone, f"exec {cmd}", timeout=120, interrupt_after=45, sig=signal.SIGTERM)
    _check(clone, cmd, rc, out, (0, 1))
    _fuzz_verdict(cmd, rc, out)


@pytest.mark.integration
def test_check_the_readme_example(clone):
    cmd = ('.venv/bin/kvproof check --groups "mamba:544x4,hidden_state:181" --cache-block-size 181 '
           "--prefix-caching --mamba-cache-mode align --vllm 0.27.0 --vllm 0.28.0 --vllm 0.32.0")
    out = _typed(clone, cmd, (1,))  # 1: any FAIL (the seed bug on 0.27.0)
    assert "hybrid.group_multiple_of_hash" in out
    assert out.count("(consumer)") == 3 and "FAIL (consumer)" in out, out[-3000:]  # every tier, a Layout too


@pytest.mark.integration
def test_check_a_pasted_layout_the_readme_example(clone):
    cmd = ('kvproof check --groups "mla:1536,mamba:1536,sliding_window:3456" --cache-block-size 1536 '
           "--prefix-caching --mamba-cache-mode align --max-model-len 65536 --vllm 0.32.0")
    out = _typed(clone, ".venv/bin/" + cmd, (0,))
    assert "OK (manager)" in out and "WARN (consumer)  efficiency.consumer_prefix_reuse" in out, out[-3000:]
    assert "r2 0/6912/6915" in out and "987 tokens lost per request" in out, out[-3000:]
    assert cmd in (ROOT / "README.md").read_text().replace(" \\\n    ", " ")  # the command as the README shows it


@pytest.mark.integration
def test_check_config_the_readme_example(clone):
    cmd = ('.venv/bin/kvproof check --config nemotron_h_8b --flags "--enable-prefix-caching --mamba-cache-mode align" '
           "--vllm 0.27.0 --vllm 0.32.0")
    out = _typed(clone, cmd, (0,))
    # 6 Mamba groups + 1 attention group at the real depth; the sizes depend on the CPU (the Mamba
    # state dtype follows its ISA: derivation.host_cpu), the same on both releases in align mode.
    lines = re.findall(r"block_sizes=\[(\d+)(?:, \1){6}\], hash_block_size=\1\b", out)
    assert len(lines) == 2, out[-3000:]
    assert out.count("(consumer)") == 2, out[-3000:]


@pytest.mark.integration
def test_explain_the_readme_example(clone):
    cmd = f'.venv/bin/kvproof explain "{SEED_LINE}"'
    out = _typed(clone, cmd, (1,))  # 1: an installed release prints the line (0.27.0, 0.28.0)
    assert "diagnosis: reproduced on 0.27.0" in out


@pytest.mark.integration
def test_derive_the_readme_example(clone):
    cmd = ('.venv/bin/kvproof derive \'{"family": "nemotron_h", "aux_layers": [0, 1, 2], '
           '"mamba_cache_mode": "align"}\' --vllm 0.27.0 --vllm 0.32.0')
    out = _typed(clone, cmd, (0,))
    assert out.count("block_sizes=[") >= 2, out[-3000:]  # the line vLLM logs, per release


@pytest.mark.integration
def test_findings(clone):
    cmd = ".venv/bin/kvproof findings"
    out = _typed(clone, cmd, (0,), timeout=120)
    n = len(list((clone / "findings" / "ledger").glob("*.json")))
    assert n and f"{n} known classes" in out, out[-2000:]
