"""kvproof.frames: the one traceback walker and ``path:line in function`` parser.

The tracebacks are real: code compiled under vLLM-like and kvproof-like file names
(no vLLM imported; only the file names the walker reads are chosen).
"""

from __future__ import annotations

import linecache
import os
import traceback

import kvproof
from kvproof import frames

VLLM = "/env/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py"
OWN = "/env/lib/python3.12/site-packages/kvproof/consumer/spies.py"
APP = "/home/u/app/main.py"


def _code(filename: str, source: str) -> dict:
    ns: dict = {}
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own source, under a chosen file name
    return ns


# vLLM's outer() -> vLLM's inner() -> a callback in kvproof's spy, which raises
_vllm = _code(VLLM, "def outer(cb):\n    return inner(cb)\n\n\ndef inner(cb):\n    return cb()\n\n\n"
                    "def boom():\n    assert False\n")
_own = _code(OWN, "def spy():\n    raise KeyError('x')\n")
_app = _code(APP, "def main():\n    raise ValueError('y')\n")


def _raised(fn, *args) -> BaseException:
    try:
        fn(*args)
    except BaseException as err:  # noqa: BLE001
        return err
    raise AssertionError("did not raise")


def test_a_frame_is_written_and_read_back_the_same():
    text = frames.text(VLLM, 123, "resolve_kv_cache_block_sizes")
    assert text == "vllm/v1/core/kv_cache_utils.py:123 in resolve_kv_cache_block_sizes"
    f = frames.parse(text)
    assert f == ("vllm/v1/core/kv_cache_utils.py", "123", "resolve_kv_cache_block_sizes") and str(f) == text
    assert frames.parse("  vllm/x.py:7 in <lambda>\n") == ("vllm/x.py", "7", "<lambda>")
    assert frames.parse("vllm/x.py:f") is None and frames.parse("vllm/x.py: in f") is None and frames.parse("") is None
    assert frames.path_of(text) == frames.path_of(frames.key(text)) == "vllm/v1/core/kv_cache_utils.py"
    assert frames.function_of(text) == "resolve_kv_cache_block_sizes" and frames.function_of("vllm/x.py:f") == ""


def test_the_key_drops_the_line_and_keeps_the_path_from_vllm_on():
    assert frames.key("/a/site-packages/vllm/v1/x.py:12 in f") == "vllm/v1/x.py:f"
    assert frames.key("vllm/v1/x.py:12 in f") == "vllm/v1/x.py:f"
    # a checkout under a folder named vllm keeps its whole path; a line-less string stays as it is
    assert frames.key("/home/vllm/kvproof/src/kvproof/judging/judge.py:3 in f") == "/home/vllm/kvproof/src/kvproof/judging/judge.py:f"
    assert frames.key(" vllm/v1/x.py:f ") == "vllm/v1/x.py:f"
    assert frames.CALLED_FROM == " <- "


def test_the_innermost_vllm_frame_wins_over_a_later_kvproof_frame():
    err = _raised(_vllm["outer"], _own["spy"])
    assert frames.vllm_frame(err) == "vllm/v1/core/kv_cache_utils.py:6 in inner"
    pick, caller = frames.raising(err)
    assert (frames.where(pick), frames.where(caller)) == (frames.vllm_frame(err),
                                                          "vllm/v1/core/kv_cache_utils.py:2 in outer")
    pick, caller = frames.raising(err, vllm_only=False)  # the innermost, called by the innermost vLLM frame
    assert (frames.where(pick), frames.where(caller)) == ("kvproof/consumer/spies.py:2 in spy", frames.vllm_frame(err))
    assert frames.where(frames.innermost(err)) == "kvproof/consumer/spies.py:2 in spy"
    assert frames.own_frame(err, os.path.dirname(OWN) + "/") == "kvproof/spies.py:spy"
    assert frames.is_own("kvproof/consumer/spies.py:2 in spy") and not frames.is_own(frames.vllm_frame(err))
    # vLLM's file in a fix overlay under kvproof's cache is vLLM's
    assert not frames.is_own("/root/.cache/kvproof/fix-overlays/k/vllm/v1/core/kv_cache_utils.py:6 in inner")
    # raised in vLLM itself: the innermost frame either way, called by the vLLM frame above it
    err = _raised(_vllm["outer"], _vllm["boom"])
    for vllm_only in (True, False):
        pick, caller = frames.raising(err, vllm_only)
        assert (frames.where(pick), frames.where(caller)) == ("vllm/v1/core/kv_cache_utils.py:10 in boom",
                                                              "vllm/v1/core/kv_cache_utils.py:6 in inner")


def test_a_frame_outside_vllm_and_kvproof():
    err = _raised(_app["main"])
    assert frames.vllm_frame(err) == frames.where(frames.innermost(err)) == "/home/u/app/main.py:2 in main"
    assert frames.raising(err)[1] is None
    assert frames.own_frame(err, os.path.dirname(kvproof.__file__) + os.sep) is None
    assert not frames.is_own(frames.vllm_frame(err))
    assert frames.vllm_frame(ValueError("never raised")) == "" and frames.own_frame(ValueError(), "/") is None


def test_stack_vllm_skips_the_callers_frames():
    seen = []

    def callback():
        seen.extend((frames.stack_vllm(1), frames.stack_vllm(2), frames.stack_vllm(3)))  # no comprehension: a frame

    _vllm["outer"](callback)
    assert seen == ["vllm/v1/core/kv_cache_utils.py:6 in inner", "vllm/v1/core/kv_cache_utils.py:2 in outer", ""]
    assert frames.stack_vllm(10_000) == ""


def test_the_walk_reads_no_source(monkeypatch):
    # per fuzz input: no linecache (traceback.extract_tb reads every frame's source line)
    def refuse(*a, **k):
        raise AssertionError("linecache read")
    err = _raised(_vllm["outer"], _own["spy"])
    with monkeypatch.context() as m:
        for name in ("getline", "getlines", "checkcache", "updatecache", "lazycache"):
            m.setattr(linecache, name, refuse)
        got = (frames.vllm_frame(err), frames.where(frames.innermost(err)), frames.where(frames.raising(err, False)[1]),
               frames.own_frame(err, os.path.dirname(OWN) + "/"))
        extract = _raised(traceback.extract_tb, err.__traceback__)  # the check can see a reader
    assert got == ("vllm/v1/core/kv_cache_utils.py:6 in inner", "kvproof/consumer/spies.py:2 in spy",
                   "vllm/v1/core/kv_cache_utils.py:6 in inner", "kvproof/spies.py:spy")
    assert str(extract) == "linecache read"
