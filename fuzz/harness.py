"""The atheris harnesses. Run INSIDE a vLLM environment, on the real code.

    <env>/bin/python -m kvproof.fuzz.harness contracts [libFuzzer flags] [corpus dirs]
    <env>/bin/python -m kvproof.fuzz.harness conformance ...

(``python -m kvproof.fuzz.run`` builds these command lines; ClusterFuzzLite
uses the thin ``fuzz_contracts.py`` / ``fuzz_conformance.py`` entry points.)

contracts
    bytes -> Layout (``decode``) -> the bridge's ``evaluate`` (the real
    resolver) -> ``oracle.judge`` (a thin use of ``kvproof.judging.judge``); where a
    manager-tier contract predicts a violation the real ``KVCacheManager`` (coordinator,
    block pool) is built too and decides FAIL or LATENT
    (``KVPROOF_FUZZ_MANAGER=always``: on every input). Every FAIL, UNSUPPORTED
    and ERROR judgement is keyed by ``kvproof.judging.classkey.class_key``, looked
    up in the ledger (``kvproof.findings.ledger``) and counted per class
    (``classes`` in the stats); the first input of a class the ledger does not
    know is stored in the campaign's findings folder. Nothing is raised into
    libFuzzer: the campaign goes on in-process (no crash, no worker restart).
    An exception in kvproof's own code (decoder, judge, stores) is counted as
    ERROR with its cause (``errors``), never a crash. LATENT findings (a
    contract predicts a violation, the real code accepted) are counted
    (``latent``) and stored under ``<workdir>/latent/``.
conformance
    the real resolver's (scheduler, hash) or rejection versus the Z3 model's
    prediction for the installed revision (``kvproof.spec``); a disagreement
    is a model bug (or vLLM drift) and is stored under the campaign folder.

Coverage: ``atheris.instrument_imports`` cannot reach ``kv_cache_utils``
(``vllm.config`` imports it before any hook can be installed), so after the
imports every function and method defined in the modules of ``COVERED`` is
instrumented in place with ``atheris.instrument_func``.

Configuration comes from the environment (libFuzzer owns argv): the
``KVPROOF_FUZZ_*`` variables, read once into ``kvproof.settings.HarnessSettings``
(documented there with the rest).
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
import typing
from pathlib import Path

from kvproof import frames
from kvproof.fsio import atomic_write
from kvproof.cliutil import guarded
from kvproof.errors import UsageError
from kvproof.settings import HarnessSettings

COVERED = (
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.block_pool",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.kv_cache_interface",
)


class ModelDisagreement(AssertionError):
    """The real resolver and the Z3 model of its revision disagree."""


def instrument_module(module: types.ModuleType) -> int:
    """Instrument every function defined in ``module`` (methods, properties too)."""
    import atheris

    done = 0
    seen: set[int] = set()

    def visit(fn: object) -> None:
        nonlocal done
        code = getattr(fn, "__code__", None)
        if code is None or id(code) in seen or getattr(fn, "__module__", None) != module.__name__:
            return
        seen.add(id(code))
        try:
            atheris.instrument_func(fn)
            done += 1
        except Exception:  # a builtin, a C function, a frozen wrapper: skip
            pass

    for value in list(vars(module).values()):
        if isinstance(value, types.FunctionType):
            visit(value)
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr in list(vars(value).values()):
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                if isinstance(attr, property):
                    for f in (attr.fget, attr.fset):
                        if f is not None:
                            visit(f)
                elif isinstance(attr, types.FunctionType):
                    visit(attr)
    return done


def instrument_covered(scope: str = "1") -> dict[str, int]:
    """Instrument the modules of ``scope`` (KVPROOF_FUZZ_INSTRUMENT): "1" the
    ``COVERED`` ones, "0" none, else a comma-separated list of module names."""
    import importlib

    names = COVERED if scope == "1" else () if scope == "0" else tuple(n for n in scope.split(",") if n)
    done = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise UsageError(f"KVPROOF_FUZZ_INSTRUMENT: cannot import {name!r} ({err})") from None
        done[name] = instrument_module(module)
    return done


def release_caps(builder) -> "Caps":  # noqa: F821
    """What the installed release can express, read from its own spec classes at
    start-up (never by version): the kinds, the Mamba modes, ring buffers, which
    kinds' spec classes carry ``dcp_sharded`` / ``tokens_per_state`` fields, and of
    those the kinds that really compress (facts.COMPRESSED_KINDS); the engine's
    block-size rule is the release's revision's (facts.ENGINE_BLOCK_SIZE_OVER)."""
    import dataclasses

    import vllm
    from vllm.config import cache as cache_mod
    from vllm.v1 import kv_cache_interface as kvi

    from kvproof.fuzz.decode import FULL, Caps
    from kvproof import facts
    from kvproof.revisions import revision_for

    def fields(kind: str) -> set[str]:
        cls = getattr(kvi, facts.KIND_SPEC_CLASS[kind], None)
        return {f.name for f in dataclasses.fields(cls)} if cls is not None else set()

    modes = tuple(typing.get_args(cache_mod.MambaCacheMode))  # the release's own literal (facts.MAMBA_MODES checks it)
    kinds = tuple(k for k in FULL.kinds if k != "hidden_state" or builder.hidden_cls is not None)
    tps_kinds = tuple(k for k in kinds if "tokens_per_state" in fields(k))
    try:
        rule = facts.ENGINE_BLOCK_SIZE_OVER[revision_for(vllm.__version__)]
    except KeyError:  # past the table: the newest revision's rule
        rule = facts.ENGINE_BLOCK_SIZE_OVER[max(facts.ENGINE_BLOCK_SIZE_OVER, key=facts.release_key)]
    return Caps(kinds=kinds, modes=modes, ring_buffer=builder.circular is not None,
                dcp_sharded_attention="dcp_sharded" in builder.attn_fields,
                dcp_sharded_mamba="dcp_sharded" in builder.mamba_fields,
                tokens_per_state_kinds=tps_kinds,
                compressed_kinds=tuple(k for k in facts.COMPRESSED_KINDS if k in tps_kinds),
                prefix_match_unit="prefix_match_unit" in builder.cache_fields,
                engine_block_size_over=rule)


def premise_label(layout, vllm: str, premise: str) -> str:
    """"reachable" when the engine premise (spec/premise.py) of the release's revision admits
    the layout; otherwise "unreachable: <why>" (an engine-premise campaign) or "free: <why>"
    (a ``--premise free`` campaign: only a direct caller of the resolver builds it)."""
    from kvproof.spec.premise import derivable
    from kvproof.revisions import revision_for
    try:
        outside = derivable(layout, revision_for(vllm))
    except KeyError:
        outside = "release not modelled"
    if not outside:
        return "reachable"
    return f"{'free' if premise == 'free' else 'unreachable'}: {outside}"


def harness_cause(err: BaseException) -> str:
    """``Type at file:function`` of the innermost frame: where kvproof's own code broke."""
    last = frames.innermost(err)
    if last is None:
        return type(err).__name__
    path, function = last.tb_frame.f_code.co_filename, last.tb_frame.f_code.co_name
    for marker in ("/kvproof/", "/vllm/", "/fuzz/"):
        if marker in path:
            path = path[path.rindex(marker) + 1:]
            break
    return f"{type(err).__name__} at {frames.key_of(path, function)}"


class Stats:
    """Counters flushed to ``<workdir>/stats/<target>-<pid>.json`` every second and at exit.

    ``classes``: class id -> {key, verdict, status (the ledger's, or "new"), count,
    first_s, layout, detail, premise, path (the stored input of a class the ledger
    does not know)}; ``new``: FAIL classes the ledger does not know (stored);
    ``known``: hits of FAIL classes the ledger knows; ``errors``: kvproof's own
    exceptions by cause (counted as ERROR)."""

    def __init__(self, workdir: Path | None, target: str, vllm: str, bridge=None, premise: str = "engine") -> None:
        self.bridge = bridge
        self.premise = premise
        self.path = workdir / "stats" / f"{target}-{os.getpid()}.json" if workdir else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.data: dict = {"target": target, "vllm": vllm, "pid": os.getpid(), "started": time.time(),
                           "execs": 0, "verdicts": {}, "latent": {}, "latent_classes": 0, "classes": {},
                           "new": 0, "known": 0, "errors": {}, "first_crash_s": None, "bridge_errors": 0,
                           "drafts": {}, "layouts": {}}
        self.t0 = time.monotonic()
        self._next = time.monotonic() + 1
        self._ledger = None
        self.store = None  # fuzz.store.FindingStore, set by the target

    @property
    def ledger(self):
        if self._ledger is None:
            from kvproof.findings.ledger import Ledger

            self._ledger = Ledger.load()
        return self._ledger

    def meet(self, j, key, layout, data: bytes, detail: str, **meta) -> bool:
        """Count one FAIL / UNSUPPORTED / ERROR judgement of class ``key``; store the first
        input of a class the ledger does not know. True when it is a new FAIL class."""
        classes = self.data["classes"]
        rec = classes.get(key.id)
        if rec is not None:
            rec["count"] += 1
            if rec["status"] != "new" and rec["verdict"] == "FAIL":
                self.data["known"] += 1
            return False
        entry = self.ledger.get(key)
        status = entry.status.value if entry is not None else "new"
        rec = classes[key.id] = {
            "id": key.id, "key": str(key), "tier": key.tier, "check": key.check, "exc_type": key.exc_type,
            "frame": key.frame, "verdict": str(j.verdict), "status": status, "count": 1,
            "first_s": round(time.monotonic() - self.t0, 2), "layout": layout.summary(), "detail": detail[:300],
            "premise": premise_label(layout, self.data["vllm"], self.premise), **{k: v for k, v in meta.items()
                                                                                  if k in ("stream_summary", "stream_as_found", "layout_as_found")}}
        if entry is not None:
            if rec["verdict"] == "FAIL":
                self.data["known"] += 1
            return False
        if self.store is not None:
            extra = {k: v for k, v in meta.items() if k != "stream_summary"}
            path, _ = self.store.record(layout, key.id, j.contract or key.check, detail, data, verdict=str(j.verdict),
                                               tier=str(j.tier), signature=signature(j), **{"class": str(key)},
                                               **extra)
            rec["path"] = str(path) if path else ""
        if rec["verdict"] != "FAIL":
            return False
        self.data["new"] += 1
        if self.data["first_crash_s"] is None:
            self.data["first_crash_s"] = rec["first_s"]
        self.flush()
        return True

    def harness_error(self, err: BaseException) -> None:
        """An exception in kvproof's own code: ERROR with its cause, the campaign goes on."""
        self.bump("verdicts", "ERROR")
        cause = harness_cause(err)
        self.bump("errors", cause)
        self.data.setdefault("error_examples", {}).setdefault(cause, f"{type(err).__name__}: {str(err)[:200]}")

    def bump(self, section: str, key: str) -> None:
        d = self.data[section]
        d[key] = d.get(key, 0) + 1

    def tick(self) -> None:
        self.data["execs"] += 1
        if self.path and time.monotonic() >= self._next:
            self.flush()

    def flush(self) -> None:
        if not self.path:
            return
        self._next = time.monotonic() + 1
        self.data["updated"] = time.time()
        if self.bridge is not None and self.bridge.memo_managers:
            self.data["manager_memo"] = {"hits": self.bridge.manager_hits, "misses": self.bridge.manager_misses}
        atomic_write(self.path, json.dumps(self.data))


def signature(j) -> str:
    from kvproof.fuzz.oracle import signature as sig

    return sig(j)


def build(target: str):
    """Import vLLM through the bridge, instrument, and return TestOneInput."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from kvproof.bridge.runtime import Bridge  # imports vLLM
    from kvproof.fuzz.decode import decode
    from kvproof.fuzz.oracle import judge
    from kvproof.fuzz.provider import PyFDP  # atheris' byte semantics, twice as fast per call
    from kvproof.fuzz.store import FindingStore
    from kvproof.verdicts import Tier

    opts = HarnessSettings.from_environ()
    bridge = Bridge(fast=opts.fast, memo_managers=opts.memo)
    instrumented = instrument_covered(opts.instrument)
    caps = release_caps(bridge.builder)
    premise = opts.premise
    always_manager = opts.manager == "always"
    workdir = opts.workdir
    version = bridge.version
    stats = Stats(workdir, target, version, bridge, premise)
    stats.data["caps"] = caps.to_dict()
    stats.data["instrumented"] = instrumented
    stats.data["manager"] = opts.manager
    scratch = workdir or Path(os.environ.get("TMPDIR", "/tmp")) / f"kvproof-fuzz-{os.getpid()}"
    stats.store = FindingStore(opts.corpus_out, scratch / "seen", version)
    latent_store = FindingStore(scratch / "latent", scratch / "seen-latent", version)
    _ = stats.ledger  # loaded before the first input (a broken ledger: one line, exit 2)
    evaluate, with_manager = bridge.evaluate, bridge.with_manager
    print(f"kvproof.fuzz: {target} on vLLM {version} ({premise} premise, manager {opts.manager}), "
          f"caps={caps.to_dict()}, instrumented={sum(instrumented.values())} functions in "
          f"{len(instrumented)} modules", file=sys.stderr, flush=True)

    def contracts_one(data: bytes) -> None:
        layout = decode(PyFDP(data), caps, premise)
        try:
            out = evaluate(layout, manager=always_manager)
        except Exception as err:  # the bridge could not build a config vLLM accepts: a rejection
            stats.bump("verdicts", "BRIDGE_REJECTED")
            stats.data["bridge_errors"] += 1
            stats.data.setdefault("last_bridge_error", f"{type(err).__name__}: {str(err)[:200]}")
            return
        f = judge(layout, out)
        # Escalation: the function tier's verdict is final unless a manager-tier contract
        # predicts a violation; then the real manager decides FAIL (it raised) or LATENT.
        # A manager raising where no manager-tier contract predicts it is what
        # tests/integration/test_contract_agreement.py forbids and what the consumers
        # target (a real manager per input) would find; later-tier predictions stay LATENT
        # here for the consumers target to observe.
        if not always_manager and f.latent and any(v.contract.tier == Tier.MANAGER for v in f.judgement.latent):
            try:
                out = with_manager(layout, out)
            except Exception as err:
                stats.bump("verdicts", "BRIDGE_REJECTED")
                stats.data["bridge_errors"] += 1
                stats.data.setdefault("last_bridge_error", f"{type(err).__name__}: {str(err)[:200]}")
                return
            f = judge(layout, out)
        j = f.judgement
        stats.bump("verdicts", str(j.verdict))
        if f.latent:  # a prediction nothing real showed: counted and stored apart
            stats.bump("latent", f.contract)
            _, new_latent = latent_store.record(layout, _latent_id(f.contract), f.contract, f.detail, data,
                                                verdict="LATENT")
            if new_latent:
                stats.data["latent_classes"] += 1
        elif f.classed:
            stats.meet(j, f.key, layout, data, f.detail)

    def contracts_guarded(data: bytes) -> None:
        try:
            contracts_one(data)
        except Exception as err:  # kvproof's own code broke: ERROR with its cause, never a crash
            stats.harness_error(err)
        stats.tick()

    def conformance_one(data: bytes) -> None:
        layout = decode(PyFDP(data), caps, premise)
        real = evaluate(layout, manager=False)
        if not real.expressible:
            stats.bump("verdicts", "NOT_EXPRESSIBLE")
            stats.tick()
            return
        try:
            want = _summary(model_evaluate(layout, revision))
        except Exception as err:  # the model itself failed on an input the release accepts
            want = ("model error", f"{type(err).__name__}: {err}"[:200])
        got = _summary(real)
        stats.tick()
        if got == want:
            stats.bump("verdicts", "AGREE")
            return
        stats.bump("verdicts", "DISAGREE")
        stats.data["new"] += 1
        folder = (workdir or Path("/tmp")) / "conformance"
        from kvproof.corpus import publish

        path, _ = publish(layout.with_meta(vllm=version, contract="model.conformance", found_by="atheris",
                                                detail=f"real {got} model:{revision} {want}"), folder)
        stats.flush()
        raise ModelDisagreement(f"real {got} != model:{revision} {want}\n  layout: {layout.summary()}\n"
                                f"  stored: {path}")

    if target == "contracts":
        contracts_guarded.stats = stats  # the campaign's counters, for the bench and the tests
        return contracts_guarded
    if target != "conformance":
        raise SystemExit(f"unknown target {target!r} (contracts, conformance)")
    model_evaluate, revision_for = _model_api()
    revision = revision_for(version)
    stats.data["revision"] = revision
    return conformance_one


def _latent_id(contract: str) -> str:
    import hashlib

    return hashlib.sha256(f"latent|{contract}".encode()).hexdigest()[:12]


def _model_api():
    try:
        from kvproof.spec import evaluate, revision_for  # the documented API
    except ImportError:
        try:
            from kvproof.spec.model import evaluate
            from kvproof.revisions import revision_for
        except ImportError as err:
            raise SystemExit(f"kvproof.fuzz conformance: the Z3 model is not available ({err})") from None
    return evaluate, revision_for


def _summary(out) -> tuple:
    """What conformance compares: the pair, or that the resolver raised (and which type)."""
    if out.resolver_error is not None:
        return ("raises", out.resolver_error.type)
    return (out.scheduler_block_size, out.hash_block_size)


def run_libfuzzer(prog: str, argv: list[str] | None, make_test_one: typing.Callable[[list[str]], typing.Callable]) -> None:
    """Build TestOneInput and start libFuzzer. Bad usage or a bad KVPROOF_FUZZ_* value
    (a KvproofError while building): one line, exit 2, and libFuzzer never starts."""
    import atheris

    args = list(sys.argv if argv is None else argv)

    def setup(_: object) -> int:
        test_one = make_test_one(args)
        # libFuzzer's fork and merge modes re-run argv[0] as a program: the runner
        # starts us through an executable wrapper and names it here.
        argv0 = HarnessSettings.from_environ().argv0
        if argv0:
            args[0] = argv0
        atheris.Setup(args, test_one)
        return 0

    rc = guarded(prog, setup, None)
    if rc:
        raise SystemExit(rc)
    atheris.Fuzz()


def main(target: str | None = None, argv: list[str] | None = None) -> None:
    def make(args: list[str]) -> typing.Callable:
        name = target
        if name is None:
            if len(args) < 2 or args[1] not in ("contracts", "conformance"):
                raise UsageError("usage: python -m kvproof.fuzz.harness {contracts,conformance} [libFuzzer flags]")
            name = args.pop(1)
        return build(name)

    run_libfuzzer("kvproof.fuzz.harness", argv, make)


if __name__ == "__main__":
    main()
