"""The stream format and generator (stdlib, no vLLM)."""

import json

import pytest

from kvproof.consumer.stream import Req, Stream, shrink, streams
from kvproof.errors import LayoutError


def test_round_trip_and_prompts():
    s = Stream((10,), (Req(0, 10, 3, 0, 2, resend_at=4), Req(0, 5, 0, 1, 1)), 8, 64, 4)
    back = Stream.from_json(s.to_json())
    assert back == s
    assert back.prompt(0)[:5] == back.prompt(1) and len(back.prompt(0)) == 13


@pytest.mark.parametrize("text,needle", [
    ("[]", "must be an object"),
    ('{"requests": []}', "non-empty"),
    ('{"requests": [{"prefix_len": 1}]}', "prefix_len must be in"),
    ('{"requests": [{"suffix_len": 0}]}', "prompt is empty"),
    ('{"requests": [{"bogus": 1}]}', "unknown field 'bogus'"),
    ('{"requests": [{"tokens": [1, -1]}]}', "tokens[1]"),
    ("{", "not JSON"),
])
def test_one_line_errors(text, needle):
    with pytest.raises(LayoutError) as err:
        Stream.from_json(text, where="s.json")
    assert needle in str(err.value) and "\n" not in str(err.value) and str(err.value).startswith("s.json")


def test_generator_valid_and_shrinker():
    gen = streams(3)
    for _ in range(50):
        s = next(gen)
        assert Stream.from_dict(json.loads(s.to_json())) == s
    big = next(streams(5))
    small = shrink(big, lambda s: len(s.requests) >= 1 and any(len(s.prompt(i)) > 3 for i in range(len(s.requests))))
    assert len(small.requests) == 1 and len(small.prompt(0)) <= 7
