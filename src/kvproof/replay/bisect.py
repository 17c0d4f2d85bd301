"""``kvproof bisect FILE... [--tier ...] [--vllm V ...]``: the version matrix of counterexamples.

Replays each FILE on every managed release (oldest first) at the chosen tiers
(default all: function, manager, consumer and real engine boots) and names the first
release where it stops failing: the first release whose verdict at the
deciding tier (the strongest replayed: engine, consumer, manager, function) is OK, WARN,
LATENT or REJECTED after one that was FAIL (ERROR and unreplayed rows say
nothing). A LATENT there is named: real vLLM stopped failing, but the
contracts still flag the layout. Exit 0 when every replay agrees with the expectations
recorded in the file (a counterexample that still fails on the newest release
is reported, not an error), 1 when a replay contradicts them, 2 on a usage or
input error.
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

from kvproof.inputs import files as inputs
from kvproof.cliutil import Parser, add_tier, add_vllm, guarded
from kvproof.errors import UsageError
from kvproof.replay import core
from kvproof.replay.cli import releases_of
from kvproof.tiers import registry
from kvproof.tiers.row import ReplayRow
from kvproof.verdicts import Tier, Verdict

PROG = "kvproof bisect"

STOPS_FAILING = (Verdict.OK, Verdict.WARN, Verdict.LATENT, Verdict.REJECTED)


def first_fixed(rows: Sequence[ReplayRow], tier: Tier | str) -> tuple[str | None, list[str]]:
    """(first release where ``tier`` stops failing, releases where it fails)."""
    tier = core.as_tier(tier)
    by_release = sorted((r for r in rows if r.tier == tier), key=lambda r: core.version_key(r.release))
    failing: list[str] = []
    for r in by_release:
        if r.verdict == Verdict.FAIL:
            failing.append(r.release)
        elif failing and r.verdict in STOPS_FAILING:
            return r.release, failing
    return None, failing


def matrix(rows: Sequence[ReplayRow], tiers: Sequence[Tier | str]) -> str:
    tiers = [core.as_tier(t) for t in tiers]
    releases = sorted({r.release for r in rows}, key=core.version_key)
    cell = {(r.release, r.tier): r for r in rows}
    # a tier run outside the worker (the engine's boots) has its detail printed beside the verdicts
    detailed = [t for t in tiers if registry.runner(t).serve is None]
    lines = [f"{'vllm':8}" + "".join(f"  {str(t):10}" for t in tiers) + "".join(f"  {t} detail" for t in detailed)]
    for rel in releases:
        line = f"{rel:8}" + "".join(f"  {(core.verdict_name(cell[(rel, t)]) if (rel, t) in cell else '-'):10}"
                                    for t in tiers)
        line += "".join("  " + core.detail(cell[(rel, t)])[:200] for t in detailed if (rel, t) in cell)
        lines.append(line)
    return "\n".join(lines)


# The tiers `make matrix` replays every known finding at: the bridge's (one worker call, no stream
# or boot), and so the ledger classes it can decide.
MATRIX_TIERS = registry.through(registry.default())


def managed_installed() -> list[str]:
    """Every managed release (src/kvproof/facts/__init__.py) whose environment is built, oldest first."""
    from kvproof import envs
    return core.installed_releases(envs.MANAGED)


def known_findings() -> list[tuple[str, "object", str]]:
    """(name, Layout, deciding tier) per known finding: the ledger's classes with a layout
    (kvproof.findings.ledger), each Mamba align-mode one also with ``mamba_cache_mode="all"``
    (the same shape where a user picks "all": a class of its own from 0.28)."""
    from kvproof.inputs.layout import Layout
    try:
        from kvproof.findings.ledger import Ledger
        entries = Ledger.load().entries()
    except Exception as err:  # noqa: BLE001 -- no ledger yet: the caller says so
        raise UsageError(f"matrix: the findings ledger cannot be read ({err}); give FILEs") from None
    out = []
    for e in sorted(entries, key=lambda e: str(e.key)):
        if not e.layout or e.key.tier not in map(str, MATRIX_TIERS):
            continue  # consumer/engine classes need a stream or a boot: `kvproof replay --tier ...`
        lay = Layout.from_dict(e.layout)
        eid = getattr(e, "id", None) or e.key.id
        out.append((f"{eid} {e.key.check}", lay, e.key.tier))
        if lay.has_mamba and lay.cache.mamba_cache_mode == "align":
            d = lay.to_dict()
            d["cache"]["mamba_cache_mode"] = "all"
            out.append((f"{eid} {e.key.check} with mamba_cache_mode=all", Layout.from_dict(d), e.key.tier))
    return out


def first_bad_good(verdicts: Sequence[tuple[str, str]]) -> tuple[str | None, str | None]:
    """(first release that FAILs, first later release that stops failing) over (release, verdict) oldest first."""
    bad = next((r for r, v in verdicts if v == "FAIL"), None)
    if bad is None:
        return None, None
    after = [(r, v) for r, v in verdicts if core.version_key(r) > core.version_key(bad)]
    good = next((r for r, v in after if v in {x.name for x in STOPS_FAILING}), None)
    return bad, good


def finding_matrix(args) -> int:
    """``make matrix``: every known finding x every managed release, first bad and first good."""
    releases = sorted(args.vllm or managed_installed(), key=core.version_key)
    if not releases:
        raise UsageError("matrix: no managed vLLM environment is installed (make envs-all)")
    found = known_findings()
    for i, (name, lay) in enumerate(inputs.load_layouts(args.files) if args.files else []):
        found.append((name, lay, str(MATRIX_TIERS[-1])))  # decided at the highest tier replayed
    echo = (lambda s: print(s, file=sys.stderr)) if args.json else (lambda s: print(s, file=sys.stderr))
    named = [(n, lay) for n, lay, _ in found]
    rows = core.replay(named, releases, MATRIX_TIERS, echo=echo, synthesise=False)
    cell = {(r.name, r.release, str(r.tier)): r for r in rows}
    out = []
    width = max([len(n) for n, _, _ in found] + [7])
    if not args.json:
        print(f"{'finding':<{width}}  " + "  ".join(f"{r:>7}" for r in releases) + "  first bad  first good  last bad")
    for name, lay, tier in found:
        vs = [(rel, core.verdict_name(cell[(name, rel, tier)]) if (name, rel, tier) in cell else "-") for rel in releases]
        bad, good = first_bad_good(vs)
        last = next((r for r, v in reversed(vs) if v == "FAIL"), None)
        out.append({"finding": name, "layout": lay.summary(), "tier": tier, "verdicts": dict(vs),
                    "first_bad": bad, "first_good": good, "last_bad": last})
        if not args.json:
            print(f"{name:<{width}}  " + "  ".join(f"{v[:7]:>7}" for _, v in vs)
                  + f"  {bad or '-':>9}  {good or ('never' if bad else '-'):>10}  {last or '-':>8}")
    if args.json:
        print(json.dumps({"releases": releases, "findings": out}, indent=2))
    else:
        print(f"\n{len(found)} finding(s) x {len(releases)} release(s) at the finding's own tier "
              f"(function or manager); layouts:")
        for o in out:
            print(f"  {o['finding']}: {o['layout']}")
    return 0


def _main(argv: Sequence[str] | None) -> int:
    ap = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", metavar="FILE")
    add_tier(ap, core.REPLAY_TIERS, default=core.REPLAY_TIERS)
    add_vllm(ap, help="release to bisect over (repeatable; default: every managed release installed)")
    ap.add_argument("--matrix", action="store_true",
                    help="every known finding (the ledger, plus FILEs) x every managed release installed: "
                         "verdicts, first bad and first good release (`make matrix`)")
    ap.add_argument("--no-synth", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.matrix:
        return finding_matrix(args)
    if not args.files:
        raise UsageError("bisect: give FILEs (or --matrix for every known finding)")
    named = inputs.load_layouts(args.files)
    tiers = args.tier
    echo = (lambda s: print(s, file=sys.stderr)) if args.json else print
    rows = core.replay(named, releases_of(args), tiers, echo=echo, synthesise=not args.no_synth)
    deciding = max(core.as_tier(t) for t in tiers)  # the strongest tier replayed
    code = 0
    out = []
    for name, lay in named:
        mine = [r for r in rows if r.name == name]
        fixed, failing = first_fixed(mine, deciding)
        fixed_row = next((r for r in mine if r.tier == deciding and r.release == fixed), None)
        out.append({"name": name, "layout_hash": lay.content_hash(), "summary": lay.summary(),
                    "deciding_tier": str(deciding), "first_fixed_verdict": core.verdict_name(fixed_row) if fixed_row else None, "fails_on": failing, "first_fixed": fixed,
                    "contradictions": sum(core.contradicts(r) for r in mine), "results": [core.replay_dict(r) for r in mine]})
        if not args.json:
            print(f"\n{name}: {lay.summary()}")
            print(matrix(mine, tiers))
            if fixed:
                latent = (f"; still LATENT there: the contracts flag the layout "
                          f"({', '.join(core.data(fixed_row).get('contracts') or []) or 'see detail'})"
                          if fixed_row is not None and fixed_row.verdict == Verdict.LATENT else "")
                print(f"first release where it stops failing ({deciding} tier): {fixed} "
                      f"(fails on {', '.join(failing)}){latent}")
            elif failing:
                print(f"still failing on the newest release replayed ({deciding} tier): {failing[-1]} "
                      f"(FAIL observed at the {deciding} tier)")
            else:
                print(f"never fails at the {deciding} tier on the releases replayed")
    if any(o["contradictions"] for o in out):
        code = 1
    if args.json:
        print(json.dumps(out, indent=2))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Usage and input errors: one line ``kvproof bisect: ...`` on stderr, exit 2."""
    return guarded(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
