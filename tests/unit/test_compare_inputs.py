"""kvproof compare's inputs: a Layout file runs under its own stream (``kvproof.stream``, what a
consumer finding carries), a ledger entry under its ``stream``, a bare layout under the default."""

from __future__ import annotations

import json

from kvproof.commands.compare import generated, load_inputs
from kvproof.consumer.stream import Req, Stream, default_stream
from kvproof.inputs.drafts import Acceptance
from kvproof.inputs.layout import Layout

LAY = {"groups": [{"kind": "full_attention", "block_size": 16}], "cache": {"block_size": 16}}
OWN = Stream((64,), (Req(0, 64, 0, 0, 2), Req(0, 64, 0, 3, 2)), accept=Acceptance("none"))


def test_each_input_kind_keeps_its_stream(tmp_path):
    (tmp_path / "a_layout_with_stream.json").write_text(json.dumps({**LAY, "kvproof": {"stream": OWN.to_dict()}}))
    (tmp_path / "b_entry.json").write_text(json.dumps({"layout": LAY, "stream": OWN.to_dict()}))
    (tmp_path / "c_bare.json").write_text(json.dumps(LAY))
    (a, sa), (b, sb), (c, sc) = load_inputs([str(tmp_path)])
    assert sa == OWN and sb == OWN
    assert sc == default_stream(Layout.from_dict(LAY)) != OWN


def test_generated_inputs_turn_through_connectors_with_the_same_streams():
    plain = generated(10, 1.0, seed=3)
    turned = generated(10, 1.0, seed=3, connectors=(None, "SimpleCPUOffloadConnector"))
    assert [s for _, s in plain] == [s for _, s in turned]
    assert [l.kv_connector for l, _ in turned] == [None] * 5 + ["SimpleCPUOffloadConnector"] * 5
