"""Reports of a proof run: terminal table, JSON, JUnit XML, Markdown."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from kvproof import contracts as C
from kvproof.spec import lemmas
from kvproof.spec.properties import BY_KEY

CEX, PROVED, WARNING, UNKNOWN = "COUNTEREXAMPLE", "PROVED", "WARNING", "UNKNOWN"


def row_verdict(row: dict) -> tuple[str, str]:
    """(verdict, premise note) of one (revision, property, N) row."""
    e, f = row.get("engine", {}).get("status"), row.get("free", {}).get("status")
    if e in (CEX, WARNING):
        return e, "engine"
    if f in (CEX, WARNING):
        return f, "free only" if e == PROVED else "free"
    if UNKNOWN in (e, f):
        return UNKNOWN, "engine" if e == UNKNOWN else "free"
    return PROVED, ""


def _ranges(ns: list[int]) -> str:
    if not ns:
        return ""
    out, start, prev = [], ns[0], ns[0]
    for n in ns[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(out)


def summarise(result: dict) -> list[dict]:
    """One line per (revision, property): verdicts over N, time, first witness."""
    groups: dict[tuple, list[dict]] = {}
    for row in result["rows"]:
        groups.setdefault((row["revision"], row["property"]), []).append(row)
    out = []
    for (rev, key), rows in groups.items():
        rows.sort(key=lambda r: r["n"])
        by: dict[str, list[int]] = {}
        notes: dict[str, set] = {}
        seconds = 0.0
        witness = None
        for r in rows:
            v, note = row_verdict(r)
            by.setdefault(v, []).append(r["n"])
            if note:
                notes.setdefault(v, set()).add(note)
            seconds += sum(r.get(p, {}).get("seconds", 0.0) for p in ("engine", "free")
                           if r.get(p, {}).get("how") != "engine witness")
            if witness is None and v in (CEX, WARNING):
                src = r["engine"] if r.get("engine", {}).get("status") == v else r["free"]
                witness = {"n": r["n"], "summary": src.get("detail", ""), "layout": src.get("layout"),
                           "outcome": src.get("outcome"), "premise": note}
        order = [CEX, WARNING, UNKNOWN, PROVED]
        worst = next(v for v in order if v in by)
        parts = [f"{v} N={_ranges(by[v])}" + (f" ({'/'.join(sorted(notes[v]))})" if notes.get(v) else "")
                 for v in order if v in by]
        prop = BY_KEY[key]
        out.append({"revision": rev, "property": key, "contract": prop.contract, "scenario": prop.scenario,
                    "kind": prop.kind, "verdict": worst, "by_verdict": by, "text": "; ".join(parts),
                    "seconds": round(seconds, 3), "witness": witness})
    return out


def terminal(result: dict) -> str:
    lines = []
    lines.append(f"{'rev':5} {'property':58} {'verdict':15} {'time':>7}  detail")
    lines.append("-" * 130)
    for s in summarise(result):
        w = s["witness"]
        detail = s["text"]
        if w:
            detail += f"  e.g. N={w['n']}: {w['summary']}"
        lines.append(f"{s['revision']:5} {s['property']:58} {s['verdict']:15} {s['seconds']:6.2f}s  {detail}")
    for d in result.get("drift", []):
        lines.append(("STALE  " if d["stale"] else "drift  ") + d["message"])
    for c in result.get("corpus", []):
        lines.append(f"corpus {'new ' if c['new'] else 'kept'} {c['path']}  {c['revision']} {c['property']} "
                     f"({c['premise']}): {c['summary']}")
    lines.append(f"wall {result['wall_seconds']:.1f}s, {len(result['rows'])} rows, "
                 f"{result.get('killed', 0)} queries killed at the hard deadline")
    return "\n".join(lines) + "\n"


def _atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def junit(result: dict) -> str:
    cases = []
    fails = errors = skipped = 0
    for row in result["rows"]:
        v, note = row_verdict(row)
        name = f"{row['property']} N={row['n']}"
        secs = sum(row.get(p, {}).get("seconds", 0.0) for p in ("engine", "free"))
        body = ""
        if v == CEX:
            fails += 1
            src = row["engine"] if note == "engine" else row["free"]
            body = (f"<failure message={quoteattr(f'counterexample ({note} premise): ' + src.get('detail', ''))}>"
                    f"{escape(json.dumps(src.get('layout'), sort_keys=True))}</failure>")
        elif v == UNKNOWN:
            errors += 1
            src = row.get(note) or {}
            body = f"<error message={quoteattr('UNKNOWN: ' + str(src.get('detail', '')))}/>"
        elif v == WARNING:
            src = row["engine"] if note == "engine" else row["free"]
            body = f"<system-out>{escape('warning witness: ' + src.get('detail', ''))}</system-out>"
        cases.append(f'  <testcase classname={quoteattr("kvproof.verify." + row["revision"])} '
                     f'name={quoteattr(name)} time="{secs:.3f}">{body}</testcase>')
    head = (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="kvproof.verify" tests="{len(cases)}" '
            f'failures="{fails}" errors="{errors}" skipped="{skipped}" time="{result["wall_seconds"]:.3f}">')
    return head + "\n" + "\n".join(cases) + "\n</testsuite>\n"


def markdown(result: dict) -> str:
    s = result.get("settings", {})
    out = ["# kvproof verify", "",
           f"Revisions {', '.join(s.get('revisions', []))}; N = {s.get('min_groups')}..{s.get('max_groups')}; "
           f"raw block sizes 1..{s.get('max_block') or 'unbounded'}; dcp in {s.get('dcp_values')}; "
           f"timeout {s.get('timeout')} s per query; wall {result['wall_seconds']:.1f} s; "
           f"exit code {result.get('exit_code')}.", "",
           "| revision | property | verdict | over N | time (s) | first witness |",
           "|---|---|---|---|---:|---|"]
    for r in summarise(result):
        w = r["witness"]
        wt = f"N={w['n']} ({w['premise']}): `{w['summary']}`" if w else ""
        out.append(f"| {r['revision']} | `{r['property']}` | {r['verdict']} | {r['text']} | {r['seconds']:.2f} | {wt} |")
    out += ["", "## Contracts", "", "| id | kind | protects | statement |", "|---|---|---|---|"]
    for c in C.CATALOGUE:
        out.append(f"| `{c.id}` | {c.kind} | `{c.protects}` | {c.statement} |")
    out += ["", "## Lemmas the encoding relies on (each checked)", "", "| id | statement | checked by |",
            "|---|---|---|"]
    for i, st, how in lemmas.LEMMAS:
        out.append(f"| {i} | {st} | {how} |")
    if result.get("drift"):
        out += ["", "## Installed vLLM releases (drift alarm)", ""]
        out += [f"- {'**STALE** ' if d['stale'] else ''}{d['message']}" for d in result["drift"]]
    if result.get("corpus"):
        out += ["", "## Counterexamples written to the corpus", ""]
        out += [f"- `{c['path']}` ({'new' if c['new'] else 'already there'}): {c['revision']} "
                f"`{c['property']}` ({c['premise']} premise): `{c['summary']}`" for c in result["corpus"]]
    return "\n".join(out) + "\n"


def write_all(result: dict, out: Path) -> list[Path]:
    out = Path(out)
    paths = [out / "verify.json", out / "junit.xml", out / "verify.md"]
    _atomic(paths[0], json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    _atomic(paths[1], junit(result))
    _atomic(paths[2], markdown(result))
    return paths
