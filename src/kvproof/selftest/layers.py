"""The layers a mutant is run against; each returns a Catch (no vLLM import here).

Bug layers (say "bug": real vLLM raised / misbehaved where the base release did not):

- replay: corpus/ layouts through the bridge at the function and manager
  tiers; a verdict that becomes FAIL against the base release's own verdict
  (or a FAIL with a different exception signature).
- probe: the same judge on a fixed, seeded set of layouts from the fuzzer's
  decoder (``kvproof.verify.drift.fuzzed_layouts``: fuzz/seeds, byte-flipped
  seeds, random bytes), run in the same bridge call as the corpus: a
  deterministic, import-free slice of contract fuzzing.
- contracts: a time-boxed atheris run (``kvproof fuzz``, which stores every new
  FAIL class and goes on); each class's Layout is re-run on the base release
  through the bridge (the rule of docs/ci/check_vllm_pr.sh): a class that FAILs
  there with the same signature is pre-existing and is not a catch.
- consumer: ``kvproof.consumer`` request streams on the corpus and on the
  probe layouts whose (scheduler, hash) the mutant changed; a consumer FAIL
  (``judge_consumer``) the base does not have.

Signal layers: drift (resolver fingerprint unknown to the model) and
conformance (real != model:<revision> on a layout where the base agrees with
the model; ``--full`` adds an atheris conformance run).

Replay, probe and conformance come from ONE bridge call per overlay: one
worker per overlay of a batch, started in parallel (``start_all``), every
layout in one request.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kvproof.envs import Env
from kvproof.inputs.layout import Layout

BUG_LAYERS = ("replay", "probe", "contracts", "consumer", "known", "campaign")
SIGNAL_LAYERS = ("drift", "conformance", "differential")


@dataclass
class Catch:
    layer: str
    caught: bool | None  # None: not run
    seconds: float = 0.0
    detail: str = ""

    def cell(self) -> str:
        if self.caught is None:
            return "-"
        return f"CAUGHT {self.seconds:.0f}s" if self.caught else f"missed {self.seconds:.0f}s"


def drift(env: Env, release: str) -> Catch:
    from kvproof.verify.drift import check_env

    t = time.monotonic()
    d = check_env(env.name, env.root, release) or {}
    return Catch("drift", bool(d.get("stale")), time.monotonic() - t,
                 f"fingerprint {d.get('fingerprint')}" + (" unknown" if d.get("stale") else " known"))


# --- one bridge call per environment, judged once -----------------------------------------

@dataclass(frozen=True)
class Judged:
    expressible: bool
    function: str  # verdict name
    manager: str
    signature: str  # of the FAIL judgement (function or manager), "" otherwise
    pair: tuple  # kvproof.verify.drift.summary
    line: str


def judge_outcomes(layouts: Sequence[Layout], outcomes) -> list[Judged]:
    from kvproof.fuzz.oracle import signature
    from kvproof.tiers import registry
    from kvproof.verdicts import Verdict
    from kvproof.verify.drift import summary

    function, manager = registry.runners(registry.through(registry.default()))  # the bridge's two stages
    out = []
    for lay, o in zip(layouts, outcomes):
        if not o.expressible:
            out.append(Judged(False, "NOT_EXPRESSIBLE", "NOT_EXPRESSIBLE", "", (), o.not_expressible[:100]))
            continue
        jf = function.judge(lay, o)
        jm = manager.judge(lay, o)
        fail = jm if jm.verdict == Verdict.FAIL else jf if jf.verdict == Verdict.FAIL else None
        out.append(Judged(True, jf.verdict.name, jm.verdict.name, signature(fail) if fail else "", summary(o),
                          (fail.line() if fail else jm.line())[:160]))
    return out


def run_batch(env_list: Sequence[Env], layouts: Sequence[Layout]) -> tuple[list[list[Judged]], float]:
    """Every layout through every environment at the function and manager tiers: the one tier
    runner (``kvproof.running.checking.run``: one worker each, started in parallel, one call each)."""
    from kvproof.running import checking
    from kvproof.tiers import registry

    t = time.monotonic()
    rows, _ = checking.run([(str(i), lay) for i, lay in enumerate(layouts)], list(env_list),
                           tiers=registry.through(registry.default()))
    per_env = [[r.outcome for r in rows if r.env == e.name] for e in env_list]
    return [judge_outcomes(layouts, o) for o in per_env], time.monotonic() - t


def new_fail(base: Judged, got: Judged) -> bool:
    failed = "FAIL" in (got.function, got.manager)
    return failed and ("FAIL" not in (base.function, base.manager) or base.signature != got.signature)


def layout_layers(names: Sequence[str], n_corpus: int, base: Sequence[Judged], got: Sequence[Judged],
                  model: Sequence[tuple | None], seconds: float) -> dict[str, Catch]:
    """replay (first n_corpus layouts), probe (the rest) and conformance (all) from one batch's judgements."""
    rep, prb, conf, changed = [], [], [], 0
    for i, (name, b, g, m) in enumerate(zip(names, base, got, model)):
        if not g.expressible:
            continue
        if new_fail(b, g):
            (rep if i < n_corpus else prb).append(f"{Path(name).name}: {b.manager}->FAIL {g.line}")
        elif (b.function, b.manager) != (g.function, g.manager):
            changed += 1
        if m is not None and b.expressible and b.pair == m and g.pair != m:
            conf.append((name, g.pair, m))
    cells = {"replay": Catch("replay", bool(rep), seconds, f"{len(rep)} newly FAIL: {rep[0]}" if rep else
                             f"no corpus layout newly FAILs ({changed} verdicts moved elsewhere)"),
             "probe": Catch("probe", bool(prb), seconds, f"{len(prb)} newly FAIL: {prb[0]}" if prb else
                            "no probe layout newly FAILs")}
    cells["conformance"] = Catch("conformance", bool(conf), seconds,
                                 f"{len(conf)} layouts real != model where the base agrees: "
                                 f"{conf[0][0]} real {conf[0][1]} model {conf[0][2]}" if conf else "agrees")
    return cells


# --- atheris runs -------------------------------------------------------------------------

def fuzz_classes(env: Env, target: str, seconds: int, workdir: Path) -> tuple[int, list[dict], str, float]:
    """(rc, new FAIL classes of this run, output tail, wall seconds) of one time-boxed run."""
    from kvproof.fuzz.run import read_classes

    workdir = workdir.resolve()  # the runner starts the harness from its log folder
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "kvproof", "fuzz", "--python", str(env.python), "--target", target,
           "--seconds", str(seconds), "--workdir", str(workdir), "--crash-dir", str(workdir / "crashes"),
           "--status-every", "100000", "--seed", "1"]  # every campaign lists every class it met
    t = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = proc.stdout + proc.stderr
    return proc.returncode, read_classes(workdir), out, time.monotonic() - t


def stored_classes(layer: str, env: Env, target: str, seconds: int,
                   workdir: Path) -> tuple[Catch | None, list[tuple[dict, Layout]], float]:
    """One time-boxed campaign's new FAIL classes with their stored Layouts, and its wall
    seconds; the Catch is set (and the list empty) when the harness itself failed."""
    rc, classes, out, dt = fuzz_classes(env, target, seconds, workdir)
    if rc not in (0, 1):
        tail = (out.strip().splitlines() or ["?"])[-1]
        return Catch(layer, None, dt, f"harness failed rc={rc}: {tail[:200]}"), [], dt
    lays = []
    for c in classes:
        try:
            lays.append((c, Layout.from_json(Path(c["path"]).read_text(), c["path"])))
        except (OSError, ValueError, KeyError, TypeError):  # a stored file that no longer reads
            continue
    return None, lays, dt


def contracts(env: Env, seconds: int, workdir: Path, base_worker) -> Catch:
    """Atheris contract fuzz; a class is a catch only when its Layout is not the same FAIL on the base."""
    failed, lays, dt = stored_classes("contracts", env, "contracts", seconds, workdir)
    if failed is not None:
        return failed
    if not lays:
        return Catch("contracts", False, dt, "clean: no FAIL class")
    from kvproof.tiers import client

    t = time.monotonic()
    base = judge_outcomes([lay for _, lay in lays], client.outcomes(base_worker, [lay for _, lay in lays]))
    dt += time.monotonic() - t
    # the overlay FAILed each stored Layout (that is why it is stored); its signature is in the meta
    new = [(c, lay) for (c, lay), b in zip(lays, base)
           if "FAIL" not in (b.function, b.manager) or b.signature != str(lay.meta.get("signature", ""))]
    pre = len(lays) - len(new)
    if new:
        c, lay = new[0]
        return Catch("contracts", True, dt, f"{len(new)} new FAIL class(es) ({pre} pre-existing on the base); first "
                                            f"after {c['seconds']} s of fuzzing: {lay.summary()}: "
                                            f"{str(c.get('detail', ''))[:140]}")
    return Catch("contracts", False, dt, f"{pre} FAIL class(es), all pre-existing on the base release")


def conformance_fuzz(env: Env, seconds: int, workdir: Path) -> Catch:
    rc, _classes, out, dt = fuzz_classes(env, "conformance", seconds, workdir)
    if rc == 1 and "violation:" in out:
        text = out.split("violation:", 1)[-1].strip().splitlines()
        return Catch("conformance", True, dt, next((ln.strip() for ln in text if ln.strip()), "violation")[:300])
    if rc == 0:
        return Catch("conformance", False, dt, "clean")
    return Catch("conformance", None, dt, f"harness failed rc={rc}")


# --- consumer tier ------------------------------------------------------------------------

def consumer_verdicts(layouts: Sequence[Layout], env: Env) -> list[tuple[str, str]]:
    """(verdict, line) per layout at the consumer tier (``kvproof.running.checking.run``: the layout's
    own stream, else the default one; ``judge_consumer``)."""
    from kvproof.running import checking
    from kvproof.tiers import registry

    rows, _ = checking.run([(str(i), lay) for i, lay in enumerate(layouts)], [env], tiers=(registry.streamed(),))
    return [(r.verdict.name, r.judgement.line()[:160]) for r in rows]


def consumer(layouts: Sequence[tuple[str, Layout]], env: Env, base: dict[str, tuple[str, str]]) -> Catch:
    t = time.monotonic()
    try:
        got = consumer_verdicts([lay for _, lay in layouts], env)
    except Exception as err:  # the tier is another engineer's work in progress: report, do not hide
        return Catch("consumer", None, time.monotonic() - t, f"consumer tier failed: {type(err).__name__}: {err}"[:200])
    new = [f"{Path(n).name}: {base.get(lay.content_hash(), ('?', ''))[0]}->FAIL {line}"
           for (n, lay), (v, line) in zip(layouts, got)
           if v == "FAIL" and base.get(lay.content_hash(), ("?", ""))[0] != "FAIL"]
    return Catch("consumer", bool(new), time.monotonic() - t,
                 f"{len(new)} newly FAIL: {new[0]}" if new else f"no consumer FAIL on {len(layouts)} layouts")
