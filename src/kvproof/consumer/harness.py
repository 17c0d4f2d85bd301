"""The consumer harness: the REAL scheduler driven by a request stream. Runs INSIDE a vLLM env.

One run, in parts: ``refusals`` turns away what no engine builds;
``scheduler`` builds what the engine core builds from a Layout and a Stream
(configs, the real resolver's block sizes, the real ``Scheduler`` with its
``KVCacheManager``, block pool and the connector's scheduler side);
``wiring`` hangs the oracles (``oracles``) on it through the spies
(``spies``); the driver (``driver``) feeds the stream step by step with a
fake model runner (``runner``, ``spec_runner`` under speculative decoding)
and a fake connector worker (``fake_worker``), the way vLLM's scheduler
tests do. Chunked prefill comes from ``max_num_batched_tokens``, preemption
from a small ``num_blocks``. Importing this module first sets the release's
cache root, before anything builds a ``ModelConfig``.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict

from kvproof.settings import use_release_cache_root

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
use_release_cache_root()  # before the first ModelConfig (see kvproof.settings)

import torch  # noqa: E402,F401
import vllm  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402

from kvproof.bridge import compat  # noqa: E402
from kvproof.bridge.build import Builder  # noqa: E402
from kvproof.consumer import drafters, frontend, scheduler, wiring  # noqa: E402
from kvproof.consumer.configs import EngineConfigs  # noqa: E402
from kvproof.consumer.driver import Driver  # noqa: E402
from kvproof.consumer.drafts import Drafts  # noqa: E402
from kvproof.consumer.failures import raised  # noqa: E402
from kvproof.errors import Unchecked  # noqa: E402
from kvproof.consumer.needs import draft_ids_cls, needs  # noqa: E402
from kvproof.consumer.refusals import refusal  # noqa: E402
from kvproof.consumer.result import ConsumerResult, RunState  # noqa: E402
from kvproof.consumer.runner import FakeModelRunner  # noqa: E402
from kvproof.consumer.spec_runner import SpeculativeRunner  # noqa: E402
from kvproof.consumer.stream import Req, Stream  # noqa: E402
from kvproof.inputs.layout import Layout  # noqa: E402
from kvproof import facts  # noqa: E402


class Harness:
    """One per process (after ``import vllm``): caches the model config and the builder."""

    def __init__(self) -> None:
        self.builder = Builder()
        self.configs = EngineConfigs(self.builder)
        self.draft_ids_cls = draft_ids_cls()
        # the vLLM APIs this harness relies on, checked once against the installed release
        # (``needs`` looked up here, in this module, so a test can add a row that no longer fits)
        self.incompatible = compat.first_problem(needs())

    def warm(self) -> float:
        """Pay the one-time costs before the first timed input; returns the seconds spent.

        The first ``ModelConfig``, ``SpeculativeConfig``, ``Scheduler`` and each connector
        import modules lazily (vLLM's executor, tracing, the connector modules, and the model
        registry's inspection when its cache misses: seconds each, tens on a cold disk). One
        small run per connector (and none, and one with drafts) here moves that into start-up,
        so a fuzzer's execs/s and a run's ``seconds`` measure the scheduler, not imports. The
        runs' results are discarded; nothing they cache changes a later run's result."""
        t0 = time.perf_counter()
        stream = Stream((32,), (Req(0, 32, 4, 0, 2), Req(0, 32, 8, 1, 2)), None, 64, 4)
        runs = [(conn, None) for conn in (None,) + tuple(facts.CONSUMER_CONNECTORS)]
        runs += [(None, {"method": m, "num_speculative_tokens": 2}) for m in facts.SPEC_METHODS]
        for conn, spec in runs:
            kind = "hidden_state" if conn == facts.HIDDEN_STATES_CONNECTOR else "full_attention"
            layout = Layout.from_dict({"groups": [{"kind": kind, "block_size": 16}], "kv_connector": conn,
                                       "cache": {"block_size": 16, "enable_prefix_caching": True},
                                       "speculative": spec})
            try:
                self.run(layout, stream)
            except Exception:  # a release without the connector: its first real input says so
                pass
        return time.perf_counter() - t0

    def run(self, layout: Layout, stream: Stream, max_steps: int | None = None) -> ConsumerResult:
        """One run of ``layout`` under ``stream``; ``seconds`` is its wall time."""
        t0 = time.perf_counter()
        st = RunState(ConsumerResult(layout.content_hash(), vllm.__version__, connector=layout.kv_connector))
        if self.incompatible:
            st.res.harness_error = self.incompatible
        else:
            self._run(st, layout, stream, max_steps)
        st.res.seconds = time.perf_counter() - t0
        return st.res

    def _run(self, st: RunState, layout: Layout, stream: Stream, max_steps: int | None) -> None:
        try:
            drafts, why = refusal(layout, stream, self.draft_ids_cls is not None,
                                  frontend.takes_frontend_hashes(), release=vllm.__version__)
        except Unchecked as err:
            st.res.unchecked = str(err)
            return
        if why is not None:
            st.res.not_expressible = why
            return
        with drafters.model_runner(drafts):
            self._drive(st, layout, stream, drafts, max_steps)

    def _drive(self, st: RunState, layout: Layout, stream: Stream, drafts: Drafts | None,
               max_steps: int | None) -> None:
        built = scheduler.build(self.configs, st, layout, stream)
        if built is None:
            return
        sched, hash_fn, block_hasher = built
        # a drafter only where the Layout speculates (refusal: then the release takes drafts)
        runner = FakeModelRunner(ModelRunnerOutput, KVConnectorOutput) if drafts is None else \
            SpeculativeRunner(ModelRunnerOutput, KVConnectorOutput, drafts, self.draft_ids_cls)
        driver = None
        try:
            oracles = wiring.wire(st, layout, sched, hash_fn, self.builder)
            runner.oracles = oracles
            driver = Driver(sched, stream, block_hasher, oracles, runner, st.rec, st.res)
            if stream.hasher != "engine":
                driver.frontend = frontend.Frontend(stream.hasher, frontend.published_config(
                    sched.vllm_config, st.res.hash_block_size), block_hasher, st.rec)
            st.res.steps = driver.run(max_steps)
        except Exception as err:
            raised(st, err)
        finally:
            st.res.steps = max(st.res.steps, st.rec.step)
            st.res.drafts_proposed, st.res.drafts_accepted = runner.proposed, runner.accepted
            st.res.drafts_verified = runner.verified
            if isinstance(runner, SpeculativeRunner):
                st.res.drafts_scheduled_max = runner.drafts_scheduled_max
                st.res.slot_slack_min, st.res.slot_slack_max = runner.slot_slack or (None, None)
            if driver is not None and driver.frontend is not None:
                st.res.frontend = asdict(driver.frontend.tally)
            try:
                if sched.connector is not None and hasattr(sched.connector, "shutdown"):
                    sched.connector.shutdown()
            except Exception:
                pass
