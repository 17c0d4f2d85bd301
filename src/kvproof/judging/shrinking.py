"""The one greedy layout shrinker.

Two callers bring their own candidate moves and size order, and share this loop:
``kvproof.spec.query.shrink`` (a proof's witness, judged by the model, the
first smaller candidate that still violates wins) and
``kvproof.verify.drift.shrink`` (a model-versus-real disagreement, judged a
batch at a time through one bridge round trip, the smallest wins).

Stdlib and ``kvproof.inputs.layout`` only: drift must stay import-light.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, Sequence

from kvproof.inputs.layout import Layout


def shrink(start: Layout, candidates: Callable[[Layout], Iterable[Layout]], size: Callable[[Layout], object],
           still: Callable[[Sequence[Layout]], Iterable[bool]], *, smallest: bool = False,
           deadline: float | None = None, rounds: int | None = None) -> Layout:
    """Greedy: move to a smaller candidate for which ``still`` holds, until none does.

    Each round takes ``candidates(current)`` in order, keeps those that are valid
    Layouts (a ``to_dict``/``from_dict`` round trip), not seen before in the round
    and smaller than the current one by ``size``, and asks ``still`` about the batch
    (a sequence built as far as ``still`` reads it).
    ``still`` may return a list (the whole batch judged at once) or a lazy iterable
    (consumed only up to the move). The move is the first candidate that holds, or
    with ``smallest`` the smallest that holds (ties: the first). It stops when
    nothing holds, after ``rounds`` rounds, or at ``deadline`` (``time.monotonic``,
    checked before each verdict is read).
    """
    cur = start
    done = 0
    while rounds is None or done < rounds:
        done += 1
        cands = _Lazy(_valid(cur, candidates, size))
        if not cands:
            return cur
        pick = None
        for cand, keep in zip(cands, _verdicts(still(cands), deadline)):
            if keep and (pick is None or (smallest and size(cand) < size(pick))):
                pick = cand
                if not smallest:
                    break
        if pick is None:
            return cur
        cur = pick
    return cur


def _valid(cur: Layout, candidates: Callable[[Layout], Iterable[Layout]],
           size: Callable[[Layout], object]) -> Iterator[Layout]:
    """The round's candidates that are valid Layouts, new in the round and smaller than ``cur``."""
    seen: set[str] = set()
    bound = size(cur)
    for cand in candidates(cur):
        try:
            cand = Layout.from_dict(cand.to_dict())
        except Exception:  # noqa: BLE001 -- a candidate the Layout type refuses
            continue
        h = cand.content_hash()
        if h not in seen and size(cand) < bound:
            seen.add(h)
            yield cand


class _Lazy(Sequence):
    """A round's candidate list, built as far as it is read (Sequence's own ``__iter__`` reads it
    index by index): a lazy ``still`` stops at the first move,
    and most candidates of a round (about five in six in the proof run) are then never built."""

    def __init__(self, it: Iterator[Layout]) -> None:
        self._it, self._got = it, []

    def _fill(self, n: int | None) -> None:
        while n is None or len(self._got) < n:
            try:
                self._got.append(next(self._it))
            except StopIteration:
                return

    def __getitem__(self, i):  # type: ignore[override]
        self._fill(None if isinstance(i, slice) or i < 0 else i + 1)
        return self._got[i]

    def __len__(self) -> int:
        self._fill(None)
        return len(self._got)

    def __bool__(self) -> bool:
        self._fill(1)
        return bool(self._got)


def _verdicts(verdicts: Iterable[bool], deadline: float | None) -> Iterable[bool]:
    it = iter(verdicts)
    while deadline is None or time.monotonic() <= deadline:
        try:
            yield next(it)
        except StopIteration:
            return
