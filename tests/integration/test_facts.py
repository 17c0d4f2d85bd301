"""Every fact in kvproof.facts, read back from each installed release.

The facts module is the one place the model, the contracts, the generators
and the bridge take vLLM facts from; this is the test that it has not drifted.
It reads the installed package (sources statically, classes by import)
inside each environment.
"""

from __future__ import annotations

import ast
import json
import subprocess

import pytest

from kvproof.bridge.client import worker_env
from kvproof import envs, facts
from kvproof.revisions import revision_for
from conftest import RELEASES, require_env

pytestmark = pytest.mark.integration

PROBE = r'''
import dataclasses, json, pathlib, re, typing
import vllm
from vllm.config import cache as cache_mod
from vllm.v1 import kv_cache_interface as kvi
from vllm.distributed.kv_transfer.kv_connector import factory

root = pathlib.Path(factory.__file__).parent
registered = re.findall(r'register_connector\(\s*"([^"]+)",\s*"([^"]+)",\s*"([^"]+)"',
                        pathlib.Path(factory.__file__).read_text())
hma = []
from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
import importlib
for name, module, cls in registered:
    try:
        klass = getattr(importlib.import_module(module), cls)
    except Exception:  # optional third-party dependency missing: read the class line instead
        rel = module.replace("vllm.distributed.kv_transfer.kv_connector.", "").replace(".", "/") + ".py"
        text = (root / rel).read_text() if (root / rel).exists() else ""
        m = re.search(r"^class " + re.escape(cls) + r"\(([^)]*)\)", text, re.M)
        if m and "SupportsHMA" in m.group(1):
            hma.append(name)
        continue
    if issubclass(klass, SupportsHMA):
        hma.append(name)

kinds = {"full_attention": kvi.FullAttentionSpec, "sliding_window": kvi.SlidingWindowSpec,
         "chunked_local": kvi.ChunkedLocalAttentionSpec, "mla": kvi.MLAAttentionSpec, "mamba": kvi.MambaSpec,
         "hidden_state": getattr(kvi, "HiddenStateCacheSpec", None)}
fields = {f.name for f in dataclasses.fields(kvi.KVCacheSpec)} | {f.name for f in dataclasses.fields(kvi.MambaSpec)}
fields |= {n for n in ("prefix_cacheable",) if isinstance(getattr(kvi.KVCacheSpec, n, None), property)}
sharded = {}
if "dcp_sharded" in fields:
    for k, cls in kinds.items():
        if cls is not None:
            sharded[k] = next(f.default for f in dataclasses.fields(cls) if f.name == "dcp_sharded")
import importlib as _il, sys as _sys
marks = json.loads(_sys.argv[1])


def _has(where):
    mod, _, qual = where.partition(":")
    try:
        obj = _il.import_module(mod)
    except Exception:
        return None
    for part in qual.split("."):
        fields = getattr(obj, "__dataclass_fields__", {})
        if hasattr(obj, part) or part in fields:
            obj = getattr(obj, part, None)
        else:
            return False
    return True


lookahead = {}
for name, module, cls in registered:
    try:
        klass = getattr(importlib.import_module(module), cls)
    except Exception:  # an optional dependency missing: its module source must not claim it
        rel = module.replace("vllm.", "", 1).replace(".", "/")
        src = pathlib.Path(vllm.__file__).parent / (rel + ".py")
        text = src.read_text() if src.exists() else ""
        lookahead[name] = None if "supports_lookahead_block_hashes" not in text else "unknown"
        continue
    f = getattr(klass, "supports_lookahead_block_hashes", None)
    if f is not None:
        from vllm.config import KVTransferConfig
        lookahead[name] = bool(f(KVTransferConfig(kv_connector=name, kv_role="kv_both")))
from vllm.config import speculative as spec_mod


def _flat(t):
    args = typing.get_args(t)
    return {t} if isinstance(t, str) else set().union(*(_flat(a) for a in args)) if args else set()


print(json.dumps({
    "spec_methods": sorted(_flat(getattr(spec_mod, "SpeculativeMethod", None))),
    "marks": {k: _has(w) for k, w in marks.items()},
    "lookahead": lookahead,
    "vllm": vllm.__version__,
    "modes": list(typing.get_args(cache_mod.MambaCacheMode)),
    "registered": [r[0] for r in registered],
    "hma": hma,
    "attention": sorted(k for k, c in kinds.items() if c is not None and issubclass(c, kvi.AttentionSpec)),
    "fields": sorted(fields & {"prefix_cacheable", "dcp_sharded", "tokens_per_state"}),
    "dcp_sharded_default": sharded,
}))
'''


# The releases under test (conftest.RELEASES: the ci subset of src/kvproof/facts/__init__.py's list by default;
# `make test RELEASES=all` reads back 0.27.1, 0.29, 0.30 and 0.31 too).
@pytest.fixture(scope="module", params=RELEASES)
def real(request):
    env = require_env(request.param)
    marks = json.dumps({k: where for k, (_, where) in facts.CONSUMER_MARKS.items()})
    proc = subprocess.run([str(env.python), "-c", PROBE, marks], capture_output=True, text=True, env=worker_env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return revision_for(got["vllm"]), got


def test_mamba_modes(real):
    rev, got = real
    assert set(facts.MAMBA_MODES[rev]) == set(got["modes"])


def test_connector_names(real):
    rev, got = real
    registered, hma = facts.release_connectors(got["vllm"], rev)
    assert set(registered) == set(got["registered"])
    assert set(hma) == set(got["hma"])
    assert facts.DEFAULT_CONNECTOR in got["hma"] and facts.HIDDEN_STATES_CONNECTOR in got["hma"]


def test_attention_kinds_and_dcp_sharded_default(real):
    rev, got = real
    assert set(facts.ATTENTION_KINDS) == set(got["attention"])
    for kind, default in got["dcp_sharded_default"].items():
        assert facts.default_dcp_sharded(kind) == default, kind


def test_spec_fields(real):
    rev, got = real
    assert set(facts.FIELDS[rev]) == set(got["fields"])


def test_lookahead_hash_connectors(real):
    """0.34's connectors that keep lookahead block hashes (facts.LOOKAHEAD_HASH_CONNECTORS)."""
    rev, got = real
    assert "unknown" not in got["lookahead"].values(), got["lookahead"]
    kept = {name for name, yes in got["lookahead"].items() if yes}
    assert kept == set(facts.lookahead_hash_connectors(got["vllm"]))


def test_consumer_marks(real):
    """Each consumer change (facts.CONSUMER_MARKS) is present exactly from its release on."""
    rev, got = real
    for name, (since, where) in facts.CONSUMER_MARKS.items():
        expected = facts.release_key(got["vllm"]) >= facts.release_key(since + ".0")
        assert got["marks"][name] is expected, (name, where, got["vllm"])


def test_speculative_methods(real):
    """Which speculative methods the release names (facts.SPEC_METHODS_SINCE), read from its
    SpeculativeMethod literal: a method it lacks is NOT_EXPRESSIBLE there (consumer.drafters.build)."""
    rev, got = real
    for m in facts.SPEC_METHODS:
        assert (m in got["spec_methods"]) is facts.release_has_spec_method(got["vllm"], m), (m, got["vllm"])


def _string_texts(path) -> set[str]:
    """Every string literal of a source file, with ``+`` and implicit concatenation joined and an
    f-string's fields read as ``{}`` (how vLLM writes its assertion messages)."""
    def text(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = text(node.left), text(node.right)
            return None if left is None or right is None else left + right
        return None
    return {t for node in ast.walk(ast.parse(path.read_text())) if (t := text(node))}


@pytest.mark.parametrize("release", RELEASES)
def test_refusal_release_ranges(release):
    """Each refusal by design (contracts.UNSUPPORTED_BY_DESIGN) is in the release's source exactly
    within its release range (Refusal.since/.until), read statically from the installed package."""
    from kvproof.judging.contracts import UNSUPPORTED_BY_DESIGN
    env = require_env(release)
    sp = envs.site_packages(env.root)
    for r in UNSUPPORTED_BY_DESIGN:
        path = sp / "vllm" / (r.where.split(":")[0])
        present = path.exists() and any(r.message in t for t in _string_texts(path))
        assert present is r.in_release(release), (release, r.message, r.since, r.until)


# The model runner each parallel drafter gets, built by the consumer tier's own configs (no scheduler).
RUNNER_PROBE = r'''
import contextlib, json, os
from dataclasses import replace
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
from kvproof.settings import use_release_cache_root
use_release_cache_root()
import torch  # noqa: F401
import vllm
from kvproof import facts
from kvproof.bridge.build import Builder
from kvproof.consumer import drafters
from kvproof.consumer.configs import EngineConfigs
from kvproof.consumer.drafts import Drafts
from kvproof.consumer.stream import default_stream
from kvproof.inputs.layout import Layout, Speculative

layout = Layout.from_dict({"groups": [{"kind": "full_attention", "block_size": 16}],
                           "cache": {"block_size": 16, "enable_prefix_caching": True}})
configs = EngineConfigs(Builder())
out = {"vllm": vllm.__version__}
for m in facts.PARALLEL_DRAFT_METHODS:
    drafting = replace(layout, speculative=Speculative(m, 3))
    stream = default_stream(drafting)
    for override in (False, True):
        with drafters.model_runner(Drafts(m, 3)) if override else contextlib.nullcontext():
            try:
                cfg = configs.vllm_config(drafting, stream, 64)
                r = {"v2": bool(getattr(cfg, "use_v2_model_runner", True))}  # 0.34 removed V1
            except Exception as err:
                r = {"error": " ".join(str(err).split())[:400]}
        out[f"{m}:{'kvproof' if override else 'as-is'}"] = r
print(json.dumps(out))
'''


@pytest.fixture(scope="module", params=RELEASES)
def runners(request):
    env = require_env(request.param)
    proc = subprocess.run([str(env.python), "-c", RUNNER_PROBE], capture_output=True, text=True, env=worker_env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_dspark_runs_only_on_model_runner_v2(runners):
    """facts.V2_RUNNER_SPEC_METHODS, read back: built as this machine would build it, a DSpark config
    either gets Model Runner V2 or is refused for V1 ("Model Runner V1 does not support: dspark ...")
    or for the V2 runner's Triton (the machine's limit); never V1. With kvproof's stand-in for the
    GPU engine (consumer.drafters.model_runner) it builds, on V2. DFlash builds as it is."""
    got = runners
    for m in facts.PARALLEL_DRAFT_METHODS:
        as_is, ours = got[f"{m}:as-is"], got[f"{m}:kvproof"]
        if m in facts.V2_RUNNER_SPEC_METHODS:
            refused = ("Model Runner V1 does not support", "Model Runner V2 requires Triton")
            assert as_is.get("v2") is True or any(why in as_is.get("error", "") for why in refused), \
                (got["vllm"], m, as_is)
            assert ours == {"v2": True}, (got["vllm"], m, ours)
        else:
            assert "error" not in as_is and ours == as_is, (got["vllm"], m, as_is, ours)
