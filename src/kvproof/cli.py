"""kvproof's command line. Exit codes: 0 ok, 1 a contract failed, 2 usage or input error.

Subcommands that belong to other layers (verify, fuzz, replay, bisect) are
dispatched to their own ``main(argv)`` so each stays importable alone.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Sequence

from kvproof import checking, contracts, envs, explain
from kvproof.errors import KvproofError, UsageError
from kvproof.layout import Layout, parse_groups_spec

# name -> (module, help); each module has main(argv) -> int
DELEGATED = {
    "verify": ("kvproof.verify.cli", "Z3 proof run over revisions x properties x group counts"),
    "fuzz": ("kvproof.fuzz.run", "atheris fuzzing of the real installed vLLM"),
    "replay": ("kvproof.replay.cli", "replay counterexamples: function, manager and engine tiers"),
    "bisect": ("kvproof.replay.bisect", "first managed release where a counterexample stops failing"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def _add_release_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vllm", action="append", metavar="RELEASE",
                   help=f"vLLM release to run (repeatable; default {envs.DEFAULT_RELEASE})")
    p.add_argument("--python", action="append", metavar="PATH",
                   help="an interpreter with your own vLLM installed (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-manager", action="store_true", help="skip the KVCacheManager tier")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="kvproof", description="Prove, fuzz and replay vLLM's KV cache block-size resolution.")
    sub = ap.add_subparsers(dest="cmd", parser_class=_Parser)
    c = sub.add_parser("check", help="run layouts through real vLLM releases and judge the contracts")
    c.add_argument("files", nargs="*", help="Layout JSON files or folders of them")
    c.add_argument("--groups", help="inline groups, e.g. mamba:544x4,hidden_state:181")
    c.add_argument("--cache-block-size", type=int)
    pc = c.add_mutually_exclusive_group()
    pc.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None)
    pc.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    c.add_argument("--prefix-match-unit", type=int)
    c.add_argument("--mamba-cache-mode", choices=("align", "all", "none"))
    c.add_argument("--kv-connector")
    c.add_argument("--dcp", type=int, default=1)
    c.add_argument("--max-model-len", type=int, default=131072)
    _add_release_args(c)
    e = sub.add_parser("explain", help="turn a 'block_sizes=[...], hash_block_size=N' log line into a check")
    e.add_argument("line")
    _add_release_args(e)
    env = sub.add_parser("env", help="manage vLLM environments")
    envsub = env.add_subparsers(dest="env_cmd", parser_class=_Parser)
    create = envsub.add_parser("create", help="build (or reuse) environments")
    create.add_argument("releases", nargs="*", default=list(envs.SUPPORTED))
    create.add_argument("--force", action="store_true")
    envsub.add_parser("list", help="show installed environments")
    sub.add_parser("contracts", help="list the contract catalogue")
    for name, (_, help_text) in DELEGATED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return ap


def _envs(args: argparse.Namespace) -> list[envs.Env]:
    out = [envs.find(r) for r in (args.vllm or ([] if args.python else [envs.DEFAULT_RELEASE]))]
    return out + [envs.from_python(p) for p in args.python or []]


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
        print(f"  {'layout':<{width}}  {'scheduler':>9}  {'hash':>7}  {'verdict':<8} contract / vLLM message")
        for r in env_rows:
            o = r.outcome
            s = "-" if o.scheduler_block_size is None else o.scheduler_block_size
            h = "-" if o.hash_block_size is None else o.hash_block_size
            print(f"  {r.layout.summary():<{width}}  {s:>9}  {h:>7}  {r.verdict:<8} {r.message()}")
        print()


def cmd_check(args: argparse.Namespace) -> int:
    if args.groups and args.files:
        raise UsageError("check: give layout files or --groups, not both")
    if not args.groups and not args.files:
        raise UsageError("check: give layout files or --groups")
    named = [("inline", _inline_layout(args))] if args.groups else checking.load_layouts(args.files)
    rows, info = checking.run(named, _envs(args), manager=not args.no_manager)
    if args.json:
        print(checking.dumps(rows, info))
    else:
        _print_table(rows, info)
    return 1 if any(r.verdict == contracts.FAIL for r in rows) else 0


def cmd_explain(args: argparse.Namespace) -> int:
    d = explain.diagnose(args.line)
    if not (args.vllm or args.python):
        args.vllm = [r for r in envs.SUPPORTED if _installed(r)] or [envs.DEFAULT_RELEASE]
    rows, info = checking.run([("explained", d.layout)], _envs(args))
    reproduced = [r for r in rows if r.verdict == contracts.FAIL and r.outcome.manager_error
                  and f"hash_block_size={d.hash_block_size}" in r.outcome.manager_error.message]
    fixed = [r for r in rows if r.verdict != contracts.FAIL]
    known = d.known_bug and bool(reproduced) and bool(fixed)
    if args.json:
        print(json.dumps({"layout": d.layout.to_dict(), "reasoning": d.reasoning, "known_bug": known,
                          "results": [r.to_dict() for r in rows]}, indent=2))
        return 1 if reproduced else 0
    print(f"read: block_sizes={list(d.block_sizes)}, hash_block_size={d.hash_block_size}")
    print(f"why:  {d.reasoning}")
    print(f"layout: {d.layout.canonical()}\n")
    _print_table(rows, info)
    if known:
        print(f"diagnosis: the known vLLM <= 0.27 Mamba align fallback bug: reproduced on "
              f"{', '.join(r.outcome.vllm_version for r in reproduced)}; fine on "
              f"{', '.join(r.outcome.vllm_version for r in fixed)}. Upgrade to vLLM >= 0.28.0.")
    elif reproduced:
        print("diagnosis: reproduced, but not the known <= 0.27 bug's shape")
    else:
        print("diagnosis: not reproduced by the reconstructed layout on the releases run")
    return 1 if reproduced else 0


def _installed(release: str) -> bool:
    try:
        envs.find(release)
        return True
    except KvproofError:
        return False


def cmd_env(args: argparse.Namespace) -> int:
    if args.env_cmd == "create":
        for r in args.releases:
            env = envs.create(r, force=args.force, echo=lambda m: print(m, file=sys.stderr))
            m = env.manifest() or {}
            print(f"{env.name}: vllm {m.get('vllm')} at {env.root} ({m.get('disk_mb')} MB, "
                  f"built in {m.get('build_seconds')} s)")
        return 0
    if args.env_cmd == "list":
        rows = envs.installed()
        if not rows:
            print(f"no environments under {envs.env_home()}; run `kvproof env create`")
        for r in rows:
            print(f"{r['name']:<20} vllm {r['vllm']:<8} {r['status']:<10} {r['disk_mb']:>6} MB  {r['path']}")
        return 0
    raise UsageError("env: say `create` or `list`")


def cmd_contracts(args: argparse.Namespace) -> int:
    for c in contracts.CATALOGUE:
        print(f"{c.id:<45} {c.kind:<10} {c.statement}\n{'':<45} protects {c.protects}; when {c.premise}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in DELEGATED:
            module = importlib.import_module(DELEGATED[argv[0]][0])
            return int(module.main(argv[1:]) or 0)
        args = _parser().parse_args(argv)
        handlers = {"check": cmd_check, "explain": cmd_explain, "env": cmd_env, "contracts": cmd_contracts}
        if args.cmd not in handlers:
            raise UsageError("kvproof: say check, explain, env, contracts, verify, fuzz, replay or bisect (--help)")
        return handlers[args.cmd](args)
    except KvproofError as err:
        print(f"kvproof: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
