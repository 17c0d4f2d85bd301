"""The consumer tier: the REAL scheduler, prefix cache, KV events and connectors, driven by request streams.

Modules (one concept each): ``stream`` (request streams, stdlib), ``harness``
(inside a vLLM env: builds the real Scheduler and drives it, with a fake model
runner and connector worker), ``spies`` (wrappers on the scheduler's methods
that report what vLLM did), ``oracles`` (the checks: each judges a report
against the ground truth), ``truth`` (the ground truth: computed tokens, the
hash index), ``compat`` (start-up check of the vLLM signatures the harness
relies on), ``result`` (ConsumerResult; ``kvproof.judge.judge_consumer`` gives
its verdict), ``worker`` (the in-env process), ``client`` (``run``/``run_many``
from any Python), ``fuzz`` (atheris target).

    from kvproof.consumer import run
    result = run(layout, stream, env)   # env: kvproof.envs.Env
"""

from kvproof.consumer.client import ConsumerWorker, default_stream, run, run_many  # noqa: F401
from kvproof.consumer.result import ConsumerResult  # noqa: F401
from kvproof.consumer.stream import Stream  # noqa: F401
