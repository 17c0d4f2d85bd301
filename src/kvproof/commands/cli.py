"""kvproof's command line.

Exit codes of ``check``: 0 nothing FAIL (OK, UNCHECKED, WARN, REJECTED, NOT_EXPRESSIBLE
and LATENT rows), 1 any FAIL (real vLLM raised or misbehaved, at the tier the
table names), 3 any ERROR and no FAIL (a run failed for a reason unrelated to
block sizes), 2 usage or input error. Verdicts come from ``kvproof.judging.judge``.

Subcommands that belong to other layers (verify, fuzz, replay, bisect) are
dispatched to their own ``main(argv)`` so each stays importable alone.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
from typing import Sequence

from kvproof.running import checking
from kvproof.judging import contracts
from kvproof import envs
from kvproof.commands import explain
from kvproof.inputs import files as inputs
from kvproof.cliutil import Parser, add_skips, add_tier, add_vllm, guarded, skipped
from kvproof.inputs.config import Config, reference_models
from kvproof.derivation import harness_note
from kvproof.errors import KvproofError, UsageError
from kvproof.findings.ledger import known, known_dict
from kvproof.inputs.layout import Layout, parse_groups_spec
from kvproof import facts
from kvproof.tiers import registry
from kvproof.verdicts import Tier

# name -> (module, help); each module has main(argv) -> int
DELEGATED = {
    "verify": ("kvproof.verify.cli", "Z3 proof run over revisions x properties x group counts"),
    "fuzz": ("kvproof.fuzz.run", "atheris fuzzing of the real installed vLLM"),
    "replay": ("kvproof.replay.cli", "replay counterexamples: function, manager and engine tiers"),
    "bisect": ("kvproof.replay.bisect", "first managed release where a counterexample stops failing"),
    "selftest": ("kvproof.selftest.run", "seeded vLLM mutants: which layer catches each (kill matrix)"),
    "findings": ("kvproof.findings.cli", "the ledger of known finding classes (list, show, add, report)"),
    "consumer": ("kvproof.commands.consume", "one layout through the real scheduler, prefix cache, KV events and connector"),
    "compare": ("kvproof.commands.compare", "release differential: the same layouts and streams on two releases, hit by hit"),
    "drift-consumers": ("kvproof.verify.consumer_drift", "which vLLM consumer functions a release changed (drift alarm)"),
}


def _add_release_args(p: argparse.ArgumentParser) -> None:
    add_vllm(p, help=f"vLLM release to run (repeatable; default {envs.DEFAULT_RELEASE})")
    p.add_argument("--python", action="append", metavar="PATH",
                   help="an interpreter with your own vLLM installed (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_skips(p, registry.skips(checking.CHECK_TIERS))


# Subcommands whose --flags holds a vllm serve line (see _serve_flags_argv).
SERVE_FLAGS_COMMANDS = ("check", "derive")
SERVE_FLAGS_HELP = ("The word after --flags is always its value, so a single flag works too "
                    "(--flags --enable-prefix-caching); or put the serve flags last, after a bare -- "
                    "(like vllm serve MODEL FLAGS...): ... -- --enable-prefix-caching --mamba-cache-mode align")


def _serve_flags_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the serve flags of ``check`` / ``derive`` made unambiguous for argparse:
    ``--flags X`` becomes ``--flags=X`` (argparse reads a lone ``X`` starting with '-' as an
    option and says "expected one argument"), and everything after a bare ``--`` becomes one
    ``--flags=...`` (shell-quoted, split back by load_configs). Other commands are untouched."""
    argv = list(argv)
    if not argv or argv[0] not in SERVE_FLAGS_COMMANDS:
        return argv
    out: list[str] = []
    given = False
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            if given:
                raise UsageError(f"{argv[0]}: give the serve flags with --flags or after --, not both")
            return out + ["--flags=" + shlex.join(argv[i + 1:])]
        if tok == "--flags" and i + 1 < len(argv):
            out.append("--flags=" + argv[i + 1])
            given = True
            i += 2
            continue
        given = given or tok.startswith("--flags=")
        out.append(tok)
        i += 1
    return out


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    return _parser().parse_args(_serve_flags_argv(argv))


def _parser() -> argparse.ArgumentParser:
    ap = Parser(prog="kvproof", description="Prove, fuzz and replay vLLM's KV cache block-size resolution.")
    sub = ap.add_subparsers(dest="cmd", parser_class=Parser)
    c = sub.add_parser("check", help="run layouts through real vLLM releases and judge the contracts")
    c.add_argument("files", nargs="*", help="Layout JSON files or folders of them")
    c.add_argument("--groups", help="inline groups, e.g. mamba:544x4,hidden_state:181")
    c.add_argument("--cache-block-size", type=int)
    pc = c.add_mutually_exclusive_group()
    pc.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None)
    pc.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    c.add_argument("--prefix-match-unit", type=int)
    c.add_argument("--mamba-cache-mode", choices=facts.ALL_MAMBA_MODES)
    c.add_argument("--kv-connector")
    c.add_argument("--dcp", type=int, default=1)
    c.add_argument("--max-model-len", type=int, default=131072)
    c.add_argument("--config", action="append", metavar="CONFIG",
                   help="derive, then check: an HF config.json (file or folder), a reference model "
                        "(spec/models: " + ", ".join(reference_models()) + "), a kvproof Config JSON, or a folder "
                        "of them (repeatable)")
    c.add_argument("--flags", default="", metavar="'VLLM SERVE FLAGS'",
                   help="vllm serve flags for --config models, parsed by each release's own EngineArgs, "
                        "e.g. '--enable-prefix-caching --mamba-cache-mode align'. " + SERVE_FLAGS_HELP)
    add_tier(c, checking.CHECK_TIERS, refused=registry.refused(checking.CHECK_TIERS),
             help="default all three; the engine tier boots a model per layout: kvproof replay FILE --tier engine")
    _add_release_args(c)
    e = sub.add_parser("explain", help="turn a 'block_sizes=[...], hash_block_size=N' log line into a check")
    e.add_argument("line")
    _add_release_args(e)
    d = sub.add_parser("derive", help="derive the Layout real vLLM builds from a user configuration")
    d.add_argument("config", nargs="?", help="a Config as a JSON file or an inline JSON object (or a list of them)")
    d.add_argument("--enumerate", action="store_true",
                   help="derive every Config of the bounded knob space and write the release's table "
                        "(spec/derived/RELEASE.json, what `verify` searches for witness Configs)")
    add_vllm(d, help=f"vLLM release to derive with (repeatable; default {envs.DEFAULT_RELEASE})")
    d.add_argument("--models", action="store_true",
                   help="with --enumerate: derive the reference models (spec/models) under common flag sets "
                        "into spec/derived/models/RELEASE.json instead")
    d.add_argument("--keep", action="store_true",
                   help="with --enumerate --models: keep the table's rows (derived on this CPU) and derive "
                        "only the Configs it lacks")
    d.add_argument("--retry-refused", action="store_true",
                   help="with --keep: derive the rows vLLM refused again too (not those refused for "
                        "this machine's memory), e.g. after a stand-in or a reference config changed")
    d.add_argument("--flags", default="", metavar="'VLLM SERVE FLAGS'",
                   help="vllm serve flags for a model config.json, parsed by each release's own EngineArgs. "
                        + SERVE_FLAGS_HELP)
    d.add_argument("--json", action="store_true", help="machine-readable output")
    env = sub.add_parser("env", help="manage vLLM environments")
    envsub = env.add_subparsers(dest="env_cmd", parser_class=Parser)
    create = envsub.add_parser("create", help="build (or reuse) environments")
    create.add_argument("releases", nargs="*", default=["ci"],
                        help="releases, a subset of src/kvproof/facts/__init__.py (all, ci, cpu, python-only, default) or latest")
    create.add_argument("--force", action="store_true")
    create.add_argument("--probe", action="store_true", help="probe derivation and every tier again")
    envsub.add_parser("list", help="show installed environments and their disk use")
    rel = envsub.add_parser("releases", help="print a subset of the release list (src/kvproof/facts/__init__.py)")
    rel.add_argument("subset", nargs="*", default=["all"])
    ov = envsub.add_parser("overlay", help="a vLLM checkout's Python files over a release environment (seconds)")
    ov.add_argument("name")
    ov.add_argument("--base", default=envs.DEFAULT_RELEASE, help="managed release to copy (hard links)")
    ov.add_argument("--vllm-src", required=True, metavar="PATH", help="root of a vLLM checkout (holds vllm/)")
    ov.add_argument("--ref", metavar="GITREF", help="take the files at this commit (default: the working tree)")
    ov.add_argument("--since", metavar="GITREF", help="compare C++/CUDA sources against this commit "
                                                     "(default: tag v<base>, else the upstream merge base)")
    ov.add_argument("--force", action="store_true", help="replace an overlay of that name")
    rm = envsub.add_parser("remove", help="remove an overlay (a managed release only with --force)")
    rm.add_argument("name")
    rm.add_argument("--force", action="store_true")
    sub.add_parser("contracts", help="list the contract catalogue")
    for name, (_, help_text) in DELEGATED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return ap


def _envs(args: argparse.Namespace) -> list[envs.Env]:
    out = [envs.find(r) for r in (args.vllm or ([] if args.python else [envs.DEFAULT_RELEASE]))]
    return out + [envs.from_python(p) for p in args.python or []]


def _tiers(args: argparse.Namespace) -> tuple[Tier, ...]:
    """The tiers ``check`` runs: ``--tier`` (default every tier of checking.CHECK_TIERS) less
    what ``--no-<tier>`` (the registry's skippable tiers: manager, consumer) drops."""
    chosen = checking.CHECK_TIERS if args.tier is None else args.tier
    drop = skipped(args, checking.CHECK_TIERS)
    tiers = tuple(t for t in checking.CHECK_TIERS if t in chosen and t not in drop)
    if not tiers:
        raise UsageError("check: no tier left to run (--tier, --no-manager, --no-consumer)")
    return tiers


def _inline_layout(args: argparse.Namespace) -> Layout:
    cache: dict = {"enable_prefix_caching": bool(args.prefix_caching) if args.prefix_caching is not None else True}
    if args.cache_block_size is not None:
        cache["block_size"] = args.cache_block_size
    if args.prefix_match_unit is not None:
        cache["prefix_match_unit"] = args.prefix_match_unit
    if args.mamba_cache_mode:
        cache["mamba_cache_mode"] = args.mamba_cache_mode
    return Layout.from_dict({"groups": parse_groups_spec(args.groups), "cache": cache,
                             "kv_connector": args.kv_connector, "dcp": args.dcp,
                             "max_model_len": args.max_model_len})


def _print_table(rows: Sequence[checking.Row], info: dict) -> None:
    by_env: dict[str, list[checking.Row]] = {}
    for r in rows:
        by_env.setdefault(r.env, []).append(r)
    for env_name, env_rows in by_env.items():
        i = info.get(env_name, {})
        print(f"vLLM {i.get('vllm', '?')} ({env_name}, resolver {i.get('fingerprint', '?')})")
        width = max(len(r.layout.summary()) for r in env_rows)
        vwidth = max(len(_verdict_cell(r)) for r in env_rows)
        print(f"  {'layout':<{width}}  {'scheduler':>9}  {'hash':>7}  {'verdict (tier)':<{vwidth}}  "
              "contract / vLLM message")
        last = None
        for r in env_rows:
            s = "-" if r.scheduler_block_size is None else r.scheduler_block_size
            h = "-" if r.hash_block_size is None else r.hash_block_size
            # one layout's rows of every tier together, the layout named once
            name = "" if r.layout is last else r.layout.summary()
            last = r.layout
            print(f"  {name:<{width}}  {s:>9}  {h:>7}  {_verdict_cell(r):<{vwidth}}  {r.message()}")
            if (k := known(r)) is not None:
                print(f"  {'':<{width}}  {'':>9}  {'':>7}  {'':<{vwidth}}  {k.known_line()}")
        print()


def _row_dict(r: checking.Row) -> dict:
    """A check row as JSON, with the ledger entry of its class (``known``: null when none)."""
    return {**r.to_dict(), "known": known_dict(r)}


def _verdict_cell(r: checking.Row) -> str:
    """The verdict and the tier that gave it (a FAIL's: the tier that observed it)."""
    return f"{r.verdict} ({r.tier})"


def load_configs(items: Sequence[str], flags: str, revision: str | None = None,
                 where_note: str = "") -> list[tuple[str, Config]]:
    """Named Configs from what a user typed: an inline Config JSON, a reference model name, an HF
    config.json (a file or a folder holding one; ``flags`` are its vllm serve flags), a kvproof
    Config JSON file (an object or a list), or a folder of such files."""
    import shlex
    from pathlib import Path
    try:
        flag_list = shlex.split(flags)
    except ValueError as err:
        raise UsageError(f"--flags: {err}") from None

    def one(text: str) -> list[tuple[str, Config]]:
        if text.lstrip().startswith(("{", "[")):
            data, where = inputs.parse_json(text, "derive: config", UsageError), "config"
        elif text in reference_models():
            return [(text, Config.from_dict({"model": text, "flags": flag_list}, revision))]
        else:
            path = Path(text)
            if path.is_dir() and not (path / "config.json").is_file():
                found = sorted(path.glob("*.json"))
                if not found:
                    raise UsageError(f"{text}: a folder with no config.json and no *.json files")
                return [c for f in found for c in one(str(f))]
            if path.is_dir():
                path = path / "config.json"
            if not path.is_file():
                raise UsageError(f"{text}: no such file (give a JSON file or folder, an inline JSON object, "
                                 f"or a reference model: {', '.join(reference_models())})")
            data, where = inputs.parse_json(inputs.read_text(path), str(path), UsageError), str(path)
            if isinstance(data, dict) and "architectures" in data:  # an HF config.json
                return [(path.parent.name if path.name == "config.json" else path.stem,
                         Config.from_dict({"model": str(path), "flags": flag_list}, revision))]
        items = data if isinstance(data, list) else [data]
        out = []
        for i, item in enumerate(items):
            label = where if len(items) == 1 else f"{where}[{i}]"
            try:
                cfg = Config.from_dict(item, revision)
            except KvproofError as err:
                raise type(err)(f"{label}{where_note}: {err}") from None
            out.append((label, cfg))
        return out

    return [c for text in items for c in one(text)]


def _print_config_checks(checks: Sequence[checking.ConfigCheck]) -> None:
    for c in checks:
        d = c.derived
        print(f"{c.env}: {c.name}: {d.config.describe()}")
        if c.environment_error:
            print(f"  ERROR (derive) environment: {c.environment_error}")
            continue
        if c.not_derivable:
            print(f"  NOT_DERIVABLE: {c.not_derivable}")
            if note := harness_note(c.not_derivable):
                print(f"  note: {note}")
            continue
        print(f"  derived:  {d.layout.summary()}  ({d.seconds:.2f} s)" + (
            f"  [derived with stand-in backend {d.stand_in}]" if d.stand_in else ""))
        if d.log_line():
            print(f"  vLLM:     {d.log_line()}  (scheduler_block_size={d.scheduler_block_size})")
        if d.error is not None:
            print(f"  derivation stopped at {d.error.line()}")
        for r in c.rows:
            print(f"  {_verdict_cell(r):<22} {r.message()}")
            if (k := known(r)) is not None:
                print(f"  {'':<22} {k.known_line()}")
        print()


def cmd_check(args: argparse.Namespace) -> int:
    if args.config:
        if args.groups or args.files:
            raise UsageError("check: give --config, layout files or --groups, one kind at a time")
        if args.python:
            raise UsageError("check --config derives in managed releases; use --vllm")
        named = load_configs(args.config, args.flags)
        checks = checking.check_configs(named, _envs(args), tiers=_tiers(args))
        if args.json:
            print(json.dumps([{"name": c.name, "env": c.env, "config": c.derived.config.to_dict(minimal=True),
                               "not_derivable": c.not_derivable, "log_line": c.derived.log_line(),
                               "seconds": c.derived.seconds, "peak_rss_mb": c.derived.peak_rss_mb,
                               "results": [_row_dict(r) for r in c.rows]} for c in checks], indent=2))
        else:
            _print_config_checks(checks)
        return checking.config_exit_code(checks)
    if args.flags:
        raise UsageError("check: --flags go with --config")
    if args.groups and args.files:
        raise UsageError("check: give layout files or --groups, not both")
    if not args.groups and not args.files:
        raise UsageError("check: give layout files or --groups")
    tiers = _tiers(args)
    named = [("inline", _inline_layout(args))] if args.groups else inputs.load_layouts(args.files)
    rows, info = checking.run(named, _envs(args), tiers=tiers)
    if args.json:
        print(json.dumps({"environments": info, "results": [_row_dict(r) for r in rows]}, indent=2))
    else:
        _print_table(rows, info)
    return checking.exit_code(rows)


def cmd_explain(args: argparse.Namespace) -> int:
    """Every configuration choice that prints the log line, per installed release."""
    explain.parse(args.line)  # a bad line is a usage error before any vLLM starts
    if not (args.vllm or args.python):
        args.vllm = [r for r in envs.SUPPORTED if _installed(r)] or [envs.DEFAULT_RELEASE]
    sizes, hash_size, answers = explain.explain(args.line, _envs(args))
    if args.json:
        print(json.dumps({"block_sizes": sizes, "hash_block_size": hash_size, "releases": [
            {"vllm": a.release, "tried": a.tried, "ambiguous": a.ambiguous,
             "reproducing": [{"choice": c.describe(), "layout": c.layout.to_dict(), "message": m,
                              "derived_by": None if x is None else {"config": x.config.to_dict(minimal=True),
                                                                    "layout": x.layout.to_dict()}}
                             for c, m, x in zip(a.reproducing, a.messages, a.examples)]} for a in answers]}, indent=2))
        return 1 if any(a.reproducing for a in answers) else 0
    print(f"read: block_sizes={sizes}, hash_block_size={hash_size}")
    for a in answers:
        head = f"vLLM {a.release}: {len(a.reproducing)} of {a.tried} configuration choices print this line"
        print(head + (" (ambiguous: the line cannot tell them apart)" if a.ambiguous else ""))
        for c, x in zip(a.reproducing, a.examples):
            print(f"  {c.describe()}  [{c.layout.summary()}]")
            if x is not None:
                print(f"    a real model reaches this class: {x.config.describe()} derives {x.layout.summary()} "
                      f"(hash {x.hash_block_size})")
    fixed = [a.release for a in answers if not a.reproducing]
    broken = [a.release for a in answers if a.reproducing]
    if broken and fixed:
        print(f"diagnosis: reproduced on {', '.join(broken)}; no choice prints it on {', '.join(fixed)}")
    elif broken:
        print(f"diagnosis: reproduced on {', '.join(broken)} (every release run)")
    else:
        print("diagnosis: no configuration choice prints this line on the releases run")
    return 1 if broken else 0


def _installed(release: str) -> bool:
    try:
        envs.find(release)
        return True
    except KvproofError:
        return False


def cmd_env(args: argparse.Namespace) -> int:
    if args.env_cmd == "create":
        from kvproof.running import health
        broken = 0
        for r in envs.resolve(args.releases):
            env = envs.create(r, force=args.force, echo=lambda m: print(m, file=sys.stderr))
            m = env.manifest() or {}
            h = m.get("health") or {}
            key = health.probe_key(m)
            if args.force or args.probe or h.get("probe") != key:
                print(f"kvproof: {env.name}: probing derivation and every tier on a known input", file=sys.stderr)
                h = envs.update_manifest(env, health=health.probe(env).to_dict(key))["health"]
            bad = health.broken(h)
            tiers = ", ".join(health.works(h)) or "none"
            stand_ins = "".join(f"; stand-in: {s}" for s in m.get(envs.STAND_INS, []))
            state = "ready" if not bad else "NOT READY"
            print(f"{env.name}: {state}: vllm {m.get('vllm')} at {env.root} ({m.get('disk_mb')} MB, "
                  f"built in {m.get('build_seconds')} s); works: {tiers}{stand_ins}")
            for step, cause in bad.items():
                print(f"kvproof: {env.name}: the {step} tier cannot run here: {cause}", file=sys.stderr)
            broken += bool(bad)
        return 3 if broken else 0
    if args.env_cmd == "list":
        print("\n".join(envs.list_lines()))
        return 0
    if args.env_cmd == "releases":
        print(" ".join(envs.resolve(args.subset)))
        return 0
    if args.env_cmd in ("overlay", "remove"):
        from kvproof.envs import overlay
        if args.env_cmd == "remove":
            print(f"removed {overlay.remove(args.name, force=args.force)}")
            return 0
        made = overlay.create(args.name, args.base, args.vllm_src, ref=args.ref, since=args.since, force=args.force)
        o = made.manifest[overlay.KEY]
        print(f"{made.env.name}: {o['base']} + {len(o['files'])} file(s) from {o['source']['path']}"
              f"@{(o['source'].get('commit') or 'worktree')[:12]} in {made.seconds:.1f} s ({made.env.python})")
        for f in o["files"]:
            print(f"  {f}")
        return 0
    raise UsageError("env: say `create`, `list`, `overlay` or `remove`")


def cmd_contracts(args: argparse.Namespace) -> int:
    for c in contracts.CATALOGUE:
        print(f"{c.id:<45} {c.kind:<10} {c.statement}\n{'':<45} protects {c.protects}; when {c.premise}")
    return 0


def cmd_derive(args: argparse.Namespace) -> int:
    """Config -> real vLLM derivation, per release: the Layout and resolver result, or vLLM's error."""
    from kvproof.running.checking import derive_all, write_model_table, write_table
    from kvproof.revisions import revision_for
    if args.enumerate:
        if args.config:
            raise UsageError("derive: give a Config or --enumerate, not both")
        if args.keep and not args.models:
            raise UsageError("derive: --keep goes with --enumerate --models")
        if args.retry_refused and not args.keep:
            raise UsageError("derive: --retry-refused goes with --keep")
        for release in args.vllm or list(envs.SUPPORTED):
            envs.find(release)
            if args.models:
                print(f"reference-model derivations for vLLM {release}: {write_model_table(release, keep=args.keep, retry_refused=args.retry_refused)}")
            else:
                print(f"derivation table for vLLM {release}: {write_table(release)}")
        return 0
    if args.models or args.keep:
        raise UsageError(f"derive: {'--models' if args.models else '--keep'} goes with --enumerate")
    if not args.config:
        raise UsageError("derive: give a Config (JSON file or inline object), a model config.json, "
                         "a reference model or --enumerate")
    releases = args.vllm or [envs.DEFAULT_RELEASE]
    plan = []
    for release in releases:
        try:
            revision = revision_for(release)
        except KeyError as err:
            raise UsageError(f"derive: {err.args[0]}") from None
        configs = [c for _, c in load_configs([args.config], args.flags, revision, f" (vLLM {release})")]
        plan.append((release, envs.find(release), configs))
    rows = []
    for release, env, configs in plan:
        for d in derive_all(release, configs):
            rows.append({"release": release, "config": d.config.to_dict(minimal=True), "ok": d.error is None,
                         "summary": d.layout.summary() if d.layout else None,
                         "layout": d.layout.to_dict() if d.layout else None,
                         "scheduler_block_size": d.scheduler_block_size, "hash_block_size": d.hash_block_size,
                         "error": None if d.error is None else {"stage": d.error.stage, "type": d.error.type,
                                                                "message": d.error.message,
                                                                "frame": d.error.frame},
                         "seconds": d.seconds, "describe": d.config.describe(), "log_line": d.log_line(),
                         "peak_rss_mb": d.peak_rss_mb, "stand_in_backend": d.stand_in,
                         "kv_cache_memory_bytes": d.raw.get("kv_cache_memory_bytes")})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"vLLM {r['release']}: {r['describe']}")
        if r["summary"]:
            print(f"  layout:   {r['summary']}")
        if r["stand_in_backend"]:
            print(f"  derived with stand-in backend {r['stand_in_backend']}")
        if r["ok"]:
            print(f"  vLLM:     {r['log_line']}")
            print(f"  resolver: scheduler_block_size={r['scheduler_block_size']} "
                  f"hash_block_size={r['hash_block_size']}  ({r['seconds']:.2f} s, peak RSS "
                  f"{r['peak_rss_mb']} MB, KV memory sized to {r['kv_cache_memory_bytes']} bytes)")
        elif not r["summary"]:
            e = r["error"]
            text = " | ".join(ln.strip() for ln in e["message"].strip().splitlines() if ln.strip())
            print(f"  NOT_DERIVABLE at {e['stage']}: {e['type']}: {text[:400]}" + (f"  [{e['frame']}]" if e["frame"] else ""))
            if note := harness_note(e["message"]):
                print(f"  note:     {note}")
            continue
        else:
            e = r["error"]
            text = " | ".join(ln.strip() for ln in e["message"].strip().splitlines() if ln.strip())
            print(f"  rejected at {e['stage']}: {e['type']}: {text[:400]}" + (f"  [{e['frame']}]" if e["frame"] else ""))
    return 0


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        module = importlib.import_module(DELEGATED[argv[0]][0])
        return int(module.main(argv[1:]) or 0)
    args = _parse(argv)
    handlers = {"check": cmd_check, "explain": cmd_explain, "env": cmd_env, "contracts": cmd_contracts,
                "derive": cmd_derive}
    if args.cmd not in handlers:
        raise UsageError("kvproof: say check, explain, derive, env, contracts, verify, fuzz, replay, bisect, "
                         "selftest, findings or compare (--help)")
    return handlers[args.cmd](args)


def main(argv: Sequence[str] | None = None) -> int:
    return guarded("kvproof: error", _main, argv)
