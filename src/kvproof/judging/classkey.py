"""A finding's class: one identity per root cause, whatever numbers its message carries.

ClusterFuzz keys a crash by its type and top frames; here a class is
``(tier, check, exception type, frame)``:

- ``tier``: the evidence tier that observed it (function, manager, consumer, engine; model for verify);
  for an exception a contract explains, the contract's own tier (one root cause, one class, at
  whichever tier a run met it);
- ``check``: the contract that explains the exception (its id, qualified ``[align]`` /
  ``[not-align]`` when the layout has Mamba groups: the Mamba mode picks the resolver's
  hash fallback, so the seed bug and 0.28's ``mamba_cache_mode=all`` crash are two causes
  behind one assertion), an oracle (``oracle:kv_event``), or for an exception no contract
  explains, the words its message starts with (``raise:<stem>``, names and numbers cut;
  ``by-design:<stem>`` for a refusal by design, whose assertion may be a failure on other layouts);
  a bare ``assert`` has no message, so its stem is its condition as the raising source line
  states it (``raise:assert block_size % hash_block_size == 0``, ``StageError.condition``): two
  asserts of one function are two causes, one condition in every release is one;
- ``exc_type``: the exception's type ("" for an oracle observation);
- ``frame``: the vLLM ``file:function`` that raised, without the line number; for a bare assert
  also the vLLM function that called it (``kv_cache_utils.py:resolve_block_hashes <-
  simple_kv_offload/manager.py:_select_eager_blocks_to_store``): its condition names the raising
  function's own variables, whose values the caller chose, so a shared helper's assert met from two
  callers is two causes (0.27's connector lookup and 0.30's eager offload store); for an oracle
  observation, who produced the wrong thing, in vLLM's names: the block pool or the connector
  that published the event and its medium (``SimpleCPUOffloadConnector (BlockStored[CPU])``),
  the connector and its inner method (``SimpleCPUOffloadConnector: BlockHashToBlockMap.insert``),
  or the coordinator that answered the lookup (google/oss-fuzz#8389: a key too coarse
  merges two bugs; here a known kv_event bug would swallow every later one).

Pure Python, no vLLM.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from kvproof import frames
from kvproof.judging.judge import Judgement
from kvproof.inputs.layout import Layout
from kvproof.judging.oracle_ids import CHECK_PREFIX
from kvproof.verdicts import Verdict

STEM_WORDS = 6
_STOP = re.compile(r"[\d\[\](){}=:'\"<>@,;]")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z_.\-]*$")


@dataclass(frozen=True, order=True)
class ClassKey:
    tier: str
    check: str
    exc_type: str = ""
    frame: str = ""

    def __str__(self) -> str:
        return "|".join((self.tier, self.check, self.exc_type, self.frame))

    @property
    def id(self) -> str:
        """12 hex characters, stable across runs, releases and machines."""
        return hashlib.sha256(str(self).encode()).hexdigest()[:12]

    @property
    def raising_frame(self) -> str:
        """The frame that raised, without a bare assert's caller (``frames.CALLED_FROM``)."""
        return self.frame.split(frames.CALLED_FROM, 1)[0]

    def to_dict(self) -> dict:
        return {"tier": self.tier, "check": self.check, "exc_type": self.exc_type, "frame": self.frame}

    @classmethod
    def from_dict(cls, d: dict) -> "ClassKey":
        return cls(str(d["tier"]), str(d["check"]), str(d.get("exc_type", "")), str(d.get("frame", "")))

    @classmethod
    def parse(cls, text: str) -> "ClassKey":
        # the check may hold a "|" (an assert's condition ``a | b``); tier, type and frame never do
        tier, _, rest = text.partition("|")
        parts = [tier, *rest.rsplit("|", 2)]
        if len(parts) != 4 or not _:
            raise ValueError(f"{text!r} is not a class key (tier|check|exc_type|frame)")
        return cls(*parts)


def stem(message: str) -> str:
    """The words an exception's message starts with, up to the first number, bracket,
    quote or separator and at most ``STEM_WORDS``: the assertion, not its values."""
    head = _STOP.split(message, maxsplit=1)[0]
    words = []
    for w in head.split():
        if not _WORD.match(w) or len(words) == STEM_WORDS:
            break
        words.append(w.lower().rstrip("."))
    return " ".join(words)


def what_raised(err) -> str:
    """What an exception states: its message's stem, or for a bare assert (no message) the
    condition it asserted (``assert <condition>``, whitespace normalised)."""
    cond = getattr(err, "condition", "")
    if cond and not err.message.strip():
        return "assert " + cond
    return stem(err.message)


def _mode(layout: Layout | None) -> str:
    if layout is None or not layout.has_mamba:
        return ""
    return "[align]" if layout.cache.mamba_cache_mode == "align" else "[not-align]"


def class_key(j: Judgement, layout: Layout | None = None) -> ClassKey:
    """The class of a FAIL / UNSUPPORTED / ERROR / REJECTED judgement (of any, really:
    a judgement with nothing observed is keyed by its naming contract)."""
    err = j.observed
    tier = str(j.tier)
    if err is None:
        return ClassKey(tier, (j.contract or str(j.verdict)) + _mode(layout))
    if err.type.startswith(CHECK_PREFIX):
        # the oracle and who produced the wrong thing (the observation's cause is "rule|producer").
        # Not the rule, nor the group spec: one fault breaks several rules on several specs (a
        # seeded off-by-one in the block pool's BlockStored payload met "hash-vs-tokens" and
        # "token-count" on seven specs: 31 classes, one cause)
        producer = err.frame.partition("|")[2]
        return ClassKey(tier, err.type, "", producer)
    frame = frames.key(err.frame)
    if getattr(err, "condition", "") and getattr(err, "caller", "") and not err.message.strip():
        frame += frames.CALLED_FROM + frames.key(err.caller)
    if j.explained and j.verdict in (Verdict.FAIL, Verdict.UNSUPPORTED):
        # a contract's class is the contract's, at its own tier, whichever tier ran into it: the
        # consumer tier meeting the coordinator's assertion at Scheduler() is the manager's class
        tier = str(j.explained[0].contract.tier)
    if j.explained and j.verdict == Verdict.FAIL:
        check = j.explained[0].contract.id + _mode(layout)
    elif j.explained and j.verdict == Verdict.UNSUPPORTED:  # a refusal by design: the mode changes nothing
        check = j.explained[0].contract.id
    elif j.verdict == Verdict.UNSUPPORTED:  # the same assertion can be a failure elsewhere (contracts.Refusal.applies)
        check = "by-design:" + what_raised(err)
    else:
        check = "raise:" + what_raised(err)
    return ClassKey(tier, check, err.type, frame)


def model_key(prop: str) -> ClassKey:
    """The class of a proof run's counterexample: the property (its id names the mode)."""
    return ClassKey("model", prop)
