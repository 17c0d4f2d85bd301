"""A ledger entry's suggested fix, applied to real vLLM and checked.

``findings/fixes/<id>.diff`` is a unified diff against the newest affected
release's ``vllm/`` source (paths ``a/vllm/...``). :func:`patched` applies it
with ``patch -p1`` to a release's installed files and lays the result over that
release as an overlay environment (``kvproof.envs.overlay.make``: hard links, seconds;
:func:`check` takes it from the content-keyed cache of ``kvproof.findings.fixenv``).
:func:`check` then runs, on the release and on the overlay, the entry's
reproducer and the entry's own class measurement, and every other ledger entry
of the same tier, so the evidence says: the fix removes the symptom, and the
rest of the ledger is as it was. One worker per environment serves every tier
(one vLLM import each), and the script's run on the release is the report's own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kvproof.errors import UsageError

FIXES = Path(__file__).resolve().parent / "fixes"
_FILE = re.compile(r"^\+\+\+ b/(\S+)", re.M)


def diff_path(entry_id: str) -> Path | None:
    p = FIXES / f"{entry_id}.diff"
    return p if p.exists() else None


def files_of(diff: str) -> list[str]:
    """The site-packages relative files a diff changes."""
    return _FILE.findall(diff)


def patched(diff: str, release: str) -> dict[str, bytes]:
    """The files of ``diff`` applied to ``release``'s installed source (``patch`` may shift lines,
    never guess: a hunk that does not apply is an error)."""
    from kvproof import envs
    from kvproof.envs.overlay import site_packages

    sp = site_packages(envs.find(release).root)
    with tempfile.TemporaryDirectory(prefix="kvproof-fix-") as tmp:
        for rel in files_of(diff):
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(sp / rel, Path(tmp) / rel)
        proc = subprocess.run(["patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-r", "-", "-s"],
                              input=diff, text=True, capture_output=True, cwd=tmp)
        if proc.returncode != 0:
            raise UsageError(f"the fix does not apply to vLLM {release}: {(proc.stdout + proc.stderr).strip()[:300]}")
        return {rel: (Path(tmp) / rel).read_bytes() for rel in files_of(diff)}


@dataclass
class FixRun:
    release: str
    repro: int  # the reproducer's exit on the release (1: the bug shows)
    repro_fixed: int  # ... with the fix laid over it
    verdict: str  # the entry's class measurement on the release
    verdict_fixed: str
    pytest: int | None = None  # the pytest reproducer's exit (1: it fails, the bug shows)
    pytest_fixed: int | None = None
    witness: str | None = None  # the real model's configuration (report["witness"]), measured the same way
    witness_fixed: str | None = None
    others_changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # other entry -> (base, fixed)
    others_checked: int = 0  # the other ledger entries and corpus files compared

    @property
    def others_worse(self) -> dict[str, tuple[str, str]]:
        """The other entries the fix made worse (:func:`worsened`)."""
        return worsened(self.others_changed)

    @property
    def removes_symptom(self) -> bool:
        return (self.repro == 1 and self.repro_fixed == 0 and self.verdict_fixed not in ("FAIL", "ERROR")
                and (self.pytest is None or (self.pytest == 1 and self.pytest_fixed == 0))
                and self.witness_fixed not in ("FAIL", "ERROR"))

    def to_dict(self) -> dict:
        return {"release": self.release, "repro": self.repro, "repro_fixed": self.repro_fixed,
                "verdict": self.verdict, "verdict_fixed": self.verdict_fixed, "pytest": self.pytest,
                "pytest_fixed": self.pytest_fixed, "witness": self.witness, "witness_fixed": self.witness_fixed,
                "others_changed": {k: list(v) for k, v in self.others_changed.items()},
                "others_checked": self.others_checked,
                "removes_symptom": self.removes_symptom}


def worsened(changed) -> dict[str, tuple[str, str]]:
    """Of ``changed`` (other entry -> (verdict without the fix, with it)), the changes for the worse:
    a verdict that rises in severity (kvproof.verdicts.Verdict's order: OK -> WARN, WARN -> FAIL) or
    a run that errs. A fix that also removes another class's symptom (FAIL -> WARN: the same cause,
    or a neighbouring one) changes it for the better, and the report says so without failing."""
    from kvproof.verdicts import Verdict

    def rank(v):
        return Verdict[v] if v in Verdict.__members__ else Verdict.ERROR  # missing: the run did not answer

    return {k: (a, b) for k, (a, b) in changed.items() if rank(b) == Verdict.ERROR or rank(b) > rank(a)}


def _verdicts(named: list[tuple], names: list, hosts=None) -> list[dict[str, str]]:
    """Each (label, entry)'s verdict at the entry's tier on each environment, and every corpus/
    layout's at the function and manager tiers (what a fix must leave as it was): one call of
    kvproof's tier runner per tier, on one live worker per environment (started together; with
    ``hosts``, kvproof.bridge.warm.Hosts, forked from each environment's warm python)."""
    from concurrent.futures import ThreadPoolExecutor

    from kvproof import envs
    from kvproof.running.checking import Workers
    from kvproof.findings.measure import judge_all
    from kvproof.inputs.files import load_layouts
    from kvproof.inputs.layout import Layout
    from kvproof.settings import settings
    from kvproof.inputs.stream import Stream
    from kvproof.tiers import registry
    from kvproof.tiers.classify import as_tier

    def layout(e):
        lay = Layout.from_dict(e.layout)
        return lay.with_stream(Stream.from_dict(e.stream)) if e.stream else lay

    out: list[dict[str, str]] = [{} for _ in names]
    # each entry at the top tier of its reply part (a function entry with the manager stage), the
    # corpus layouts at the default tier (manager); run from the top of the ladder down
    by_tier: dict = {}
    for label, e in named:
        by_tier.setdefault(registry.top(as_tier(e.key.tier)), []).append((label, layout(e)))
    files = sorted(settings().corpus.glob("*.json"))  # the regression layouts (not consumers/)
    corpus = [(f"corpus/{Path(n).name}", lay) for n, lay in load_layouts([str(f) for f in files])]
    by_tier.setdefault(registry.default(), []).extend(corpus)
    found = [n if isinstance(n, envs.Env) else envs.find(n) for n in names]
    live = {}
    try:
        if hosts is not None:
            with ThreadPoolExecutor(len(found)) as pool:
                live = dict(zip([e.name for e in found], pool.map(hosts.worker, found)))
        with Workers.start(found, live=live) as pool:
            for tier, items in sorted(by_tier.items(), reverse=True):
                for side, js in zip(out, judge_all(items, found, str(tier), workers=pool.by_env)):
                    side.update({label: str(j.verdict) for label, j in js.items()})
    finally:
        for w in live.values():
            w.close()
    return out


def _witness(entry):
    """The real model's configuration as a stand-in ledger entry (report["witness"]: layout, stream)."""
    from dataclasses import replace

    w = (entry.report or {}).get("witness")
    return replace(entry, layout=w["layout"], stream=w.get("stream")) if w else None


def check(entry, repro: Path, releases: list[str], ledger, test: Path | None = None,
          base_runs: dict | None = None, hosts=None) -> list[FixRun]:
    """Per release: the reproducer (and the pytest one), the entry's class and its real-model
    witness, with and without the fix; the same tier's other ledger entries and every corpus/
    layout (function and manager tiers) must keep their verdicts. ``base_runs`` (release -> Run):
    the same script's runs on the releases, already made (the report's), not run again; ``hosts``
    (kvproof.bridge.warm.Hosts): the warm pythons the scripts and pytests fork from."""
    from concurrent.futures import ThreadPoolExecutor

    from kvproof.findings.fixenv import fixed_env
    from kvproof.findings.runs import require_ran, run_pytest, run_script

    path = diff_path(entry.id)
    if path is None:
        raise UsageError(f"no fix for {entry.id} (findings/fixes/{entry.id}.diff)")
    diff = path.read_text()
    others = [e for e in ledger.entries() if e.key.tier == entry.key.tier and e.id != entry.id and e.layout]
    witness = _witness(entry)
    measured = [(e.id, e) for e in [entry] + others] + ([("witness", witness)] if witness else [])
    overlays = {r: fixed_env(entry.id, r, diff, patched(diff, r))[0] for r in releases}

    def one(r: str) -> FixRun:
        env, known = overlays[r], (base_runs or {}).get(r)
        sides = [env] if known is not None and known.ran else [r, env]
        with ThreadPoolExecutor(2) as pool:  # the scripts and the pytests side by side
            scripts = pool.submit(run_script, repro, sides, entry, hosts=hosts)
            tests = pool.submit(run_pytest, test, [r, env], hosts=hosts) if test is not None else None
            got = scripts.result()
            tests = tests.result() if tests is not None else None
        base, fixed = ([known] if len(sides) == 1 else []) + got
        require_ran([base, fixed])
        pt = [None, None]
        if tests is not None:
            require_ran(tests, "the pytest reproducer")
            pt = [t.rc for t in tests]
        before, after = _verdicts(measured, [r, env], hosts)
        compared = [k for k in before if k not in (entry.id, "witness")]
        changed = {k: (before[k], after.get(k)) for k in compared if before[k] != after.get(k)}
        return FixRun(r, base.rc, fixed.rc, before[entry.id], after[entry.id], pt[0], pt[1],
                      before.get("witness"), after.get("witness"), changed, len(compared))

    # the releases side by side: one's overlay imports vLLM while another's runs its scripts
    with ThreadPoolExecutor(max(1, len(releases))) as pool:
        return list(pool.map(one, releases))
