"""The one judge: (Layout, Outcome, tier) -> ``Judgement``.

Used by ``kvproof check``, ``verify`` (replaying a counterexample), the
fuzzer's oracle, ``replay`` and ``explain``. A finding's identity (its class)
is ``kvproof.judging.classkey.class_key`` of a Judgement.

API (small on purpose)::

    from kvproof.judging.judge import judge, Judgement
    j = judge(layout, outcome)               # tier inferred from the Outcome
    j = judge(layout, outcome, Tier.ENGINE)  # an Outcome recorded by an engine boot
    j.verdict      # Verdict (IntEnum; max() over rows is a run's verdict)
    j.tier         # Tier that observed ``observed`` (FAIL/REJECTED), else the tier that ran
    j.observed     # the real StageError, or None
    j.explained    # contracts that predicted the observed exception (FAIL rows)
    j.latent       # contract violations nothing real observed (LATENT rows)
    j.warnings     # efficiency hazards
    j.by_design    # the exception is a manager refusal of an unsupported configuration
    j.contract     # the id that names the row ("" when none)

Rules, in order:

1. Not expressible in the release: NOT_EXPRESSIBLE.
2. ``Outcome.run_error`` (the run failed for a reason unrelated to block
   sizes): ERROR, unless real vLLM also raised (then FAIL).
3. The resolver raised: REJECTED only for its own clear validation of a user
   error, a ``ValueError`` naming the ``prefix_match_unit`` the user set when
   that unit is wrong for a documented reason (``resolver_rejects_user_error``);
   any other exception, a refusal of a unit that divides every group, and any
   exception for a configuration whose user set no ``prefix_match_unit`` (an
   availability regression, contract ``resolver.accepts_the_configuration``)
   is FAIL at the function tier.
4. The manager (coordinator, block pool) raised: a refusal of a configuration
   vLLM does not support by design (``contracts.UNSUPPORTED_BY_DESIGN``) is
   UNSUPPORTED (``by_design`` set, shown with its message, never fails a run);
   any other exception is FAIL at the manager tier, never waived; the
   contracts that predicted it are ``explained`` (else ``manager.constructs``
   names it).
5. Otherwise contract violations are LATENT (never FAIL): predicted unsafe,
   nothing real showed it. Efficiency hazards make WARN, else OK.

Consumer tier (``judge_consumer(result, layout=None)``, a ``kvproof.consumer``
``ConsumerResult``: the real Scheduler driven by a request stream), first match wins:

C0. ``unchecked`` set (kvproof does not model what the run needs: a speculative method it
    does not draft for): UNCHECKED with what would lift it, never a verdict about vLLM.
C1. ``not_expressible`` set (the release has no such setting, or the engine never
    builds that connector setup, e.g. a connector without SupportsHMA on a hybrid
    layout): NOT_EXPRESSIBLE with the reason.
C1b. a frontend that breaks the engine's PrefixHashConfig hashed the prompts
    (``frontend.hasher`` in ``facts.CONTRACT_BREAKING_HASHERS``): no input vLLM means to
    accept, so UNSUPPORTED, whatever the oracles saw; the note says what the engine did
    with its hashes (trusted, ignored, differing) and what that caused first.
C2. ``setup_error`` (building the configuration failed before vLLM ran): ERROR.
C3. the resolver raised: rule 3 (REJECTED only for the user's prefix_match_unit).
C4. any other ``exception``, or any observation of an id ``kvproof.judging.oracle_ids`` registers
    as hard (``prefix_hit``, ``hash_chain``, ``connector``, ``kv_event``, ``spec_hit``; an
    unregistered id raises ``UnknownOracle``): FAIL at the consumer tier. ``observed`` is what real
    vLLM raised when it raised, else the first observation (an exception keeps its
    type, message and frame; an oracle observation has type ``oracle:<id>``); an
    oracle's earlier observation of the run follows in the note; with a layout, the SAFETY contracts its resolved block
    sizes violate are ``explained``; ``by_design`` as rule 4.
    An exception raised in kvproof's own frames (``harness_error`` set, or a
    ``kvproof/`` frame) or an assertion in a frame that checks the fake
    worker's transfer report (``HARNESS_FED_FRAMES``) is ERROR with that
    cause, not FAIL; a by-design refusal is UNSUPPORTED as in rule 4.
C5. ``stalled`` (the stream did not finish in the step budget): ERROR with cause.
C6. the measured share of reusable shared-prefix tokens recomputed exceeds the share the
    finest granularity this release's consumers support (its ``hash_block_size``: hits
    landing on every hash block) would recompute on the same stream by more than
    ``CONSUMER_WARN_FRACTION`` (5 points) and by at least ``CONSUMER_WARN_TOKENS`` tokens
    per request: WARN (``efficiency.consumer_prefix_reuse``) showing both numbers and the
    tokens lost per request; else OK (the numbers are the note). The token floor keeps a
    harness stream's short prompts from inflating a few tokens (full attention 16 + sliding
    window 32 aligns hits to 32: 8 tokens per request) into a share.
    A result without per-admission hits has no ideal to compare with: WARN from
    ``CONSUMER_WARN_UNMEASURED`` (half the reusable tokens recomputed). With prefix caching
    off and no connector hits, nothing is expected to hit: OK.

``tier`` is the highest tier that ran. For FUNCTION/MANAGER Outcomes an
exception is attributed to the stage that raised it (resolver -> function,
manager -> manager); an Outcome recorded at CONSUMER or ENGINE tier
attributes its exceptions to that tier.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvproof.judging import contracts
from kvproof import facts, frames
from kvproof.judging.contracts import Violation
from kvproof.inputs.layout import Layout
from kvproof.judging.oracle_ids import HARD_IDS, OracleId, is_hard
from kvproof.outcome import Outcome, StageError
from kvproof.verdicts import Tier, Verdict

__all__ = ["Judgement", "judge", "judge_consumer", "consumer_efficiency_line", "resolver_rejects_user_error",
           "CONSUMER_WARN_FRACTION", "CONSUMER_WARN_TOKENS"]

CONSUMER_WARN_FRACTION = 0.05  # recomputed share above the ideal granularity's, in points
CONSUMER_WARN_TOKENS = 64  # and tokens lost per request above the ideal's
CONSUMER_WARN_UNMEASURED = 0.5  # a result without per-admission hits (no ideal to compare): half recomputed
# Scheduler frames that only check what the consumer harness's fake worker reported
# (finished_recving/finished_sending): an assertion there is about the harness first.
HARNESS_FED_FRAMES = ("in _update_from_kv_xfer_finished",)


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    tier: Tier
    observed: StageError | None = None
    explained: tuple[Violation, ...] = ()
    latent: tuple[Violation, ...] = ()
    warnings: tuple[Violation, ...] = ()
    by_design: bool = False
    note: str = ""  # one line: why this verdict (availability, by design, ...)

    @property
    def contract(self) -> str:
        """The contract id naming this row: the explaining one for FAIL, the
        first latent one for LATENT, the first warning for WARN."""
        for vs in (self.explained, self.latent, self.warnings):
            if vs:
                return vs[0].contract.id
        return ""

    @property
    def failed(self) -> bool:
        return self.verdict == Verdict.FAIL

    def line(self) -> str:
        """One line for a table: what real vLLM said, or the contract."""
        if self.observed is not None:
            head = f"{self.contract}: " if self.explained else ""
            tail = f" ({self.note})" if self.note else ""
            return head + self.observed.line() + tail
        if self.latent:
            return "latent " + "; ".join(v.line() for v in self.latent)
        if self.warnings:
            return "; ".join(w.line() for w in self.warnings)
        return self.note

    def to_dict(self) -> dict:
        def vs(items):
            return [{"contract": v.contract.id, "detail": v.detail, "protects": v.contract.protects,
                     "tier": str(v.contract.tier)} for v in items]
        return {"verdict": str(self.verdict), "tier": str(self.tier),
                "observed": None if self.observed is None else self.observed.to_dict(),
                "explained": vs(self.explained), "latent": vs(self.latent), "warnings": vs(self.warnings),
                "by_design": self.by_design, "note": self.note}


def resolver_rejects_user_error(layout: Layout, err: StageError) -> bool:
    """The release's own clear validation of a user error: a ValueError about the
    ``prefix_match_unit`` the user set, where the setting is wrong for one of the
    documented reasons (0.32 ``resolve_kv_cache_block_sizes``): with one group and
    block hashing active, a unit other than the block size; with several, a unit that
    does not divide every size the resolver hashes over (the prefix-cacheable groups,
    dcp applied, or ALL groups when none is prefix-cacheable: ``hashing_sizes = [...]
    or group_block_sizes``); or a prefix-cacheable spec compresses states
    (tokens_per_state > 1) whose alignment the unit may break. A refusal of a unit
    that divides every hashed group of a plain layout is an availability failure."""
    pmu = layout.cache.prefix_match_unit
    if err.type != "ValueError" or pmu is None or "prefix_match_unit" not in err.message:
        return False
    sizes = contracts.effective_block_sizes(layout)
    cacheable = contracts.prefix_cacheable(layout)
    hashed = [s for s, c in zip(sizes, cacheable) if c] or sizes
    return (any(s % pmu for s in hashed) or (len(sizes) == 1 and sizes[0] != pmu)
            or any((g.tokens_per_state or 0) > 1 for g, c in zip(layout.groups, cacheable) if c))


def _tier_of(out: Outcome, tier: Tier | None) -> Tier:
    if tier is not None:
        return Tier(tier)
    return Tier.MANAGER if out.manager_attempted else Tier.FUNCTION


def judge(layout: Layout, out: Outcome, tier: Tier | None = None) -> Judgement:
    """The verdict of real vLLM on ``layout`` as recorded in ``out`` (see module doc)."""
    ran = _tier_of(out, tier)
    if not out.expressible:
        return Judgement(Verdict.NOT_EXPRESSIBLE, ran, note=out.not_expressible)
    late = ran if ran > Tier.MANAGER else None  # consumer/engine Outcomes: that tier observed it
    err = out.resolver_error
    if err is not None:
        if resolver_rejects_user_error(layout, err):
            return Judgement(Verdict.REJECTED, late or Tier.FUNCTION, err, note="the user's prefix_match_unit")
        why = ("availability: the resolver refused a configuration whose user set no prefix_match_unit"
               if layout.cache.prefix_match_unit is None else
               "availability: the resolver refused a prefix_match_unit that divides every group"
               if err.type == "ValueError" else "the resolver raised other than its documented ValueError")
        explained = (Violation(contracts.BY_ID["resolver.accepts_the_configuration"], err.line()),)
        return Judgement(Verdict.FAIL, late or Tier.FUNCTION, err, explained, note=why)
    predicted = contracts.check(layout, out)
    warns = tuple(contracts.warnings(layout, out))
    merr = out.manager_error
    if merr is not None:
        explained = tuple(v for v in predicted if v.contract.tier == Tier.MANAGER)
        if not explained:
            explained = (Violation(contracts.BY_ID["manager.constructs"], merr.line()),)
        latent = tuple(v for v in predicted if v.contract.tier > Tier.MANAGER)
        if contracts.refused_by_design(layout, merr, out.vllm_version):
            return Judgement(Verdict.UNSUPPORTED, late or Tier.MANAGER, merr, explained, latent, warns, True,
                             "vLLM does not support this configuration, by design")
        return Judgement(Verdict.FAIL, late or Tier.MANAGER, merr, explained, latent, warns)
    run_error = out.run_error
    if run_error is not None:
        return Judgement(Verdict.ERROR, ran, run_error, latent=tuple(predicted), warnings=warns,
                         note="the run failed for a reason unrelated to block sizes")
    if predicted:
        return Judgement(Verdict.LATENT, ran, latent=tuple(predicted), warnings=warns)
    return Judgement(Verdict.WARN if warns else Verdict.OK, ran, warnings=warns)


# --- consumer tier ---------------------------------------------------------------

# Which oracle ids fail a run is the registry's word (kvproof.judging.oracle_ids: hard or soft, one enum);
# an observation of an id it does not register is an error (UnknownOracle), never silently soft.
EXCEPTION = OracleId.EXCEPTION


def _ideal_recomputed(r) -> int | None:
    """Tokens the stream would recompute if every first admission hit its ideal (``ideal_hit``)."""
    g = getattr(r, "hash_block_size", None)
    if not g or not getattr(r, "hits", None):
        return None
    return sum(max(0, int(h["truth"]) - ideal_hit(r, h, int(g))) for h in r.hits)


def ideal_hit(r, h: dict, g: int | None = None) -> int:
    """The most one admission ``h`` (a ``ConsumerResult.hits`` row) can hit under the release's own
    rules at hash granularity ``g``: an upper bound no correct hit exceeds (the hit oracle's bounds,
    rounded down to ``g``). A local hit stays within the common prefix with computed KV and
    leaves the last token, or with 0.33's hash lookahead L the last L tokens, to compute, and
    under a lookahead a block counts only when the L tokens after it are common too
    (get_request_block_hasher: a request sharing exactly kB tokens matches (k-1)B); under EAGLE's drop it gives back one unit of what matched
    (drop_eagle_block); chunked local attention may skip its null blocks (``free``); a connector's
    load is token-granular (vLLM recomputes only the last token), so an admission with external
    tokens may reach its whole reusable prefix; a request that limits its own cache reads
    (``limit``: prompt logprobs) gets at most that. Rows without ``lcp``/``tokens`` (recorded
    before they existed) read them from ``truth``."""
    g = int(g or getattr(r, "hash_block_size", 0) or 1)
    ahead = int(getattr(r, "hash_lookahead", 0) or 0)
    truth = int(h["truth"])
    lcp, n = int(h.get("lcp", truth)), int(h.get("tokens", truth + 1))
    # a block's lookahead hash needs the L tokens after it in common too (KV computed or not)
    common = int(h.get("lcp_tokens", lcp + ahead)) - ahead if ahead else lcp
    best = max(0, min(lcp, common, n - max(1, ahead))) // g * g
    if getattr(r, "eagle_drop", False):
        best = min(best, max(0, min(lcp, n) // g * g - g))
    best = max(best, int(h.get("free", 0)))
    if int(h.get("external", 0)):
        best = max(best, truth)
    if "limit" in h:  # a limited request reads no connector (0.34 skip_reading_external_kv): blocks only
        best = min(best, int(h["limit"]) // g * g)
    return best


def spec_ideal_hit(r, truth: int, g: int) -> int:
    """``ideal_hit`` of an admission known only by its reusable tokens (a resend: the common
    prefix is the whole prompt of ``truth + 1`` tokens)."""
    return ideal_hit(r, {"truth": truth}, g)


def above_ideal(r) -> list[str]:
    """Admissions that hit more than ``ideal_hit`` allows: a wrong hit (a hard oracle's FAIL) or a
    bug in kvproof's ideal, never a silent line."""
    g = getattr(r, "hash_block_size", None)
    if not g:
        return []
    return [f"r{h['req']} hit {h['hit'] + h['external']} above its ideal {ideal_hit(r, h, int(g))} "
            f"(reusable {h['truth']}, common prefix {h.get('lcp', '?')}, {h.get('tokens', '?')} tokens)"
            for h in getattr(r, "hits", None) or [] if {"req", "hit", "external", "truth"} <= set(h)
            and int(h["hit"]) + int(h["external"]) > ideal_hit(r, h, int(g))]


def consumer_efficiency_line(r) -> str:
    e = r.efficiency
    return (f"{e.hit_tokens + e.external_tokens} of {e.reusable_tokens} reusable shared-prefix tokens hit "
            f"({e.recomputed_fraction:.1%} recomputed; {e.prompt_tokens} prompt tokens, {e.admissions} admissions)"
            + (f"; drafts {r.drafts_accepted} of {r.drafts_verified} accepted" if getattr(r, "drafts_verified", 0)
               else "") + _per_request(r))


def _per_request(r) -> str:
    """Each admission's hit against the release's ideal and the reusable tokens (up to 8)."""
    g = getattr(r, "hash_block_size", None)
    hits = getattr(r, "hits", None) or []
    if not g or not hits or len(hits) > 8:
        return ""
    if not all({"req", "hit", "external", "truth"} <= set(h) for h in hits):
        return ""
    cells = [f"r{h['req']} {h['hit'] + h['external']}/{ideal_hit(r, h, int(g))}/{h['truth']}"
             for h in hits]
    return "; per request hit/ideal/reusable: " + " ".join(cells)


def _stage_error(oracle: str, detail: str, cause: str = "") -> StageError:
    """An observation as a StageError: an exception keeps type/message/frame; an oracle's
    ``frame`` is its cause ("rule|where", :class:`kvproof.consumer.oracles.Observation`)."""
    if oracle == EXCEPTION:
        body = detail.split(": ", 1)[1] if detail.startswith(("resolver: ", "Scheduler(): ")) else detail
        head, _, frame = body.rpartition(" @ ")
        if not head:
            head, frame = body, ""
        typ, _, msg = head.partition(": ")
        # a bare assert's condition and caller (kvproof.consumer.failures.raised writes
        # "assert <condition> <- <caller>"; ast.unparse never writes " <- " in a condition)
        cond, caller = "", ""
        if cause.startswith("assert ") and not msg.strip():
            cond, _, caller = cause.removeprefix("assert ").partition(frames.CALLED_FROM)
        return StageError(typ, msg, frame, cond, caller)
    return StageError(OracleId(oracle).check, detail, cause)


def frontend_line(fe: dict) -> str:
    """What the engine did with a frontend's prompt block hashes (a ``FrontendTally`` as a dict)."""
    return (f"{fe['hasher']}: the engine trusted {fe['trusted']} and ignored {fe['ignored']} of {fe['requests']} "
            f"requests' frontend hashes; {fe['differ']} trusted differ from its own hashing"
            + (f" (first {fe['first_differ']})" if fe.get("first_differ") else ""))


def consumer_outcome(r, layout: Layout | None = None) -> Outcome:
    """The ConsumerResult as an Outcome (the resolver's pair, the tier's error) for the contracts."""
    sizes = [] if layout is None else list(contracts.effective_block_sizes(layout))
    return Outcome(layout_hash=r.layout_hash, vllm_version=r.vllm_version, expressible=not r.not_expressible,
                   not_expressible=r.not_expressible or "", scheduler_block_size=r.scheduler_block_size,
                   hash_block_size=r.hash_block_size, group_block_sizes=sizes)


def judge_consumer(r, layout: Layout | None = None) -> Judgement:
    """The verdict of a consumer-tier run (``kvproof.consumer.ConsumerResult``); rules C1-C6."""
    T = Tier.CONSUMER
    if getattr(r, "unchecked", None):
        return Judgement(Verdict.UNCHECKED, T, note=r.unchecked)
    if r.not_expressible:
        return Judgement(Verdict.NOT_EXPRESSIBLE, T, note=r.not_expressible)
    fe = getattr(r, "frontend", None) or {}
    if fe.get("hasher") in facts.CONTRACT_BREAKING_HASHERS:
        first = next((o for o in r.observations if o.oracle != OracleId.EFFICIENCY), None)
        return Judgement(Verdict.UNSUPPORTED, T, note=(
            f"a frontend that breaks the engine's PrefixHashConfig, not an input vLLM means to accept; "
            f"{frontend_line(fe)}" + (f"; then {first.oracle}: {first.detail}" if first else "; no oracle objected")))
    if r.setup_error:
        return Judgement(Verdict.ERROR, T, StageError("SetupError", r.setup_error),
                         note="building the configuration failed before vLLM ran")
    harness = getattr(r, "harness_error", "") or ""
    if harness and not any(o.oracle == EXCEPTION for o in r.observations):
        return Judgement(Verdict.ERROR, T, StageError("HarnessError", harness),
                         note="kvproof's own harness broke (its start-up check or its own frames), not vLLM")
    hard = [o for o in r.observations if is_hard(o.oracle)]
    out = consumer_outcome(r, layout) if layout is not None else None
    warns = tuple(contracts.warnings(layout, out)) if out is not None and out.resolved else ()
    if hard:
        # what real vLLM raised leads (the engine core died there); an oracle's earlier observation
        # of the same run, often the state that made it raise, follows it in the note
        first = next((o for o in hard if o.oracle == EXCEPTION), hard[0])
        err = _stage_error(first.oracle, first.detail, getattr(first, "cause", ""))
        more = sum(r.counts.get(k, 0) for k in HARD_IDS) - 1
        note = f"{first.oracle} at step {first.step}" + (f" (+{more} more observations)" if more > 0 else "")
        if first is not hard[0]:
            note += f"; before it, {hard[0].oracle} at step {hard[0].step}: {hard[0].detail}"
        if first.oracle == EXCEPTION and first.detail.startswith("resolver: "):
            if (layout is not None and resolver_rejects_user_error(layout, err)) or \
                    (layout is None and err.type == "ValueError" and "prefix_match_unit" in err.message):
                return Judgement(Verdict.REJECTED, T, err, note="the user's prefix_match_unit")
            if layout is not None:
                # The resolver is the function tier: judged (and keyed) as the function tier judges
                # it, so the contracts campaign and the consumer campaign name one class.
                fj = judge(layout, replace(out, resolver_error=err, hash_block_size=None, scheduler_block_size=None))
                if fj.verdict >= Verdict.REJECTED:
                    return replace(fj, note=fj.note or "the resolver raised: " + note)
            return Judgement(Verdict.FAIL, T, err, note="the resolver raised: " + note)
        if first.oracle == EXCEPTION and (harness or frames.is_own(err.frame)):
            return Judgement(Verdict.ERROR, T, err, warnings=warns,
                             note="kvproof's own harness broke (an exception in its frames), not vLLM: "
                                  + (harness or note))
        if first.oracle == EXCEPTION and any(f in err.frame for f in HARNESS_FED_FRAMES):
            return Judgement(Verdict.ERROR, T, err, warnings=warns,
                             note="raised on the fake worker's transfer report (harness protocol, not "
                                  "evidence about vLLM until reproduced with a real worker): " + note)
        predicted = contracts.check(layout, out) if out is not None and out.resolved else []
        if first.oracle == EXCEPTION:  # the contract whose enforcing file raised
            explained = tuple(v for v in predicted if frames.path_of(v.contract.protects).removeprefix("vllm/")
                              in err.frame)
        else:  # a misbehaviour the consumer-tier contracts predicted
            explained = tuple(v for v in predicted if v.contract.tier == Tier.CONSUMER)
        latent = tuple(v for v in predicted if v not in explained)
        release = getattr(r, "vllm_version", None)
        if first.oracle == EXCEPTION and contracts.refused_by_design(layout, err, release):
            return Judgement(Verdict.UNSUPPORTED, T, err, explained, latent, warns, True,
                             "vLLM does not support this configuration, by design: " + note)
        return Judgement(Verdict.FAIL, T, err, explained, latent, warns, False, note)
    over = above_ideal(r)
    if over:
        return Judgement(Verdict.ERROR, T, StageError(OracleId.IDEAL.check, "; ".join(over[:3])), warnings=warns,
                         note="kvproof's ideal is below a hit no oracle faults: a bug in judge.ideal_hit, "
                              "not vLLM")
    stalled = r.by(OracleId.STALLED)
    if stalled:
        return Judgement(Verdict.ERROR, T, StageError(OracleId.STALLED.check, stalled[0].detail), warnings=warns,
                         note="the stream did not finish in the harness's step budget")
    e = r.efficiency
    line = consumer_efficiency_line(r)
    ideal = _ideal_recomputed(r)
    if e.reusable_tokens and ideal is not None:
        # a connector's load is not rounded to a hash block (vLLM recomputes only the last
        # token): it can beat the local ideal, which loses nothing, not a negative amount
        lost = max(0, e.reusable_tokens - e.hit_tokens - e.external_tokens - ideal)
        rule = " under the EAGLE drop" if getattr(r, "eagle_drop", False) else ""
        rule += f" and hash lookahead {r.hash_lookahead}" if getattr(r, "hash_lookahead", 0) else ""
        line += (f"; ideal at the finest granularity ({r.hash_block_size} tokens{rule}) "
                 f"{ideal / e.reusable_tokens:.1%} recomputed, {lost / max(1, e.admissions):.0f} tokens lost per request")
    if not e.reusable_tokens:  # nothing was reusable: no efficiency to judge
        over_ideal = False
    elif layout is not None and not layout.cache.enable_prefix_caching and not e.external_tokens:
        over_ideal = False  # the user turned prefix caching off: recomputing every prefix is what they asked for
        line += "; prefix caching is off"
    elif ideal is not None:
        over_ideal = (e.recomputed_fraction - ideal / e.reusable_tokens > CONSUMER_WARN_FRACTION
                      and lost / max(1, e.admissions) >= CONSUMER_WARN_TOKENS)
    else:
        over_ideal = e.recomputed_fraction >= CONSUMER_WARN_UNMEASURED
    if over_ideal:
        w = Violation(contracts.BY_ID["efficiency.consumer_prefix_reuse"], line)
        return Judgement(Verdict.WARN, T, warnings=(w,) + warns, note=line)
    return Judgement(Verdict.WARN if warns else Verdict.OK, T, warnings=warns, note=line)
