"""Drift alarm for the consumers: which consumer functions a release changed.

    python -m kvproof.verify.consumer_drift --from 0.33.0 --to 0.34.0 [--root DIR]
    python -m kvproof.verify.consumer_drift --release 0.34.0 [--root DIR]
    python -m kvproof.verify.consumer_drift --write [--release R [--root DIR]] [--reviewed]

Sources come from a release's installed environment, or ``--root DIR``
(unpacked wheel or checkout holding ``vllm/``) for ``--to``/``--release``;
``--from``/``--to`` fall back to the record (spec/derived/
consumer_fingerprints.json). The report lists by area the functions that
changed, appeared or vanished and the release kvproof's consumer tier still
models each as. ``--release`` exits 1 when the sources differ from the
record. ``--write`` records installed releases (or ``--root`` as
``--release``): an unchanged function keeps its ``modelled_as``, a new or
changed one gets the previous release's (not caught up); ``--reviewed``
says the consumer tier was brought up to the release. Exit 2: bad input.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Sequence

from kvproof import facts
from kvproof.cliutil import Parser, guarded
from kvproof.errors import KvproofError, UsageError
from kvproof.spec import consumer_fingerprint as cf

PROG = "python -m kvproof.verify.consumer_drift"
RECORD = cf.RECORD


def tree_version(root: Path) -> str | None:
    """X.Y.Z from vllm/_version.py under ``root`` (None without one, e.g. a checkout)."""
    try:
        m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"](\d+\.\d+\.\d+)",
                      (Path(root) / "vllm/_version.py").read_text())
    except OSError:
        return None
    return m.group(1) if m else None


def sources(release: str, root: str | None, rec: dict, record_ok: bool) -> tuple[dict, str, Path | None]:
    """(fingerprints, where from, source tree) of one side: --root, the installed env, else the record."""
    from kvproof import envs

    tree, where = (Path(root), f"--root {root}") if root else (None, "")
    if tree is None:
        try:
            env = envs.find(release)
            tree, where = envs.site_packages(env.root), f"installed env {env.name}"
        except KvproofError:
            pass
    if tree is None:
        if record_ok and release in rec["releases"]:
            return cf.recorded(rec, release), "the record", None
        raise UsageError(f"{release}: no installed environment" + (" and no record" if record_ok else "")
                         + "; `kvproof env create` it, or give --root DIR with its unpacked sources")
    try:
        return cf.fingerprints(tree), where, tree
    except (OSError, SyntaxError, ValueError) as err:  # a tree we cannot read: one line, exit 2
        raise UsageError(f"{tree}: cannot read vLLM sources ({type(err).__name__}: {err})") from err


def rows_text(rows, rec: dict, release: str, fallback: str | None = None) -> list[str]:
    """Rows grouped by area; a note is printed once per catalogue entry (a class's members share one)."""
    out, area, note_was = [], None, None
    base = release if release in rec["releases"] else fallback
    for a, key, old, new, note in rows:
        if a != area:
            out.append(a)
            area = a
        what = "appeared" if old is None else "vanished" if new is None else "changed"
        out.append(f"  {what:9} {key}  (modelled as {cf.modelled_as(rec, base, key) or 'unrecorded'})")
        if note != note_was:
            out.append(f"  {'':9} kvproof models: {note}")
        note_was = note
    return out


def report(old: str, new: str, root: str | None, rec: dict) -> list[str]:
    a, a_from, a_tree = sources(old, None, rec, True)
    b, b_from, b_tree = sources(new, root, rec, True)
    rows = cf.diff(a, b)
    kinds = [("appeared" if o is None else "vanished" if n is None else "changed") for _, _, o, n, _ in rows]
    head = [(f"consumer drift {old} -> {new}: {len(rows)} of {len(set(a) | set(b))} consumer functions differ "
             f"({kinds.count('changed')} changed, {kinds.count('appeared')} appeared, "
             f"{kinds.count('vanished')} vanished)"), f"  {old}: {a_from}", f"  {new}: {b_from}"]
    if a_tree and b_tree:  # the resolver's own alarm (kvproof.verify.drift), for contrast
        from kvproof.spec import fingerprint

        try:
            ra, rb = fingerprint.of_source_files(a_tree), fingerprint.of_source_files(b_tree)
            head.append(f"  resolver fingerprint: {ra} -> {rb} ({'identical' if ra == rb else 'changed'})")
        except (OSError, SyntaxError):  # a partial tree (an overlay's few files): no resolver to compare
            head.append("  resolver fingerprint: not comparable (no kv_cache_utils.py on one side)")
    return head + rows_text(rows, rec, new, old)


def check(release: str, root: str | None, rec: dict) -> tuple[int, list[str]]:
    fps, where, _ = sources(release, root, rec, False)
    want = cf.recorded(rec, release)
    if want is None:
        return 1, [(f"consumer drift {release} ({where}): no reviewed record; review, then `{PROG} --write "
                    f"--release {release}`")]
    rows = cf.diff(want, fps)
    behind = [k for k in fps if (m := cf.modelled_as(rec, release, k)) != release
              and (cf.recorded(rec, m) or {}).get(k, "?") != fps[k]]  # code differs from what kvproof models
    head = (f"consumer drift {release} ({where}): {len(fps)} functions, {len(rows)} differ from the record; "
            f"{len(behind)} not caught up (they differ from the release kvproof models them as)")
    if not rows:
        return 0, [head]
    return 1, [head] + rows_text(rows, rec, release) + [
        f"review these, then `{PROG} --write --release {release}` records them"]


def write(release: str | None, root: str | None, reviewed: bool, rec: dict, path: Path) -> list[str]:
    if root and not release:
        raise UsageError("--write --root needs --release (which release the tree is)")
    if root and tree_version(Path(root)) != release:  # the one mistake --write must refuse: the wrong tree
        raise UsageError(f"--root {root} holds vllm {tree_version(Path(root)) or '(no _version.py)'}, not {release}")
    out = []
    for r in [release] if release else sorted(set(facts.MANAGED_RELEASES) | set(rec["releases"]), key=facts.release_key):
        try:
            fps, where, _ = sources(r, root, rec, False)
        except UsageError as err:
            if release or not str(err).startswith(f"{r}: no installed"):
                raise
            out.append(f"{r}: not installed, record kept")
            continue
        where = f"unpacked vllm {r} sources (--root)" if root else where  # no machine path in the record
        prev = cf.previous(rec, r)
        changed = cf.merge(rec, r, fps, where, reviewed)
        moved = len(cf.diff(cf.recorded(rec, prev), fps)) if prev else len(fps)
        out.append(f"{r}: recorded from {where}: {len(fps)} functions, {len(changed)} differ from its last record, "
                   f"{moved} from {prev or 'nothing'}; modelled as {rec['releases'][r]['modelled_as']}")
    from kvproof.fsio import atomic_write

    atomic_write(path, cf.dump(rec))
    return out


def _main(argv: Sequence[str] | None) -> int:
    ap = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="old", metavar="RELEASE")
    ap.add_argument("--to", dest="new", metavar="RELEASE")
    ap.add_argument("--release", metavar="RELEASE", help="check (with --write: record) one release")
    ap.add_argument("--root", metavar="DIR", help="unpacked vLLM sources (holds vllm/) for --to or --release")
    ap.add_argument("--write", action="store_true", help="update the record")
    ap.add_argument("--reviewed", action="store_true", help="with --write: the consumer tier models these releases")
    ap.add_argument("--record", metavar="PATH", type=Path, default=RECORD, help="default: the checked-in record")
    a = ap.parse_args(argv)
    if a.release is not None and not re.match(r"^\d+\.\d+\.\d+$", a.release):
        raise UsageError(f"{PROG}: release {a.release!r} not understood (want e.g. 0.34.0)")
    if a.reviewed and not a.write:
        raise UsageError(f"{PROG}: --reviewed only goes with --write")
    if a.root and not Path(a.root, "vllm").is_dir():
        raise UsageError(f"{PROG}: --root {a.root}: no vllm/ package sources there")
    try:
        rec = cf.load(a.record)
    except ValueError as err:
        raise UsageError(str(err)) from err
    if a.write and (a.old or a.new):
        raise UsageError(f"{PROG}: --write takes --release, not --from/--to")
    if a.write:
        print("\n".join(write(a.release, a.root, a.reviewed, rec, a.record)))
        return 0
    if a.old or a.new:
        if not (a.old and a.new) or a.release:
            raise UsageError(f"{PROG}: give both --from and --to (and no --release)")
        print("\n".join(report(a.old, a.new, a.root, rec)))
        return 0
    if a.release:
        code, lines = check(a.release, a.root, rec)
        print("\n".join(lines))
        return code
    raise UsageError(f"{PROG}: give --from A --to B, --release R, or --write")


def main(argv: Sequence[str] | None = None) -> int:
    """Usage errors: one line on stderr, exit 2."""
    return guarded(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
