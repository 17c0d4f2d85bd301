"""The witness search's flag sets and the record it leaves in a ledger entry (no vLLM)."""

from __future__ import annotations

import json

import pytest

from kvproof.judging.classkey import ClassKey
from kvproof.inputs.config import Config
from kvproof.findings import cli as findings_cli, witness
from kvproof.findings.ledger import Entry, Ledger, Status
from kvproof.findings.witness_search import Search
from kvproof.inputs.layout import Layout

FOUND = {"groups": [{"kind": "full_attention", "block_size": 2}, {"kind": "sliding_window", "block_size": 44,
                                                                  "sliding_window": 1}],
         "cache": {"block_size": 2, "enable_prefix_caching": True}, "kv_connector": "SimpleCPUOffloadConnector"}


def entry(spec: dict | None, check: str = "regression:hits@0.34.0[eagle3:sliding_window]") -> Entry:
    """A consumer class found with ``spec`` (the Layout's speculative section) under a stream."""
    layout = FOUND | ({"speculative": spec} if spec else {})
    stream = {"requests": [{"prefix_len": 47, "suffix_len": 50}]}
    return Entry(ClassKey("consumer", check), Status.LATENT, "t", "w", layout=layout, stream=stream)


def spec_of(flags: tuple[str, ...]) -> dict | None:
    return json.loads(flags[flags.index("--speculative-config") + 1]) if "--speculative-config" in flags else None


def test_a_drafting_class_is_also_searched_under_each_models_own_drafter_of_its_method():
    e = entry({"method": "eagle3", "num_speculative_tokens": 1})
    found = Layout.from_dict(e.layout)
    sets = witness.flag_sets(e, found, "gpt_oss")  # spec/models/drafts/gpt_oss_eagle3.json
    # the class's own set, without its drafts: they ride the consumer run (witness.candidates)
    assert len(sets) == 2 and spec_of(sets[0]) is None and sets[0] == witness.serve_flags(Layout.from_dict(FOUND))
    assert spec_of(sets[1])["method"] == "eagle3" and spec_of(sets[1])["model"] == "gpt_oss_eagle3"
    assert '"kv_connector":"SimpleCPUOffloadConnector"' in " ".join(sets[1])  # the class's connector kept
    assert witness.flag_sets(e, found, "gemma2") == [sets[0]]  # no reference draft: the class's set only
    mtp = entry({"method": "mtp", "num_speculative_tokens": 2, "mtp_modules": 2})
    got = witness.flag_sets(mtp, Layout.from_dict(mtp.layout), "qwen3_next")
    assert [spec_of(f)["num_speculative_tokens"] for f in got[1:]] == [1, 2, 3]
    assert len(witness.flag_sets(mtp, Layout.from_dict(mtp.layout), "gpt_oss")) == 1  # no MTP layers: not tried under MTP
    ngram = entry({"method": "ngram", "num_speculative_tokens": 4})
    assert len(witness.flag_sets(ngram, Layout.from_dict(ngram.layout), "gpt_oss")) == 1  # ngram: no layers
    assert len(witness.flag_sets(entry(None), Layout.from_dict(FOUND), "gpt_oss")) == 1


def test_a_regression_class_names_its_release():
    assert witness.regression_release(entry(None)) == "0.34.0"
    assert witness.regression_release(entry(None, check="oracle:prefix_hit")) is None


def test_a_negative_search_is_recorded_with_its_models_flag_sets_and_releases(tmp_path):
    e = entry({"method": "eagle3", "num_speculative_tokens": 1})
    found = Layout.from_dict(e.layout)
    models = ("gemma2", "gpt_oss", "muse_spark")  # muse_spark: served with --language-model-only
    s = Search(e, "0.34.0", "0.33.0", models, {m: witness.flag_sets(e, found, m) for m in models},
               refusals={"model: ValueError: no such model": 1},
               got={("gpt_oss", 1): ["x3 OK"], ("gemma2", 0): []})
    rec = s.record()
    assert (rec["release"], rec["compared_with"], rec["models"], rec["configs"], rec["refused"]) == \
        ("0.34.0", "0.33.0", list(models), 4, 1)
    assert [x["models"] for x in rec["flag_sets"]] == [3, 1] and rec["flag_sets"][1]["only"] == ["gpt_oss"]
    assert rec["plus"] == {"--language-model-only": ["muse_spark"]} and "eagle3" in rec["drafts"]
    assert rec["refusals"] == {"model: ValueError: no such model": 1} and "dcp" not in rec
    assert rec["shaped"][0] == {"model": "gpt_oss", "flag_set": 1, "got": "x3 OK"}
    assert rec["shaped"][1]["got"].startswith("not run") and rec["result"] == "no reference model reaches it"
    led = Ledger.load(tmp_path)
    led.add(e.with_search(rec))
    again = Ledger.load(tmp_path).get(e.key)
    assert again.searches == [rec] and again.status == Status.LATENT
    # a rerun on the same releases replaces its record; another release adds one, in release order
    later = again.with_search(rec | {"result": "x"}).with_search(dict(rec, release="0.33.0", compared_with="0.32.0"))
    assert [(x["release"], x["result"]) for x in later.searches] == [("0.33.0", rec["result"]), ("0.34.0", "x")]


def test_an_entry_without_searches_loads_and_writes_none(tmp_path):
    d = entry(None).to_dict()
    assert "searches" not in d
    assert Entry.from_dict(d).searches == []
    assert Config.from_dict({"model": "gpt_oss", "flags": list(witness.flag_sets(entry(None), Layout.from_dict(FOUND),
                                                                                  "gpt_oss")[0])})


@pytest.mark.parametrize("argv", [["witness", "6af601441c48", "--vllm", "0.33.0"],  # its pair ends at 0.34.0
                                  ["witness", "6af601441c48", "--status", "latent"],  # --status needs --all
                                  ["witness"], ["witness", "--all", "6af601441c48"],
                                  ["witness", "--all", "--status", "nonsense"]])
def test_bad_witness_input_is_one_line_exit_2(argv, capsys):
    assert findings_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
