"""A tier's interface: what it reads of the worker's reply, how that becomes a judged row, how
replay shows the row. Members delegate to the code that runs the tier; callers ask the registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvproof.judging.judge import Judgement
from kvproof.inputs.layout import Layout
from kvproof.result import Result
from kvproof.tiers.row import ReplayRow, Row
from kvproof.verdicts import Tier

if TYPE_CHECKING:
    from kvproof.envs import Env


class TierRunner:
    """One tier of the evidence ladder.

    A tier the release's worker runs names the worker-side function that answers its part of a
    batch (``serve``, with ``serve_with`` as its options) and reads that part of the reply (``part``, parsed by :meth:`result` into the one result record, ``Result``, with
    the tier's own record as its payload: tiers sharing a part share one result and one row, as the
    function and manager tiers share the bridge's Outcome). A tier run outside the
    worker (``serve`` None) makes its rows itself (:meth:`outside_rows`), after the rows of the tiers
    it ``needs``."""

    tier: Tier
    serve: str | None = None  # "kvproof.module:function" answering its part inside the worker
    serve_with: dict[str, Any] = {}  # that function's options (the highest asked member's, per part)
    part: str | None = None  # the batch reply part its result comes from
    what: str = ""  # its result, as a missing answer names it
    skip: str = ""  # help of ``check --no-<tier>`` (empty: the tier has no such flag)
    elsewhere: str = ""  # why a command that does not run the tier refuses it, and where it runs
    default: bool = False  # the tier a layout is checked at unless a command is told otherwise
    streams: bool = False  # runs a layout's request stream (a hit regression compares its results)

    def result(self, raw: dict[str, Any]) -> Result:
        """This tier's result record from its part of the worker's reply."""
        raise NotImplementedError(f"the {self.tier} tier is not run by the worker")

    def record(self, own: Any) -> Result:
        """The one result record around this tier's own record (Outcome, ConsumerResult, EngineRun)."""
        raise NotImplementedError

    def judge(self, layout: Layout, result: Any) -> Judgement:
        """The one judge's verdict on this tier's own record (a ``Result``'s payload) for ``layout``."""
        raise NotImplementedError

    def row(self, name: str, layout: Layout, env_name: str, result: Result) -> Row:
        """A result of the worker's reply, judged into the tier's row."""
        raise NotImplementedError(f"the {self.tier} tier is not run by the worker")

    def carries(self, row: Row) -> bool:
        """Whether a runner's row holds this tier's result."""
        return False

    def replay_row(self, row: Row, release: str) -> ReplayRow:
        """The row replay keeps for this tier from a runner's row that carries its result."""
        raise NotImplementedError

    def expected(self, layout: Layout, release: str) -> bool:
        """Whether a corpus file must record this tier's verdict on ``release`` (a managed one)."""
        return False

    def probe_ok(self, row: Row) -> bool:
        """Whether a health probe's row shows this tier ran (beside its verdict)."""
        return True

    def needs(self, named: Sequence[tuple[str, Layout]]) -> tuple[Tier, ...]:
        """Tiers whose rows this one reads before it runs (the engine tier: the function tier)."""
        return ()

    def outside_rows(self, named: Sequence[tuple[str, Layout]], env_map: dict[str, Env], prior: Sequence[ReplayRow],
                     **how: Any) -> list[ReplayRow]:
        """The rows of a tier the worker does not run, per layout and release (``env_map``);
        ``prior``: the rows of the tiers it ``needs``, on every installed release."""
        raise NotImplementedError

    def recorded(self, rows: Sequence[ReplayRow], meta: dict[str, Any]) -> dict[str, Any]:
        """A corpus file's meta with what this tier's ``rows`` of it keep beside the expectations."""
        return meta

    def detail(self, row: ReplayRow) -> str:
        """replay's one line of a judged row."""
        raise NotImplementedError

    def data(self, row: ReplayRow) -> dict[str, Any]:
        """The tier's own fields of replay's JSON row."""
        raise NotImplementedError
