"""Drift alarm: is the installed vLLM's resolver one the model knows?

The fingerprint (kvproof.spec.fingerprint) is computed from the
environment's installed sources without importing vLLM, which gives the
same value as ``inspect.getsource`` inside the environment (checked against
0.27.0, 0.28.0 and 0.32.0).

Overlays (``kvproof env overlay``: a vLLM checkout's Python files over a
release) are labelled as such: "overlay of <base> (release X), fingerprint
known (revision R) / unknown". An unknown fingerprint is drift as a
workflow, not only an alarm:

    python -m kvproof.verify.drift --vllm NAME [--seconds S] [--count N] [--show K]

prints the nearest modelled revision (the base release's) and runs
conformance between that revision's model (``kvproof.spec.evaluate``) and
the environment's real resolver (one bridge worker) on fuzzed layouts (the
fuzzer's own decoder over seeded bytes, plus fuzz/seeds), then prints the
first disagreements shrunk to minimal layouts (fewest groups, smallest
block sizes, fewest options). One screen. Exit 0: no disagreement, 1:
disagreements shown, 2: usage/environment error. ``workflow()`` is the same
as a function (the CI recipe and ``kvproof selftest`` use it).
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from kvproof.cliutil import Parser, add_vllm, guarded, print_error
from kvproof.spec import fingerprint
from kvproof import revisions as R

OVERLAY_KEY = "overlay"  # kvproof.envs.OVERLAY_KEY (not imported: this module must stay import-light)


def check_fingerprint(fp: str, vllm_version: str = "") -> dict:
    """The verdict for one installed resolver fingerprint."""
    message = R.drift(fp, vllm_version)
    rev = R.revision_for_fingerprint(fp)
    return {"vllm": vllm_version, "fingerprint": fp, "revision": rev, "stale": message is not None,
            "message": message or f"vLLM {vllm_version or '?'}: resolver fingerprint {fp} is revision {rev} (modelled)"}


def _manifest(root: Path) -> dict:
    try:
        return json.loads((Path(root) / "kvproof-manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def nearest_revision(fp: str, base_release: str | None) -> tuple[str | None, str]:
    """(revision, why): the fingerprint's own revision if known, else the base release's."""
    rev = R.revision_for_fingerprint(fp)
    if rev is not None:
        return rev, f"fingerprint is revision {rev}'s"
    if base_release:
        try:
            return R.revision_for(base_release), f"the base release {base_release}'s revision"
        except KeyError:
            pass
    return None, "no modelled revision covers the base release"


def check_env(name: str, root: Path, version: str = "") -> dict | None:
    """The drift row of one environment folder (None when it has no vLLM sources)."""
    from kvproof.errors import EnvError
    from kvproof.envs import site_packages  # the one rule: the site-packages that holds vllm/

    try:
        sp = site_packages(Path(root))
    except EnvError:
        return None
    m = _manifest(root)
    version = version or m.get("vllm") or m.get("version") or ""
    fp = fingerprint.of_source_files(sp)
    ov = m.get(OVERLAY_KEY)
    if ov is None:
        return dict(check_fingerprint(fp, version), env=name)
    base_release = ov.get("base_release") or version
    known = R.revision_for_fingerprint(fp)
    nearest, why = nearest_revision(fp, base_release)
    files = ov.get("files") or []
    changed = f"{len(files)} changed file(s)" + (f": {', '.join(files[:2])}{' ...' if len(files) > 2 else ''}"
                                                 if files else "")
    if known is not None:
        msg = (f"overlay {name} of {ov.get('base')} (release {base_release}; {changed}): resolver fingerprint "
               f"{fp} is known (revision {known}, modelled)")
    else:
        msg = (f"overlay {name} of {ov.get('base')} (release {base_release}; {changed}): resolver fingerprint "
               f"{fp} is UNKNOWN; nearest modelled revision {nearest} ({why}); run "
               f"`python -m kvproof.verify.drift --vllm {name}` for model-vs-real disagreements")
    return {"vllm": version, "fingerprint": fp, "revision": known, "stale": known is None, "message": msg,
            "env": name, "overlay": {"base": ov.get("base"), "base_release": base_release,
                                     "nearest_revision": nearest, "files": files}}


def check_envs() -> list[dict]:
    """Every managed environment (kvproof.envs), overlays included, that has vLLM sources on disk."""
    try:
        from kvproof import envs
        rows = envs.installed(disk=False)  # the disk walk (every file of every env) is not drift's business
    except Exception:  # noqa: BLE001 -- no managed environments: no drift rows
        return []
    out = []
    for row in rows:
        version = row.get("vllm") or ""
        if version in ("", "-"):
            version = row["name"].rsplit("-", 1)[-1]
        d = check_env(row["name"], Path(row["path"]), version)
        if d is not None:
            out.append(d)
    return out


# --- drift as a workflow: conformance of the nearest model against the real code ----------

def fuzzed_layouts(count: int = 400, seed: int = 1) -> list[tuple[str, "Layout"]]:  # noqa: F821
    """Layouts from the fuzzer's decoder (engine premise): fuzz/seeds, byte-flipped seeds, random bytes.

    Deterministic for a seed; duplicates (by content hash) dropped.
    """
    from kvproof.fuzz.decode import FULL, decode
    from kvproof.fuzz.provider import PyFDP
    from kvproof.fuzz.libfuzzer import SEEDS

    rng = random.Random(seed)
    seeds = [p.read_bytes() for p in sorted(Path(SEEDS).glob("*")) if p.is_file()] if Path(SEEDS).is_dir() else []
    raw: list[tuple[str, bytes]] = [(f"seed:{i}", s) for i, s in enumerate(seeds)]
    i = 0
    while len(raw) < count * 2 and i < count * 4:
        i += 1
        if seeds and i % 2:
            b = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                if b:
                    b[rng.randrange(len(b))] = rng.getrandbits(8)
            raw.append((f"flip:{i}", bytes(b)))
        else:
            raw.append((f"rand:{i}", bytes(rng.getrandbits(8) for _ in range(rng.randint(6, 80)))))
    out, seen = [], set()
    for name, data in raw:
        try:
            lay = decode(PyFDP(data), FULL, "engine")
        except Exception:  # noqa: BLE001 -- a byte string the decoder cannot use
            continue
        h = lay.content_hash()
        if h not in seen:
            seen.add(h)
            out.append((name, lay))
        if len(out) >= count:
            break
    return out


def summary(out) -> tuple:
    """What conformance compares (as the conformance harness does): the pair, or the raised type."""
    if out.resolver_error is not None:
        return ("raises", out.resolver_error.type)
    return (out.scheduler_block_size, out.hash_block_size)


class Model:
    """``kvproof.spec.evaluate`` for one revision, memoised by content hash."""

    def __init__(self, revision: str) -> None:
        self.revision = revision
        self._memo: dict[str, tuple] = {}

    def __call__(self, layout) -> tuple:
        h = layout.content_hash()
        if h not in self._memo:
            from kvproof.spec import evaluate
            try:
                self._memo[h] = summary(evaluate(layout, self.revision))
            except Exception as err:  # noqa: BLE001 -- the model failing is itself a disagreement
                self._memo[h] = ("model error", type(err).__name__)
        return self._memo[h]


def _size(layout) -> tuple:
    c = layout.cache
    opts = sum([c.prefix_match_unit is not None, layout.dcp > 1, layout.kv_connector is not None,
                any(g.tokens_per_state for g in layout.groups), any(g.sliding_window for g in layout.groups),
                any(g.attention_chunk_size for g in layout.groups)])
    return (len(layout.groups), sum(g.block_size for g in layout.groups) + c.block_size, opts,
            layout.max_model_len)


def _smaller(n: int) -> list[int]:
    out = {1, 2, 4, 8, 16, n // 2}
    p = 2
    m = n
    while p * p <= m:
        while m % p == 0:
            out.add(n // p)
            m //= p
        p += 1
    if m > 1:
        out.add(n // m)
    return sorted(x for x in out if 0 < x < n)


def _candidates(lay) -> Iterable:
    from kvproof.facts import engine_cache_block_size_of as engine_cache_block_size
    gs, c = list(lay.groups), lay.cache
    for i in range(len(gs)):  # fewer groups (cache block size kept, or re-derived as an engine would)
        if len(gs) > 1:
            rest = tuple(gs[:i] + gs[i + 1:])
            yield replace(lay, groups=rest)
            yield replace(lay, groups=rest, cache=replace(c, block_size=engine_cache_block_size(rest)))
    sizes = sorted({g.block_size for g in gs} | {c.block_size}, reverse=True)
    for b in sizes:  # smaller block sizes: one size everywhere it occurs, or everything divided by a factor
        for s in _smaller(b):
            ng = tuple(replace(g, block_size=s) if g.block_size == b else g for g in gs)
            yield replace(lay, groups=ng, cache=replace(c, block_size=s if c.block_size == b else c.block_size))
    from math import gcd
    g_all = 0
    for x in [g.block_size for g in gs] + [c.block_size]:
        g_all = gcd(g_all, x)
    for f in _smaller(g_all)[::-1][:3]:
        k = g_all // f if f else 1
        if k > 1:
            yield replace(lay, groups=tuple(replace(g, block_size=g.block_size // k) for g in gs),
                          cache=replace(c, block_size=c.block_size // k,
                                        prefix_match_unit=(c.prefix_match_unit // k if c.prefix_match_unit and
                                                           c.prefix_match_unit % k == 0 else c.prefix_match_unit)))
    if c.prefix_match_unit is not None:
        yield replace(lay, cache=replace(c, prefix_match_unit=None))
        for s in _smaller(c.prefix_match_unit):
            yield replace(lay, cache=replace(c, prefix_match_unit=s))
    if lay.dcp > 1:
        yield replace(lay, dcp=1)
    if lay.kv_connector is not None:
        yield replace(lay, kv_connector=None)
    for i, g in enumerate(gs):
        for f in ("tokens_per_state", "sliding_window", "attention_chunk_size", "dcp_sharded", "prefix_cacheable"):
            if getattr(g, f) is not None:
                yield replace(lay, groups=tuple(gs[:i] + [replace(g, **{f: None})] + gs[i + 1:]))
    if lay.max_model_len > 2048:
        yield replace(lay, max_model_len=2048)


def shrink(layout, still: Callable[[Sequence], list[bool]], rounds: int = 30):
    """The smallest candidate (by ``_size``) for which ``still`` holds, until none is smaller.

    ``still`` judges a batch at once (one bridge round trip per round); the loop
    is the one shrinker, ``kvproof.judging.shrinking.shrink``.
    """
    from kvproof.judging.shrinking import shrink as greedy

    return greedy(layout, _candidates, _size, still, smallest=True, rounds=rounds)


def conformance(worker, revision: str, layouts: Sequence[tuple[str, object]], show: int = 3,
                base_worker=None, deadline: float | None = None) -> dict:
    """Real (through ``worker``) versus model:``revision`` on ``layouts``; the first ``show`` shrunk.

    With ``base_worker`` (the base release), a disagreement the base shares is
    marked pre-existing (a model gap, not this overlay's change) and shrunk last.
    """
    from kvproof.tiers import client

    def real_of(w, cands):  # the real resolver alone: the model's subject
        return client.outcomes(w, cands, manager=False)

    model = Model(revision)
    lays = [lay for _, lay in layouts]
    real = real_of(worker, lays)
    base = real_of(base_worker, lays) if base_worker is not None else [None] * len(lays)
    agree, dis, ne = 0, [], 0
    for (name, lay), o, b in zip(layouts, real, base):
        if not o.expressible:
            ne += 1
            continue
        want, got = model(lay), summary(o)
        if got == want:
            agree += 1
        else:
            dis.append((name, lay, got, want, b is not None and b.expressible and summary(b) != want))
    dis.sort(key=lambda d: (d[4], _size(d[1])))

    def still(cands):
        outs = real_of(worker, cands)
        return [o.expressible and summary(o) != model(c) for c, o in zip(cands, outs)]

    shown, sigs = [], set()
    for name, lay, got, want, pre in dis:
        if len(shown) >= show or (deadline is not None and time.monotonic() > deadline and shown):
            break
        small = shrink(lay, still)
        o = real_of(worker, [small])[0]
        g, w = summary(o), model(small)
        if (g, w, small.summary()) in sigs:
            continue
        sigs.add((g, w, small.summary()))
        b = summary(real_of(base_worker, [small])[0]) if base_worker is not None else None
        shown.append({"from": name, "layout": small.summary(), "layout_json": small.to_dict(), "real": g,
                      "model": w, "base": b, "pre_existing": b is not None and b != w,
                      "original": lay.summary()})
    return {"revision": revision, "checked": len(lays), "agree": agree, "disagree": len(dis),
            "not_expressible": ne, "shown": shown}


def _fmt(v) -> str:
    if isinstance(v, tuple) and v and v[0] in ("raises", "model error"):
        return f"{v[0]} {v[1]}"
    if isinstance(v, tuple):
        return f"scheduler={v[0]} hash={v[1]}"
    return str(v)


def workflow(name, count: int = 300, seed: int = 1, show: int = 3, seconds: float = 120,
             with_base: bool = True, print_=print) -> dict:
    """The drift workflow for one environment name (an overlay or a release); prints one screen."""
    from kvproof import envs
    from kvproof.bridge.client import start_all

    t0 = time.monotonic()
    env = envs.find(name) if isinstance(name, str) else name  # a name, or an Env (overlays outside env_home)
    name = env.name
    row = check_env(env.name, env.root) or {}
    print_(f"drift: {row.get('message', f'{name}: no vLLM sources')}")
    ov = row.get("overlay") or {}
    nearest = ov.get("nearest_revision") or row.get("revision")
    if nearest is None:
        nearest, _ = nearest_revision(row.get("fingerprint", ""), row.get("vllm"))
    if nearest is None:
        print_("drift: no modelled revision to compare with")
        return {"row": row, "result": None}
    base_env = None
    if with_base and ov.get("base_release"):
        try:
            base_env = envs.find(ov["base_release"])
        except Exception:  # noqa: BLE001 -- the base is optional (pre-existing marks only)
            base_env = None
    layouts = fuzzed_layouts(count, seed)
    workers = start_all([env] + ([base_env] if base_env is not None else []))
    try:
        res = conformance(workers[0], nearest, layouts, show, workers[1] if base_env is not None else None,
                          deadline=t0 + seconds)
    finally:
        for w in workers:
            w.close()
    print_(f"drift: conformance of model:{nearest} vs {name} on {res['checked']} fuzzed layouts (seed {seed}): "
           f"{res['agree']} agree, {res['disagree']} disagree, {res['not_expressible']} not expressible "
           f"({time.monotonic() - t0:.0f} s)")
    for i, d in enumerate(res["shown"], 1):
        tag = " [pre-existing: the base disagrees too]" if d["pre_existing"] else (
            " [the base agrees with the model: this environment's change]" if d["base"] is not None else "")
        print_(f"  {i}. {d['layout']}")
        print_(f"     real {_fmt(d['real'])}  model:{nearest} {_fmt(d['model'])}{tag}")
    if res["disagree"] > len(res["shown"]):
        print_(f"  ... {res['disagree'] - len(res['shown'])} more disagreeing layouts (not shrunk)")
    if res["disagree"]:
        print_("drift: review the change; a wrong model or a wrong resolver: `kvproof check LAYOUT.json --vllm "
               f"{name}` judges a layout's contracts, and src/kvproof/revisions.py needs a revision for this fingerprint")
    return {"row": row, "result": res, "seconds": round(time.monotonic() - t0, 1)}


PROG = "python -m kvproof.verify.drift"


def _main(argv: Sequence[str] | None) -> int:
    ap = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_vllm(ap, many=False, metavar="ENV",
             help="environment name (release or overlay); without it: the drift rows of all")
    ap.add_argument("--count", type=int, default=300, help="fuzzed layouts (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=3, help="disagreements to shrink and print (default 3)")
    ap.add_argument("--seconds", type=float, default=120, help="stop shrinking after this (default 120)")
    ap.add_argument("--no-base", action="store_true", help="do not run the base release (no pre-existing marks)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    try:
        if not args.vllm:
            rows = check_envs()
            for r in rows:
                print(("STALE  " if r["stale"] else "ok     ") + r["message"])
            return 0
        out = workflow(args.vllm, args.count, args.seed, args.show, args.seconds, not args.no_base)
    except Exception as err:  # noqa: BLE001 -- one line, exit 2 (whatever the environment raised)
        print_error(PROG, RuntimeError(f"{type(err).__name__}: {err}"))
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    res = out.get("result")
    return 1 if res and res["disagree"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Usage errors: one line ``python -m kvproof.verify.drift: ...`` on stderr, exit 2."""
    return guarded(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
