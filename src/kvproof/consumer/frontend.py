"""A frontend that hashes prompts itself (0.34 ``EngineCoreRequest.block_hashes``). In a vLLM env.

The engine publishes a ``PrefixHashConfig`` (hash algorithm, hash block
size, none hash, lookahead tokens) so that a frontend (vLLM's Rust one) can
send each prompt's block hashes; ``kv_cache_utils.frontend_block_hashes``
trusts them when their count matches the prompt, else the engine hashes it.
This frontend hashes by the rule ``get_request_block_hasher`` documents
(parent hash, the block's tokens, extra keys ``(None, *next L tokens)``)
from that config: exactly (``frontend``), or with one field wrong, to show
what the engine does with a frontend that breaks the contract.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vllm.v1.core import kv_cache_utils

from kvproof.bridge.compat import kwargs_for
from kvproof.consumer.result import FrontendTally
from kvproof.consumer.observations import Recorder
from kvproof.judging.oracle_ids import OracleId
from kvproof import facts


def takes_frontend_hashes() -> bool:
    """Whether the installed release's engine takes a frontend's prompt block hashes."""
    return hasattr(kv_cache_utils, facts.CONSUMER_MARKS["frontend_block_hashes"][1].rsplit(":", 1)[1])


def published_config(vcfg: Any, hash_bs: int) -> Any:
    """The ``PrefixHashConfig`` the engine core publishes (``EngineCore.__init__``, core.py
    236-252 in 0.34): only when it hashes blocks (prefix caching or a KV connector)."""
    from vllm.v1.engine import PrefixHashConfig

    if not (vcfg.cache_config.enable_prefix_caching or vcfg.kv_transfer_config is not None):
        return None
    return PrefixHashConfig(hash_algo=vcfg.cache_config.prefix_caching_hash_algo, hash_block_size=hash_bs,
                            none_hash=kv_cache_utils.NONE_HASH,
                            num_lookahead_tokens=getattr(vcfg, "num_hash_lookahead_tokens", 0) or 0)


def as_sent(config: Any, hasher: str) -> Any:
    """The config a frontend of kind ``hasher`` (facts.PROMPT_HASHERS) hashes with."""
    if hasher == "frontend-other-block-size":
        return replace(config, hash_block_size=2 * config.hash_block_size)
    if hasher == "frontend-no-lookahead":
        return replace(config, num_lookahead_tokens=0)
    if hasher == "frontend-other-none-hash":
        return replace(config, none_hash=bytes(b ^ 0xFF for b in config.none_hash))
    return config


def prompt_hashes(config: Any, prompt: list[int]) -> list[bytes]:
    """The prompt's block hashes under ``config``: a block is hashed once its lookahead tokens exist."""
    from vllm.utils.hashing import get_hash_fn_by_name

    fn, bs, la = get_hash_fn_by_name(config.hash_algo), config.hash_block_size, config.num_lookahead_tokens
    out, parent = [], config.none_hash
    for start in range(0, max(len(prompt) - la, 0) // bs * bs, bs):
        end = start + bs
        extra = (None, *prompt[end:end + la]) if la else None
        parent = fn((parent, tuple(prompt[start:end]), extra))
        out.append(parent)
    return out


class Frontend:
    """Builds each request as the engine core does from an ``EngineCoreRequest`` carrying
    this frontend's hashes (``EngineCore._preprocess_add_request``, 0.34), and tallies them."""

    def __init__(self, hasher: str, config: Any, block_hasher: Any, rec: Recorder) -> None:
        assert hasher in facts.PROMPT_HASHERS and hasher != "engine", hasher
        self.tally = FrontendTally(hasher)
        self.config, self.block_hasher, self.rec = config, block_hasher, rec
        self.sent = None if config is None else as_sent(config, hasher)

    def request(self, rid: str, prompt: list[int], sp: Any, engine_request: Any) -> Any:
        """The real ``Request`` for ``rid``; ``engine_request`` builds the one the engine hashes."""
        from vllm.v1.engine import EngineCoreRequest
        from vllm.v1.request import Request

        hashes = prompt_hashes(self.sent, prompt) if self.sent is not None else None
        ecr = EngineCoreRequest(**kwargs_for(
            EngineCoreRequest, request_id=rid, prompt_token_ids=prompt, mm_features=None, sampling_params=sp,
            pooling_params=None, arrival_time=0.0, lora_request=None, cache_salt=None, data_parallel_rank=None,
            block_hashes=hashes))
        trusted = kv_cache_utils.frontend_block_hashes(ecr, self.config)
        req = Request.from_engine_core_request(ecr, self.block_hasher, trusted)
        t = self.tally
        t.requests += 1
        if trusted is None:
            t.ignored += 1
            if hashes and self.sent is self.config:  # the engine ignored hashes made by its own config
                self.rec.add(OracleId.HASH_CHAIN, f"{rid}: the engine ignored {len(hashes)} prompt block hashes "
                             f"a frontend computed from its PrefixHashConfig ({len(prompt)} tokens, hash block "
                             f"{self.config.hash_block_size}, lookahead {self.config.num_lookahead_tokens})",
                             cause="frontend-ignored|frontend_block_hashes")
            return req
        t.trusted += 1
        own = engine_request().block_hashes
        if list(req.block_hashes) != list(own):
            t.differ += 1
            if not t.first_differ:
                n = sum(a != b for a, b in zip(req.block_hashes, own)) + abs(len(req.block_hashes) - len(own))
                t.first_differ = f"{rid}: {n} of {len(own)} blocks"
            if self.sent is self.config:
                self.rec.add(OracleId.HASH_CHAIN, f"{rid}: the engine trusted prompt block hashes a frontend "
                             f"computed from its PrefixHashConfig, and {t.first_differ.split(': ', 1)[1]} "
                             f"differ from its own hashing",
                             cause="frontend-trusted|frontend_block_hashes")
        return req
