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

The reproducers' templates are ``findings/repro/*.py.in``. Nothing here imports vLLM.
"""

from __future__ import annotations

import json
import pprint
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvproof.errors import UsageError
from kvproof.findings.ledger import Entry, Status
from kvproof.fsio import atomic_write

TEMPLATES = Path(__file__).resolve().parent / "repro"
DEFAULT_OUT = Path("out") / "findings"
RUN_TIMEOUT_S = 300
EXIT_BUG, EXIT_OK = 1, 0
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
    "oracle:kv_event": (
        "In SimpleCPUOffloadScheduler, stop trusting the connector's own copy of a request's "
        "block ids after SlidingWindowManager.remove_skipped_blocks frees out-of-window blocks: "
        "when selecting blocks to store (`_select_eager_blocks_to_store`), skip blocks whose "
        "`block_hash` differs from the hash of this request's block at that position (or drop the "
        "freed ids from `state.block_ids` when the sliding-window manager frees them), so a "
        "BlockStored event never pairs one request's hash with another request's tokens."),
}


@dataclass
class Run:
    release: str
    python: str
    rc: int
    last: str
    expected: str  # "BUG" on an affected release, "OK" where fixed / unaffected

    @property
    def as_expected(self) -> bool:
        return self.rc == (EXIT_BUG if self.expected == "BUG" else EXIT_OK)

    def to_dict(self) -> dict:
        return {"release": self.release, "python": self.python, "rc": self.rc, "last_line": self.last,
                "expected": self.expected, "as_expected": self.as_expected}


def affected(entry: Entry) -> list[str]:
    """The releases the ledger measured the class on (FAIL/ERROR there)."""
    return sorted((r for r, v in entry.releases.items() if v in ("FAIL", "ERROR")), key=_vkey)


def _vkey(r: str) -> tuple:
    try:
        return tuple(int(p) for p in r.split(".")[:3])
    except ValueError:
        return (1 << 30,)


def expected_on(entry: Entry, release: str) -> str:
    return "BUG" if entry.releases.get(release) in ("FAIL", "ERROR") else "OK"


def _literal(value) -> str:
    return pprint.pformat(value, width=110, compact=True, sort_dicts=False)


def _stream_literal(stream: dict) -> dict:
    from kvproof.consumer.stream import Stream

    s = Stream.from_dict(stream)
    if any(r.resend_at is not None or r.abort_at is not None for r in s.requests):
        raise UsageError("the standalone reproducer does not replay resends or aborts yet")
    return {"prompts": [s.prompt(i) for i in range(len(s.requests))],
            "requests": [{"arrival": r.arrival, "max_tokens": r.max_tokens} for r in s.requests],
            "num_blocks": s.num_blocks, "max_num_batched_tokens": s.max_num_batched_tokens,
            "max_num_seqs": s.max_num_seqs}


def script(entry: Entry) -> str:
    """The standalone reproducer of ``entry`` (imports only vLLM)."""
    lay = entry.layout
    if not lay.get("groups"):
        raise UsageError(f"ledger entry {entry.id} has no layout")
    groups = [{k: v for k, v in g.items() if v is not None} for g in lay["groups"]]
    for g in groups:
        if g.pop("count", 1) != 1:
            raise UsageError("the standalone reproducer takes one group per spec (no count)")
    cache = {k: v for k, v in (lay.get("cache") or {}).items() if v is not None}
    cache.setdefault("enable_prefix_caching", True)
    key = entry.key
    if key.tier == "manager":
        expect = {"exc_type": key.exc_type, "frame": key.frame}
        subs = {"MAX_MODEL_LEN": str(lay.get("max_model_len") or 2048)}
        template = "manager.py.in"
    elif key.tier == "consumer":
        if entry.stream is None:
            raise UsageError(f"ledger entry {entry.id}: a consumer finding without its stream")
        if key.check == "oracle:kv_event":
            expect = {"check": "kv_event"}
        elif key.exc_type:
            expect = {"exc_type": key.exc_type, "frame": key.frame}
        else:
            raise UsageError(f"no standalone reproducer for consumer check {key.check!r} yet")
        subs = {"STREAM": _literal(_stream_literal(entry.stream))}
        template = "consumer.py.in"
    else:
        raise UsageError(f"no standalone reproducer for the {key.tier} tier")
    subs.update(TITLE=entry.title, GROUPS=_literal(groups), CACHE=_literal(cache),
                CONNECTOR=repr(lay.get("kv_connector")), EXPECT=repr(expect))
    text = (TEMPLATES / template).read_text()
    for k, v in subs.items():
        text = text.replace(f"@@{k}@@", v)
    if "@@" in text:
        raise UsageError(f"template {template}: unfilled placeholder")
    return text


def run_script(path: Path, releases: list[str], entry: Entry, timeout: float = RUN_TIMEOUT_S) -> list[Run]:
    """``path`` run with each release's python; the last line it printed and its exit code."""
    from kvproof import envs

    out = []
    for r in releases:
        py = str(envs.find(r).python)
        try:
            proc = subprocess.run([py, str(path)], capture_output=True, text=True, timeout=timeout,
                                  cwd=str(path.parent))
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            stdout = [ln for ln in proc.stdout.splitlines() if ln.strip()]
            last = (stdout or lines or [""])[-1].strip()
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc, last = 124, f"timed out after {timeout:.0f} s"
        out.append(Run(r, py, rc, last, expected_on(entry, r)))
    return out


def _source_line(release: str, file: str, line: int) -> str:
    from kvproof import envs
    from kvproof.errors import EnvError
    from kvproof.overlay import site_packages  # the one rule: the site-packages that holds vllm/

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
        if run.rc == EXIT_BUG and m:
            rows.append({"release": run.release, "file": m["file"], "function": m["fn"], "line": int(m["line"]),
                         "text": _source_line(run.release, m["file"], int(m["line"]))})
    return rows


def draft(entry: Entry, runs: list[Run], lines: list[dict]) -> str:
    key = entry.key
    hit = affected(entry)
    fixed = f"fixed in {entry.fixed_in}" if entry.status == Status.FIXED else "still present in the newest release measured"
    lay = entry.layout
    groups = ", ".join(f"{g['kind']}(block_size={g['block_size']}"
                       + (f", sliding_window={g['sliding_window']}" if g.get("sliding_window") else "") + ")"
                       for g in lay.get("groups", []))
    cache = lay.get("cache") or {}
    out = [f"# {entry.title}", "",
           f"**Affected releases (measured):** {', '.join(hit) or 'none'} ({fixed}). "
           f"Measured on: {', '.join(sorted(entry.releases, key=_vkey))}.", "",
           "## Configuration that reaches it", ""]
    if entry.witness_config:
        out += ["```json", json.dumps(entry.witness_config, indent=1), "```", ""]
    out += [f"This gives the KV cache groups {groups}; cache block size {cache.get('block_size')}, "
            f"prefix caching {'on' if cache.get('enable_prefix_caching', True) else 'off'}"
            + (f", mamba_cache_mode={cache['mamba_cache_mode']}" if cache.get("mamba_cache_mode") not in (None, "none")
               else "")
            + (f", kv connector {lay.get('kv_connector')}" if lay.get("kv_connector") else "") + ".", ""]
    if entry.reachability:
        out += [f"Reachability: {entry.reachability}.", ""]
    out += ["## Observed", ""]
    bug_lines = [r.last for r in runs if r.rc == EXIT_BUG]
    out += [f"- {ln}" for ln in bug_lines] or ["- (not reproduced by the script on any installed release)"]
    out += ["", "## Expected", ""]
    if key.check == "oracle:kv_event":
        out += ["Every `BlockStored` event pairs each block hash with the tokens that hash was computed from "
                "(KV event consumers, e.g. a KV-aware router, index blocks by these pairs).", ""]
    else:
        out += ["The engine either starts and serves this configuration, or refuses it up front with an error "
                "that says what is unsupported (not a bare `assert` / internal assertion).", ""]
    out += [f"Why: {entry.why}", "", "## vLLM lines involved", ""]
    if lines:
        out += ["| release | file:function | line | source |", "|---|---|---|---|"]
        out += [f"| {r['release']} | `{r['file']}:{r['function']}` | {r['line']} | `{r['text']}` |" for r in lines]
    else:
        frame = key.frame or "(no raising frame: a wrong result, not an exception)"
        out += [f"Class frame: `{frame}`; see the suggested fix for the code path."]
    out += ["", "## Suggested fix", "", SUGGESTED_FIX.get(key.frame) or SUGGESTED_FIX.get(key.check)
            or "(none written yet)", "",
            "## Reproducer", "",
            "`repro.py` (next to this file) imports only vLLM: `python repro.py` exits 1 with a last line "
            "`BUG: ...` where the bug is present and 0 (`OK: ...`) where it is not.", "",
            "| release | exit | last line | as expected |", "|---|---|---|---|"]
    out += [f"| {r.release} | {r.rc} | {r.last.replace('|', '/')} | {'yes' if r.as_expected else 'NO'} |" for r in runs]
    out += ["", f"Upstream: {entry.upstream}. kvproof ledger class `{entry.id}`: `{key}`.", ""]
    return "\n".join(out)


def generate(entry: Entry, out_root: Path | None = None, releases: list[str] | None = None,
             timeout: float = RUN_TIMEOUT_S) -> tuple[Path, list[Run]]:
    """Write the report of ``entry``; returns its folder and the script runs."""
    folder = Path(out_root or DEFAULT_OUT) / entry.id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "repro.py"
    atomic_write(path, script(entry))
    if releases is None:
        releases = sorted(entry.releases, key=_vkey)
    runs = run_script(path, releases, entry, timeout)
    lines = lines_involved(runs)
    atomic_write(folder / "evidence.json", json.dumps({"id": entry.id, "key": str(entry.key),
                                                      "runs": [r.to_dict() for r in runs], "lines": lines},
                                                     indent=1) + "\n")
    atomic_write(folder / "issue.md", draft(entry, runs, lines))
    return folder, runs
