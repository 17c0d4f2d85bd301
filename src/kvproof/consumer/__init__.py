"""The consumer tier: the REAL scheduler, prefix cache, KV events and connectors, driven by request streams.

Modules (one concept each): ``stream`` (request streams, stdlib). Inside a
vLLM env: ``harness`` (one run, from its parts), ``refusals`` (inputs no
engine builds), ``needs`` (the vLLM APIs it calls, checked by
``kvproof.bridge.compat`` at start-up), ``configs`` and ``drafters`` (the engine's configs), ``scheduler``
(the real Scheduler built from them), ``wiring`` (the oracles hung on it
through ``spies``, wrappers that report what vLLM did), ``driver`` (the step
loop), ``runner`` and ``spec_runner`` (the fake model runner, and its
speculative-decoding extension), ``fake_worker`` (the connector's worker
side), ``failures`` (an exception: vLLM's or kvproof's own). The checks:
``oracle`` (the ``Oracle`` plug-in base and the ``RunContext`` its oracles
share; their ids, hard or soft, are ``kvproof.judging.oracle_ids``), ``oracles``
(the run's oracles as one listener each report goes through),
``hit_oracle``, ``shadow``, ``coord_oracle``, ``chain_oracle``,
``connector_oracle``, ``event_oracle``, ``removal_oracle``,
``efficiency_oracle`` (a measurement, into ``efficiency``), ``observations``
(what they record), ``truth`` (the ground truth: computed tokens, the hash index).
``result`` (ConsumerResult; ``kvproof.judging.judge.judge_consumer`` gives its
verdict), ``worker`` (the in-env process). It is driven from any Python through the
one client of a release's worker, ``kvproof.tiers.client``. Its atheris target and the shrinker of what a campaign stores sit
above it, in ``kvproof.fuzz.consumers`` and ``kvproof.fuzz.minimize``.

    from kvproof.tiers import client
    [result] = client.on(env, [layout.with_stream(stream)], ("consumer",))   # env: kvproof.envs.Env
"""

from kvproof.consumer.result import ConsumerResult  # noqa: F401
from kvproof.consumer.stream import Stream, default_stream  # noqa: F401
