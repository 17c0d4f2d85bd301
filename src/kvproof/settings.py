"""The one configuration object: where things live, and every KVPROOF_* variable.

Folders that belong to a project run (``corpus/``, ``out/``) are relative to
the working directory, like ``make`` and ``pytest``; caches shared by every
clone live under the per-user cache folder. Nothing here looks for a
checkout by walking up from a source file.

==========================  ==================================================
variable                    meaning (default)
==========================  ==================================================
KVPROOF_CACHE_HOME          per-user cache ($XDG_CACHE_HOME/kvproof or ~/.cache/kvproof)
KVPROOF_ENV_HOME            vLLM environments (<cache>/envs)
KVPROOF_FUZZ_HOME           persistent fuzz campaigns (<cache>/fuzz-corpus)
KVPROOF_SYNTH_HOME          engine-synthesiser memo (<cache>/synth)
KVPROOF_CORPUS              the findings corpus (./corpus)
KVPROOF_LEDGER              the ledger of known finding classes (the package's findings/ledger)
KVPROOF_OUT                 reports and unrecorded counterexamples (./out)
KVPROOF_REQUIRE_ENVS        1: a test needing a missing vLLM environment fails, not skips
KVPROOF_RELEASES            releases the tests run on: a subset of the release list in
                            src/kvproof/facts/__init__.py (ci, all, cpu, python-only, default) or release
                            names, comma/space separated (ci); the Makefile's RELEASES sets it
KVPROOF_ENGINE_ALL          1: engine tests boot every family on every release
KVPROOF_BENCH_SMOKE         1: tests/integration/test_bench_scripts.py also runs the slow bench scripts (make bench-smoke)
KVPROOF_GPU_PYTHON          interpreter of a CUDA vLLM for the gpu tests
KVPROOF_FUZZ_WORKDIR        harness: campaign folder (seen/, stats/, conformance/)
KVPROOF_FUZZ_CORPUS_OUT     harness: where new crash classes go (<out>/fuzz-findings)
KVPROOF_FUZZ_PREMISE        harness: engine | free (engine)
KVPROOF_FUZZ_INSTRUMENT     harness: coverage instrumentation: 1 the harness's modules, 0 none
                            (benchmarks), or a comma-separated list of vLLM modules (1)
KVPROOF_FUZZ_MANAGER        contracts harness: escalate (the real KVCacheManager only where a
                            manager-tier contract predicts a violation: FAIL or LATENT) | always
                            (every input) (escalate)
KVPROOF_FUZZ_FAST           harness: 0 uses the bridge's plain path instead of Bridge(fast=True)
KVPROOF_FUZZ_MEMO           harness: 0 turns the fast path's manager memo off
KVPROOF_FUZZ_ARGV0          harness: program name libFuzzer prints
KVPROOF_CFLITE_LOCAL        tests: run the ClusterFuzzLite build script locally
KVPROOF_TRITON_STAND_IN     a 0.34+ environment's Triton stand-in: gate (default), everywhere or off
                            (src/kvproof/envs/stand_in_triton.py)
KVPROOF_WORKER_POOL         1: a process keeps a closed worker's live process for its next worker of
                            the same environment and variables (tests; kvproof.bridge.client)
KVPROOF_WORKER_ZYGOTE       1: workers fork from a detached per-release parent that imported vLLM once,
                            shared by every kvproof process of the user (tests; kvproof.bridge.zygotes)
KVPROOF                     docs/ci/check_vllm_pr.sh: the kvproof command (kvproof)
KVPROOF_BASE                docs/ci/check_vllm_pr.sh: the release the PR is overlaid on (kvproof's
                            default release, `kvproof env releases default`)
KVPROOF_OVERLAY             docs/ci/check_vllm_pr.sh: the overlay environment's name (pr-check)
KVPROOF_WORK                docs/ci/check_vllm_pr.sh: scratch folder (./kvproof-ci)
KVPROOF_PYTHON              docs/ci/check_vllm_pr.sh: the interpreter kvproof is installed in (python3)
KVPROOF_SUMMARY             docs/ci/check_vllm_pr.sh: the Markdown summary it writes (kvproof-summary.md)
KVPROOF_CORPUS_DIR          docs/ci/check_vllm_pr.sh: corpus/ of the kvproof checkout (./corpus)
KVPROOF_FUZZ_SECONDS        docs/ci/check_vllm_pr.sh: length of the overlay's contracts fuzz (60)
KVPROOF_VERIFY_ARGS         docs/ci/check_vllm_pr.sh: extra `kvproof verify` flags (none)
KVPROOF_DRIFT_COUNT         docs/ci/check_vllm_pr.sh: fuzzed layouts for the drift workflow (200)
KVPROOF_DIFF_INPUTS         docs/ci/check_vllm_pr.sh: generated inputs of the consumer differential (20)
KVPROOF_CONSUMER_SECONDS    docs/ci/check_vllm_pr.sh: length of the overlay's consumers fuzz (120)
KVPROOF_LEDGER_DIR          docs/ci/check_vllm_pr.sh: the ledger the differential replays (./findings/ledger)
KVPROOF_CONSUMERS           docs/ci/check_vllm_pr.sh: 0 skips the consumer tier (1)
KVPROOF_KNOWN_INPUTS        docs/ci/check_vllm_pr.sh: how many of the self-test's hand-written consumer inputs step 5 replays (all)
KVPROOF_GPU_LEFT            gpu/replay_gpu.sh: seconds of GPU_BUDGET_S left, passed by the script to
                            its own Python part as the boots' deadline (400)
==========================  ==================================================

The scripts' variables are also described in the header of the script that
reads them; tests/unit/test_settings.py lists every ``KVPROOF_*`` name in the
tree (Python, shell scripts, Makefile, Dockerfile, CI YAML) against this table.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kvproof.errors import UsageError


def _path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else default


def _flag(var: str, default: bool = False) -> bool:
    value = os.environ.get(var)
    return default if value in (None, "") else value not in ("0", "false", "no")


@dataclass(frozen=True)
class Settings:
    cache_home: Path
    env_home: Path
    fuzz_home: Path
    synth_home: Path
    corpus: Path
    out: Path
    require_envs: bool
    engine_all: bool
    releases: tuple[str, ...]
    worker_pool: bool = False
    worker_zygote: bool = False

    @classmethod
    def from_environ(cls) -> "Settings":
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        cache = _path("KVPROOF_CACHE_HOME", Path(xdg) / "kvproof")
        return cls(
            cache_home=cache,
            env_home=_path("KVPROOF_ENV_HOME", cache / "envs"),
            fuzz_home=_path("KVPROOF_FUZZ_HOME", cache / "fuzz-corpus"),
            synth_home=_path("KVPROOF_SYNTH_HOME", cache / "synth"),
            corpus=_path("KVPROOF_CORPUS", Path("corpus")),
            out=_path("KVPROOF_OUT", Path("out")),
            require_envs=_flag("KVPROOF_REQUIRE_ENVS"),
            engine_all=_flag("KVPROOF_ENGINE_ALL"),
            releases=tuple((os.environ.get("KVPROOF_RELEASES") or "ci").replace(",", " ").split()),
            worker_pool=_flag("KVPROOF_WORKER_POOL"),
            worker_zygote=_flag("KVPROOF_WORKER_ZYGOTE"),
        )


@dataclass(frozen=True)
class HarnessSettings:
    """The atheris harnesses' options: libFuzzer owns argv, so they come from the environment."""

    workdir: Path | None
    corpus_out: Path
    premise: str
    instrument: str
    manager: str
    fast: bool
    memo: bool
    argv0: str | None

    @classmethod
    def from_environ(cls) -> "HarnessSettings":
        workdir = os.environ.get("KVPROOF_FUZZ_WORKDIR")
        fast = _flag("KVPROOF_FUZZ_FAST", True)
        manager = os.environ.get("KVPROOF_FUZZ_MANAGER") or "escalate"
        premise = os.environ.get("KVPROOF_FUZZ_PREMISE") or "engine"
        for var, value, accepted in (("KVPROOF_FUZZ_MANAGER", manager, ("escalate", "always")),
                                     ("KVPROOF_FUZZ_PREMISE", premise, ("engine", "free"))):
            if value not in accepted:
                raise UsageError(f"{var}={value!r}: expected one of {', '.join(accepted)}")
        return cls(
            workdir=Path(workdir) if workdir else None,
            # the runner always names it; a bare harness (ClusterFuzzLite) keeps findings beside the run
            corpus_out=_path("KVPROOF_FUZZ_CORPUS_OUT", settings().out / "fuzz-findings"),
            premise=premise,
            instrument=os.environ.get("KVPROOF_FUZZ_INSTRUMENT") or "1",
            manager=manager,
            fast=fast,
            memo=fast and _flag("KVPROOF_FUZZ_MEMO", True),
            argv0=os.environ.get("KVPROOF_FUZZ_ARGV0") or None,
        )


def vllm_cache_root(env_name: str) -> Path:
    """The ``VLLM_CACHE_ROOT`` of one vLLM environment (by its folder's name).

    One per release: vLLM's model registry caches what it learnt about an
    architecture in ``$VLLM_CACHE_ROOT/modelinfos/<module>-<class>.json`` keyed
    by the model module's hash but named without the release, so with a shared
    root every switch between installed releases evicts the other's entry and
    the next process re-inspects the model in a subprocess that imports vLLM
    and torch again (registry.py ``_run_in_subprocess``, 10-30 s here).
    Compiled artefacts of different releases stay apart too."""
    return settings().cache_home / "vllm-cache" / env_name.replace(":", "_").replace("/", "_")


def use_release_cache_root() -> None:
    """Inside a vLLM environment's interpreter: this release's ``VLLM_CACHE_ROOT``
    unless the user set one (vLLM reads it lazily, at first use)."""
    if "VLLM_CACHE_ROOT" not in os.environ:
        os.environ["VLLM_CACHE_ROOT"] = str(vllm_cache_root(Path(sys.prefix).name))


def settings() -> Settings:
    """Read fresh each call: tests and subprocesses change the environment."""
    return Settings.from_environ()
