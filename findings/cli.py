"""``kvproof findings``: the ledger of known finding classes.

    kvproof findings [list]                    one line a class, bugs first
    kvproof findings show ID                   one entry (an id prefix will do)
    kvproof findings add LAYOUT --tier T --status S --title ... --why ... [--vllm R ...]
                                               measure a layout on real releases and record its class
    kvproof findings key LAYOUT --tier T [--vllm R]   print the class a layout shows, record nothing
    kvproof findings report ID|--all [--out DIR] [--vllm R ...] [--fix-on R ...] [--no-fix]
                                               the upstream issue, a pytest and a standalone reproducer
                                               (vLLM only), their runs per release, and the fix checked
                                               on an overlay, in out/findings/<id>/ (--all: every bug
                                               entry into out/reports/) (kvproof.findings.report)
    kvproof findings remeasure ID...|--all --vllm R [--write]
                                               each class measured again on a release: still present or
                                               not (kvproof.findings.remeasure); --write records the verdicts
    kvproof findings witness ID...|--all [--status S ...] [--vllm R] [--model M ...] [--write]
                                               which reference models reach the class on real vLLM
                                               (kvproof.findings.witness); --write records the search
                                               (models, flag sets, result) and the first witness

Exit codes: 0 done, 1 ``add``/``key`` found nothing to record (no release shows a
FAIL, UNSUPPORTED or ERROR), ``witness`` found no reference model reaching a class, or ``report``'s script did not behave as the ledger says on
some release or the fix did not remove the symptom, 2 usage or input error, 3 ``report``'s
script (or pytest) did not run on some release (exit neither 0 nor 1: no environment, python
could not open it, an import error, a timeout): one line names the release and the cause,
nothing is written (``kvproof.findings.runs.ReproducerDidNotRun``).

``report`` runs the script on every managed release whose environment is built (``--vllm``
restricts); a release the ledger entry has not measured is reported as run ("not in the
ledger yet: BUG as run"), never as unexpected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from kvproof.cliutil import Parser, add_tier, add_vllm, guarded
from kvproof.errors import UsageError
from kvproof.findings.fix import worsened
from kvproof.findings.ledger import Entry, Ledger, Status
from kvproof.findings.measure import TIERS
from kvproof.tiers import registry
from kvproof.verdicts import Tier

PROG = "kvproof findings"
MEASURED_TIERS = tuple(Tier[name.upper()] for name in TIERS)  # the tiers a finding is measured at
WITNESS_STATUSES = (Status.BUG, Status.LATENT, Status.UNREACHABLE)  # the entries --all searches


def _witness_config(text: str | None) -> dict | None:
    """--witness-config: a Config's JSON, inline or in a file: {"model": NAME, "flags": [...]}."""
    if not text:
        return None
    path = Path(text)
    raw = path.read_text() if not text.lstrip().startswith("{") and path.is_file() else text
    try:
        w = json.loads(raw)
    except json.JSONDecodeError as err:
        raise UsageError(f"--witness-config: neither a JSON object nor a file holding one ({err.msg})") from None
    if not isinstance(w, dict) or not isinstance(w.get("model"), str):
        raise UsageError('--witness-config must be {"model": NAME, "flags": [...]}')
    return w


def _parser() -> Parser:
    ap = Parser(prog=PROG, description="The ledger of known finding classes (findings/ledger/).")
    ap.add_argument("--ledger", help="ledger folder (default: the checked-in findings/ledger)")
    sub = ap.add_subparsers(dest="cmd", parser_class=Parser)
    ls = sub.add_parser("list", help="one line a class")
    ls.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="one entry")
    show.add_argument("id")
    rep = sub.add_parser("report", help="issue draft + standalone reproducer + its runs per release")
    rep.add_argument("id", nargs="?", help="a ledger id (or --all)")
    rep.add_argument("--all", action="store_true", help="every bug entry, into out/reports/ (or --out)")
    rep.add_argument("--fix-on", action="append", metavar="RELEASE",
                     help="lay the entry's fix (findings/fixes/ID.diff) over this release and check it "
                          "(repeatable; default: the two newest affected releases installed)")
    rep.add_argument("--no-fix", action="store_true", help="do not check the fix")
    rep.add_argument("--out", help="folder for <id>/ (default: out/findings)")
    add_vllm(rep, help="run the script on this release (repeatable; default: every managed release installed here)")
    rem = sub.add_parser("remeasure", help="measure known classes on a release again (a new release)")
    rem.add_argument("ids", nargs="*", help="ledger ids (or --all)")
    rem.add_argument("--all", action="store_true")
    add_vllm(rem, many=False, required=True, help="the release to measure on")
    rem.add_argument("--write", action="store_true", help="record each verdict in its entry's releases")
    wit = sub.add_parser("witness", help="the reference models that reach a class on real vLLM")
    wit.add_argument("ids", nargs="*", help="ledger ids (or --all: every bug, latent and unreachable entry)")
    wit.add_argument("--all", action="store_true")
    wit.add_argument("--status", action="append", choices=[str(s) for s in WITNESS_STATUSES],
                     help="with --all, only entries of this status (repeatable)")
    add_vllm(wit, many=False, help="release to search on (default: the newest installed release the entry fails "
                                   "on; a hit-regression class is searched on the release it regressed on)")
    wit.add_argument("--model", action="append", help="search only this reference model (repeatable)")
    wit.add_argument("--write", action="store_true",
                     help="record the search (found or not) and the first witness in the ledger entry")
    for name in ("add", "key"):
        p = sub.add_parser(name, help="measure a layout on real releases" + (" and record its class" if name == "add" else ""))
        p.add_argument("layout", help="a Layout JSON file (a consumer finding carries its stream in meta.stream)")
        add_tier(p, MEASURED_TIERS, many=False, default=registry.default())
        add_vllm(p, help="release (repeatable; default: installed)")
        p.add_argument("--regression", action="store_true",
                       help="the class is the input's hit regression along the releases (kvproof compare's, "
                            "consumer tier), not one release's FAIL")
        p.add_argument("--cause", metavar="KIND",
                       help="with --regression, where the input regresses in several classes: the one whose "
                            "cause (the [..] of its key, e.g. mtp:full_attention) is KIND")
        if name == "add":
            p.add_argument("--status", required=True, choices=[s.value for s in Status])
            p.add_argument("--title", required=True)
            p.add_argument("--why", required=True)
            p.add_argument("--upstream", default="unreported")
            p.add_argument("--fixed-in")
            p.add_argument("--reachability", choices=("reachable", "free", "unreachable"), default="")
            p.add_argument("--witness-config", help="the Config (JSON) that reaches it")
            p.add_argument("--premise-fact", default="")
            p.add_argument("--workaround", default="", help="what a user of an affected release can do today (measured)")
    return ap


def _releases(args) -> list[str]:
    from kvproof import envs

    if args.vllm:
        return envs.resolve(args.vllm)  # a subset name (all, ci, ...) works as elsewhere
    return _installed()


def _installed() -> list[str]:
    from kvproof import envs

    have = [e["vllm"] for e in envs.installed(disk=False) if e.get("status") == "ready" and e.get("vllm") != "-"]
    if not have:
        raise UsageError("no vLLM environment installed (kvproof env create)")
    return have


def _load(args):
    from kvproof.inputs import files as inputs
    from kvproof.inputs.layout import Layout

    layout = Layout.from_json(inputs.read_text(args.layout), args.layout)
    return layout, layout.stream


def _measure(args):
    from kvproof.findings.measure import measure

    layout, stream = _load(args)
    if args.regression:
        from kvproof.findings.measure import regression
        return layout, stream, regression(layout, _releases(args), stream, cause=args.cause)
    if args.cause:
        raise UsageError("--cause picks one of an input's hit-regression classes: it goes with --regression")
    return layout, stream, measure(layout, _releases(args), str(args.tier), stream)


def _fix_releases(args, entry) -> list[str]:
    from kvproof import envs
    from kvproof.findings.fix import diff_path
    from kvproof.findings.runs import affected

    if args.no_fix or diff_path(entry.id) is None:
        return []
    if args.fix_on:
        return envs.resolve(args.fix_on)
    have = set(_installed())
    return [r for r in affected(entry) if r in have][-2:]


def _report(args, ledger: Ledger) -> int:
    from kvproof import envs
    from kvproof.findings.report import generate
    from kvproof.findings.runs import ReproducerDidNotRun

    if args.all == bool(args.id):
        raise UsageError("findings report: give one ledger id or --all")
    entries = [e for e in ledger.entries() if e.status == Status.BUG] if args.all else [ledger.find(args.id)]
    if not args.all and not entries[0].filed_upstream:
        e = entries[0]
        print(f"{e.id} is not filed upstream ({e.status}): {e.premise_fact or e.why}")
        return 0
    out = Path(args.out) if args.out else (Path("out") / "reports" if args.all else None)
    releases = envs.resolve(args.vllm) if args.vllm else None
    ok, did_not_run = True, False
    for entry in entries:
        try:
            folder, runs = generate(entry, out, releases, fix_on=_fix_releases(args, entry), ledger=ledger)
        except (UsageError, ReproducerDidNotRun) as err:
            if not args.all:
                raise
            print(f"  {entry.id}: no report: {' '.join(str(err).split())}")
            did_not_run = did_not_run or isinstance(err, ReproducerDidNotRun)
            ok = False
            continue
        for r in runs:
            print(f"  {entry.id} vLLM {r.release}: exit {r.rc} ({r.expectation()}) {r.last}")
        fixed_ok = True
        for f in json.loads((folder / "evidence.json").read_text())["fix"]:
            worse = worsened(f["others_changed"])
            print(f"  {entry.id} with the fix on vLLM {f['release']}: script {f['repro']} -> {f['repro_fixed']}, "
                  f"test {f['pytest']} -> {f['pytest_fixed']}, class {f['verdict']} -> {f['verdict_fixed']}"
                  + (f", others changed: {f['others_changed']}" if f["others_changed"] else "")
                  + (f" (for the worse: {sorted(worse)})" if worse else ""))
            fixed_ok = fixed_ok and f["removes_symptom"] and not worse
        print(f"wrote {folder}/issue.md, repro.py, evidence.json")
        ok = ok and all(r.as_expected for r in runs) and fixed_ok
    return ReproducerDidNotRun.exit_code if did_not_run else 0 if ok else 1


def _witness(args, ledger: Ledger) -> int:
    from kvproof import envs
    from kvproof.inputs.config import reference_models
    from kvproof.findings.runs import release_key
    from kvproof.findings.witness import record, regression_release
    from kvproof.findings.witness_search import search_many

    if args.all == bool(args.ids):
        raise UsageError("findings witness: give ledger ids or --all")
    if args.status and not args.all:
        raise UsageError("findings witness: --status selects among --all's entries")
    for m in args.model or ():
        if m not in reference_models():
            raise UsageError(f"--model {m}: not a reference model (spec/models/)")
    statuses = {Status(s) for s in args.status} if args.status else set(WITNESS_STATUSES)
    entries = ([e for e in ledger.entries() if e.status in statuses] if args.all
               else [ledger.find(i) for i in args.ids])
    want = envs.resolve([args.vllm])[0] if args.vllm else None
    for entry in [] if args.all else entries:  # a regression is a pair: the release before reg, and reg
        reg = regression_release(entry)
        if reg not in (None, want) and want is not None:
            raise UsageError(f"{entry.id} is a hit regression at {reg}: it is searched from the release "
                             f"before {reg} to {reg} (give --vllm {reg} or none)")
    have = set(_installed())
    jobs, found_all = [], True
    for entry in entries:
        reg = regression_release(entry)
        if reg is not None and want not in (None, reg):
            print(f"  {entry.id}: a hit regression at {reg}, searched there (findings witness {entry.id})")
            continue
        bad = sorted((r for r, v in entry.releases.items() if v in ("FAIL", "ERROR", "UNSUPPORTED") and r in have),
                     key=release_key)  # by version, not by the ledger file's key order
        release = reg or want or (bad[-1] if bad else None)
        if release is None or release not in have:
            print(f"  {entry.id}: no installed release shows it")
            found_all = False
            continue
        jobs.append((entry, release))
    for s in search_many(jobs, args.model):
        hits, entry = s.witnesses, s.entry
        named = (entry.report or {}).get("model")
        hits.sort(key=lambda w: w.config.model != named)  # the model the report already names first
        where = f"{s.before} -> {s.release}" if s.before else s.release
        for w in hits:
            print(f"  {entry.id} vLLM {where}: {w.config.describe()}: {w.message}")
        rec = s.record()
        if not hits:
            print(f"  {entry.id} vLLM {where}: no reference model reaches it ({len(s.models)} models, "
                  f"{len(rec['flag_sets'])} flag sets, {rec['configs']} configs, {rec['refused']} refused; "
                  f"{len(rec['shaped'])} with the class's kinds"
                  + (": " + ", ".join(f"{x['model']} [{x['flag_set']}] {x['got']}" for x in rec["shaped"])
                     if rec["shaped"] else "") + ")")
            found_all = False
        if args.write:  # onto the entry as it is now: another search may have written it since we read it
            entry = (Ledger.load(ledger.folder).get(entry.key) or entry).with_search(rec)
            print(f"recorded {record(ledger, entry, hits[0]) if hits else ledger.add(entry)}")
    return 0 if found_all else 1


def _remeasure(args, ledger: Ledger) -> int:
    from kvproof import envs
    from kvproof.findings.remeasure import record, remeasure

    if args.all == bool(args.ids):
        raise UsageError("findings remeasure: give ledger ids or --all")
    release, = envs.resolve([args.vllm])[:1]
    envs.find(release)  # one line, exit 2, when it is not built
    entries = ledger.entries() if args.all else [ledger.find(i) for i in args.ids]
    results = remeasure(entries, release)
    for m in results:
        print(m.line())
    present = sum(m.present for m in results)
    print(f"{present} of {len(results)} classes still present on vLLM {release}")
    if args.write:
        print(f"recorded vLLM {release} in {record(ledger, results)} entr(ies)")
    return 0


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    ledger = Ledger.load(args.ledger)
    if args.cmd in (None, "list"):
        if getattr(args, "json", False):
            print(json.dumps([e.to_dict() for e in ledger.entries()], indent=1))
            return 0
        print(f"{len(ledger)} known classes in {ledger.folder}")
        for e in ledger.entries():
            print("  " + e.line())
        return 0
    if args.cmd == "show":
        print(json.dumps(ledger.find(args.id).to_dict(), indent=1, sort_keys=True))
        return 0
    if args.cmd == "report":
        return _report(args, ledger)
    if args.cmd == "witness":
        return _witness(args, ledger)
    if args.cmd == "remeasure":
        return _remeasure(args, ledger)
    # what the entry records is checked before the minutes of measuring
    if args.cmd == "add" and args.status == "fixed" and not args.fixed_in:
        raise UsageError("--status fixed needs --fixed-in RELEASE")
    witness = _witness_config(args.witness_config) if args.cmd == "add" else None
    layout, stream, m = _measure(args)
    for r, v in m.releases.items():
        print(f"  vLLM {r}: {v}")
    if m.key is None:
        print(f"{PROG}: " + ("no release hits less than the one before it on this input" if args.regression
                             else f"no release shows a FAIL, UNSUPPORTED or ERROR at the {args.tier} tier"))
        return 1
    print(f"class {m.key.id}: {m.key}" + ("  (known)" if m.key in ledger else "  (new)"))
    if args.cmd == "key":
        return 0
    lay = layout.to_dict()
    lay.pop("kvproof", None)
    entry = Entry(m.key, Status(args.status), args.title, args.why, args.upstream, args.fixed_in, m.releases,
                  args.reachability, witness, args.premise_fact, lay, None if stream is None else stream.to_dict(),
                  workaround=args.workaround)
    print(f"recorded {ledger.add(entry)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
