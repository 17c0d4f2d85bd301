"""The Outcome: what one vLLM release did with one Layout.

Produced by the bridge worker inside a vLLM environment (or by the Z3 model
evaluated concretely), consumed by the contracts. Plain JSON both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StageError:
    """An exception a real vLLM stage raised, verbatim."""

    type: str
    message: str
    frame: str = ""  # "file:line in function" of the raising frame

    def line(self) -> str:
        return f"{self.type}: {self.message}"


_ERRORS = ("resolver_error", "manager_error", "run_error")


@dataclass(frozen=True)
class Outcome:
    layout_hash: str
    vllm_version: str
    source: str = "vllm"  # "vllm" for the real code, "model:<revision>" for the Z3 model
    fingerprint: str = ""  # sha256 prefix of the installed resolver's source
    expressible: bool = True
    not_expressible: str = ""  # why the release cannot express the layout
    scheduler_block_size: int | None = None
    hash_block_size: int | None = None
    resolver_error: StageError | None = None
    manager_attempted: bool = False
    manager_error: StageError | None = None
    coordinator: str = ""  # class name of the coordinator vLLM picked
    group_block_sizes: list[int] = field(default_factory=list)  # as the resolver sees them (dcp applied)
    extra: dict[str, Any] = field(default_factory=dict)
    run_error: StageError | None = None  # the run failed for a reason unrelated to block sizes (-> ERROR)

    @property
    def resolved(self) -> bool:
        return self.resolver_error is None and self.hash_block_size is not None

    def to_dict(self) -> dict[str, Any]:
        # Hand-written: dataclasses.asdict deep-copies and costs ~200 µs here,
        # more than the resolver call it reports on.
        d = dict(self.__dict__)
        for key in _ERRORS:
            if d[key] is not None:
                d[key] = dict(d[key].__dict__)
        d["group_block_sizes"] = list(self.group_block_sizes)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Outcome":
        d = dict(d)
        for key in _ERRORS:
            if d.get(key) is not None:
                d[key] = StageError(**d[key])
        return cls(**d)


def vllm_frame(err: BaseException) -> str:
    """``file:line in function`` of the innermost vLLM frame of ``err``'s traceback (else
    its innermost frame). Walks the traceback itself: ``traceback.extract_tb`` reads
    source lines through linecache, a stat per frame, which a fuzz campaign pays per input."""
    tb, chosen, last = err.__traceback__, None, None
    while tb is not None:
        last = tb
        if "/vllm/" in tb.tb_frame.f_code.co_filename:
            chosen = tb
        tb = tb.tb_next
    pick = chosen or last
    if pick is None:
        return ""
    code = pick.tb_frame.f_code
    return f"{code.co_filename.split('site-packages/')[-1]}:{pick.tb_lineno} in {code.co_name}"
