"""An exception during a consumer run: vLLM's (the ``exception`` oracle) or kvproof's own (a harness error). No vLLM import.

The innermost frame decides (``frames.own_frame``): raised in kvproof's code,
the run says nothing about vLLM (``ConsumerResult.harness_error``, ERROR);
raised in vLLM, it is an observation with the vLLM frame that raised it.
"""

from __future__ import annotations

import os

import kvproof
from kvproof import frames
from kvproof.consumer.result import RunState
from kvproof.judging.oracle_ids import OracleId
from kvproof.outcome import bare_assert

_KVPROOF_DIR = os.path.dirname(os.path.abspath(kvproof.__file__)) + os.sep


def exc_line(err: BaseException) -> str:
    """``Type: message @ vLLM frame``, the message on one line and cut at 300 characters."""
    msg = " ".join(str(err).split())[:300]
    return f"{type(err).__name__}: {msg} @ {frames.vllm_frame(err)}"


def own_error(err: BaseException) -> str | None:
    """The harness error line when ``err`` was raised in kvproof's own code, else None."""
    frame = frames.own_frame(err, _KVPROOF_DIR)
    if frame is None:
        return None
    msg = " ".join(str(err).split())[:300]
    return f"{type(err).__name__} raised in kvproof's harness at {frame}: {msg}"


def raised(st: RunState, err: BaseException, where: str = "") -> None:
    """Record ``err``, raised during a run (``where``: the stage, as a prefix of the line)."""
    own = own_error(err)
    if own is not None:
        st.res.harness_error = where + own
    else:
        # a bare assert's condition and caller ride in the observation's cause (``assert
        # <condition> <- <caller frame>``), read here, in the release's worker, from the
        # installed file: the class key reads them (kvproof.judging.judge._stage_error)
        cond, caller = bare_assert(err)
        st.rec.add(OracleId.EXCEPTION, where + exc_line(err),
                   cause=(f"assert {cond}" + (frames.CALLED_FROM + caller if caller else "")) if cond else "")
