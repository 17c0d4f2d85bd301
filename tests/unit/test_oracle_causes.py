"""An oracle observation carries its cause (the rule that broke, what produced the wrong thing),
so two faults one oracle sees are two classes and numbers never split one (issue 24, item 1).
No vLLM: the oracles judge hand-built events and lookups."""

import hashlib
from types import SimpleNamespace

from kvproof.consumer.oracle import RunContext
from kvproof.consumer.oracles import Oracles, Recorder
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.truth import HashIndex
from kvproof.judging.classkey import class_key
from kvproof.judging.judge import judge_consumer


class BlockStored(SimpleNamespace):
    """Stands for vllm.distributed.kv_events.BlockStored: the oracle reads its fields by name."""


def hb(parent, toks, ahead=()):
    return hashlib.sha256(repr((parent, tuple(toks), tuple(ahead))).encode()).digest()


def oracles(connector=""):
    res = ConsumerResult("x", "v", scheduler_block_size=4, hash_block_size=4, connector_class=connector)
    ctx = RunContext(res, HashIndex(4, hb), [4, 4], [], specs=["FullAttentionSpec", "SlidingWindowSpec"],
                     coordinator="HybridKVCacheCoordinator")
    o = Oracles.of(ctx, Recorder(res.observations, res.counts))
    toks = list(range(1, 17))
    req = SimpleNamespace(request_id="r0", all_token_ids=toks, num_tokens=16, num_prompt_tokens=16)
    o.admit("r0", req, toks)
    return o, res, toks


def stored(o, toks, blocks, group, medium=None, token_ids=None, parent=None):
    chain = o.ctx.index.chains["r0"]
    return BlockStored(block_hashes=[chain[b] for b in blocks], parent_block_hash=parent,
                       token_ids=token_ids if token_ids is not None else toks[blocks[0] * 4:(blocks[-1] + 1) * 4],
                       block_size=4, group_idx=group, medium=medium)


def key_of(o, res):
    return class_key(judge_consumer(res))


def test_a_correct_event_records_nothing():
    o, res, toks = oracles()
    o.event(stored(o, toks, [0, 1], 1))
    assert not res.observations


def test_two_producers_one_oracle_are_two_classes_and_rules_specs_numbers_never_split_one():
    o1, r1, toks = oracles("SimpleCPUOffloadConnector")
    o1.event(stored(o1, toks, [0, 1], 1, medium="CPU", token_ids=[9] * 8))  # other tokens
    o2, r2, _ = oracles("SimpleCPUOffloadConnector")
    o2.event(stored(o2, toks, [1], 0, parent=b"\x01" * 32))  # the block pool's event: a parent naming nothing
    o3, r3, _ = oracles("SimpleCPUOffloadConnector")  # another spec, blocks, rule: the same producer
    o3.event(stored(o3, toks, [2, 3], 0, medium="CPU", token_ids=[7] * 4, parent=o3.ctx.index.chains["r0"][1]))
    k1, k2, k3 = key_of(o1, r1), key_of(o2, r2), key_of(o3, r3)
    assert k1.check == k2.check == "oracle:kv_event" and k1.exc_type == k2.exc_type == ""
    assert k1.frame == "SimpleCPUOffloadConnector (BlockStored[CPU])" and k2.frame == "BlockPool (BlockStored[GPU])"
    assert k1 != k2 and k1.id != k2.id
    assert r1.observations[0].cause.startswith("hash-vs-tokens|") and r3.observations[0].cause.startswith("token-count|")
    assert k3 == k1
    assert "of SlidingWindowSpec" in r1.observations[0].detail  # the spec is in the words, not the key


def test_a_hit_cause_names_the_coordinator_and_the_rule():
    o, res, toks = oracles()
    o.ctx.truth.record("r0", toks, 8)
    req = SimpleNamespace(request_id="r1", all_token_ids=toks, num_tokens=16, num_prompt_tokens=16)
    o.lookup(req, 12)  # only 8 tokens were computed
    k = key_of(o, res)
    assert (k.check, k.exc_type, k.frame) == ("oracle:prefix_hit", "", "HybridKVCacheCoordinator")
    assert res.observations[0].cause == "beyond-common-prefix|HybridKVCacheCoordinator"


def test_the_cause_survives_the_worker_round_trip():
    o, res, toks = oracles()
    o.event(stored(o, toks, [0], 0, token_ids=[3, 3, 3, 3]))
    back = ConsumerResult.from_dict(res.to_dict())
    assert back.observations[0].cause == res.observations[0].cause == "hash-vs-tokens|BlockPool (BlockStored[GPU])"
    assert key_of(o, back) == key_of(o, res)
