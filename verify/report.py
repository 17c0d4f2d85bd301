"""Reports of a proof run: terminal summary (+ table), JSON, JUnit XML, Markdown.

Statuses are ``kvproof.verdicts.ProofStatus`` members inside the run (result
dicts from ``run_query`` may carry strings or members; ``status()`` accepts
both) and their names in every written report.
"""

from __future__ import annotations

import enum
import json
import textwrap
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from kvproof.spec import lemmas
from kvproof.spec.properties import BY_KEY

from kvproof.judging import contracts as C
from kvproof.fsio import atomic_write
from kvproof.verdicts import ProofStatus, Reachability

PROVED, WARNING, CEX, UNKNOWN = ProofStatus.PROVED, ProofStatus.WARNING, ProofStatus.COUNTEREXAMPLE, ProofStatus.UNKNOWN
WITNESS = (CEX, WARNING)
PREMISES = ("engine", "free")


def status(value) -> ProofStatus | None:
    """``ProofStatus`` from a string or a member (None stays None): the transition boundary."""
    if value is None or isinstance(value, ProofStatus):
        return value
    return ProofStatus[str(value)]


def _st(row: dict, premise: str) -> ProofStatus | None:
    return status(row.get(premise, {}).get("status"))


def row_verdict(row: dict) -> tuple[ProofStatus, str]:
    """(verdict, premise note) of one (revision, property, N) row."""
    e, f = _st(row, "engine"), _st(row, "free")
    if e in WITNESS:
        return e, "engine"
    if f in WITNESS:
        return f, "free only" if e == PROVED else "free"
    if UNKNOWN in (e, f):
        return UNKNOWN, "engine" if e == UNKNOWN else "free"
    return PROVED, ""


def ranges(ns) -> str:
    """[1, 2, 3, 5] -> "1-3,5"."""
    ns = sorted(ns)
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


def parse_ranges(text: str) -> list[int]:
    """"1-3,5" -> [1, 2, 3, 5]."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def summarise(result: dict) -> list[dict]:
    """One entry per (revision, property): verdicts over N, time, first witness (engine-shaped first)."""
    groups: dict[tuple, list[dict]] = {}
    for row in result["rows"]:
        groups.setdefault((row["revision"], row["property"]), []).append(row)
    out = []
    for (rev, key), rows in sorted(groups.items()):
        rows.sort(key=lambda r: r["n"])
        by: dict[ProofStatus, list[int]] = {}
        notes: dict[ProofStatus, set] = {}
        seconds = 0.0
        witnesses = []
        for r in rows:
            v, note = row_verdict(r)
            by.setdefault(v, []).append(r["n"])
            if note:
                notes.setdefault(v, set()).add(note)
            seconds += sum(r.get(p, {}).get("seconds", 0.0) for p in PREMISES
                           if r.get(p, {}).get("how") != "engine witness")
            if v in WITNESS:
                premise = "engine" if note == "engine" else "free"
                src = r[premise]
                witnesses.append({"n": r["n"], "summary": src.get("detail", ""), "layout": src.get("layout"),
                                  "outcome": src.get("outcome"), "premise": premise, "note": note,
                                  "engine_status": _st(r, "engine")})
        order = [CEX, WARNING, UNKNOWN, PROVED]
        worst = next(v for v in order if v in by)
        parts = [f"{v} N={ranges(by[v])}" + (f" ({'/'.join(sorted(notes[v]))})" if notes.get(v) else "")
                 for v in order if v in by]
        # the witness to label: the smallest engine-shaped one, else the smallest
        engine = [w for w in witnesses if w["premise"] == "engine"]
        witness = (engine or witnesses or [None])[0]
        prop = BY_KEY[key]
        out.append({"revision": rev, "property": key, "contract": prop.contract, "scenario": prop.scenario,
                    "kind": prop.kind, "verdict": worst, "by_verdict": by, "text": "; ".join(parts),
                    "seconds": round(seconds, 3), "witness": witness})
    return out


# --- the inductive proof (every N) ------------------------------------------------------------

def _smallest_witness(result: dict, rev: str, key: str, premise: str) -> tuple[int, ProofStatus] | None:
    hits = [(row["n"], _st(row, premise)) for row in result["rows"]
            if row["revision"] == rev and row["property"] == key and _st(row, premise) in WITNESS]
    return min(hits, key=lambda h: h[0]) if hits else None


def unbounded_premise(result: dict, rev: str, key: str, premise: str) -> dict:
    """One property and premise for every N: the induction's verdict, checked against the bounded rows.

    A witness at some N (bounded search) wins: the smallest N is named and the induction does not
    apply. Without one, PROVED needs every base, step, the transfer and the conclusion PROVED;
    anything else (a step or conclusion not proved, the invariant too weak) is UNKNOWN.
    """
    from kvproof.spec.induction import unbounded
    ind = (result.get("induction") or {}).get(rev, {})
    verdict, why = unbounded(ind, key, premise)
    hit = _smallest_witness(result, rev, key, premise)
    if hit is not None:
        n, st = hit
        if verdict == PROVED:  # never both: the fold or the bounded model is wrong
            return {"status": UNKNOWN, "smallest_n": n,
                    "text": f"induction PROVED but the bounded search found {st} at N={n}: model inconsistency"}
        return {"status": st, "smallest_n": n, "text": f"{st} at N={n} (bounded search); the induction does not apply"}
    if verdict == PROVED:
        return {"status": PROVED, "smallest_n": None, "text": "PROVED for all N (induction)"}
    return {"status": UNKNOWN, "smallest_n": None,
            "text": f"UNKNOWN for N beyond the bounded search ({why}); the bounded search finds no counterexample"}


def add_unbounded(result: dict) -> None:
    """Each property entry gains ``unbounded``: per premise and overall (free first: it is the
    stronger statement; the engine premise's own verdict rides along)."""
    for p in result.get("properties", []):
        per = {pr: unbounded_premise(result, p["revision"], p["property"], pr) for pr in PREMISES}
        f, e = per["free"], per["engine"]
        if f["status"] == PROVED:
            top = dict(f)
        elif e["status"] == PROVED:
            top = dict(f, text=f"{f['text']}; engine premise: PROVED for all N (induction)")
        else:
            top = dict(f)
        p["unbounded"] = dict(top, engine=e, free=f)


def _props(result: dict) -> list[dict]:
    return result.get("properties") or summarise(result)


# --- terminal --------------------------------------------------------------------------------

def _wrap(head: str, items: list[str], width: int = 118, indent: int = 11) -> list[str]:
    if not items:
        return []
    return textwrap.wrap(head + ", ".join(items), width=width, subsequent_indent=" " * indent,
                         break_on_hyphens=False)


def _bounds(s: dict) -> str:
    mb = s.get("max_block")
    dcp = ",".join(str(d) for d in s.get("dcp_values", []))
    return f"block sizes <= {mb if mb else 'unbounded'}, dcp in {{{dcp}}}"


def _wall_detail(result: dict) -> str:
    """How the wall time splits: the solver phase and what the result cache answered."""
    parts = []
    if "solver_seconds" in result:
        parts.append(f"solver {result['solver_seconds']:.1f} s")
    c = result.get("cache")
    if c:
        parts.append(f"{c['hits']} of {c['hits'] + c['misses']} results from the cache")
    ph = result.get("phases")
    if ph:  # the rest of the wall, phase by phase (kvproof.verify.cli._run)
        parts.append(", ".join(f"{k} {v:.1f} s" for k, v in ph.items() if k != "solver"))
    return f" ({'; '.join(parts)})" if parts else ""


def summary(result: dict) -> str:
    """What a maintainer reads first: per release what is proved (and within which bounds), the
    reachable findings, then free/unreachable counts, then the change against the baseline."""
    s = result.get("settings", {})
    props = _props(result)
    lines = [(f"kvproof verify: revisions {', '.join(s.get('revisions', []))}; N={s.get('min_groups')}.."
              f"{s.get('max_groups')} groups; {_bounds(s)}; {s.get('timeout')} s per query; "
              f"wall {result['wall_seconds']:.1f} s{_wall_detail(result)}")]
    # 1) reachable findings, with the witness Config (else Layout)
    reach = [p for p in props if p["verdict"] in WITNESS and p.get("reachability") == Reachability.REACHABLE]
    lines.append("")
    if reach:
        lines.append(f"REACHABLE: {len(reach)} finding(s) a user configuration hits")
        for p in reach:
            w = p["witness"] or {}
            cfg = p.get("witness_config")
            what = ("config " + json.dumps(cfg, sort_keys=True)) if cfg else f"layout {w.get('summary', '')}"
            lines.append(f"  {p['revision']:5} {p['property']} {p['verdict']} N={ranges(p['by_verdict'][p['verdict']])}"
                         f": {what}")
    else:
        lines.append("REACHABLE: none (no configuration found that derives a counterexample)")
    # 2) per release: proved with bounds, findings by label
    lines.append("")
    lines.append(f"per release (PROVED = UNSAT for every N listed, {_bounds(s)}):")
    for rev in s.get("revisions", sorted({p["revision"] for p in props})):
        mine = [p for p in props if p["revision"] == rev]
        if not mine:
            continue
        proved = [f"{p['property']} N={ranges(p['by_verdict'][PROVED])}" for p in mine if p["verdict"] == PROVED]
        lines += _wrap(f"{rev:5}  proved {len(proved)}/{len(mine)}: ", proved) or [f"{rev:5}  proved 0/{len(mine)}"]
        by_label: dict[str, list[str]] = {}
        for p in mine:
            if p["verdict"] not in WITNESS:
                continue
            lab = p.get("reachability")
            name = "warning" if p["verdict"] == WARNING else (str(lab) if lab is not None else "unlabelled")
            by_label.setdefault(name, []).append(
                f"{p['property']} N={ranges(p['by_verdict'][p['verdict']])}")
        counts = ", ".join(f"{len(by_label[k])} {k}" for k in ("reachable", "free", "unreachable", "unlabelled",
                                                                  "warning") if k in by_label)
        lines.append(f"       findings: {counts or 'none'}")
        for k, head in (("free", "free (engine-shaped, no config yet): "),
                        ("unreachable", "unreachable (direct callers only): ")):
            lines += _wrap("         " + head, by_label.get(k, []))
        unknown = [f"{p['property']} N={ranges(p['by_verdict'][UNKNOWN])}" for p in mine if UNKNOWN in p["by_verdict"]]
        lines += _wrap("       UNKNOWN (not proved): ", unknown)
        if any("unbounded" in p for p in mine):
            every = [p["property"] for p in mine if p["unbounded"]["status"] == PROVED]
            lines += _wrap("       PROVED for all N (induction): ", every) or ["       PROVED for all N (induction): none"]
            eng = [p["property"] for p in mine
                   if p["unbounded"]["status"] != PROVED and p["unbounded"]["engine"]["status"] == PROVED]
            lines += _wrap("       PROVED for all N (induction), engine premise only: ", eng)
            fails = [f"{p['property']} (smallest N={p['unbounded']['smallest_n']})" for p in mine
                     if p["unbounded"]["status"] in WITNESS]
            lines += _wrap("       not for all N, induction does not apply: ", fails)
            unk = [p["property"] for p in mine if p["unbounded"]["status"] == UNKNOWN]
            lines += _wrap("       for all N UNKNOWN (induction not proved): ", unk)
    # 3) against the baseline
    lines.append("")
    b = result.get("baseline")
    if not b:
        lines.append("baseline: not compared (--no-baseline)")
    else:
        if b.get("created"):
            lines.append(f"baseline {b['path']}: created ({b['compared']} entries)")
        elif b.get("updated"):
            lines.append(f"baseline {b['path']}: rewritten ({len(b['changes'])} change(s) accepted)")
        elif not b["changes"]:
            lines.append(f"baseline {b['path']}: matches ({b['compared']} entries compared)")
        else:
            lines.append(f"baseline {b['path']}: {len(b['changes'])} change(s)")
        for c in ([] if b.get("created") else b["changes"]):
            lines.append(f"  {c['kind'].upper():8} {c['revision']:5} {c['property']}: {c['text']}")
        for note in b.get("notes", []):
            lines.append(f"  note: {note}")
        for u in b.get("unknown", []):
            lines.append(f"  UNKNOWN  {u}")
    for d in result.get("drift", []):
        lines.append(("STALE  " if d["stale"] else "drift ok: ") + d["message"])
    return "\n".join(lines) + "\n"


def table(result: dict) -> str:
    lines = [f"{'rev':5} {'property':50} {'verdict':15} {'label':12} {'time':>7}  detail", "-" * 140]
    for s in _props(result):
        w = s["witness"]
        detail = s["text"]
        if w:
            detail += f"  e.g. N={w['n']}: {w['summary']}"
        lab = str(s.get("reachability") or "")
        lines.append(f"{s['revision']:5} {s['property']:50} {s['verdict']!s:15} {lab:12} {s['seconds']:6.2f}s  "
                     f"{detail}")
        if s.get("unbounded"):
            lines.append(f"{'':5} {'  every N:':50} {s['unbounded']['status']!s:15} {'':12} {'':7}  "
                         f"{s['unbounded']['text']}")
    for c in result.get("corpus", []):
        lines.append(f"counterexample {'new ' if c['new'] else 'kept'} {c['path']}  {c['revision']} {c['property']} "
                     f"({c['premise']}): {c['summary']}")
    lines.append(f"wall {result['wall_seconds']:.1f}s, {len(result['rows'])} rows, "
                 f"{result.get('killed', 0)} queries killed at the hard deadline")
    return "\n".join(lines) + "\n"


def terminal(result: dict, verbose: bool = False) -> str:
    out = summary(result)
    if verbose:
        out += "\n" + table(result)
    return out


# --- files -----------------------------------------------------------------------------------

def plain(obj):
    """JSON-ready copy: enum members as their names (ProofStatus "PROVED", Reachability "free")."""
    if isinstance(obj, enum.Enum):
        return str(obj)
    if isinstance(obj, dict):
        return {(str(k) if isinstance(k, enum.Enum) else k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def junit(result: dict) -> str:
    cases = []
    fails = errors = skipped = 0
    for row in result["rows"]:
        v, note = row_verdict(row)
        name = f"{row['property']} N={row['n']}"
        secs = sum(row.get(p, {}).get("seconds", 0.0) for p in PREMISES)
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
           (f"Revisions {', '.join(s.get('revisions', []))}; N = {s.get('min_groups')}..{s.get('max_groups')}; "
           f"raw block sizes 1..{s.get('max_block') or 'unbounded'}; dcp in {s.get('dcp_values')}; "
           f"timeout {s.get('timeout')} s per query; wall {result['wall_seconds']:.1f} s; "
           f"exit code {result.get('exit_code')}."), "", "```", summary(result).rstrip(), "```", "",
           "| revision | property | verdict | reachability | over N | time (s) | first witness |",
           "|---|---|---|---|---|---:|---|"]
    for r in _props(result):
        w = r["witness"]
        wt = f"N={w['n']} ({w['note']}): `{w['summary']}`" if w else ""
        out.append(f"| {r['revision']} | `{r['property']}` | {r['verdict']} | {r.get('reachability') or ''} | "
                   f"{r['text']} | {r['seconds']:.2f} | {wt} |")
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
        out += ["", "## Counterexamples written", ""]
        out += [f"- `{c['path']}` ({'new' if c['new'] else 'already there'}): {c['revision']} "
                f"`{c['property']}` ({c['premise']} premise): `{c['summary']}`" for c in result["corpus"]]
    return "\n".join(out) + "\n"


def write_all(result: dict, out: Path) -> list[Path]:
    out = Path(out)
    paths = [out / "verify.json", out / "junit.xml", out / "verify.md"]
    atomic_write(paths[0], json.dumps(plain(result), indent=2, sort_keys=True, default=str) + "\n")
    atomic_write(paths[1], junit(result))
    atomic_write(paths[2], markdown(result))
    return paths
