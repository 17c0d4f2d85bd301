"""Run the atheris harnesses inside a vLLM environment: time-boxed or continuous.

    kvproof fuzz                                       # contracts, default release, 60 s
    kvproof fuzz --vllm 0.27.0 --seconds 60
    kvproof fuzz --continuous --jobs 2                 # until killed; resumable
    kvproof fuzz --target conformance --seconds 30
    kvproof fuzz --target consumers --vllm 0.32.0 --seconds 600 --jobs 1

Target ``consumers`` runs ``<env>/bin/python -m kvproof.fuzz.consumers`` (the real
Scheduler driven by request streams, judged by ``kvproof.judging.judge.judge_consumer``)
with the same stats and classes; its findings carry their request stream
(``meta.stream``: ``kvproof consumer FILE --vllm R`` replays it).

This process never imports vLLM: it starts ``<env>/bin/python -m
kvproof.fuzz.harness <target> <libFuzzer flags>`` with the bridge's
``worker_env()`` (PYTHONPATH, offline switches) and reads the harness's stats
files (``<workdir>/stats/*.json``) for its one-line status and its report.

Findings never stop a campaign. Every FAIL, UNSUPPORTED and ERROR judgement
is keyed by ``kvproof.judging.classkey.class_key`` (one root cause, one class),
looked up in the ledger (``findings/``) and counted in-process: no libFuzzer
crash, no worker restart. The first input of each class the ledger does not
know is stored in the campaign folder (``<workdir>/findings/``,
``--crash-dir``); it reaches ``corpus/`` and the ledger only with ``--record``.

The report starts with the NEW FAIL classes (not in the ledger), each labelled
by the engine premise of the release's revision (reachable, or unreachable /
free with the premise's reason), then the ledger's known bugs seen with their
counts, then counts per ledger status and per verdict. Exit codes: 0 nothing
new, 1 a new FAIL class (``--expect-violation`` inverts that, for a canary on a
release with a bug the ledger does not hold), 2 usage, 3 the harness could not
start.

Time-boxed (default): one libFuzzer process for ``--seconds``. Working folder
``out/fuzz/<release>/<target>/``: its libFuzzer corpus persists between runs;
each run is its own campaign (its ``seen/`` markers are cleared).

Continuous (``--continuous``): ``--jobs`` libFuzzer workers (default: all
cores; one plain process with ``--jobs 1``) sharing one corpus folder, in
epochs of ``--merge-every`` seconds. Default ``--parallel jobs`` is
libFuzzer's ``-jobs/-workers`` mode: each worker imports vLLM once per epoch.
``--parallel fork`` is libFuzzer's fork mode (``-fork=N``); it starts a fresh
process per job and its jobs last 1, 2, 3 ... 300 s, so with a 10 s vLLM
import per process it spends most of its first hour importing. After each
epoch the corpus is merged/minimised (``-merge=1`` into a fresh folder,
swapped in by rename). Everything lives in
``~/.cache/kvproof/fuzz-corpus/<release>/<target>/`` (outside git): killing
the runner at any point loses at most the current epoch's unmerged inputs,
and the next start resumes from the folder. ``--seconds 0`` runs until
killed. Totals over all sessions of a campaign: ``<workdir>/campaign.json``.
A continuous ``consumers`` campaign runs its stored corpus on the release before
after each merge (``kvproof.fuzz.differential``; ``--diff-against``, ``--diff-max``):
each hit regression class is a campaign class.
"""

from __future__ import annotations

import argparse
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

from kvproof.fuzz import differential
from kvproof.fuzz.libfuzzer import INTERRUPTED, LibFuzzerProcess, count_files

from kvproof import envs
from kvproof.cliutil import Parser, add_vllm, guarded
from kvproof.errors import UsageError
from kvproof.fsio import atomic_write
from kvproof.settings import settings

MAX_LEN = 256
TARGETS = ("contracts", "conformance", "consumers")


def _stats_files(workdir: Path) -> list[dict]:
    out = []
    for f in sorted(glob.glob(str(workdir / "stats" / "*.json"))):
        try:
            out.append(json.loads(Path(f).read_text()))
        except (OSError, ValueError):
            continue
    return out


def read_stats(workdir: Path) -> dict:
    """Sum of every harness process's counters in this campaign folder."""
    total = {"execs": 0, "new": 0, "known": 0, "processes": 0, "verdicts": {}, "errors": {}, "drafts": {},
             "layouts": {},
             "first_crash_s": None}
    for d in _stats_files(workdir):
        total["processes"] += 1
        for k in ("execs", "new", "known"):
            total[k] += d.get(k, 0)
        for section in ("verdicts", "errors", "drafts", "layouts"):
            for k, v in d.get(section, {}).items():
                total[section][k] = total[section].get(k, 0) + v
        if d.get("first_crash_s") is not None and total["first_crash_s"] is None:
            total["first_crash_s"] = d["first_crash_s"]
    return total


def merged_classes(workdir: Path) -> dict[str, dict]:
    """Every class the harness processes of this campaign met, by class id: counts summed,
    the earliest record kept (its layout, detail and stored file)."""
    out: dict[str, dict] = {}
    for d in _stats_files(workdir):
        classes = d.get("classes")
        for cid, rec in (classes.items() if isinstance(classes, dict) else ()):  # an older harness's list: skipped
            have = out.get(cid)
            if have is None:
                out[cid] = dict(rec)
                continue
            have["count"] += rec["count"]
            if rec.get("path") and not have.get("path"):
                have["path"] = rec["path"]
            if rec["first_s"] < have["first_s"]:
                have.update({k: rec[k] for k in ("first_s", "layout", "detail", "premise") if k in rec})
    return out


def read_classes(workdir: Path) -> list[dict]:
    """The new FAIL classes (not in the ledger when met) of this campaign, first met first:
    each with tier, contract, layout, detail, seconds, premise and path (its stored input)."""
    new = [dict(c, contract=c["check"], seconds=c["first_s"])
           for c in merged_classes(workdir).values() if c["status"] == "new" and c["verdict"] == "FAIL"]
    return sorted(new, key=lambda c: c["seconds"])


def _key(rec: dict):
    from kvproof.judging.classkey import ClassKey

    return ClassKey(rec["tier"], rec["check"], rec["exc_type"], rec["frame"])


def _bug_on(entry, release: str | None) -> bool:
    """A ledger bug a user of ``release`` hits: status bug, or fixed in a later release."""
    if entry is None:
        return False
    if hasattr(entry, "bug_on"):
        return entry.bug_on(release)
    return entry.status.value == "bug"


def report(workdir: Path, ledger, release: str | None = None) -> tuple[str, int]:
    """The campaign's report and its number of new FAIL classes. NEW classes first (with the
    engine-premise label; a class the ledger has fixed in ``release`` or earlier is a
    regression and counts as new), then the ledger's known bugs seen (status bug, or fixed after
    ``release``), then counts per ledger status and per verdict. Statuses are re-read from
    ``ledger`` (an entry added since counts)."""
    classes = list(merged_classes(workdir).values())
    for c in classes:
        entry = ledger.get(_key(c))
        c["status"] = entry.status.value if entry is not None else "new"
        c["entry"] = entry
        # a class the ledger says is fixed, met on its fix release or later: the fix is gone
        c["regression"] = entry is not None and hasattr(entry, "regressed_on") and entry.regressed_on(release)
    new = sorted((c for c in classes if (c["status"] == "new" or c["regression"]) and c["verdict"] == "FAIL"),
                 key=lambda c: (c["premise"] != "reachable", c["first_s"]))
    lines = [f"NEW classes: {len(new)}" if new else "No new class (every FAIL is in the ledger)"]
    for c in new:
        was = f" REGRESSION of {c['entry'].title!r} (ledger: fixed in {c['entry'].fixed_in})" if c["regression"] else ""
        lines += [f"NEW ({c['tier']}) {' '.join(x for x in (c['check'], c['exc_type']) if x)} at {c['frame'] or '?'}  [{c['premise']}]  "
                  f"id {c['id']}{was}",
                  f"  first at {c['first_s']} s, {c['count']} hits: {c['layout']}",
                  f"  {c['detail']}"]
        if c.get("layout_as_found"):
            lines.append(f"  layout shrunk: {c['layout_as_found']} -> {c['layout']}")
        if c.get("stream_as_found"):
            lines.append(f"  stream shrunk: {c['stream_as_found']} -> {c.get('stream_summary')}")
        if c.get("path"):
            lines.append(f"  stored: {c['path']}")
    bugs = sorted((c for c in classes if _bug_on(c["entry"], release)), key=lambda c: -c["count"])
    if bugs:
        lines.append("Known bugs seen (ledger status bug, or fixed after this release):")
        for c in bugs:
            e = c["entry"]
            status = f"fixed in {e.fixed_in}" if c["status"] == "fixed" else f"upstream {e.upstream}"
            lines.append(f"  {c['id']} {e.title}  [{e.reachability or c['premise']}] {status}: "
                         f"{c['count']:,} hits ({c['tier']}; first: {c['layout']})")
    unlisted = [c for c in classes if c["status"] == "new" and c["verdict"] != "FAIL"]
    if unlisted:
        lines.append("Not in the ledger (counted, never a finding):")
        lines += [f"  {c['verdict']} {c['key']} id {c['id']}: {c['count']} hits ({c['layout']}; "
                  f"{c['detail'][:160]})" for c in sorted(unlisted, key=lambda c: -c["count"])]
    by_status: dict[str, list[int]] = {}
    for c in classes:  # "new" is a new FAIL class; any other class the ledger lacks is only counted
        st = c["status"] if c["status"] != "new" or c["verdict"] == "FAIL" else "not in the ledger"
        n = by_status.setdefault(st, [0, 0])
        n[0] += 1
        n[1] += c["count"]
    if by_status:
        lines.append("Classes by ledger status: " + ", ".join(
            f"{st} {n} ({hits:,} hits)" for st, (n, hits) in sorted(by_status.items())))
    s = read_stats(workdir)
    order = ["OK", "WARN", "NOT_EXPRESSIBLE", "REJECTED", "UNSUPPORTED", "LATENT", "ERROR", "FAIL"]
    verdicts = sorted(s["verdicts"].items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0]))
    lines.append("Verdicts: " + (", ".join(f"{k} {v:,}" for k, v in verdicts) or "none"))
    if s["drafts"]:  # the consumers target: inputs by speculative method ("none": no drafts)
        n = sum(s["drafts"].values())
        spec = n - s["drafts"].get("none", 0)
        lines.append(f"Speculative inputs: {spec:,} of {n:,} ({spec / max(n, 1):.0%}): " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(s["drafts"].items())))
    if s.get("layouts"):  # the consumers target: inputs whose layout a reference model derives
        n, real = sum(s["layouts"].values()), s["layouts"].get("real", 0)
        lines.append(f"Real-model layouts: {real:,} of {n:,} inputs ({real / max(n, 1):.0%}; the rest random)")
    if s["errors"]:
        lines.append("kvproof's own errors (counted as ERROR): " + "; ".join(
            f"{cause} x{n}" for cause, n in sorted(s["errors"].items(), key=lambda kv: -kv[1])))
    return "\n".join(lines), len(new)


def recover_merge(corpus: Path) -> None:
    """Undo what a merge killed midway left: its ``.new`` folder, and its ``.old`` one (put back
    when the corpus is missing or empty: killed between the two renames of a swap)."""
    old, new = corpus.with_name(corpus.name + ".old"), corpus.with_name(corpus.name + ".new")
    if old.exists() and (not corpus.exists() or not any(corpus.iterdir())):
        if corpus.exists():
            corpus.rmdir()
        old.rename(corpus)
    shutil.rmtree(new, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


class Campaign(LibFuzzerProcess):
    """A campaign: its folders, counters and report around libFuzzer processes (time-boxed: one;
    continuous: epochs with a merge after each)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        if args.python:
            self.env = envs.from_python(args.python)
            self._release = None  # read from the interpreter's vLLM when first printed
            label = "python-" + hashlib.sha256(str(Path(args.python).resolve()).encode()).hexdigest()[:8]
        else:
            self.env = envs.find(args.vllm)
            self._release = label = args.vllm
        where = settings()  # its folders may be relative to the working directory: made absolute here
        if args.continuous:
            self.workdir = Path(args.workdir or where.fuzz_home / label / args.target).absolute()
        else:
            self.workdir = Path(args.workdir or where.out / "fuzz" / label / args.target).absolute()
        self.corpus = Path(args.corpus_dir) if args.corpus_dir else self.workdir / "corpus"
        # new classes go to the campaign folder; corpus/ and the ledger only with --record
        self.crash_dir = Path(args.crash_dir) if args.crash_dir else self.workdir / "findings"
        self.record_dir = where.corpus.absolute() / ("consumers" if args.target == "consumers" else "")
        self.artifacts = self.workdir / "artifacts"
        self.log_dir = self.workdir / "logs"
        self._last = (time.monotonic(), 0)
        self.started = time.monotonic()
        self.base_execs = 0

    @property
    def release(self) -> str:
        """The vLLM version under test (for --python: the interpreter's vLLM, not its Python)."""
        if self._release is None:
            self._release = envs.vllm_version(self.env.python)
        return self._release

    @functools.cached_property
    def version(self) -> str:
        """The installed vLLM's version (an overlay's is its base release's): what the ledger's
        "fixed in" is compared with."""
        label = self._release or ""
        return label if re.fullmatch(r"\d+\.\d+\.\d+", label) else envs.vllm_version(self.env.python)

    # --- plumbing ------------------------------------------------------------
    def prepare(self) -> None:
        recover_merge(self.corpus)
        if not self.args.continuous:  # each time-boxed run is its own campaign: its own counters and classes
            for d in ("seen", "stats"):
                shutil.rmtree(self.workdir / d, ignore_errors=True)
        for d in (self.workdir, self.corpus, self.artifacts, self.log_dir, self.workdir / "stats"):
            d.mkdir(parents=True, exist_ok=True)
        self.base_execs = read_stats(self.workdir)["execs"]

    def status(self, final: bool = False) -> str:
        s = read_stats(self.workdir)
        now = time.monotonic()
        t0, e0 = self._last
        rate = (s["execs"] - e0) / max(now - t0, 1e-9) if e0 else (s["execs"] - self.base_execs) / max(now - self.started, 1e-9)
        self._last = (now, s["execs"])
        elapsed = int(now - self.started)
        return (f"[fuzz {self.args.target} vllm {self.release}] {elapsed // 60:02d}:{elapsed % 60:02d} "
                f"execs={s['execs']:,} ({rate:,.0f}/s) corpus={count_files(self.corpus)} "
                f"classes={len(merged_classes(self.workdir))} new={len(read_classes(self.workdir))} known={s['known']} "
                f"errors={sum(s['errors'].values())}" + (" (final)" if final else ""))

    def write_campaign(self, extra: dict) -> None:
        path = self.workdir / "campaign.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {"release": self.release, "target": self.args.target, "sessions": []}
        s = read_stats(self.workdir)
        data.update(total_execs=s["execs"], new=s["new"], known=s["known"], verdicts=s["verdicts"],
                    errors=s["errors"], corpus=count_files(self.corpus),
                    artifacts=len(list(self.artifacts.glob("crash-*"))))
        data["sessions"].append({"ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                 "seconds": round(time.monotonic() - self.started, 1),
                                 "execs": s["execs"] - self.base_execs, **extra})
        atomic_write(path, json.dumps(data, indent=2))

    # --- the report --------------------------------------------------------
    def finish(self) -> int:
        """Print the report; with --record copy each new class into corpus/ and the ledger.
        The number of new FAIL classes."""
        from kvproof.findings.ledger import Ledger

        ledger = Ledger.load()
        text, n_new = report(self.workdir, ledger, self.version)
        print(text, flush=True)
        if self.args.record and n_new:
            self.record(ledger)
        return n_new

    def record(self, ledger) -> None:
        from kvproof.findings.ledger import Entry, Status

        from kvproof.corpus import publish
        from kvproof.inputs.layout import Layout

        for c in read_classes(self.workdir):
            if not c.get("path"):
                continue
            layout = Layout.from_json(Path(c["path"]).read_text(), c["path"])
            path, _ = publish(layout, self.record_dir)
            entry = Entry(key=_key(c), status=Status.BUG, title=c["detail"][:120],
                          why=f"found by kvproof fuzz on vLLM {self.release}; not triaged yet",
                          releases={self.release: "FAIL"}, reachability=c["premise"].split(":")[0],
                          layout=layout.to_dict(), stream=layout.stream and layout.stream.to_dict())
            print(f"recorded {c['id']}: {path} and {ledger.add(entry)}", flush=True)

    def harness_failed(self, rc: int) -> int | None:
        """libFuzzer stopped on its own: the harness could not start (usage: 2; else 3),
        or a deadly signal, timeout or out-of-memory in vLLM's native code (1: its
        artefact is under artifacts/)."""
        if rc == 0:
            return None
        if rc == INTERRUPTED and self.stopped_at_deadline:
            # libFuzzer checks -max_total_time between inputs and its clock starts after the
            # import, so a loaded machine can run past the time box; kvproof's SIGTERM then
            # ends it with libFuzzer's interrupt code. That is the time box, not a crash.
            print(f"libFuzzer ran past its time box and was stopped (rc={rc}); log {self.last_log}", flush=True)
            return None
        tail = self.last_log.read_text(errors="replace").strip().splitlines()[-15:]
        if read_stats(self.workdir)["execs"] - self.base_execs == 0:
            print(f"harness failed (rc={rc}); log {self.last_log}:\n" + "\n".join(tail), file=sys.stderr)
            return 2 if rc == 2 else 3
        print(f"libFuzzer stopped (rc={rc}): a crash outside Python's exceptions; artefacts in {self.artifacts}; "
              f"log {self.last_log}:\n" + "\n".join(tail), flush=True)
        return 1

    # --- modes ---------------------------------------------------------------
    def timeboxed(self) -> int:
        cmd = self.command([f"-max_total_time={self.args.seconds}", "-print_final_stats=1"],
                           [self.corpus] + self.seed_dirs())
        print(f"kvproof fuzz: {self.args.target} on vLLM {self.release} for {self.args.seconds} s "
              f"(campaign: {self.workdir})", flush=True)
        rc = self.run_process(cmd, self.args.seconds, "timeboxed")
        print(self.status(final=True), flush=True)
        done = re.search(r"^Done (\d+) runs in (\d+) second", self.last_log.read_text(errors="replace"), re.M)
        if done:  # libFuzzer's own count (the stats files are flushed once a second)
            runs, secs = int(done.group(1)), int(done.group(2))
            print(f"libFuzzer: {runs:,} runs in {secs} s ({runs / max(secs, 1):,.0f}/s)", flush=True)
        self.write_campaign({"mode": "timeboxed", "rc": rc})
        if self.args.target == "conformance":  # a model disagreement stops the run (a bug in the model)
            text = self.violation_text()
            if text:
                print("violation:\n  " + text.replace("\n", "\n  "), flush=True)
                return 0 if self.args.expect_violation else 1
        n_new = self.finish()
        failed = self.harness_failed(rc)
        if failed is not None and failed != 1:
            return failed
        found = bool(n_new) or failed == 1
        if self.args.expect_violation:
            if not found:
                print("expected a new class (--expect-violation) and found none", file=sys.stderr)
            return 0 if found else 1
        return 1 if found else 0

    def continuous(self) -> int:
        jobs = self.args.jobs or os.cpu_count() or 1
        total = self.args.seconds if self.args.seconds_given else 0
        print(f"kvproof fuzz: continuous {self.args.target} on vLLM {self.release}, {jobs} workers "
              f"({self.args.parallel} mode), campaign {self.workdir}"
              + (f", {total} s" if total else ", until killed"), flush=True)
        end = time.monotonic() + total if total else None
        diff = differential.setup(self)  # None: off, or skipped (one line says why)
        epoch = 0
        try:
            while end is None or time.monotonic() < end - 5:
                left = (end - time.monotonic()) if end else self.args.merge_every
                span = int(max(5, min(self.args.merge_every, left)))
                if self.args.parallel == "fork":
                    flags = [f"-fork={jobs}", "-ignore_crashes=1", "-ignore_timeouts=1", "-ignore_ooms=1",
                             f"-max_total_time={span}"]
                elif jobs == 1:  # one in-process campaign: nothing stops it but the epoch's end
                    flags = [f"-max_total_time={span}"]
                else:
                    # N workers sharing the corpus folder (-reload). Findings never stop a
                    # worker (they are counted in-process); the runner ends the epoch
                    # (SIGTERM, libFuzzer exits cleanly; corpus and stats are on disk).
                    flags = [f"-jobs={jobs}", f"-workers={jobs}", f"-max_total_time={span}", "-reload=1"]
                cmd = self.command(flags, [self.corpus] + self.seed_dirs())
                self.run_process(cmd, span, f"epoch{epoch}", stop_after=span + 30)
                print(self.status(), flush=True)
                if count_files(self.corpus) > 1:
                    self.merge()
                if diff is not None:  # the stored corpus on the release before: regressions are classes
                    diff.epoch(epoch)
                epoch += 1
        except KeyboardInterrupt:
            print("[fuzz] interrupted; the campaign folder resumes on the next start", flush=True)
        print(self.status(final=True), flush=True)
        self.write_campaign({"mode": "continuous", "parallel": self.args.parallel, "jobs": jobs})
        return 1 if self.finish() else 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="kvproof fuzz", description=__doc__.split("\n\n")[0])
    add_vllm(p, many=False, default=envs.DEFAULT_RELEASE, help="release whose environment runs the harness")
    p.add_argument("--python", help="fuzz the vLLM of this interpreter instead (must have atheris)")
    p.add_argument("--target", choices=TARGETS, default="contracts")
    p.add_argument("--seconds", type=int, default=None, help="time box (default 60; continuous: until killed)")
    p.add_argument("--continuous", action="store_true", help="libFuzzer fork mode, persistent corpus, merges")
    p.add_argument("--jobs", type=int, default=0, help="parallel workers (default: all cores)")
    p.add_argument("--parallel", choices=("jobs", "fork"), default="jobs",
                   help="continuous: libFuzzer -jobs/-workers (default; one vLLM import per worker per epoch) "
                        "or -fork (one import per fork job; jobs last 1, 2, 3 ... 300 s)")
    p.add_argument("--corpus-dir", help="libFuzzer's working corpus (default: <workdir>/corpus)")
    p.add_argument("--workdir", help="campaign folder (stats, seen, artifacts, logs)")
    p.add_argument("--crash-dir", help="where the first input of each new class goes (default: <workdir>/findings)")
    p.add_argument("--record", action="store_true",
                   help="also copy each new FAIL class into corpus/ (KVPROOF_CORPUS) and the ledger (findings/)")
    p.add_argument("--premise", choices=("engine", "free"), default="engine")
    p.add_argument("--status-every", type=float, default=10.0, help="seconds between status lines")
    p.add_argument("--merge-every", type=int, default=1800, help="continuous: seconds per epoch between merges")
    p.add_argument("--seed", type=int, help="libFuzzer -seed")
    p.add_argument("--max-len", type=int, default=MAX_LEN)
    p.add_argument("--no-seeds", action="store_true", help="do not read the checked-in seed corpus")
    p.add_argument("--expect-violation", action="store_true",
                   help="time-boxed canary on a buggy release: exit 0 when a new class is found, 1 when not")
    differential.add_arguments(p)
    p.add_argument("libfuzzer", nargs="*", help="extra libFuzzer flags after --")
    args = p.parse_args(argv)
    differential.check_args(args)
    # Every campaign path absolute, once, here: the harness runs with cwd=<workdir>/logs.
    for name in ("workdir", "corpus_dir", "crash_dir", "python"):
        if getattr(args, name):
            setattr(args, name, str(Path(getattr(args, name)).expanduser().absolute()))
    args.seconds_given = args.seconds is not None
    if args.seconds is None:
        args.seconds = 60
    if args.seconds < 0 or (not args.continuous and args.seconds == 0):
        raise UsageError("--seconds must be positive (0 only with --continuous: until killed)")
    return args


def _terminate(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt  # SIGTERM (and SIGINT in background jobs) stop the campaign cleanly


def _main(argv: list[str] | None) -> int:
    args = parse(argv)
    campaign = Campaign(args)
    campaign.prepare()
    return campaign.continuous() if args.continuous else campaign.timeboxed()


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    return guarded("kvproof fuzz", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
