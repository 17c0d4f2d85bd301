"""The ledger: the one memory of known finding classes, checked in as
``findings/ledger/<class id>.json`` (one file a class).

Measured fields (``key``, ``layout``, ``stream``, ``releases``) are written by
``kvproof findings add``, which runs the layout on the installed releases; the
human fields (``status``, ``title``, ``why``, ``upstream``) say what a maintainer
decided. Verify, the fuzz campaigns, selftest and replay read the same ledger:
a known class is counted and the run goes on; only a new class fails a run.
"""

from __future__ import annotations

import enum
import functools
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvproof.errors import UsageError
from kvproof.judging.classkey import ClassKey
from kvproof.fsio import atomic_write

HERE = Path(__file__).resolve().parent / "ledger"


class Status(str, enum.Enum):
    BUG = "bug"  # a real vLLM bug (upstream reference or "unreported")
    FIXED = "fixed"  # a real vLLM bug, fixed from release ``fixed_in``
    BY_DESIGN = "by-design"  # vLLM refuses the configuration on purpose
    UNREACHABLE = "unreachable"  # no configuration reaches it (``premise_fact`` says why)
    # real vLLM raises or misbehaves on an input its engine premise allows, but no model the
    # release registers is known to build it (``why`` says what was read): not filed upstream
    LATENT = "latent"
    HARNESS = "harness"  # kvproof's own harness, not vLLM

    def __str__(self) -> str:
        return self.value


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split("+")[0].split(".")[:3])
    except ValueError:
        return ()


@dataclass
class Entry:
    key: ClassKey
    status: Status
    title: str
    why: str
    upstream: str = "unreported"
    fixed_in: str | None = None
    releases: dict[str, str] = field(default_factory=dict)  # release -> verdict measured there
    reachability: str = ""  # reachable | free | unreachable
    witness_config: dict | None = None
    premise_fact: str = ""
    layout: dict = field(default_factory=dict)
    stream: dict | None = None
    was: tuple[str, ...] = ()  # former ids: the class before its key was refined (src/kvproof/judging/classkey.py)
    workaround: str = ""  # what a user of an affected release can do today (measured, like the rest)
    report: dict = field(default_factory=dict)  # the upstream issue's human half (findings/report.py REPORT_KEYS)
    # the witness searches run for this class (``kvproof findings witness --write``), one per release
    # (or release pair, for a regression class): models, flag sets, shaped models, result, date; a
    # negative search is a record too, so "no real model reaches it" names what was tried
    searches: list[dict] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.key.id

    @property
    def filed_upstream(self) -> bool:
        """A real vLLM bug (open or fixed) that has, or should have, an upstream report; the
        other statuses (by-design, unreachable, latent, harness) are never filed."""
        return self.status in (Status.BUG, Status.FIXED)

    def bug_on(self, release: str | None) -> bool:
        """A bug a user of ``release`` can hit (a FIXED entry is one before its fix)."""
        if self.status == Status.BUG:
            return True
        if self.status != Status.FIXED or not self.fixed_in:
            return False
        have, fix = _version(release or ""), _version(self.fixed_in)
        return bool(have and fix) and have < fix

    def regressed_on(self, release: str | None) -> bool:
        """A FIXED entry met on its fix release or a later one: the fix is gone (a regression)."""
        if self.status != Status.FIXED or not self.fixed_in:
            return False
        have, fix = _version(release or ""), _version(self.fixed_in)
        return bool(have and fix) and have >= fix

    def to_dict(self) -> dict:
        d = {"id": self.id, "key": self.key.to_dict(), "status": str(self.status), "title": self.title,
             "why": self.why, "upstream": self.upstream, "fixed_in": self.fixed_in, "releases": self.releases,
             "reachability": self.reachability, "witness_config": self.witness_config,
             "premise_fact": self.premise_fact, "layout": self.layout, "stream": self.stream}
        if self.was:
            d["was"] = list(self.was)
        if self.workaround:
            d["workaround"] = self.workaround
        if self.report:
            d["report"] = self.report
        if self.searches:
            d["searches"] = self.searches
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Entry":
        try:
            return cls(key=ClassKey.from_dict(d["key"]), status=Status(d["status"]), title=d["title"],
                       why=d["why"], upstream=d.get("upstream") or "unreported", fixed_in=d.get("fixed_in"),
                       releases=dict(d.get("releases") or {}), reachability=d.get("reachability") or "",
                       witness_config=d.get("witness_config"), premise_fact=d.get("premise_fact") or "",
                       layout=d.get("layout") or {}, stream=d.get("stream"),
                       was=tuple(str(x) for x in d.get("was") or ()), workaround=d.get("workaround") or "",
                       report=dict(d.get("report") or {}),
                       searches=[dict(x) for x in d.get("searches") or ()])
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"ledger entry not understood ({type(err).__name__}: {err})") from None

    def with_search(self, record: dict) -> "Entry":
        """This entry with ``record`` as its search on ``record``'s releases (an earlier search there
        replaced: a rerun updates, never piles up)."""
        where = (record.get("release"), record.get("compared_with"))
        kept = [s for s in self.searches if (s.get("release"), s.get("compared_with")) != where]
        return replace(self, searches=sorted(kept + [record], key=lambda s: (_version(s.get("release", "")),
                                                                             s.get("compared_with") or "")))

    def known_line(self) -> str:
        """What ``kvproof check`` says of a result in this class: id, status, title, where the
        report is, and the workaround."""
        status = f"fixed in {self.fixed_in}" if self.status == Status.FIXED else str(self.status)
        up = f", upstream {self.upstream}" if self.filed_upstream else ""
        out = (f"known class {self.id} ({status}{up}): {self.title}; "
               f"report: kvproof findings report {self.id}")
        return out + (f"; workaround: {self.workaround}" if self.workaround else "")

    def line(self) -> str:
        status = f"fixed in {self.fixed_in}" if self.status == Status.FIXED else str(self.status)
        return f"{self.id}  {status:<16} {self.key.tier:<8} {self.title}"


class Ledger:
    """Every known class, by key. ``Ledger.load()`` reads the checked-in folder
    (``KVPROOF_LEDGER`` overrides it)."""

    def __init__(self, folder: Path, entries: dict[ClassKey, Entry]) -> None:
        self.folder = folder
        self._by_key = entries

    @classmethod
    def load(cls, folder: Path | str | None = None) -> "Ledger":
        folder = Path(folder or os.environ.get("KVPROOF_LEDGER") or HERE)
        entries: dict[ClassKey, Entry] = {}
        for path in sorted(folder.glob("*.json")):
            try:
                e = Entry.from_dict(json.loads(path.read_text()))
            except (OSError, ValueError) as err:
                raise UsageError(f"{path}: not a ledger entry ({err})") from None
            entries[e.key] = e
        return cls(folder, entries)

    def get(self, key: ClassKey) -> Entry | None:
        return self._by_key.get(key)

    def find(self, ident: str) -> Entry:
        """An entry by id or a former id (a unique prefix will do)."""
        hits = [e for e in self._by_key.values() if any(i.startswith(ident) for i in (e.id,) + e.was)]
        if len(hits) != 1:
            raise UsageError(f"{ident!r} names {'no' if not hits else 'more than one'} ledger entry "
                             f"(kvproof findings list)")
        return hits[0]

    def entries(self) -> list[Entry]:
        return sorted(self._by_key.values(), key=lambda e: (e.status != Status.BUG, str(e.status), e.key))

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: ClassKey) -> bool:
        return key in self._by_key

    def add(self, entry: Entry) -> Path:
        """Write (or replace) one entry atomically."""
        self._by_key[entry.key] = entry
        return atomic_write(self.folder / f"{entry.id}.json", json.dumps(entry.to_dict(), indent=1, sort_keys=True) + "\n")


@functools.lru_cache(maxsize=1)
def checked_in() -> Ledger:
    """The ledger (``KVPROOF_LEDGER`` or the checked-in one), read once per process."""
    return Ledger.load()


def known(row) -> Entry | None:
    """The ledger entry of a judged row's class (``kvproof.running.checking.Row``): None when the row
    observed nothing. Lives here, not on the row: the tier runner knows no ledger."""
    from kvproof.judging.classkey import class_key
    from kvproof.verdicts import Verdict
    if row.verdict < Verdict.UNSUPPORTED or row.judgement.observed is None:
        return None
    return checked_in().get(class_key(row.judgement, row.layout))


def known_dict(row) -> dict | None:
    """``known(row)`` as the check report's JSON writes it."""
    k = known(row)
    return None if k is None else {"id": k.id, "status": str(k.status), "title": k.title, "upstream": k.upstream,
                                   "fixed_in": k.fixed_in, "workaround": k.workaround}
