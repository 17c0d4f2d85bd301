"""kvproof: prove, fuzz and replay vLLM's KV cache block-size resolution.

The data flow is Layout -> bridge -> real vLLM -> Outcome -> contracts ->
report / corpus. Only the modules in ``VLLM_SIDE`` import vLLM; each runs
inside a vLLM environment (started there as ``<env>/bin/python -m ...``, or
imported by one that was): the release's one worker (``kvproof.running.worker``,
lazily) serves the bridge's runtime and builder, the derive step and the
consumer harness (with its configs, drafters, driver, API list, scheduler
build and oracle wiring); the consumer fuzz target, the engine boot,
the atheris harnesses and the Triton stand-in an environment imports at start.
Everything else, the client side included, never
imports vLLM (tests/unit/test_vllm_side.py keeps this list true).
"""

__version__ = "0.1.0"

VLLM_SIDE = (
    "kvproof.bridge.build",
    "kvproof.bridge.derive",
    "kvproof.bridge.runtime",
    "kvproof.consumer.configs",
    "kvproof.consumer.drafters",
    "kvproof.consumer.frontend",
    "kvproof.consumer.driver",
    "kvproof.fuzz.consumers",
    "kvproof.consumer.harness",
    "kvproof.consumer.needs",
    "kvproof.consumer.scheduler",
    "kvproof.consumer.wiring",
    "kvproof.fuzz.harness",
    "kvproof.envs.stand_in_triton",
    "kvproof.tiers.boot",
)
