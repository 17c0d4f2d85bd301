"""The consumer fuzz target: (Layout, stream) bytes -> the real scheduler -> consumer oracles -> the judge.

Runs INSIDE a vLLM environment. ``kvproof fuzz --target consumers`` (``fuzz/run.py``)
starts it as ``<env>/bin/python -m kvproof.fuzz.consumers [libFuzzer flags]``;
``fuzz/fuzz_consumers.py`` is the ClusterFuzzLite entry point; ``Target.test_one_input(data)``
works without atheris' ``Fuzz`` loop (benchmarks, tests).

Bytes decode into a Layout with the fuzz decoder (``kvproof.fuzz.decode``, the
release's capabilities by introspection), an optional connector from
``facts.CONSUMER_CONNECTORS``, and a stream from a seed (``stream.random_stream``
at a scale fitted to the layout's block sizes). ``kvproof.judging.judge.judge_consumer``
gives the verdict. Same conventions as the contracts target (``fuzz/harness.py``):

- stats in ``$KVPROOF_FUZZ_WORKDIR/stats/consumers-<pid>.json`` (``fuzz.harness.Stats``:
  "execs", "verdicts", "classes" by ``kvproof.judging.classkey.class_key`` with the
  ledger's status and a count, "new", "known", "errors"), flushed every second;
- every FAIL / UNSUPPORTED / ERROR is counted per class; the first input of a class
  the ledger does not know is stored in ``$KVPROOF_FUZZ_CORPUS_OUT`` (the campaign's
  findings folder) as a corpus Layout whose meta carries the stream (``meta.stream``),
  so ``kvproof consumer FILE --vllm R`` replays it;
- nothing is raised into libFuzzer: the campaign goes on in-process; an exception in
  kvproof's own code is ERROR with its cause.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvproof import facts
from kvproof.inputs.drafts import ALL
from kvproof.verdicts import Verdict

TARGET = "consumers"


# Blocks a generated stream may need (sizing.auto_blocks). vLLM's BlockPool builds one Python
# object per block at every scheduler start, so a layout with 1-token and 2^20-token groups
# under a 4096-token stream cost 0.2 s or more per input before a step ran (one input in ten
# needed over 10,000 blocks, the largest 160,000). Past the budget the stream's token scale is
# halved: every layout still runs, with prompts that span fewer of its largest blocks.
# 2048, not 4096: building the pool was a fifth of a campaign's time on 0.33.0 (cProfile).
BLOCK_BUDGET = 2048
# Share of generated streams that carry speculative decoding (method, k, acceptance): the
# consumer paths speculation changes (draft slots, rollback, the EAGLE drop, lookahead
# hashing) are where the field reports are; a refusal by the release's own SpeculativeConfig
# is NOT_EXPRESSIBLE (the engine premise: only what the release accepts).
SPEC_SHARE = 0.4
# A new class's stream is shrunk before it is stored (a maintainer reads the shortest stream
# that still fails): greedy, bounded so a campaign loses seconds, not minutes, per new class.
SHRINK_RUNS = 80
SHRINK_SECONDS = 30.0


def stream_scale(layout: Any) -> int:
    big = layout.largest_block
    return max(16, min(3 * big, 4096, layout.max_model_len // 4))


def decode_input(data: bytes, caps: Any, premise: str = "engine", real: tuple = ()) -> tuple[Any, Any]:
    """Bytes -> (Layout with an optional connector, Stream). Needs atheris (FuzzedDataProvider)."""
    import atheris

    return decode_choices(atheris.FuzzedDataProvider(data), caps, premise, real)


def decode_choices(fdp: Any, caps: Any, premise: str = "engine", real: tuple = ()) -> tuple[Any, Any]:
    """``decode_input`` from any provider with atheris' API (``kvproof.fuzz.provider.PyFDP``
    outside a vLLM environment: the same bytes give the same input).

    ``real``: layouts real models derive (:func:`real_layouts`). The last choice (read after the
    decoded layout, so an input written before it keeps its meaning: no byte left reads 0) picks
    one of them, ``1..len(real)``, instead of the decoded layout, about a third of the time."""
    from kvproof.fuzz.decode import decode

    seed = fdp.ConsumeIntInRange(0, (1 << 32) - 1)
    conn = fdp.ConsumeIntInRange(0, len(facts.CONSUMER_CONNECTORS))
    layout = decode(fdp, caps, premise)
    pick = fdp.ConsumeIntInRange(0, 3 * len(real)) if real else 0
    if 1 <= pick <= len(real):
        layout = real[pick - 1]
        if layout.speculative is not None or layout.kv_connector is not None:
            # the model's own drafter and connector: no drawn speculation, every draft accepted
            return layout, replace(fit_input(layout, seed)[1], accept=ALL)
    if conn < len(facts.CONSUMER_CONNECTORS):
        layout = replace(layout, kv_connector=facts.CONSUMER_CONNECTORS[conn])
    return fit_input(layout, seed)


def real_layouts(release: str) -> tuple:
    """The layouts the reference models (spec/models) derive under their serve flag sets
    (speculative settings and connectors included), from the checked-in table of ``release`` or
    of the newest release before it that has one (kvproof.derivation.load_model_table)."""
    from kvproof.derivation import load_model_table

    # (an overlay's name sorts after every release: the newest table)
    older = [r for r in facts.MANAGED_RELEASES if facts.release_key(r) <= facts.release_key(release)]
    for rel in reversed(older or [facts.MANAGED_RELEASES[0]]):
        rows = load_model_table(rel)
        if rows:
            seen: dict[str, Any] = {}
            for row in rows:
                if row.layout is not None:
                    seen.setdefault(row.layout.content_hash(), row.layout)
            return tuple(seen[k] for k in sorted(seen))
    return ()


def fit_input(layout: Any, seed: int) -> tuple[Any, Any]:
    """The seed's random input (``random_input``: a stream, and a share of them speculating, which
    the Layout records) at the layout's scale, halved until it needs at most ``BLOCK_BUDGET``
    blocks (or the scale is 16)."""
    from kvproof.consumer.sizing import auto_blocks
    from kvproof.consumer.stream import random_input

    scale = stream_scale(layout)
    lay, stream = random_input(random.Random(seed), layout, scale, SPEC_SHARE)
    while scale > 16 and auto_blocks(lay, stream) > BLOCK_BUDGET:
        scale = max(16, scale // 2)
        lay, stream = random_input(random.Random(seed), layout, scale, SPEC_SHARE)
    return lay, stream


class Target:
    def __init__(self, workdir: Path | None = None) -> None:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        import vllm

        from kvproof.consumer.harness import Harness  # imports vLLM
        from kvproof.fuzz.harness import Stats, instrument_covered, release_caps
        from kvproof.fuzz.store import FindingStore
        from kvproof.settings import HarnessSettings
        opts = HarnessSettings.from_environ()
        self.version = vllm.__version__
        self.harness = Harness()
        self.warm_seconds = self.harness.warm()  # lazy imports before the first timed input
        self.caps = release_caps(self.harness.builder)
        self.real = real_layouts(self.version.split("+")[0])  # inputs seeded by what real models derive
        self.real_keys = {lay.content_hash() for lay in self.real} | {
            replace(lay, kv_connector=None).content_hash() for lay in self.real}
        self.premise = opts.premise
        wd = workdir or opts.workdir
        self.workdir = wd
        scratch = wd or Path(os.environ.get("TMPDIR", "/tmp")) / f"kvproof-fuzz-{os.getpid()}"
        self.stats = Stats(wd, TARGET, self.version, premise=self.premise)
        self.stats.store = FindingStore(opts.corpus_out, scratch / "seen-consumers", self.version)
        _ = self.stats.ledger  # loaded before the first input
        self.stats.data.update(steps=0, run_seconds=0.0, caps=self.caps.to_dict())
        self.instrumented = instrument_covered(opts.instrument)
        self.stats.data["instrumented"] = self.instrumented

    def decode(self, data: bytes) -> tuple[Any, Any]:
        return decode_input(data, self.caps, self.premise, self.real)

    def run(self, layout: Any, stream: Any) -> Any:
        return self.harness.run(layout, stream)

    def one(self, layout: Any, stream: Any, data: bytes = b"") -> Any:
        from kvproof.judging.classkey import class_key
        from kvproof.fuzz.oracle import CLASSED
        from kvproof.judging.judge import judge_consumer

        res = self.run(layout, stream)
        s = self.stats
        s.data["steps"] += res.steps
        s.data["run_seconds"] = round(s.data["run_seconds"] + res.seconds, 3)
        s.bump("drafts", layout.speculative.method if layout.speculative else "none")
        real = layout.content_hash() in self.real_keys or \
            replace(layout, kv_connector=None).content_hash() in self.real_keys
        s.bump("layouts", "real" if real else "random")
        j = judge_consumer(res, layout)
        s.bump("verdicts", str(j.verdict))
        if j.verdict in CLASSED:
            key = class_key(j, layout)
            extra = {}
            if j.verdict == Verdict.FAIL and key.id not in s.data["classes"] and s.ledger.get(key) is None:
                # a new class is stored with its smallest layout and shortest stream
                small, short = self.minimal(layout, stream, key)
                if short != stream:
                    extra["stream_as_found"] = stream.summary()
                if small != layout:
                    extra["layout_as_found"] = layout.summary()
                layout, stream = small, short
            s.meet(j, key, layout, data, f"[{j.tier}] {j.line()}", stream=stream.to_dict(),
                   stream_summary=stream.summary(), **extra)
        return res

    def minimal(self, layout: Any, stream: Any, key: Any) -> tuple[Any, Any]:
        """The smallest (layout, stream) (``fuzz.minimize``) that still FAILs in class
        ``key`` on this release; at most SHRINK_RUNS runs and SHRINK_SECONDS."""
        from kvproof.fuzz.minimize import minimal
        from kvproof.judging.classkey import class_key
        from kvproof.judging.judge import judge_consumer

        def same_class(lay: Any, cand: Any) -> bool:
            j = judge_consumer(self.run(lay, cand), lay)
            return j.verdict == Verdict.FAIL and class_key(j, lay) == key
        rule = self.caps.engine_block_size_over if self.premise == "engine" else None
        return minimal(layout, stream, same_class, rule, SHRINK_RUNS, SHRINK_SECONDS)

    def test_one_input(self, data: bytes) -> None:
        try:
            layout, stream = self.decode(data)
            self.one(layout, stream, data)
        except Exception as err:  # kvproof's own code broke: ERROR with its cause, never a crash
            self.stats.harness_error(err)
        self.stats.tick()


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

    run_libfuzzer("kvproof.fuzz.consumers", argv, make)


if __name__ == "__main__":
    main()


def real_seeds(release: str) -> list[bytes]:
    """One input per layout of :func:`real_layouts`: the bytes ``decode_choices`` (full caps) reads
    as that layout under stream seed k, with no connector of the fuzzer's own; a campaign starts
    from what real models derive (``kvproof fuzz --target consumers`` passes them as a seed folder)."""
    from kvproof.fuzz.decode import FULL, encode
    from kvproof.fuzz.provider import PyFDP, int_chunk
    from kvproof.inputs.layout import Layout

    real = real_layouts(release)
    if not real:
        return []
    base = encode(Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}]}))
    n = len(facts.CONSUMER_CONNECTORS)

    def data(k: int, split: int) -> bytes:
        # ints are read from the end (seed, connector, the layout's, then the pick), bools from the
        # front: the pick sits between the layout's front (bool) bytes and its int bytes
        return (base[:split] + int_chunk(0, 3 * len(real), k) + base[split:] + int_chunk(0, n, n)
                + int_chunk(0, (1 << 32) - 1, k))

    split = next(i for i in range(len(base) + 1)
                 if decode_choices(PyFDP(data(1, i)), FULL, "engine", real)[0] == real[0])
    return [data(k, split) for k in range(1, len(real) + 1)]
