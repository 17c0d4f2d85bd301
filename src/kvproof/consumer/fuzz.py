"""The consumer fuzz target: (Layout, stream) bytes -> the real scheduler -> consumer oracles -> the judge.

Runs INSIDE a vLLM environment. ``kvproof fuzz --target consumers`` (``fuzz/run.py``)
starts it as ``<env>/bin/python -m kvproof.consumer.fuzz [libFuzzer flags]``;
``fuzz/fuzz_consumers.py`` is the ClusterFuzzLite entry point; ``Target.test_one_input(data)``
works without atheris' ``Fuzz`` loop (benchmarks, tests).

Bytes decode into a Layout with the fuzz decoder (``kvproof.fuzz.decode``, the
release's capabilities by introspection), an optional connector from
``facts.CONSUMER_CONNECTORS``, and a stream from a seed (``stream.random_stream``
at a scale fitted to the layout's block sizes). ``kvproof.judge.judge_consumer``
gives the verdict. Same conventions as the contracts target (``fuzz/harness.py``):

- stats in ``$KVPROOF_FUZZ_WORKDIR/stats/consumers-<pid>.json`` ("execs", "crashes",
  "known", "verdicts", "classes": [{tier, contract, signature, layout, path, detail,
  seconds}]), flushed every second;
- a FAIL of a new class (vLLM, contract, layout shape, signature: the observation with
  numbers erased) is stored by ``CrashStore`` in ``$KVPROOF_FUZZ_CORPUS_OUT`` as a corpus
  Layout whose meta carries the stream (``meta.stream``) and the tier, so
  ``python -m kvproof.consumer FILE --stream <meta.stream> --vllm R`` replays it;
  then raised (libFuzzer stops) unless ``KVPROOF_FUZZ_COLLECT=1`` (store and go on);
- a known class is counted (``known``); ``KVPROOF_FUZZ_RAISE_KNOWN=1`` raises anyway.
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvproof.spec import facts


class ConsumerViolation(AssertionError):
    """A consumer oracle saw real vLLM misbehave (the fuzzer's crash)."""


TARGET = "consumers"


def stream_scale(layout: Any) -> int:
    big = max(g.block_size for g in layout.groups)
    return max(16, min(3 * big, 4096, layout.max_model_len // 4))


def decode_input(data: bytes, caps: Any, premise: str = "engine") -> tuple[Any, Any]:
    """Bytes -> (Layout with an optional connector, Stream). Needs atheris (FuzzedDataProvider)."""
    import atheris

    from kvproof.consumer.stream import random_stream
    from kvproof.fuzz.decode import decode

    fdp = atheris.FuzzedDataProvider(data)
    seed = fdp.ConsumeIntInRange(0, (1 << 32) - 1)
    conn = fdp.ConsumeIntInRange(0, len(facts.CONSUMER_CONNECTORS))
    layout = decode(fdp, caps, premise)
    if conn < len(facts.CONSUMER_CONNECTORS):
        layout = replace(layout, kv_connector=facts.CONSUMER_CONNECTORS[conn])
    return layout, random_stream(random.Random(seed), stream_scale(layout))


class Target:
    def __init__(self, workdir: Path | None = None) -> None:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        from kvproof.consumer.harness import Harness  # imports vLLM
        from kvproof.fuzz.harness import Stats, instrument_covered, release_caps
        from kvproof.fuzz.store import CrashStore
        from kvproof.settings import HarnessSettings

        import vllm
        opts = HarnessSettings.from_environ()
        self.version = vllm.__version__
        self.harness = Harness()
        self.warm_seconds = self.harness.warm()  # lazy imports before the first timed input
        self.caps = release_caps(self.harness.builder)
        self.premise = opts.premise
        wd = workdir or opts.workdir
        self.workdir = wd
        scratch = wd or Path(os.environ.get("TMPDIR", "/tmp")) / f"kvproof-fuzz-{os.getpid()}"
        self.store = CrashStore(opts.corpus_out, scratch / "seen-consumers", self.version)
        self.stats = Stats(wd, TARGET, self.version)
        self.stats.data.update(steps=0, run_seconds=0.0, caps=self.caps.to_dict())
        self.instrumented = instrument_covered(opts.instrument)
        self.stats.data["instrumented"] = self.instrumented
        self.collect = opts.collect
        self.raise_known = opts.raise_known
        self.t0 = time.monotonic()

    def decode(self, data: bytes) -> tuple[Any, Any]:
        return decode_input(data, self.caps, self.premise)

    def run(self, layout: Any, stream: Any) -> Any:
        return self.harness.run(layout, stream)

    def one(self, layout: Any, stream: Any, data: bytes = b"") -> Any:
        from kvproof.fuzz.oracle import signature
        from kvproof.judge import judge_consumer
        from kvproof.verdicts import Verdict

        res = self.run(layout, stream)
        s = self.stats
        s.data["steps"] += res.steps
        s.data["run_seconds"] = round(s.data["run_seconds"] + res.seconds, 3)
        j = judge_consumer(res, layout)
        s.bump("verdicts", str(j.verdict))
        if j.verdict != Verdict.FAIL:
            s.tick()
            return res
        obs = j.observed
        contract = j.contract if j.explained else f"consumer.{(obs.type if obs else 'fail').split(':')[-1]}"
        sig = signature(j)
        detail = f"[{j.tier}] {j.line()}"
        s.bump("fail_classes_seen", f"{j.tier}:{contract}:{obs.type if obs else ''}")
        path, new = self.store.record(layout, contract, detail, data, sig, verdict="FAIL", tier=str(j.tier),
                                      stream=stream.to_dict())
        s.tick()
        if not new and not self.raise_known:
            s.data["known"] += 1
            return res
        s.data["crashes"] += 1
        if s.data["first_crash_s"] is None:
            s.data["first_crash_s"] = time.monotonic() - self.t0
        s.add_class(str(j.tier), contract, sig, layout, path, detail, time.monotonic() - self.t0,
                    stream=stream.summary())
        s.flush()
        if self.collect and new:
            return res
        raise ConsumerViolation(f"{detail}\n  layout: {layout.summary()}\n  stream: {stream.summary()}\n"
                                f"  stored: {path}\n  replay: python -m kvproof.consumer {path} --vllm {self.version}")

    def test_one_input(self, data: bytes) -> None:
        layout, stream = self.decode(data)
        self.one(layout, stream, data)


def main(argv: list[str] | None = None) -> None:
    from kvproof.fuzz.harness import run_libfuzzer

    def make(_: list[str]) -> Any:
        real_stdout = sys.stdout
        sys.stdout = sys.stderr  # vLLM prints; libFuzzer owns the process's output
        try:
            target = Target()
        finally:
            sys.stdout = real_stdout
        print(f"kvproof.fuzz: {TARGET} on vLLM {target.version}, caps={target.caps.to_dict()}, "
              f"instrumented={sum(target.instrumented.values())} functions", file=sys.stderr, flush=True)
        return target.test_one_input

    run_libfuzzer("kvproof.consumer.fuzz", argv, make)


if __name__ == "__main__":
    main()
