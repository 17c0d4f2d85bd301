"""The one greedy layout shrinker.

Two callers bring their own candidate moves and size order, and share this loop:
``kvproof.spec.query.shrink`` (a proof's witness, judged by the model, the
first smaller candidate that still violates wins) and
``kvproof.verify.drift.shrink`` (a model-versus-real disagreement, judged a
batch at a time through one bridge round trip, the smallest wins).

Stdlib and ``kvproof.layout`` only: drift must stay import-light.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

from kvproof.layout import Layout


def shrink(start: Layout, candidates: Callable[[Layout], Iterable[Layout]], size: Callable[[Layout], object],
           still: Callable[[Sequence[Layout]], Iterable[bool]], *, smallest: bool = False,
           deadline: float | None = None, rounds: int | None = None) -> Layout:
    """Greedy: move to a smaller candidate for which ``still`` holds, until none does.

    Each round takes ``candidates(current)`` in order, keeps those that are valid
    Layouts (a ``to_dict``/``from_dict`` round trip), not seen before in the round
    and smaller than the current one by ``size``, and asks ``still`` about the batch.
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
        cands, seen = [], set()
        for cand in candidates(cur):
            try:
                cand = Layout.from_dict(cand.to_dict())
            except Exception:  # noqa: BLE001 -- a candidate the Layout type refuses
                continue
            h = cand.content_hash()
            if h not in seen and size(cand) < size(cur):
                seen.add(h)
                cands.append(cand)
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


def _verdicts(verdicts: Iterable[bool], deadline: float | None) -> Iterable[bool]:
    it = iter(verdicts)
    while deadline is None or time.monotonic() <= deadline:
        try:
            yield next(it)
        except StopIteration:
            return
