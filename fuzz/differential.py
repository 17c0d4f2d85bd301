"""A continuous consumers campaign's release differential: its stored corpus on the release before.

After each epoch's merge, ``kvproof fuzz --continuous --target consumers`` runs
``kvproof.differential.diff`` on up to ``--diff-max`` files of the campaign's corpus,
decoded the way the harness decodes them (``kvproof.fuzz.consumers.decode_choices``
through ``PyFDP``, with the release capabilities the harness recorded in its
stats files and the campaign's premise): each input runs on the campaign's
release and on ``--diff-against`` (default: the newest managed release older
than the campaign's; ``none``: off), one worker call per release (``tiers.client.consumed_on``:
both releases' workers started together, their vLLM imports at once).
Files are named by their content's SHA-1; a file compared against a release is
not compared against it again, so each epoch takes files no earlier epoch
compared, in name order, and a restart resumes. Runs are not always
deterministic (OffloadingConnector's external hits vary run to run), so the
inputs of a regression run once more on both releases, and only a regression
that comes back counts.

Each regression class (``differential.Regression.class_key``) becomes a campaign class
like the harness's (``<workdir>/stats/differential.json``, read by
``run.merged_classes``): the report and the exit status count it, a ledgered one
is known, and the first input of a class the ledger lacks is stored in the
campaign's findings folder with its stream. That file also remembers the files
compared; it is written atomically once per epoch, so an interrupted epoch is
simply done again. Nothing here stops the campaign. A finished campaign's folder is read the
same way for bench/bench_differential.py's chain (``describe_campaign``, ``campaign_corpus``).
No vLLM import here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvproof import facts

from kvproof import envs
from kvproof.differential import Regression, diff
from kvproof.tiers.client import consumed_on
from kvproof.errors import EnvError, KvproofError, UsageError
from kvproof.fsio import atomic_write

STATS = "differential.json"  # under <workdir>/stats/: classes (for the report) and the files compared
DEFAULT_MAX = 50
OFF = "none"


def add_arguments(p: Any) -> None:
    p.add_argument("--diff-against", metavar="RELEASE",
                   help="continuous consumers: after each merge, run the stored corpus on this release too and "
                        "record hit regressions as classes (default: the managed release before; none: off)")
    p.add_argument("--diff-max", type=int, default=DEFAULT_MAX, metavar="N",
                   help=f"corpus files the differential compares per epoch (default {DEFAULT_MAX}; 0: off)")


def check_args(args: Any) -> None:
    if args.diff_max < 0:
        raise UsageError("--diff-max must be >= 0")
    if args.diff_against not in (None, OFF) and not (args.continuous and args.target == "consumers"):
        raise UsageError("--diff-against needs --continuous --target consumers")


def previous_release(version: str) -> str | None:
    """The newest managed release older than ``version``."""
    older = [r for r in facts.MANAGED_RELEASES if facts.release_key(r) < facts.release_key(version)]
    return max(older, key=facts.release_key) if older else None


def campaign_caps(workdir: Path) -> Any:
    """The release capabilities the consumers harness recorded in its stats (None before any)."""
    from kvproof.fuzz.decode import Caps

    for path in sorted((workdir / "stats").glob("consumers-*.json")):
        try:
            caps = json.loads(path.read_text()).get("caps")
        except (OSError, ValueError):
            continue
        if isinstance(caps, dict):
            return Caps.from_dict(caps)
    return None


def describe_campaign(workdir: Path) -> dict:
    """What a campaign folder says of itself (campaign.json, its consumers harness stats): release,
    target, sessions, execs and verdicts summed over the stats files."""
    try:
        data = json.loads((workdir / "campaign.json").read_text())
    except (OSError, ValueError):
        data = {}
    stats = []
    for p in sorted((workdir / "stats").glob("consumers-*.json")):
        with contextlib.suppress(OSError, ValueError):
            stats.append(json.loads(p.read_text()))
    verdicts: dict[str, int] = {}
    for d in stats:
        for k, v in d.get("verdicts", {}).items():
            verdicts[k] = verdicts.get(k, 0) + v
    return {"release": data.get("release") or next((d.get("vllm") for d in stats), "?"),
            "target": data.get("target", "consumers"), "sessions": data.get("sessions", []),
            "execs": sum(d.get("execs", 0) for d in stats), "verdicts": verdicts}


def campaign_corpus(workdir: Path, limit: int, premise: str, real: tuple = ()) -> tuple[Any, int, list[tuple], set[str], int]:
    """Up to ``limit`` of a consumers campaign's corpus files (``<workdir>/corpus``, in name order;
    its reference-model seeds, ``<workdir>/real-seeds``, when libFuzzer kept nothing new),
    decoded the harness's way with the capabilities its stats recorded: (caps, files, picked as
    ``select`` gives them, SHA-1s refused, files left over). A folder without harness stats, or
    with an empty corpus, is a UsageError."""
    caps = campaign_caps(workdir)
    if caps is None:
        raise UsageError(f"--workdir {workdir}: no consumers harness stats with the release's capabilities "
                         f"(stats/consumers-*.json); not a consumers campaign folder, or it never ran an input")
    files = scan(workdir / "corpus")
    if not files:  # a short campaign under load ran its seeds only: libFuzzer keeps in corpus/ what
        files = scan(workdir / "real-seeds")  # covers new code, and the reference-model seeds are its inputs
    if not files:
        raise UsageError(f"--workdir {workdir}: the campaign's corpus ({workdir / 'corpus'}) is empty "
                         f"and it left no seeds ({workdir / 'real-seeds'})")
    picked, refused, left = select(files, set(), limit, caps, premise, real)
    return caps, len(files), picked, refused, left


def decode_file(data: bytes, caps: Any, premise: str, real: tuple = ()) -> tuple[Any, Any] | None:
    """The (Layout, Stream) the harness makes of ``data``; None when the decoder refuses it."""
    from kvproof.fuzz.provider import PyFDP

    from kvproof.fuzz.consumers import decode_choices

    try:
        return decode_choices(PyFDP(data), caps, premise, real)
    except Exception:  # noqa: BLE001 (what the harness counts as ERROR, never compared)
        return None


def scan(corpus: Path) -> list[tuple[str, bytes]]:
    """(SHA-1, bytes) of each corpus file, in name order, one per content."""
    out: dict[str, bytes] = {}
    for path in sorted(p for p in corpus.iterdir() if p.is_file()) if corpus.is_dir() else ():
        try:
            data = path.read_bytes()
        except OSError:  # a merge swapped the folder meanwhile: the next epoch sees it
            continue
        out.setdefault(hashlib.sha1(data).hexdigest(), data)
    return list(out.items())


def select(files: list[tuple[str, bytes]], done: set[str], limit: int, caps: Any,
           premise: str, real: tuple = ()) -> tuple[list[tuple], set[str], int]:
    """Up to ``limit`` of ``files`` whose SHA-1 is not in ``done``, in order, decoded:
    ([(sha1, data, layout, stream)], SHA-1s the decoder refused, files left for later epochs)."""
    picked: list[tuple] = []
    refused: set[str] = set()
    left = 0
    for sha, data in files:
        if sha in done:
            continue
        if len(picked) >= limit:
            left += 1
            continue
        item = decode_file(data, caps, premise, real)
        if item is None:
            refused.add(sha)
        else:
            picked.append((sha, data, *item))
    return picked, refused, left


class Differential:
    """One campaign's differential: ``epoch(n)`` after each merge prints one status line."""

    def __init__(self, workdir: Path, corpus: Path, crash_dir: Path, release: str, version: str, env: Any,
                 against: str, against_env: Any, premise: str = "engine", limit: int = DEFAULT_MAX,
                 started: float | None = None, runner: Callable = consumed_on) -> None:
        self.workdir, self.corpus, self.crash_dir = Path(workdir), Path(corpus), Path(crash_dir)
        self.release, self.version, self.env = release, version, env
        self.against, self.against_env = against, against_env
        self.premise, self.limit, self.runner = premise, limit, runner
        self.started = time.monotonic() if started is None else started
        # the older release runs first: a regression is named by the newer one
        self.against_newer = facts.release_key(against) > facts.release_key(version)
        self.path = self.workdir / "stats" / STATS
        self.tag = (f"[fuzz differential {release} -> {against}]" if self.against_newer
                    else f"[fuzz differential {against} -> {release}]")

    # --- the campaign folder ---------------------------------------------------
    def load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        base = {"target": "differential", "vllm": self.release, "against": self.against, "classes": {},
                "new": 0, "known": 0, "compared": {}, "refused": [], "epochs": 0, "inputs": 0, "admissions": 0,
                "regressions": 0}
        return {**base, **data, "against": self.against}

    def save(self, state: dict) -> None:
        state["updated"] = time.time()
        atomic_write(self.path, json.dumps(state, sort_keys=True))

    # --- one epoch ----------------------------------------------------------------
    def epoch(self, n: int) -> dict | None:
        """Compare this epoch's share of the corpus; record its regression classes. Returns the
        epoch's counts (None when nothing could run)."""
        t0 = time.monotonic()
        caps = campaign_caps(self.workdir)
        if caps is None:
            print(f"{self.tag} epoch {n}: no harness stats with the release's capabilities yet; nothing compared",
                  flush=True)
            return None
        state = self.load()
        files = scan(self.corpus)
        here = {sha for sha, _ in files}  # files the merges dropped are forgotten: the state stays corpus-sized
        done = set(state["compared"].get(self.against, ())) & here
        refused_before = set(state["refused"]) & here
        # the real layouts the harness picks from (fuzz.consumers.Target.real): the same bytes, the same input
        from kvproof.fuzz.consumers import real_layouts
        real = real_layouts(self.version.split("+")[0])
        picked, refused, left = select(files, done | refused_before, self.limit, caps, self.premise, real)
        counts = {"inputs": len(picked), "admissions": 0, "regressions": 0, "not_compared": {}, "classes": []}
        if picked:
            items = [(lay, st) for _, _, lay, st in picked]
            order = [self.release, self.against] if self.against_newer else [self.against, self.release]
            try:
                runs = dict(zip(order, self.runner(
                    [self.env if rel == self.release else self.against_env for rel in order],
                    [lay.with_stream(st) for lay, st in items])))
            except (KvproofError, OSError) as err:
                print(f"{self.tag} epoch {n}: not run ({err}); the campaign goes on", flush=True)
                return None
            found = []
            for (_, data, lay, st), a, b in zip(picked, runs[order[0]], runs[order[1]]):
                rep = diff([(lay, st)], {order[0]: [a], order[1]: [b]}, margin=0)
                counts["admissions"] += rep.requests_compared
                for why, k in rep.not_compared.items():
                    counts["not_compared"][why] = counts["not_compared"].get(why, 0) + k
                found += [(reg, lay, st, data) for reg in rep.regressions]
            found, counts["unconfirmed"] = self.confirm(found, order)
            counts["regressions"] = len(found)
            counts["classes"] = self.record(state, found)
        compared = {rel: sorted(set(shas) & here) for rel, shas in state["compared"].items()}
        state["compared"] = {**compared, self.against: sorted(done | {s for s, *_ in picked})}
        state["refused"] = sorted(refused_before | refused)
        state["epochs"] += 1
        for k in ("inputs", "admissions", "regressions"):
            state[k] += counts[k]
        self.save(state)
        skipped = counts["not_compared"]
        print(f"{self.tag} epoch {n}: inputs compared {counts['inputs']} ({left} corpus files left), "
              f"admissions compared {counts['admissions']}, regressions {counts['regressions']}"
              + (f" in {', '.join(counts['classes'])}" if counts["classes"] else "")
              + (f"; {counts['unconfirmed']} did not come back on a rerun (not counted)"
                 if counts.get("unconfirmed") else "")
              + (f"; not compared: {', '.join(f'{v} {k}' for k, v in skipped.items())}" if skipped else "")
              + f" ({time.monotonic() - t0:.0f} s)", flush=True)
        return counts

    def confirm(self, found: list[tuple[Regression, Any, Any, bytes]], order: list[str]
                ) -> tuple[list[tuple[Regression, Any, Any, bytes]], int]:
        """Keep the regressions that come back when both releases run their inputs again: with
        OffloadingConnector the same input's external hits vary run to run (bench_differential.md),
        and noise must never be a class. Returns (kept, dropped)."""
        if not found:
            return found, 0
        inputs = list({(id(lay), id(st)): (lay, st) for _, lay, st, _ in found}.values())
        try:
            again = dict(zip(order, self.runner(
                [self.env if rel == self.release else self.against_env for rel in order],
                [lay.with_stream(st) for lay, st in inputs])))
        except (KvproofError, OSError):
            return [], len(found)  # unconfirmed: not counted
        rep = diff(inputs, {order[0]: again[order[0]], order[1]: again[order[1]]}, margin=0)
        back = {(r.input_hash, r.request, r.admission, r.class_key) for r in rep.regressions}
        kept = [f for f in found if (f[0].input_hash, f[0].request, f[0].admission, f[0].class_key) in back]
        return kept, len(found) - len(kept)

    def record(self, state: dict, found: list[tuple[Regression, Any, Any, bytes]]) -> list[str]:
        """Count each regression into its class in ``state`` (the harness's record shape, keyed by
        ``ClassKey`` id); store the first input of a class the ledger lacks. The classes, as
        ``<id> new|known``."""
        from kvproof.judging.classkey import ClassKey
        from kvproof.findings.ledger import Ledger
        from kvproof.fuzz.harness import premise_label
        from kvproof.fuzz.store import FindingStore

        ledger = Ledger.load()
        store = FindingStore(self.crash_dir, self.workdir / "seen-differential", self.release)
        classes = state["classes"]
        met: dict[str, str] = {}
        for reg, lay, st, data in found:
            key = ClassKey.parse(reg.class_key)
            entry = ledger.get(key)
            rec = classes.get(key.id)
            if rec is None:
                detail = (f"[consumer] hits {reg.before} -> {reg.after} of {reg.truth} reusable on request "
                          f"{reg.request} (admission {reg.admission}), {reg.previous} -> {reg.release} "
                          f"({reg.spec or 'no drafts'})" + (f"; scheduler block {reg.blocks[0]} -> {reg.blocks[1]}"
                                                            if reg.blocks[0] != reg.blocks[1] else ""))
                rec = classes[key.id] = {
                    "id": key.id, "key": str(key), "tier": key.tier, "check": key.check, "exc_type": key.exc_type,
                    "frame": key.frame, "verdict": "FAIL", "status": entry.status.value if entry else "new",
                    "count": 0, "first_s": round(time.monotonic() - self.started, 2), "layout": lay.summary(),
                    "detail": detail[:300], "premise": premise_label(lay, self.version, self.premise),
                    "stream_summary": st.summary()}
                if entry is None:
                    path, _ = store.record(lay, key.id, key.check, detail, data, verdict="FAIL", tier=key.tier,
                                           found_by="differential", against=reg.previous, stream=st.to_dict(),
                                           **{"class": str(key)})
                    rec["path"] = str(path) if path else ""
                    state["new"] += 1
            rec["count"] += 1
            if rec["status"] != "new":
                state["known"] += 1
            met[key.id] = "new" if rec["status"] == "new" else "known"
        return [f"{cid} {how}" for cid, how in met.items()]


def setup(campaign: Any) -> Differential | None:
    """The campaign's differential, or None: off (not a continuous consumers campaign,
    ``--diff-against none``, ``--diff-max 0``) or skipped (one line says why)."""
    args = campaign.args
    if not (args.continuous and args.target == "consumers") or args.diff_against == OFF or args.diff_max == 0:
        return None
    against = args.diff_against or previous_release(campaign.version)
    if against is None:
        print(f"[fuzz differential] skipped: {campaign.version} is the oldest managed release "
              f"(--diff-against RELEASE names another)", flush=True)
        return None
    if against == campaign.release:
        raise UsageError(f"--diff-against {against}: that is the campaign's own release")
    try:
        against_env = envs.find(against)
    except EnvError as err:
        print(f"[fuzz differential] skipped: {err}", flush=True)
        return None
    return Differential(campaign.workdir, campaign.corpus, campaign.crash_dir, campaign.release, campaign.version,
                        campaign.env, against, against_env, args.premise, args.diff_max, campaign.started)
