"""One input unit: a Layout with an optional typed Stream (issue 43 item 2b).

The stream used to ride as an untyped dict in ``Layout.meta["stream"]``, read by each caller with
its own ``Stream.from_dict`` (or none). Now the Layout holds a :class:`kvproof.inputs.stream.Stream`
(``Layout.stream``); the file form stays what it was (``"kvproof": {"stream": {...}}``) and is read
once, at the edge, through ``Stream.from_dict``. The stream stays outside the content hash.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvproof.consumer.stream import default_stream, stream_for
from kvproof.errors import LayoutError
from kvproof.inputs.layout import Layout
from kvproof.inputs.stream import Req, Stream

ROOT = Path(__file__).resolve().parents[2]
BARE = {"groups": [{"kind": "full_attention", "block_size": 16}, {"kind": "mamba", "block_size": 32}],
        "cache": {"block_size": 16}}
OLD_FORM = {"prefixes": [40], "requests": [{"prefix": 0, "prefix_len": 40, "suffix_len": 3, "max_tokens": 2},
                                            {"prefix_len": 20, "arrival": 2}],
            "max_num_seqs": 4, "accept": {"mode": "none"}}


def test_a_files_meta_stream_is_read_once_into_a_typed_stream():
    lay = Layout.from_dict({**BARE, "kvproof": {"stream": OLD_FORM, "found_by": "differential"}})
    assert isinstance(lay.stream, Stream) and lay.stream == Stream.from_dict(OLD_FORM)
    assert lay.stream.accept.mode == "none" and lay.stream.requests[1] == Req(0, 20, 1, 2, 1)
    assert lay.meta == {"found_by": "differential"}  # never held twice
    # the stream is outside the hash and equality, as meta is: file names and ids do not move
    bare = Layout.from_dict(BARE)
    assert lay == bare and lay.content_hash() == bare.content_hash() and hash(lay) == hash(bare)
    # written back in the same place, in Stream's own JSON form
    again = lay.to_dict(with_meta=True)
    assert again["kvproof"] == {"found_by": "differential", "stream": lay.stream.to_dict()}
    assert Layout.from_dict(again).stream == lay.stream and "kvproof" not in lay.to_dict()
    assert stream_for(lay) is lay.stream and stream_for(bare) == default_stream(bare)


def test_every_way_of_attaching_a_stream_gives_the_typed_one():
    st = Stream.from_dict(OLD_FORM)
    bare = Layout.from_dict(BARE)
    for lay in (bare.with_stream(st), bare.with_meta(stream=OLD_FORM), bare.with_meta(stream=st),
                dataclasses.replace(bare, meta={"stream": OLD_FORM}), Layout(bare.groups, bare.cache, meta={"stream": st})):
        assert lay.stream == st and "stream" not in lay.meta
    assert bare.with_stream(st).with_meta(stream=None).stream is None
    assert bare.with_stream(st).with_meta(found_by="x").stream == st  # other meta leaves it alone


def test_a_bad_stream_is_refused_where_the_file_is_read():
    with pytest.raises(LayoutError, match=r"kvproof.stream: requests\[0\] has unknown field 'prompt'"):
        Layout.from_json(json.dumps({**BARE, "kvproof": {"stream": {"requests": [{"prompt": 3}]}}}))
    with pytest.raises(LayoutError, match="kvproof.stream: stream must be an object"):
        Layout.from_dict({**BARE, "kvproof": {"stream": [1, 2]}})


def test_stored_inputs_keep_loading_and_keep_their_names():
    """The corpus files and every ledger entry's layout+stream load; a corpus file is still named by
    its content hash; a stream read from a file comes back as the same Stream."""
    for path in sorted((ROOT / "corpus").glob("*.json")):
        lay = Layout.from_json(path.read_text(), where=str(path))
        assert path.stem == lay.content_hash()
    n = 0
    for path in sorted((ROOT / "findings" / "ledger").glob("*.json")):
        entry = json.loads(path.read_text())
        if not entry.get("layout") or not entry.get("stream"):
            continue
        lay = Layout.from_dict({**entry["layout"], "kvproof": {"stream": entry["stream"]}})
        assert lay.stream == Stream.from_dict(entry["stream"])
        assert Layout.from_dict(lay.to_dict(with_meta=True)).stream == lay.stream
        assert lay.content_hash() == Layout.from_dict(entry["layout"]).content_hash()
        n += 1
    assert n > 10


def test_prompt_len_is_the_prompt_s_length_and_prefix_tokens_slice_one_formula():
    """Sizing reads ``prompt_len`` (no prompt built) and prompts slice a memo of each prefix's
    tokens: both must be what building the prompt from the formula gives, whatever order the
    lengths are asked in (a longer ask extends the memo, a shorter one slices it)."""
    import random

    from kvproof.consumer.stream import random_stream
    from kvproof.inputs.stream import VOCAB, prefix_tokens

    rng = random.Random(3)
    for _ in range(200):
        s = random_stream(rng, rng.choice([64, 300, 2000, 20000]))
        assert [s.prompt_len(i) for i in range(len(s.requests))] == [len(s.prompt(i)) for i in range(len(s.requests))]
    for p, n in [(2, 5), (2, 700), (2, 3), (9, 0), (2, 1500), (5, 40)]:
        c, m = 1009 * (p + 1), VOCAB - 1
        assert prefix_tokens(p, n) == [1 + (31 * k + c) % m for k in range(n)]
