"""The checked-in baseline of accepted findings (``verify/baseline.json``).

Per revision and property key: the accepted status (the worst over N), the
status per group count N (as ranges, so a run over fewer N compares only
what it ran), and for a witness (COUNTEREXAMPLE / WARNING) its reachability
label, the N it was labelled at, and a one-line reason (hand edits are kept
by ``--update-baseline`` while status and label stay the same)::

    {"schema": 1, "bounds": {...},
     "revisions": {"0.27": {"hybrid.group_multiple_of_hash[align]": {
         "status": "COUNTEREXAMPLE", "n": {"COUNTEREXAMPLE": "2-8"},
         "reachability": "free", "witness_n": 2, "reason": "..."}}}}

A change is any N whose status differs (PROVED -> COUNTEREXAMPLE and
COUNTEREXAMPLE -> PROVED alike), a label that differs at the labelled N, an
inductive verdict for every N (``unbounded``; a run with
``--no-induction`` compares none) that differs, or an entry the baseline does not have. UNKNOWN is never accepted and never
compared: it is its own exit code.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvproof import revisions as R
from kvproof.spec.properties import BY_KEY
from kvproof.verify.report import PROVED, UNKNOWN, WITNESS, parse_ranges, ranges, status

from kvproof.errors import UsageError
from kvproof.fsio import atomic_write
from kvproof.verdicts import ProofStatus, Reachability, parse

SCHEMA = 1
FILE = "baseline.json"


def default_path() -> Path:
    """The baseline shipped with the verify package (``verify/baseline.json`` in a checkout)."""
    return Path(__file__).resolve().with_name(FILE)


def load(path: Path) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"no baseline at {path} (make one with --update-baseline, or pass --no-baseline)") from None
    except (OSError, ValueError) as err:
        raise UsageError(f"baseline {path} is unreadable: {err}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("revisions"), dict):
        raise UsageError(f"baseline {path}: not a schema-{SCHEMA} baseline")
    try:
        for entries in data["revisions"].values():
            for e in entries.values():
                status(e["status"])
                _by_n(e)
                if e.get("reachability"):
                    parse(Reachability, e["reachability"])
                if e.get("unbounded") is not None:
                    status(e["unbounded"])
    except (KeyError, ValueError, TypeError, AttributeError) as err:
        raise UsageError(f"baseline {path}: malformed entry ({type(err).__name__}: {err})") from None
    return data


def _by_n(entry: dict) -> dict[int, ProofStatus]:
    out: dict[int, ProofStatus] = {}
    for st, text in entry.get("n", {}).items():
        for n in parse_ranges(text):
            out[n] = status(st)
    return out


def _expected(base: dict[int, ProofStatus], n: int) -> ProofStatus | None:
    if n in base:
        return base[n]
    if base and n > max(base):  # a witness pads to N+1: the largest N's status carries upwards
        return base[max(base)]
    return None


def _run_by_n(p: dict) -> dict[int, ProofStatus]:
    return {n: status(v) for v, ns in p["by_verdict"].items() for n in ns}


def compare(data: dict | None, props: list[dict], settings: dict) -> dict:
    """Changes of this run's per-(revision, property) entries against the baseline ``data``."""
    changes: list[dict] = []
    notes: list[str] = []
    unknown: list[str] = []
    compared = 0
    bounds = (data or {}).get("bounds", {})
    for k in ("max_block", "dcp_values"):
        if bounds.get(k) is not None and bounds.get(k) != settings.get(k):
            notes.append(f"the baseline was made with {k}={bounds[k]}, this run used {settings.get(k)}")
    revs = (data or {}).get("revisions", {})
    for p in props:
        rev, key = p["revision"], p["property"]
        base = revs.get(rev, {}).get(key)
        run = {n: v for n, v in _run_by_n(p).items() if v != UNKNOWN}
        if not run:
            continue  # only UNKNOWN: exit code 3, nothing to compare
        compared += 1
        if base is None:
            changes.append(_change("new", p, f"not in the baseline: {p.get('text') or p['verdict']}"
                                   + (_label_text(p) if p["verdict"] in WITNESS else "")))
            continue
        exp = _by_n(base)
        diffs: dict[tuple, list[int]] = {}
        for n, v in sorted(run.items()):
            e = _expected(exp, n)
            if e is not None and e != v:
                diffs.setdefault((e, v), []).append(n)
        for (e, v), ns in diffs.items():
            kind = "new" if v in WITNESS and e not in WITNESS else ("fixed" if e in WITNESS and v == PROVED
                                                                      else "changed")
            changes.append(_change(kind, p, f"{e} -> {v} at N={ranges(ns)}" + (_label_text(p) if v in WITNESS else "")))
        ub_want, ub_got = base.get("unbounded"), (p.get("unbounded") or {}).get("status")
        if ub_got == UNKNOWN and ub_want is not None and status(ub_want) != UNKNOWN:
            unknown.append(f"{rev} {key}: for all N UNKNOWN (baseline: {ub_want})")  # exit 3, not a change
        elif ub_want is not None and ub_got is not None and status(ub_want) != ub_got:
            changes.append(_change("unbounded", p, f"for all N: {ub_want} -> {ub_got}: {p['unbounded']['text']}"))
        want = base.get("reachability")
        wn = base.get("witness_n")
        got = p.get("reachability")
        if (not diffs and want and got is not None and p["verdict"] in WITNESS
                and (wn is None or wn in run) and parse(Reachability, want) != got):
            changes.append(_change("label", p, f"reachability {want} -> {got}: {p.get('reason', '')}"))
    return {"changes": changes, "compared": compared, "notes": notes, "unknown": unknown}


def _label_text(p: dict) -> str:
    lab = p.get("reachability")
    return f" [{lab}: {p.get('reason', '')}]" if lab is not None else ""


def _change(kind: str, p: dict, text: str) -> dict:
    return {"kind": kind, "revision": p["revision"], "property": p["property"], "text": text}


def updated(data: dict | None, props: list[dict], settings: dict) -> dict:
    """The baseline with this run's entries merged in (per N; UNKNOWN never recorded)."""
    revs: dict = {r: dict(e) for r, e in ((data or {}).get("revisions") or {}).items()
                  if r in R.REVISIONS}
    for p in props:
        rev, key = p["revision"], p["property"]
        old = revs.get(rev, {}).get(key) or {}
        by_n = _by_n(old)
        run = {n: v for n, v in _run_by_n(p).items() if v != UNKNOWN}
        if not run:
            continue
        by_n.update(run)
        worst = max(by_n.values())
        entry: dict = {"status": str(worst),
                       "n": {str(v): ranges([n for n, s in by_n.items() if s == v])
                             for v in sorted(set(by_n.values()))}}
        if worst in WITNESS and p.get("reachability") is not None:
            lab = str(p["reachability"])
            keep = old.get("status") == entry["status"] and old.get("reachability") == lab and old.get("reason")
            entry.update(reachability=lab, witness_n=(p.get("witness") or {}).get("n"),
                         reason=old["reason"] if keep else p.get("reason", ""))
        elif worst in WITNESS and old.get("reachability"):
            entry.update({k: old[k] for k in ("reachability", "witness_n", "reason") if k in old})
        ub = (p.get("unbounded") or {}).get("status")
        if ub is not None and ub != UNKNOWN:  # the inductive verdict for every N (never UNKNOWN)
            entry["unbounded"] = str(ub)
        elif old.get("unbounded") is not None:
            entry["unbounded"] = old["unbounded"]
        revs.setdefault(rev, {})[key] = entry
    for rev, entries in revs.items():  # properties no longer in the catalogue go
        revs[rev] = {k: entries[k] for k in sorted(entries) if k in BY_KEY}
    bounds = {k: settings.get(k) for k in ("max_block", "dcp_values", "max_groups", "timeout")}
    return {"schema": SCHEMA,
            "about": "Accepted findings of `kvproof verify` per revision and property; rewrite with "
                     "`kvproof verify --update-baseline` (reasons edited by hand are kept while status and "
                     "reachability stay the same).",
            "bounds": bounds, "revisions": {r: revs[r] for r in sorted(revs)}}


def dumps(data: dict) -> str:
    """JSON with one line per (revision, property) entry: a change is a one-line diff in review."""
    head = {k: v for k, v in data.items() if k != "revisions"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "revisions": {']
    revs = data.get("revisions", {})
    for i, (rev, entries) in enumerate(revs.items()):
        lines.append(f"    {json.dumps(rev)}: {{")
        items = list(entries.items())
        for j, (key, e) in enumerate(items):
            lines.append(f"      {json.dumps(key)}: {json.dumps(e)}" + ("," if j < len(items) - 1 else ""))
        lines.append("    }" + ("," if i < len(revs) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def write(path: Path, data: dict) -> Path:
    text = dumps(data)
    assert json.loads(text) == data
    return atomic_write(path, text)
