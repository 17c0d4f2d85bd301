"""``kvproof findings report ID``: what a vLLM maintainer can file, from one ledger entry.

Writes into ``out/findings/<id>/`` (or ``--out DIR``):

- ``repro.py``: a standalone reproducer generated from the entry (its layout, stream and
  class key) that imports only vLLM: for manager-tier classes it builds the
  ``KVCacheConfig`` and the real ``KVCacheManager``; for consumer classes the real
  ``Scheduler`` and connector, driven like vLLM's own scheduler tests. Exit 1 and a last
  line ``BUG: ...`` where the bug reproduces, 0 and ``OK: ...`` where it does not,
  3 ``OTHER: ...`` for anything else;
- ``evidence.json``: the script run with each installed release's python (exit code, last line);
- ``issue.md``: the issue draft (title, affected releases, the configuration that reaches
  it, observed vs expected, the vLLM lines involved per release read from the installed
  source, a suggested fix, the evidence).

The script runs on every managed release whose environment is built (``--vllm`` to choose),
not only the releases the ledger entry measured: a release the entry has not measured has no
expected result, its run is recorded as measured now ("not in the ledger yet: BUG as run").
Everything is written into a staging folder beside ``<id>/`` and moved in only when every
run ran (exit 0 or 1): where one did not (python could not open the file, an import error, a
timeout, no environment) nothing is written, the files of an earlier report stay as they
were, and :class:`~kvproof.findings.runs.ReproducerDidNotRun` (exit 3) names the release and
the cause: the machine's failure is never a verdict about vLLM.

The reproducers' templates are ``findings/repro/*.py.in``. Nothing here imports vLLM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from kvproof.bridge.warm import Hosts
from kvproof.errors import UsageError
from kvproof.findings.ledger import Entry, Status
from kvproof.findings.reproducers import pytest_script, script
from kvproof.findings.runs import (RUN_TIMEOUT_S, ReproducerDidNotRun, Run, affected, installed_releases,
                                   release_key, require_ran, run_script)
from kvproof.fsio import atomic_write
from kvproof.judging.oracle_ids import OracleId

DEFAULT_OUT = Path("out") / "findings"
_AT = re.compile(r"@ (?P<file>\S+):(?P<line>\d+) in (?P<fn>\S+)\s*$")

# What to change, by the vLLM function that raises or misbehaves: the human half of a draft,
# keyed like the ledger (file:function), never by line numbers.
SUGGESTED_FIX = {
    "vllm/v1/simple_kv_offload/manager.py:__init__": (
        "Either support models without a FullAttentionSpec group (pick the first prefix-cacheable "
        "group, or the sliding-window/Mamba group, as the reference group for lookups), or refuse "
        "them with a clear error at config time, e.g. `raise ValueError(\"SimpleCPUOffloadConnector "
        "needs at least one full-attention KV cache group; this model has only ...\")` instead of "
        "the bare `assert`, so `vllm serve` says why it cannot start."),
    "vllm/v1/core/kv_cache_coordinator.py:__init__": (
        "Resolve the hash block size so that it divides every group's block size in "
        "`mamba_cache_mode=\"all\"` too (as the `align` path does), or reject the combination "
        "of `mamba_cache_mode=\"all\"` with `extract_hidden_states` at config validation with a "
        "message. (0.32.0 removed `mamba_cache_mode=\"all\"` from CacheConfig, so the "
        "configuration is refused there.)"),
    OracleId.KV_EVENT.check: (
        "In SimpleCPUOffloadScheduler, stop trusting the connector's own copy of a request's "
        "block ids after SlidingWindowManager.remove_skipped_blocks frees out-of-window blocks: "
        "when selecting blocks to store (`_select_eager_blocks_to_store`), skip blocks whose "
        "`block_hash` differs from the hash of this request's block at that position (or drop the "
        "freed ids from `state.block_ids` when the sliding-window manager frees them), so a "
        "BlockStored event never pairs one request's hash with another request's tokens."),
}


def _source_line(release: str, file: str, line: int) -> str:
    from kvproof import envs
    from kvproof.errors import EnvError
    from kvproof.envs.overlay import site_packages  # the one rule: the site-packages that holds vllm/

    env = envs.find(release)
    try:
        p = site_packages(env.root or env.python.parent.parent) / file
    except EnvError:
        return "(source not found)"
    if p.exists():
        lines = p.read_text(errors="replace").splitlines()
        if 0 < line <= len(lines):
            return lines[line - 1].strip()
    return "(source not found)"


def lines_involved(runs: list[Run]) -> list[dict]:
    """Per release where the script reproduced: vLLM file, function, line and its text, read
    from that release's installed source (the script prints where vLLM raised)."""
    rows = []
    for run in runs:
        m = _AT.search(run.last)
        if run.result == "BUG" and m:
            rows.append({"release": run.release, "file": m["file"], "function": m["fn"], "line": int(m["line"]),
                         "text": _source_line(run.release, m["file"], int(m["line"]))})
    return rows


def _where(entry: Entry, release: str) -> list[dict]:
    """The vLLM lines a report names (``report["lines"]``: a file and a text it contains), with
    their line numbers in ``release``'s installed source: for a wrong result as for an exception."""
    from kvproof import envs
    from kvproof.errors import EnvError
    from kvproof.envs.overlay import site_packages

    rows = []
    for want in (entry.report or {}).get("lines", []):
        try:
            text = (site_packages(envs.find(release).root) / want["file"]).read_text(errors="replace").splitlines()
        except (EnvError, OSError):
            continue
        rows += [{"release": release, "file": want["file"], "line": n, "text": ln.strip()}
                 for n, ln in enumerate(text, 1) if want["contains"] in ln]
    return rows


def _verdict_word(v: str | None) -> str:
    return {"FAIL": "affected", "ERROR": "affected", None: "-"}.get(v, "not affected")


def draft(entry: Entry, runs: list[Run], lines: list[dict], fixes: list | None = None,
          test: str | None = None) -> str:
    """The issue, in vLLM's words and its bug template's order; kvproof's class id at the end."""
    rep, key = entry.report or {}, entry.key
    hit = affected(entry)
    measured = sorted(entry.releases, key=release_key)
    newest = hit[-1] if hit else None
    out = [f"# {rep.get('title') or entry.title}", "", "### Your current environment", "",
           f"vLLM {', '.join(hit) or 'none'} (first affected {hit[0] if hit else '-'}, "
           + (f"fixed in {entry.fixed_in}" if entry.status == Status.FIXED else f"still present in {newest}")
           + f"); measured on {', '.join(measured)}. The scheduler side only: no GPU is needed to reproduce it.", "",
           "| vLLM | " + " | ".join(measured) + " |", "|---" * (len(measured) + 1) + "|",
           "| | " + " | ".join(_verdict_word(entry.releases.get(r)) for r in measured) + " |", ""]
    new = [r for r in runs if r.expected is None]
    if new:
        out += ["Not measured before, run now with the script below: "
                + "; ".join(f"vLLM {r.release}: {r.expectation()}" for r in new) + ".", ""]
    out += ["### 🐛 Describe the bug", ""]
    if rep.get("serve"):
        out += ["```bash", rep["serve"], "```", ""]
    else:
        out += ["No model that vLLM registers builds this configuration; the test below builds it directly.", ""]
    out += [rep.get("sees") or entry.why, "", "**What breaks:** " + (rep.get("breaks") or entry.why), "",
            "**Expected:** " + (rep.get("expected") or "the engine starts and serves this configuration, or refuses "
                                "it up front with an error that says what is unsupported."), ""]
    if test:
        out += ["A test in the style of `tests/v1/kv_connector/unit/` that fails on the affected releases:", "",
                "```python", test.rstrip(), "```", ""]
    where = _where(entry, newest) if newest else []
    out += ["### Where", ""]
    if where:
        out += [f"vLLM {newest}:", ""] + [f"- `{r['file']}:{r['line']}`: `{r['text']}`" for r in where]
    elif lines:
        out += [f"- vLLM {r['release']}: `{r['file']}:{r['line']}` in `{r['function']}`: `{r['text']}`" for r in lines]
    else:
        out += [f"`{key.frame or key.check}`"]
    fix = _fix_text(entry)
    out += ["", "### Suggested fix", "", rep.get("fix") or SUGGESTED_FIX.get(key.raising_frame) or SUGGESTED_FIX.get(key.check)
            or "(none written yet)", ""]
    if fix:
        out += ["```diff", fix.rstrip(), "```", ""]
    if fixes:
        out += ["With the fix applied to each release's installed source:", "",
                "| vLLM | test | test with the fix | script | script with the fix | the `vllm serve` configuration, then with the fix |",
                "|---|---|---|---|---|---|"]
        out += [f"| {f.release} | {_rc(f.pytest)} | {_rc(f.pytest_fixed)} | {_rc(f.repro)} | {_rc(f.repro_fixed)} "
                f"| {_rc(_VERDICT_RC.get(f.witness))} -> {_rc(_VERDICT_RC.get(f.witness_fixed))} |" for f in fixes]
        n = max(f.others_checked for f in fixes)
        worse = [f"{k}: {a} -> {b} on {f.release}" for f in fixes for k, (a, b) in f.others_worse.items()]
        better = [f"{k}: {a} -> {b} on {f.release}" for f in fixes for k, (a, b) in f.others_changed.items()
                  if k not in f.others_worse]
        if not worse and not better:
            out += ["", f"The fix changes nothing else that was checked ({n} other known configurations and "
                    "regression layouts keep their behaviour).", ""]
        else:
            out += [""] + ([f"The fix makes other results worse: {'; '.join(worse)}."] if worse else []) + (
                [f"The fix also improves other known results (of {n} checked): {'; '.join(better)}."] if better else []) + [""]
    if runs:
        out += ["<details><summary>The standalone script (repro.py) on every release</summary>", "",
                "| vLLM | exit | expected | last line |", "|---|---|---|---|"]
        out += [f"| {r.release} | {r.rc} | {r.expected or r.expectation()} | {r.last.replace('|', '/')} |"
                for r in runs]
        out += ["", "</details>", ""]
    workaround = rep.get("workaround") or entry.workaround
    out += [f"**Workaround:** {workaround}" if workaround else "", "",
            f"Found with kvproof (class `{entry.id}`).", ""]
    return "\n".join(out)


_VERDICT_RC = {"FAIL": 1, "ERROR": 1, "OK": 0, "WARN": 0}  # the class measured on the serve line's KV cache


def _rc(rc: int | None) -> str:
    return {None: "-", 0: "passes", 1: "fails"}.get(rc, f"exit {rc}")


def _fix_text(entry: Entry) -> str | None:
    from kvproof.findings.fix import diff_path

    p = diff_path(entry.id)
    return p.read_text() if p else None


def _env_names(releases) -> set[str]:
    """The environments' names of ``releases`` that have one."""
    from kvproof import envs
    from kvproof.errors import EnvError

    out = set()
    for r in releases:
        try:
            out.add(r.name if isinstance(r, envs.Env) else envs.find(r).name)
        except (EnvError, UsageError):
            pass
    return out


def generate(entry: Entry, out_root: Path | None = None, releases: list[str] | None = None,
             timeout: float = RUN_TIMEOUT_S, fix_on: list[str] | tuple = (), ledger=None) -> tuple[Path, list[Run]]:
    """Write the report of ``entry`` (issue.md, repro.py, the pytest, evidence.json) into
    ``out_root/<id>/``; with ``fix_on``, the fix is laid over those releases and checked there.
    ``releases``: where the script runs (default: every managed release installed here).
    Raises :class:`ReproducerDidNotRun`, writing nothing, where the script (or, with the fix,
    the pytest) did not run on some release."""
    root = Path(out_root or DEFAULT_OUT).resolve()  # once: every run's working directory is below it
    folder = root / entry.id
    if releases is None:
        releases = installed_releases(entry)
        if not releases:
            raise ReproducerDidNotRun(f"{entry.id}: no vLLM environment is built here (make envs); nothing written")
    test = None
    try:
        test = pytest_script(entry)
    except UsageError:
        pass
    test_name = f"test_{(entry.report or {}).get('test') or 'kv_cache_' + entry.id}.py"
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{entry.id}.", dir=root))  # beside <id>/: moved in at the end
    try:
        path = stage / "repro.py"
        atomic_write(path, script(entry))
        if test:
            atomic_write(stage / test_name, test)
        # each release's vLLM imported once for every run of the report; the hosts of releases
        # without a fix check close after the script's one run there
        with Hosts(path, once=_env_names(releases) - _env_names(fix_on)) as hosts:
            runs = run_script(path, releases, entry, timeout, hosts=hosts)
            require_ran(runs, f"{entry.id}: the reproducer")
            lines = lines_involved(runs)
            fixes = []
            if fix_on:
                from kvproof.findings.fix import check
                from kvproof.findings.ledger import Ledger

                try:
                    fixes = check(entry, path, list(fix_on), ledger or Ledger.load(),
                                  stage / test_name if test else None, base_runs={r.release: r for r in runs},
                                  hosts=hosts)
                except ReproducerDidNotRun as err:
                    raise ReproducerDidNotRun(f"{entry.id}, checking the fix: {err}") from err
        atomic_write(stage / "evidence.json", json.dumps({"id": entry.id, "key": str(entry.key),
                                                          "runs": [r.to_dict() for r in runs], "lines": lines,
                                                          "fix": [f.to_dict() for f in fixes]}, indent=1) + "\n")
        atomic_write(stage / "issue.md", draft(entry, runs, lines, fixes, test))
        folder.mkdir(exist_ok=True)
        for name in ["repro.py"] + ([test_name] if test else []) + ["evidence.json", "issue.md"]:
            os.replace(stage / name, folder / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return folder, runs
