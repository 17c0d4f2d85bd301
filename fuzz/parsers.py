"""Atheris target on kvproof's own input edge: bytes -> Layout / log line / --groups.

Each parser must return a valid object (which round-trips) or raise
``KvproofError`` (one line, exit 2 at the CLI). Anything else (a traceback
a user would see) is a crash. No vLLM needed: it runs in any interpreter
with atheris (the vLLM environments have it).

    <env>/bin/python -m kvproof.fuzz.parsers -max_total_time=10
"""

from __future__ import annotations

import sys

from kvproof.commands import explain
from kvproof.errors import KvproofError
from kvproof.inputs.files import parse_json
from kvproof.inputs.layout import Layout, parse_groups_spec


def _layout(text: str) -> None:
    layout = Layout.from_json(text)
    again = Layout.from_json(layout.canonical())
    assert again == layout, "Layout does not round-trip through its canonical JSON"
    assert "\n" not in layout.summary()


def _log_line(text: str) -> None:
    explain.parse(text)


def _groups(text: str) -> None:
    Layout.from_dict({"groups": parse_groups_spec(text)})


def _json(text: str) -> None:
    parse_json(text, "input")


PARSERS = (_layout, _log_line, _groups, _json)


def one_input(data: bytes) -> None:
    """The fuzz body (also called directly by the tests)."""
    if not data:
        return
    parser = PARSERS[data[0] % len(PARSERS)]
    try:
        text = data[1:].decode("utf-8")
    except UnicodeDecodeError:
        return  # the file reader's UTF-8 check is tested on its own (kvproof.inputs.files.read_text)
    try:
        parser(text)
    except KvproofError as err:
        message = str(err)
        assert message and "\n" not in message.strip(), f"multi-line error: {message[:200]!r}"


def main() -> None:
    import atheris

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
