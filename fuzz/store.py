"""Crash -> corpus Layout JSON, safely. Pure Python (no vLLM).

- canonical JSON, named ``<content_hash>.json`` (the hash ignores meta);
- written to a temporary file in the same folder, fsync'ed, then published
  with ``os.link`` (atomic like ``os.replace`` but it never overwrites: a
  concurrent writer of the same content simply loses the race), so a reader
  never sees half a file and a file, once there, never changes;
- de-duplicated by (vLLM version, contract, shape): across fork-mode workers
  through ``O_EXCL`` marker files in the campaign's ``seen/`` folder, and
  against what ``corpus/`` already holds (any file whose meta names the same
  vLLM and contract, whoever wrote it);
- meta: ``{"vllm", "contract", "found_by": "atheris", "detail", "input_sha1"}``
  plus ``verdict``, ``tier`` and ``signature`` (the class's real exception,
  numbers erased) when the oracle gives them (``input_sha1`` names
  libFuzzer's own ``crash-<sha1>`` artefact).
- a campaign keeps FAIL classes (crashes) in the corpus folder and LATENT
  classes (contract predictions nothing real showed) in a separate store
  (``<workdir>/latent/``): two ``CrashStore`` instances, never mixed.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvproof import corpus
from kvproof.fuzz.oracle import dedup_key
from kvproof.layout import Layout

FOUND_BY = "atheris"


def corpus_index(folder: Path) -> dict[str, Path]:
    """dedup key -> file for every readable corpus Layout that names a vLLM and a contract."""
    index: dict[str, Path] = {}
    if not folder.is_dir():
        return index
    for path in sorted(folder.glob("*.json")):
        try:
            layout = Layout.from_json(path.read_text(), str(path))
        except Exception:  # a foreign or broken file is not ours to judge here
            continue
        vllm, contract = layout.meta.get("vllm"), layout.meta.get("contract")
        if vllm and contract:
            index.setdefault(dedup_key(str(vllm), str(contract), layout, str(layout.meta.get("signature", ""))), path)
    return index


class CrashStore:
    """Where one campaign puts its findings."""

    def __init__(self, corpus_dir: Path, seen_dir: Path, vllm_version: str) -> None:
        self.corpus_dir = Path(corpus_dir)
        self.seen_dir = Path(seen_dir)
        self.seen_dir.mkdir(parents=True, exist_ok=True)
        self.vllm = vllm_version
        self._index: dict[str, Path] | None = None
        self._local: dict[str, Path | None] = {}  # classes this process already saw: no syscalls

    def _known(self) -> dict[str, Path]:
        if self._index is None:
            self._index = corpus_index(self.corpus_dir)
        return self._index

    def record(self, layout: Layout, contract: str, detail: str, data: bytes, signature: str = "",
               **meta_extra: str) -> tuple[Path | None, bool]:
        """Store a finding. Returns (corpus file or None, new class for this campaign)."""
        import hashlib

        key = dedup_key(self.vllm, contract, layout, signature)
        if key in self._local:
            return self._local[key], False
        marker = self.seen_dir / key
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                seen = marker.read_text().strip()
            except OSError:
                seen = ""
            self._local[key] = Path(seen) if seen else None
            return self._local[key], False
        try:
            path = self._known().get(key)
            if path is None:
                meta = {"vllm": self.vllm, "contract": contract, "found_by": FOUND_BY,
                        "detail": detail, "input_sha1": hashlib.sha1(data).hexdigest(), **meta_extra}
                if signature:
                    meta["signature"] = signature
                path, _ = corpus.publish(layout.with_meta(**meta), self.corpus_dir)
                self._known()[key] = path
            os.write(fd, str(path).encode())
        finally:
            os.close(fd)
        self._local[key] = path
        return path, True
