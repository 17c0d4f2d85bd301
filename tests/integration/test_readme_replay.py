"""The README's ``make replay`` and ``make matrix`` on a fresh clone (see test_readme_commands.py).

Corpus replay at every tier and a bisect over every managed release: the two longest README
commands, in a file of their own so the test runner can run them beside the others.
"""

from __future__ import annotations

import pytest

from test_readme_commands import _typed, clone  # noqa: F401 -- clone is the fixture


@pytest.mark.engine
@pytest.mark.parametrize("cmd", ["make replay", "make matrix"])
def test_replay_and_matrix(clone, cmd):  # noqa: F811
    _typed(clone, cmd, (0,), timeout=1200)
