"""The connector-key oracle (``ConnectorOracle.key``) on hand-built keys. No vLLM.

A key a connector's CPU pool stores off its group's block boundary must be a prompt tail that
vLLM itself registers. For an align-mode Mamba group (0.30+) that tail is the prefill checkpoint
(``get_mamba_prefill_checkpoint_position``): under EAGLE's block drop one hash unit below the
prompt's last boundary. Measured: full_attention:16 + mamba:32, SimpleCPUOffloadConnector, eagle3
k=2, a 353-token prompt: ``BlockHashToBlockMap.insert`` of the Mamba state at 336 (0.30.0-0.33.0,
class a7ff9c65c29d), the CoW copy the scheduler hands the connector as a boundary-state offload.
"""

import hashlib
from types import SimpleNamespace

import pytest

from kvproof.consumer.connector_oracle import ConnectorOracle, mamba_checkpoint_position
from kvproof.consumer.oracle import RunContext
from kvproof.consumer.oracles import Oracles, Recorder
from kvproof.consumer.result import ConsumerResult
from kvproof.consumer.truth import HashIndex

H = 16
SPECS = ["FullAttentionSpec", "MambaSpec"]
SIZES = [32, 32]  # a full-attention block of 32 too, so 336 is off both groups' boundaries


def hb(parent, toks, ahead=()):
    return hashlib.sha256(repr((parent, tuple(toks), tuple(ahead))).encode()).digest()


def run(eagle_drop: bool, prompt: int = 353, lookahead: int = 0, specs=SPECS, mamba: bool = True):
    res = ConsumerResult("x", "v", scheduler_block_size=32, hash_block_size=H,
                         connector_class="SimpleCPUOffloadConnector")
    res.alignment, res.eagle_drop = H, eagle_drop
    ctx = RunContext(res, HashIndex(H, hb, lookahead=lookahead), SIZES, [], mamba=mamba, specs=specs)
    o = Oracles.of(ctx, Recorder(res.observations, res.counts))
    toks = [1 + (i * 7) % 1000 for i in range(prompt + 4)]
    req = SimpleNamespace(request_id="r0", all_token_ids=toks[:prompt], num_tokens=prompt, num_prompt_tokens=prompt)
    o.admit("r0", req, toks)  # the index learns the hashes past the prompt too (decode tokens)
    return o, res


def key(o, end: int, group: int) -> bytes:
    """The CPU pool's BlockHashWithGroupId: the hash of tokens [0, end) and a 4-byte group id."""
    return bytes(o.ctx.index.chains["r0"][end // H - 1]) + group.to_bytes(4, "big")


def store(o, end: int, group: int) -> bool:
    return o.find(ConnectorOracle).key(key(o, end, group), "BlockHashToBlockMap.insert", None, True)


def test_the_checkpoint_position_is_vllms():
    assert mamba_checkpoint_position(353, 16, True) == 336  # 352 - 16: EAGLE's replay boundary
    assert mamba_checkpoint_position(352, 16, True) == 336
    assert mamba_checkpoint_position(353, 16, False) == 352  # (353 - 1) // 16 * 16
    assert mamba_checkpoint_position(352, 16, False) == 336
    assert mamba_checkpoint_position(353, 16, False, lookahead=2) == 336  # 0.33 hash lookahead
    assert mamba_checkpoint_position(10, 16, True) == 0


def test_a_mamba_state_at_the_eagle_checkpoint_is_a_prompt_tail():
    o, res = run(eagle_drop=True)
    assert store(o, 336, 1)
    assert not res.observations


def test_the_eagle_checkpoint_is_no_tail_of_a_full_attention_group():
    # FullAttentionManager keys its tail at prompt // h * h under EAGLE (352: a block boundary)
    o, res = run(eagle_drop=True)
    assert not store(o, 336, 0)
    assert "paired with group 0" in res.observations[0].detail


def test_without_eagle_the_mamba_key_one_unit_lower_is_still_wrong():
    o, res = run(eagle_drop=False)
    assert not store(o, 336, 1)  # the tail is 352 (a block boundary); 336 is no request's tail
    assert "group 1" in res.observations[0].detail


@pytest.mark.parametrize("end", [304, 320 + 48])
def test_a_mamba_key_elsewhere_off_the_block_boundary_still_fails(end):
    o, res = run(eagle_drop=True, prompt=400)
    assert end % 32 and end not in (mamba_checkpoint_position(400, H, True), 399 // H * H, 400 // H * H)
    assert not store(o, end, 1)


def test_unknown_specs_fall_back_on_the_mamba_flag():
    o, _ = run(eagle_drop=True, specs=())
    assert store(o, 336, 1)
    o, _ = run(eagle_drop=True, specs=(), mamba=False)
    assert not store(o, 336, 1)


def test_the_hash_lookahead_checkpoint():
    # 0.33 without the drop (no connector in vLLM, but the rule is the same function)
    o, res = run(eagle_drop=False, prompt=353, lookahead=2)
    assert store(o, 336, 1)
    assert not res.observations
