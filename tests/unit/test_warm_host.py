"""A report's warm python (kvproof/running/warm.py via kvproof.bridge.warm): a run forked from it is the
run a fresh ``python FILE`` (or ``python -m pytest``) makes, and the script's imports run once
per host. No vLLM: the "environment" is this interpreter, the scripts are small files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvproof.bridge.warm import Hosts, prologue, run
from kvproof.envs import Env

ENV = Env("this-python", Path(sys.executable))

# The prologue ends at the last top-level import; the module it imports counts its imports.
HEAD = """import os
os.environ.setdefault("WARM_PROLOGUE_SET", "by the prologue")
import counted  # noqa: E402
"""
BODIES = {
    "sees-what-python-gives": HEAD + """import sys
print(sys.argv[0] == __file__, __name__, sys.path[0] == os.path.dirname(__file__), os.getcwd())
print(os.environ.get("WARM_FROM_CALLER"), os.environ["WARM_PROLOGUE_SET"], os.environ.get("WARM_IMPORT_SET"))
print(sys.stdin.read() == "")
""",
    "exit-code": HEAD + "import sys\nprint('leaving')\nsys.exit(3)\n",
    "uncaught": HEAD + "raise ValueError('boom')\n",
    "exit-message": HEAD + "import sys\nsys.exit('a message')\n",
    "atexit": HEAD + "import atexit\natexit.register(lambda: print('bye'))\nprint('hello')\n",
    "thread": HEAD + "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.3), print('late'))).start()\n",
    "killed": HEAD + "import signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "counted.py").write_text(
        "import os\nwith open(os.environ['WARM_COUNT'], 'a') as f:\n    f.write('imported\\n')\n"
        "os.environ['WARM_IMPORT_SET'] = 'at import'\n")  # as vLLM's import and .pth files set some
    monkeypatch.setenv("WARM_COUNT", str(tmp_path / "count.txt"))
    monkeypatch.setenv("WARM_FROM_CALLER", "the caller's")
    return tmp_path


def _fresh(path: Path, variables: dict) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, str(path)], check=False, capture_output=True, text=True, cwd=path.parent,
                       env=variables, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def _last(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def test_the_prologue_ends_at_the_last_top_level_import():
    src = HEAD + "def f():\n    import json\nprint(1)\n"
    assert prologue(src) == HEAD


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_forked_run_is_the_fresh_run(folder, name):
    import os

    path = folder / f"{name}.py"
    path.write_text(BODIES[name])
    variables = dict(os.environ)
    want = _fresh(path, variables)
    with Hosts(path) as hosts:
        got = run(hosts, ENV, [str(path)], str(folder), variables, [str(folder)], 60)
    assert got[0] == want[0], (got, want)
    assert got[1] == want[1]
    assert _last(got[2]) == _last(want[2])


def test_the_imports_run_once_per_host_and_every_run_sees_a_fresh_namespace(folder):
    import os

    path = folder / "count.py"
    path.write_text(HEAD + "import sys\nstate = sys.modules.setdefault('warm_state', type(sys)('warm_state'))\n"
                    "state.n = getattr(state, 'n', 0) + 1\nprint(state.n)\n")
    variables = dict(os.environ)
    with Hosts(path) as hosts:
        outs = [run(hosts, ENV, [str(path)], str(folder), variables, [str(folder)], 60)[1] for _ in range(3)]
    assert outs == ["1\n"] * 3  # nothing of one run reaches the next
    assert (folder / "count.txt").read_text() == "imported\n"  # one import for three runs


def test_pytest_runs_as_python_dash_m_pytest(folder):
    import os

    (folder / "test_it.py").write_text(HEAD + "def test_fails():\n    assert 1 == 2\n\ndef test_passes():\n    pass\n")
    path = folder / "count.py"
    path.write_text(HEAD)
    argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "test_it.py")]
    with Hosts(path) as hosts:
        rc, out, _ = run(hosts, ENV, argv, str(folder), dict(os.environ), [str(folder)], 120)
    fresh = subprocess.run([sys.executable, *argv], check=False, capture_output=True, text=True, cwd=folder)
    assert rc == fresh.returncode == 1
    assert _last(out).split(" in ")[0] == _last(fresh.stdout).split(" in ")[0] == "1 failed, 1 passed"


def test_a_timeout_and_a_dead_host(folder):
    import os

    path = folder / "sleeps.py"
    path.write_text(HEAD + "import time\ntime.sleep(float(os.environ.get('WARM_SLEEP', '0')))\nprint('woke')\n")
    variables = dict(os.environ)
    with Hosts(path) as hosts:
        with pytest.raises(subprocess.TimeoutExpired):
            run(hosts, ENV, [str(path)], str(folder), {**variables, "WARM_SLEEP": "30"}, [str(folder)], 1)
        host = hosts.host(ENV)
        host.proc.kill()  # the host dies: the next run is a fresh python, not a verdict
        host.proc.wait()
        assert run(hosts, ENV, [str(path)], str(folder), variables, [str(folder)], 60)[:2] == (0, "woke\n")
