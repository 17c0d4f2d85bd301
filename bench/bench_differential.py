"""The release differential over a consumers campaign's stored corpus, along the release chain -> bench/results/differential.md.

    .venv/bin/python bench/bench_differential.py --workdir CAMPAIGN_DIR [--max 300] [--vllm all] [--margin 0]
                                                 [--premise engine] [--out bench/results/differential.md]
    .venv/bin/python bench/bench_differential.py --campaign-seconds 300 [--campaign-vllm RELEASE] [--workdir DIR] ...
    .venv/bin/python bench/bench_differential.py --generated 150 --spec-method mtp [--spec-share 1] [--seed 38] ...

Up to ``--max`` files of a ``kvproof fuzz --target consumers`` campaign's libFuzzer
corpus (``<workdir>/corpus``, in name order) are decoded the way the harness decodes
them (``kvproof.fuzz.differential.campaign_corpus``, with the release capabilities the
harness recorded in its stats files and the campaign's premise). Every decodable input
runs at the consumer tier on every release of the chain (``--vllm``, oldest first;
default: the project's whole release list), one worker call per release
(``kvproof.tiers.client.consumed_on``), and ``kvproof.differential.pairs`` compares each
consecutive pair admission by admission (``differential.diff``; ``--margin`` tokens a
request may lose). The table gives, per pair, the inputs and admissions compared, the
runs not compared by reason and the regressions;
per regression class (``consumer|regression:hits@<first bad release>[<drafter family
or scheduler-block>]||``) the ledger's id or NEW and its worst admission (corpus
file, request, hit before -> after of the reusable tokens, drafts, scheduler
block before -> after), with that input's layout and stream; and the share of
inputs whose stream carries speculative drafts, by method. Each pair's regressing inputs
run once more on both releases (``differential.reproduce`` with ``consumed_on``) and each class
says how many of its admissions regress again. The inputs the judge passes
on a release and FAILs on the next (compare's ``newly_failing``) are counted per pair and
listed by the class a campaign on the newer release would key them with. The classes, their
ledger entries, the counts per release and the drafts' share come from ``kvproof.differential``
(``regression_classes``, ``failing_classes``, ``release_counts``, ``spec_share``): this script
runs, times and writes the table.

With ``--generated N`` the inputs are not a campaign's corpus but ``kvproof compare
--generated``'s (``kvproof.commands.compare.generated``: the reference layouts in turn, each
under a seeded stream; ``--spec-method`` restricts the drafts to one method, MTP
drawing one module, two or one per draft token): a campaign that repeats exactly.

A campaign's stats do not record its premise: ``--premise`` says it (default
``engine``, the fuzz default). With ``--campaign-seconds S`` the script first runs
a time-boxed campaign itself (``kvproof fuzz --target consumers --vllm R
--seconds S --workdir DIR --premise P``; a time-boxed run keeps its libFuzzer
corpus) on ``--campaign-vllm`` (default: the chain's newest release), in
``--workdir`` when given (kept) or a temporary folder (removed afterwards).
The 1-min load average is read before and after; the machine is shared, so the
wall times are indicative. A regression the ledger lacks is reported (NEW), never
recorded: the exit status is 0 whenever the table was written.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvproof import envs  # noqa: E402
from kvproof.cliutil import Parser, add_vllm, guarded  # noqa: E402
from kvproof.commands.compare import new_classes, print_report  # noqa: E402
from kvproof import differential  # noqa: E402
from kvproof.differential import FailingClass, Input, Pair, RegressionClass, diff  # noqa: E402
from kvproof.errors import KvproofError, UsageError  # noqa: E402
from kvproof.fsio import atomic_write  # noqa: E402
from kvproof.fuzz.differential import campaign_corpus, describe_campaign  # noqa: E402
from kvproof import facts  # noqa: E402
from kvproof.tiers.client import consumed_on  # noqa: E402

PROG = "bench_differential.py"
DEFAULT_OUT = ROOT / "bench" / "results" / "differential.md"


def _cell(text: Any) -> str:
    """One markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    """Code in a markdown table cell (GFM splits a cell at a bare pipe, code spans included)."""
    return "`" + text.replace("|", "\\|") + "`"


def cpu_model() -> tuple[str, bool | None]:
    """The CPU's model name and whether it has AVX512-BF16 (a ledgered 0.29.0 class depends on it)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), None
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")),
                platform.machine())
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    return name, ("avx512_bf16" in flags) if flags else None


# --- the campaign ---------------------------------------------------------------
def run_campaign(release: str, seconds: int, workdir: Path, premise: str) -> dict:
    """A time-boxed consumers campaign, as a user starts it; what it did."""
    argv = ["fuzz", "--target", "consumers", "--vllm", release, "--seconds", str(seconds),
            "--workdir", str(workdir), "--premise", premise]
    load0, t0 = os.getloadavg()[0], time.monotonic()
    print(f"[{PROG}] campaign: kvproof {shlex.join(argv)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "kvproof", *argv], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):  # 1: a new class, the campaign still ran
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise KvproofError(f"the campaign failed (exit {proc.returncode}): {tail[0][:300]}")
    report = [ln for ln in proc.stdout.splitlines()
              if ln.startswith(("No new class", "NEW classes", "Verdicts", "Speculative inputs", "libFuzzer:"))]
    return {"cmd": "kvproof " + shlex.join(argv), "rc": proc.returncode, "wall": wall,
            "load": (load0, os.getloadavg()[0]), "report": report}


# --- the corpus -----------------------------------------------------------------
def collect(workdir: Path, limit: int, premise: str) -> dict:
    """Up to ``limit`` corpus files of the campaign, decoded the harness's way (timed)."""
    t0 = time.monotonic()
    caps, files, picked, refused, left = campaign_corpus(workdir, limit, premise)
    return {"caps": caps, "files": files, "picked": picked, "refused": len(refused), "left": left,
            "decode_s": time.monotonic() - t0}


def generated_corpus(n: int, share: float, seed: int, method: str | None) -> dict:
    """``compare.generated``'s inputs in the corpus shape ``collect`` returns (named ``gen-NNNN``)."""
    from kvproof.commands.compare import generated
    t0 = time.monotonic()
    picked = [(f"gen-{i:04d}", json.dumps({"layout": lay.to_dict(), "stream": st.to_dict()}).encode(), lay, st)
              for i, (lay, st) in enumerate(generated(n, share, seed, method))]
    return {"caps": None, "files": n, "picked": picked, "refused": 0, "left": 0, "decode_s": time.monotonic() - t0,
            "generated": {"n": n, "share": share, "seed": seed, "method": method}}


# --- the chain --------------------------------------------------------------------
def on_release(envs: Sequence[Any], layouts: Sequence[Any]) -> list[list]:
    """The chain's step, one release a call (timed apart): ``consumed_on``; a seam of its own,
    apart from the rerun's, for the tests' stand-in."""
    return consumed_on(envs, layouts)


def run_chain(items: Sequence[tuple], releases: Sequence[str], found: dict[str, Any],
              runner: Callable | None = None) -> tuple[dict[str, list], dict[str, float]]:
    """Every input on every release, one worker call per release (``runner``: ``consumed_on``'s
    shape, one environment a call), oldest first: (runs, wall s)."""
    runner = runner or on_release
    layouts = [lay.with_stream(st) for lay, st in items]
    runs: dict[str, list] = {}
    walls: dict[str, float] = {}
    for rel in releases:
        t0 = time.monotonic()
        [runs[rel]] = runner([found[rel]], layouts)
        walls[rel] = time.monotonic() - t0
        print(f"[{PROG}] {rel}: {len(items)} inputs in {walls[rel]:.0f} s", flush=True)
    return runs, walls


def confirm(pairs: Sequence[Pair], found_classes: Sequence[RegressionClass], found: dict[str, Any], margin: int,
            runner: Callable | None = None) -> float:
    """``differential.reproduce``: each pair's regressing inputs once more on both releases
    (``consumed_on``: one call, the two imports overlapped). The seconds it took."""
    t0 = time.monotonic()
    differential.reproduce(pairs, found_classes, found, margin, runner or consumed_on)
    return time.monotonic() - t0


# --- the table ----------------------------------------------------------------------
def render(meta: dict, corpus: dict, releases: Sequence[str], walls: dict[str, float], counts: dict,
           pairs: Sequence[Pair], found_classes: Sequence[RegressionClass], margin: int,
           failing: Sequence[FailingClass] = ()) -> list[str]:
    picked = corpus["picked"]
    layouts = [lay for *_, lay, _ in picked]
    n_spec, by_method = differential.spec_share(layouts)
    cpu, bf16 = cpu_model()
    camp = meta["campaign"]
    what = "a consumers campaign's corpus" if camp else "generated inputs"
    lines = [f"# Release differential over {what}: {' -> '.join(releases)}", "",
             f"Written by `{meta['command']}` at {meta['started']}; {platform.machine()}, {cpu}"
             + (f" (AVX512-BF16: {'yes' if bf16 else 'no'})" if bf16 is not None else "")
             + f", {os.cpu_count()} CPUs, Python {platform.python_version()}; 1-min load average "
             f"{meta['load'][0]:.2f} before, {meta['load'][1]:.2f} after; wall {meta['wall']:.0f} s in all "
             f"(campaign {meta['campaign_wall']:.0f} s, {'decoding' if camp else 'generating'} {corpus['decode_s']:.2f} s, "
             f"releases {sum(walls.values()):.0f} s, regressions rerun {meta['confirm_s']:.0f} s). "
             "The machine is shared: the times are indicative.", "",
             "## The campaign corpus" if camp else "## The generated inputs", ""]
    gen = corpus.get("generated")
    if gen:
        lines.append(f"`kvproof.commands.compare.generated({gen['n']}, spec_share={gen['share']}, seed={gen['seed']}, "
                     f"method={gen['method']!r})`, as `kvproof compare --generated {gen['n']} --spec-share "
                     f"{gen['share']} --seed {gen['seed']}" + (f" --spec-method {gen['method']}" if gen['method'] else "")
                     + "` draws them: the reference layouts (`compare.REFERENCE_LAYOUTS`) in turn, prefix caching "
                     "on, each under a seeded stream. MTP inputs by the target's MTP modules: "
                     + (", ".join(f"{k} module{'s' if k > 1 else ''}: {v}" for k, v in differential.mtp_modules(layouts).items())
                        or "none") + ".")
    elif meta.get("ran"):
        r = meta["ran"]
        lines.append(f"Made by this script: `{r['cmd']}` (exit {r['rc']}, {r['wall']:.0f} s wall, load "
                     f"{r['load'][0]:.2f} -> {r['load'][1]:.2f}): a time-boxed campaign, one libFuzzer process "
                     f"from the checked-in seeds; its report: {_cell('; '.join(r['report']))}.")
    else:
        sessions = "; ".join(f"{s.get('mode', '?')} {s.get('seconds', '?')} s, {s.get('execs', 0):,} execs, "
                             f"ended {s.get('ended', '?')}" for s in camp["sessions"]) or "no campaign.json"
        lines.append(f"The campaign folder given (`--workdir`), as its campaign.json records it: {sessions}.")
    verdicts = ", ".join(f"{k} {v:,}" for k, v in sorted(camp["verdicts"].items())) if camp else ""
    lines += [] if gen else ["",
              f"Campaign: `{camp['target']}` target on vLLM {camp['release']}, {camp['execs']:,} execs "
              f"(verdicts: {verdicts}); premise `{meta['premise']}` (`--premise`: a campaign's stats do not "
              f"record it); release capabilities as its harness recorded them: `{json.dumps(corpus['caps'].to_dict(), sort_keys=True)}`.",
              "",
              f"Corpus: {corpus['files']} files (distinct contents); {len(picked)} decoded and compared "
              f"(`--max {meta['max']}`, in name order), {corpus['refused']} refused by the decoder, "
              f"{corpus['left']} left over."]
    lines += ["",
              f"Inputs that speculate (`Layout.speculative`): **{n_spec} of {len(picked)}** "
              f"({n_spec / max(len(picked), 1):.0%}); by method: "
              + ", ".join(f"{k} {v}" for k, v in by_method.items()) + ".",
              "", "## Runs per release", "",
              "One worker call per release (vLLM import included in the wall time). Above their ideal: "
              "admissions whose hit exceeds `judge.ideal_hit` (the judge's ERROR `oracle:ideal`; 0 or "
              "kvproof's ideal is wrong).", "",
              "| release | wall s | complete | not expressible | error | raised or stalled | admissions "
              "| above their ideal |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for rel in releases:
        c = counts[rel]
        lines.append(f"| {rel} | {walls[rel]:.0f} | {c.get('complete', 0)} | {c.get('not expressible', 0)} | "
                     f"{c.get('error', 0)} | {c.get('raised or stalled', 0)} | {c.get('admissions', 0):,} | "
                     f"{c.get('above ideal', 0)} |")
    lines += ["", "## Consecutive pairs", "",
              f"`differential.diff` with margin {margin}: a request admission (matched by request index and "
              "admission number) whose hit (local + external) on the newer release is more than the margin "
              "below the older one's is a regression. An input is compared when both runs completed. "
              "Newly failing: inputs the judge passes on the older release and FAILs on the newer "
              "(compare's `newly_failing`; below). Hitting more: admissions whose hit on the newer release is "
              "more than the margin above the older one's (`Report.gains`), the other side of a change.", "",
              "| pair | inputs compared | admissions compared | not compared | regressing admissions | classes "
              "| newly failing inputs | admissions hitting more (tokens) |",
              "|---|---:|---:|---|---:|---|---:|---:|"]
    for p in pairs:
        rep = p.report
        nc = ", ".join(f"{v} {k}" for k, v in sorted(rep.not_compared.items())) or "none"
        cls = ", ".join(f"{_code(c.key)} {c.ledger}" for c in found_classes if c.release == p.release
                        and c.previous == p.previous) or "none"
        more, tokens = rep.gains.get(p.release, (0, 0))
        lines.append(f"| {p.previous} -> {p.release} | {p.inputs_compared} | {rep.requests_compared:,} | {nc} | "
                     f"{len(rep.regressions)} | {cls} | {len(rep.newly_failing)} | {more:,} (+{tokens:,}) |")
    total_adm = sum(p.report.requests_compared for p in pairs)
    lines += ["", f"Admissions compared over the chain: {total_adm:,}.", "", "## Regression classes", ""]
    if not found_classes:
        lines.append(f"None: no admission hit more than {margin} tokens less on a newer release.")
    else:
        lines += _regression_table(found_classes)
    lines += ["", "## Newly failing inputs", ""]
    if not failing:
        lines.append("None: no input the judge passes on a release FAILs on the next.")
        return lines
    lines += ["By the class a campaign on the newer release keys the FAIL with (`kvproof.judging.classkey.class_key`), "
              "in chain order; the first input met and the judge's line on the newer release.", "",
              "| class | newly failing on | ledger | inputs | first: corpus file | layout | judge |",
              "|---|---|---|---:|---|---|---|"]
    for c in failing:
        first = c.first
        lines.append(f"| {_code(c.key)} | {c.release} (after {c.previous}) | {c.ledger} | {c.inputs} | "
                     f"`{first.name[:12]}` | {_code(first.layout.summary())} | {_cell(first.line[:200])} |")
    return lines


def _regression_table(found_classes: Sequence[RegressionClass]) -> list[str]:
    lines = ["Reproduced: the class's admissions that regress again when its inputs run once more on both "
             "releases (the runs are meant to be deterministic; fewer than all: the class is not a stable "
             "difference between the releases).", "",
             "| class | first bad release | ledger | admissions (inputs) | reproduced | worst: corpus file | "
             "layout hash | request (admission) | hit before -> after of reusable | drafts | "
             "scheduler block before -> after |",
             "|---|---|---|---:|---:|---|---|---|---|---|---|"]
    for c in found_classes:
        reg, sha = c.worst.regression, c.worst.name
        blocks = f"{reg.blocks[0]} -> {reg.blocks[1]}" + ("" if reg.blocks[0] != reg.blocks[1] else " (same)")
        reproduced = "?" if c.reproduced is None else c.reproduced
        lines.append(f"| {_code(c.key)} | {reg.release} (after {reg.previous}) | {c.ledger} | "
                     f"{c.admissions} ({c.inputs}) | {reproduced} of {c.admissions} | "
                     f"`{sha[:12]}` | `{reg.input_hash}` | "
                     f"{reg.request} ({reg.admission}) | {reg.before} -> {reg.after} of {reg.truth} | "
                     f"{_cell(reg.spec or 'no drafts')} | {blocks} |")
    lines += ["", "Worst inputs (corpus file SHA-1; layout; stream):", ""]
    for c in found_classes:
        _, sha, lay, st = c.worst
        lines.append(f"- `{c.key}`: `{sha}`; `{_cell(lay.summary())}`; {_cell(st.summary())}")
    return lines


def _campaign_corpus(args: Any, camp_rel: str) -> tuple[dict | None, dict, dict]:
    """The campaign (run first with --campaign-seconds), what its folder says, its decoded corpus."""
    with contextlib.ExitStack() as stack:
        workdir = Path(args.workdir).absolute() if args.workdir else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="kvproof-bench-diff-")))
        ran = None
        if args.campaign_seconds is not None:
            ran = run_campaign(camp_rel, args.campaign_seconds, workdir, args.premise)
        elif not workdir.is_dir():
            raise UsageError(f"--workdir {workdir}: no such folder")
        campaign = describe_campaign(workdir)
        corpus = collect(workdir, args.max, args.premise)
    if not corpus["picked"]:
        raise UsageError(f"--workdir {workdir}: none of the {corpus['files']} corpus files decodes")
    return ran, campaign, corpus


def _main(argv: Sequence[str] | None) -> int:
    ap = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", metavar="DIR", help="the consumers campaign folder (with --campaign-seconds: "
                                                     "where the campaign is made, and kept)")
    ap.add_argument("--max", type=int, default=300, metavar="N", help="corpus files decoded and compared")
    add_vllm(ap, default=[], help="releases to chain (a subset name like 'all' or 'ci' works; default: all)")
    ap.add_argument("--margin", type=int, default=0, metavar="TOKENS", help="tokens a request may lose")
    ap.add_argument("--premise", choices=("engine", "free"), default="engine",
                    help="the campaign's premise (its stats do not record it; default engine)")
    ap.add_argument("--campaign-seconds", type=int, metavar="S",
                    help="first run a time-boxed consumers campaign of S seconds")
    ap.add_argument("--campaign-vllm", metavar="RELEASE", help="the campaign's release (default: the newest)")
    ap.add_argument("--generated", type=int, metavar="N", help="compare's N generated inputs instead of a corpus")
    ap.add_argument("--spec-share", type=float, default=1.0, help="--generated: share of streams with drafts")
    ap.add_argument("--spec-method", choices=facts.SPEC_METHODS, help="--generated: drafts of this method only")
    ap.add_argument("--seed", type=int, default=0, help="--generated: the streams' seed")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    command = f".venv/bin/python bench/{PROG} " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    if args.max < 1 or args.margin < 0:
        raise UsageError("--max must be >= 1 and --margin >= 0")
    if args.campaign_seconds is not None and args.campaign_seconds < 1:
        raise UsageError("--campaign-seconds must be >= 1")
    if args.generated is not None and (args.workdir or args.campaign_seconds is not None):
        raise UsageError("--generated makes its own inputs: no --workdir, no --campaign-seconds")
    if args.generated is not None and (args.generated < 1 or not 0.0 <= args.spec_share <= 1.0):
        raise UsageError("--generated must be >= 1 and --spec-share in [0, 1]")
    if args.generated is None and (args.spec_method or args.seed or args.spec_share != 1.0):
        raise UsageError("--spec-method, --spec-share and --seed go with --generated")
    if args.workdir is None and args.campaign_seconds is None and args.generated is None:
        raise UsageError("give --workdir CAMPAIGN_DIR, --campaign-seconds S to run a campaign first, "
                         "or --generated N")
    if args.campaign_vllm and args.campaign_seconds is None:
        raise UsageError("--campaign-vllm goes with --campaign-seconds")
    releases = sorted(envs.resolve(args.vllm or ["all"]), key=facts.release_key)
    if len(releases) < 2:
        raise UsageError("--vllm: name at least two releases to chain")
    found = {rel: envs.find(rel) for rel in releases}  # a release without an environment: one line, exit 2
    camp_rel = args.campaign_vllm or releases[-1]
    if args.campaign_seconds is not None:
        envs.find(camp_rel)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0, t0 = os.getloadavg()[0], time.monotonic()
    ran = campaign = None
    if args.generated is not None:
        corpus = generated_corpus(args.generated, args.spec_share, args.seed, args.spec_method)
    else:
        ran, campaign, corpus = _campaign_corpus(args, camp_rel)
    picked = corpus["picked"]
    print(f"[{PROG}] {len(picked)} inputs from {corpus['files']} " + ("generated" if campaign is None else "corpus files")
          + f"; {' -> '.join(releases)}", flush=True)
    items = [(lay, st) for _, _, lay, st in picked]
    runs, walls = run_chain(items, releases, found, on_release)
    pairs = differential.pairs([Input(sha, lay, st) for sha, _, lay, st in picked], runs, args.margin)
    from kvproof.findings.ledger import Ledger

    ledger = Ledger.load()
    chain = diff(items, runs, args.margin)  # the whole chain at once: the same counts, printed as compare does
    assert chain.requests_compared == sum(p.report.requests_compared for p in pairs)
    assert len(chain.regressions) == sum(len(p.report.regressions) for p in pairs)
    assert len(chain.newly_failing) == sum(len(p.report.newly_failing) for p in pairs)
    found_classes = [c for p in pairs for c in differential.regression_classes(p.found, ledger)]
    confirm_s = confirm(pairs, found_classes, found, args.margin, consumed_on)
    meta = {"command": command, "started": started, "load": (load0, os.getloadavg()[0]),
            "wall": time.monotonic() - t0, "campaign_wall": ran["wall"] if ran else 0.0, "ran": ran, "confirm_s": confirm_s,
            "campaign": campaign, "premise": args.premise, "max": args.max}
    lines = render(meta, corpus, releases, walls, differential.release_counts(runs), pairs, found_classes,
                   args.margin, differential.failing_classes([f for p in pairs for f in p.failing], ledger))
    atomic_write(Path(args.out), "\n".join(lines) + "\n")
    print_report(chain, ledger)
    new = new_classes(chain, ledger)
    print(f"[{PROG}] wrote {args.out}" + (f"; {len(new)} class(es) the ledger lacks: {', '.join(new)}" if new else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
