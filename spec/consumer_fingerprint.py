"""Source fingerprints of the vLLM *consumers* kvproof models, per function.

``spec/fingerprint.py`` fingerprints the resolver; this module fingerprints
what runs downstream of it (coordinators, managers, block pool, block
hashing, request hit caps, the scheduler's cache paths, scheduler-side
connectors, the speculative lookahead rules), so a release that keeps the
resolver but changes a consumer is seen (0.34.0 is one).

Stdlib only, never imports vLLM: files are read with ``ast``. A function's
fingerprint is sha256 of its def's source text (decorators included), first
12 hex characters; several defs of one name (``@overload``) are joined, and
a class-level assignment (a pydantic ``Field``) counts as a def. A name
missing from a release is ``None`` (absent is drift too). ``Class.*``
stands for every def in the class body (each its own key).
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

from kvproof import facts
from kvproof.spec.consumer_catalogue import CONSUMERS, consumer_of

RECORD = Path(__file__).with_name("derived") / "consumer_fingerprints.json"
ABOUT = ("Reviewed record of vLLM consumer fingerprints (kvproof.spec.consumer_catalogue), written only by "
         "`python -m kvproof.verify.consumer_drift --write`. modelled_as: the release whose behaviour kvproof's consumer tier models for the function; a "
         "fingerprint differing from that release's is not caught up.")


def _defs(text: str) -> dict[str, str]:
    """Qualified name -> source text of every def (and class-level assignment), nested classes too."""
    lines = text.splitlines(keepends=True)
    out: dict[str, list[str]] = {}

    def walk(body, prefix: str, in_class: bool) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.", True)
                out.setdefault(f"{prefix}{node.name}.*", [])  # the class exists (wildcards)
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [node.name]
            elif in_class and isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            elif in_class and isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())]) - 1
            for n in names:
                out.setdefault(prefix + n, []).append("".join(lines[start:node.end_lineno]))

    walk(ast.parse(text).body, "", False)
    return {k: "\n".join(v) for k, v in out.items()}


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def fingerprints(vllm_root: str | Path) -> dict[str, str | None]:
    """Key -> fingerprint (None: absent) of every catalogued consumer under ``vllm_root`` (holds ``vllm/``)."""
    root = Path(vllm_root)
    if not (root / "vllm").is_dir():
        raise FileNotFoundError(f"{root}: no vllm/ package sources here")
    files: dict[str, dict[str, str] | None] = {}

    def defs(rel: str) -> dict[str, str] | None:
        if rel not in files:
            p = root / rel
            files[rel] = _defs(p.read_text(encoding="utf-8")) if p.is_file() else None
        return files[rel]

    out: dict[str, str | None] = {}
    for c in CONSUMERS:
        found = next((d for d in map(defs, c.paths) if d is not None and c.name in d), None)
        if not c.name.endswith(".*"):
            out[c.key] = digest(found[c.name]) if found else None
            continue
        cls = c.name[:-1]  # "Class."
        members = [n for n in (found or {}) if n.startswith(cls) and "." not in n[len(cls):]]
        members = [n for n in members if not n.endswith("*")]
        if not members:
            out[c.key] = None
        for n in members:
            out[f"{c.paths[0]}:{n}"] = digest(found[n])
    return out


def diff(old: dict[str, str | None], new: dict[str, str | None]) -> list[tuple[str, str, str | None, str | None, str]]:
    """(area, key, old, new, note) for every key whose fingerprint differs, in catalogue order."""
    order = {c.key: i for i, c in enumerate(CONSUMERS)}
    rows = []
    for key in set(old) | set(new):
        if old.get(key) != new.get(key):
            c = consumer_of(key)
            rows.append((order.get(c.key, len(order)) if c else len(order), key,
                         c.area if c else "uncatalogued", c.note if c else ""))
    rows.sort()
    return [(area, key, old.get(key), new.get(key), note) for _, key, area, note in rows]


# --- the reviewed record (spec/derived/consumer_fingerprints.json) ----------------------------

def load(path: Path = RECORD) -> dict:
    try:
        rec = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {"about": ABOUT, "releases": {}}
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable record ({err})") from err
    if not isinstance(rec, dict) or not isinstance(rec.setdefault("releases", {}), dict):
        raise ValueError(f"{path}: not a consumer fingerprint record")
    return rec


def dump(rec: dict) -> str:
    """The record as JSON, one function a line (reviewable diffs)."""
    out = ["{", f' "about": {json.dumps(rec.get("about", ABOUT))},', ' "releases": {']
    rels = sorted(rec["releases"], key=facts.release_key)
    for i, r in enumerate(rels):
        body = rec["releases"][r]
        head = {k: v for k, v in body.items() if k != "functions"}
        out.append(f"  {json.dumps(r)}: {json.dumps(head)[:-1]}, \"functions\": {{")
        out.append(",\n".join(f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in body["functions"].items()))
        out.append("  }}" + ("," if i < len(rels) - 1 else ""))
    return "\n".join(out + [" }", "}", ""])


def previous(rec: dict, release: str) -> str | None:
    """The newest recorded release older than ``release``."""
    older = [r for r in rec["releases"] if facts.release_key(r) < facts.release_key(release)]
    return max(older, key=facts.release_key) if older else None


def merge(rec: dict, release: str, fps: dict, source: str, reviewed: bool = False) -> list[str]:
    """Record ``fps`` as ``release`` (the --write rule); returns the keys that differ from its last record."""
    own = rec["releases"].get(release, {}).get("functions", {})
    prev = previous(rec, release)
    before = rec["releases"][prev] if prev else {"functions": {}, "modelled_as": None}
    order = {c.key: i for i, c in enumerate(CONSUMERS)}
    funcs = {}
    for key in sorted(fps, key=lambda k: (order.get(getattr(consumer_of(k), "key", ""), len(order)), k)):
        if reviewed:
            m = release
        elif key in own and own[key]["fingerprint"] == fps[key]:
            m = own[key]["modelled_as"]  # unchanged: the reviewed value stays
        else:  # new or changed: still modelled as the previous release models it
            m = before["functions"].get(key, {}).get("modelled_as", before.get("modelled_as"))
        funcs[key] = {"fingerprint": fps[key], "modelled_as": m}
    level = release if reviewed else before.get("modelled_as")
    rec["releases"][release] = {"source": source, "modelled_as": level, "functions": funcs}
    return [k for k in funcs if k not in own or own[k]["fingerprint"] != fps[k]]


def recorded(rec: dict, release: str | None) -> dict[str, str | None] | None:
    body = rec["releases"].get(release)
    return None if body is None else {k: v["fingerprint"] for k, v in body["functions"].items()}


def modelled_as(rec: dict, release: str, key: str) -> str | None:
    body = rec["releases"].get(release) or {}
    return (body.get("functions", {}).get(key) or {}).get("modelled_as", body.get("modelled_as"))
