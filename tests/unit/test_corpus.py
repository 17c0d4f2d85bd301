import json

import pytest

from kvproof import corpus
from kvproof.errors import CorpusError
from kvproof.inputs.layout import Layout

A = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 128, "count": 2},
                                 {"kind": "sliding_window", "block_size": 64}]})


def test_publish_names_by_hash_and_never_overwrites(tmp_path):
    path, written = corpus.publish(A.with_meta(found_by="z3"), tmp_path)
    assert written and path.name == f"{A.content_hash()}.json"
    again, written_again = corpus.publish(A.with_meta(found_by="atheris"), tmp_path)
    assert again == path and not written_again
    assert json.loads(path.read_text())["kvproof"] == {"found_by": "z3"}  # the first one stays
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary files left
    assert Layout.from_json(path.read_text()) == A


def test_rewrite_keeps_the_name_and_refuses_another_layout(tmp_path):
    path, _ = corpus.publish(A, tmp_path)
    corpus.rewrite(path, A.with_meta(expect={"0.27.0": {"manager": "FAIL"}}))
    assert json.loads(path.read_text())["kvproof"]["expect"]["0.27.0"]["manager"] == "FAIL"
    other = Layout.from_dict({"groups": [{"kind": "mamba", "block_size": 64}]})
    with pytest.raises(CorpusError):
        corpus.rewrite(path, other)
    assert Layout.from_json(path.read_text()) == A
