"""A campaign's findings: one Layout JSON per new class, in the campaign folder. Pure Python (no vLLM).

- keyed by ``kvproof.judging.classkey.ClassKey`` (tier, contract or oracle, exception
  type, the raising vLLM frame): one root cause is one class, whatever the numbers;
- written under the campaign's ``findings/`` folder (``<workdir>/findings``,
  ``--crash-dir``), never into ``corpus/`` or the ledger: the runner copies them
  there only with ``--record``;
- canonical JSON named ``<content_hash>.json`` through ``kvproof.corpus.publish``
  (atomic, never overwritten: a reader never sees half a file);
- de-duplicated across the processes of one campaign (continuous workers) through
  ``O_EXCL`` marker files named by the class id in the campaign's ``seen/`` folder;
- meta: ``{"vllm", "contract", "class", "class_id", "found_by": "atheris",
  "detail", "input_sha1", "verdict", "tier"}`` (+ ``stream`` for consumer
  findings); ``input_sha1`` names the fuzzer input's SHA-1.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kvproof import corpus
from kvproof.inputs.layout import Layout

FOUND_BY = "atheris"


class FindingStore:
    """Where one campaign puts the first input of each class it meets."""

    def __init__(self, folder: Path, seen_dir: Path, vllm_version: str) -> None:
        self.folder = Path(folder)
        self.seen_dir = Path(seen_dir)
        self.seen_dir.mkdir(parents=True, exist_ok=True)
        self.vllm = vllm_version
        self._local: dict[str, Path | None] = {}  # classes this process already met: no syscalls

    def record(self, layout: Layout, class_id: str, contract: str, detail: str, data: bytes,
               **meta_extra) -> tuple[Path | None, bool]:
        """Store the first input of a class. Returns (its file, new for this campaign)."""
        if class_id in self._local:
            return self._local[class_id], False
        marker = self.seen_dir / class_id
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # another worker of this campaign met it first
            try:
                seen = marker.read_text().strip()
            except OSError:
                seen = ""
            self._local[class_id] = Path(seen) if seen else None
            return self._local[class_id], False
        try:
            meta = {"vllm": self.vllm, "contract": contract, "class_id": class_id, "found_by": FOUND_BY,
                    "detail": detail, "input_sha1": hashlib.sha1(data).hexdigest(), **meta_extra}
            path, _ = corpus.publish(layout.with_meta(**meta), self.folder)
            os.write(fd, str(path).encode())
        finally:
            os.close(fd)
        self._local[class_id] = path
        return path, True
