"""A pure-Python FuzzedDataProvider with atheris' exact byte semantics, and its inverse.

The decoder (``kvproof.fuzz.decode``) reads its choices from a *source* with
the atheris ``FuzzedDataProvider`` API (``ConsumeIntInRange``, ``ConsumeBool``;
``PickValueInList`` here too). Inside a vLLM environment the harness hands it
the real atheris provider, whose unread bytes ``as_source`` moves into a PyFDP
(atheris' C++ calls are slower than these: see ``as_source``). Everywhere else
(unit tests, seed generation, replay of a libFuzzer artefact without atheris)
PyFDP stands in alone. Its semantics were measured on atheris 3.0.0 and are
checked against it by tests/integration/test_fuzz_harness.py:

- ``ConsumeIntInRange(lo, hi)`` takes bytes from the END of the data, most
  significant first, as many as the range needs (``ceil(bits(hi-lo)/8)``),
  fewer when the data runs out, and returns ``lo + value % (hi - lo + 1)``;
- ``ConsumeBool()`` takes one byte from the FRONT and returns its low bit;
- ``PickValueInList(xs)`` is ``xs[ConsumeIntInRange(0, len(xs) - 1)]``;
- exhausted data yields ``lo`` / ``False`` / ``xs[0]``.

``Encoder`` records the choices a decoder should see and lays the bytes out so
that either provider replays exactly those choices: that is how the checked-in
seed corpus and dictionary are generated from Layouts.
"""

from __future__ import annotations

from typing import Any, Sequence


class PyFDP:
    """atheris.FuzzedDataProvider semantics in pure Python (the subset we use)."""

    __slots__ = ("_data", "_lo", "_hi")

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._lo = 0  # next front byte
        self._hi = len(self._data)  # one past the next end byte

    def remaining_bytes(self) -> int:
        return self._hi - self._lo

    def ConsumeIntInRange(self, lo: int, hi: int) -> int:  # noqa: N802 (atheris' name)
        rng = hi - lo
        end = self._hi
        if 0 < rng < 256:  # one byte (the decoder's usual call)
            if end > self._lo:
                end -= 1
                self._hi = end
                return lo + self._data[end] % (rng + 1)
            return lo
        if rng < 0:
            raise ValueError("lo > hi")
        result = 0
        offset = 0
        while offset < 64 and (rng >> offset) > 0 and end > self._lo:
            end -= 1
            result = (result << 8) | self._data[end]
            offset += 8
        self._hi = end
        if rng != (1 << 64) - 1:
            result = result % (rng + 1)
        return lo + result

    def ConsumeBool(self) -> bool:  # noqa: N802
        if self._hi <= self._lo:
            return False
        b = self._data[self._lo]
        self._lo += 1
        return bool(b & 1)

    def PickValueInList(self, values: Sequence[Any]) -> Any:  # noqa: N802
        return values[self.ConsumeIntInRange(0, len(values) - 1)]


def as_source(fdp: Any) -> Any:
    """The fastest equivalent of a provider for the decoder.

    atheris' ``ConsumeIntInRange`` goes through pybind11 with arbitrary-precision
    ``int`` arguments and costs about 1 us a call (its ``ConsumeBool`` 0.4 us),
    twice PyFDP's pure-Python call; the decoder makes ~17 such calls per input.
    ``buffer()`` hands over the bytes it has not consumed yet, which PyFDP then
    reads with the same semantics (checked against atheris by
    tests/integration/test_fuzz_harness.py), so the same bytes decode to the
    same Layout. Anything else (PyFDP, the Hypothesis source) is used as is.
    """
    if type(fdp) is PyFDP:
        return fdp
    buffer = getattr(fdp, "buffer", None)
    if buffer is not None and type(fdp).__module__.startswith("atheris"):
        return PyFDP(buffer())
    return fdp


def _width(rng: int) -> int:
    n = 0
    while (rng >> (8 * n)) > 0 and n < 8:
        n += 1
    return n


class Encoder:
    """Writes the bytes that make a provider return chosen values in order.

    Call ``int(lo, hi, value)``, ``bool(value)`` and ``pick(values, value)``
    in the order the decoder consumes them (``decode.encode`` does), then
    ``data()``.
    """

    def __init__(self) -> None:
        self._front: list[int] = []
        self._back: list[int] = []  # in consumption order (reversed at the end)

    def int(self, lo: int, hi: int, value: int) -> None:
        if not lo <= value <= hi:
            raise ValueError(f"{value} not in [{lo}, {hi}]")
        rng = hi - lo
        width = _width(rng)
        v = value - lo
        # Consumed most significant byte first.
        self._back.extend((v >> (8 * (width - 1 - i))) & 0xFF for i in range(width))

    def bool(self, value: bool) -> None:
        self._front.append(1 if value else 0)

    def pick(self, values: Sequence[Any], value: Any) -> None:
        self.int(0, len(values) - 1, list(values).index(value))

    def data(self) -> bytes:
        return bytes(self._front) + bytes(reversed(self._back))


def int_chunk(lo: int, hi: int, value: int) -> bytes:
    """The bytes one ``ConsumeIntInRange(lo, hi) == value`` reads, as they sit in the data."""
    enc = Encoder()
    enc.int(lo, hi, value)
    return enc.data()
