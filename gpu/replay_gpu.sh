#!/usr/bin/env bash
# kvproof engine-tier replay on a GPU machine with the CUDA `vllm` package.
#
# Run from the repository root:   bash gpu/replay_gpu.sh
# Results go to $OUT (default gpu/out): replay_gpu.md (table), results.json, replay_gpu.log.
#
# What it does, within GPU_BUDGET_S seconds (default 540):
#   1. reports the GPU, then looks for an interpreter that already has vllm + CUDA torch;
#   2. otherwise installs vllm==$NEW (default: the newest release of src/kvproof/facts/__init__.py) and then vllm==$OLD (the oldest) into
#      venvs under $WORK (uv if available, else pip), each bounded by the time left;
#      if the package registry cannot be reached it says so and stops;
#   3. boots the seed class on each installed release with the same code as the CPU tier
#      (kvproof.tiers.boots -> python -m kvproof.tiers.boot in that venv):
#        - NemotronH tiny, sliding window 64, fp8 KV cache with sliding-window layers unquantised
#          (groups mamba:128x2 + sliding_window:64, cache 64 on CPU): 0.27 should die in
#          HybridKVCacheCoordinator, 0.33 should boot and generate;
#        - NemotronH tiny with hidden-state extraction (extract_hidden_states + ExampleHiddenStatesConnector):
#          on a GPU generation works, unlike on CPU;
#        - the first recipe plus KV offloading to CPU (OffloadingConnector): 0.27 dies in the connector's own
#          divisibility assertion (tokens_per_block % tokens_per_hash); on CPU the fixed releases cannot show
#          the other side (CPU offloading needs a GPU), here they can.
#      The live layout may differ from CPU (other attention backend, other kernel block sizes): the
#      table shows what the GPU engine really built.
# KVPROOF_GPU_LEFT: set by this script (the seconds of GPU_BUDGET_S left) and read by its Python part
#   below as the deadline for the boots (400 when unset).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu/out}"
WORK="${WORK:-/tmp/kvproof-gpu}"
# Default releases from the one release list (src/kvproof/facts/__init__.py): NEW the newest managed release, OLD the
# oldest. Read with `kvproof env releases all` (oldest first), else from src/kvproof/facts/__init__.py itself (stdlib
# data) with python3; the literals are only the fallback where neither runs.
kvproof_cli="$(command -v kvproof || { [ -x .venv/bin/kvproof ] && echo .venv/bin/kvproof; } || true)"
ALL_RELEASES="$( { [ -n "$kvproof_cli" ] && "$kvproof_cli" env releases all 2>/dev/null; } ||
  python3 -c "import runpy; print(*runpy.run_path('src/kvproof/facts/__init__.py')['MANAGED_RELEASES'])" 2>/dev/null || true)"
NEW="${NEW:-$(echo "$ALL_RELEASES" | awk '{print $NF}')}"; NEW="${NEW:-0.33.0}"
OLD="${OLD:-$(echo "$ALL_RELEASES" | awk '{print $1}')}"; OLD="${OLD:-0.27.0}"
BUDGET="${GPU_BUDGET_S:-540}"
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/replay_gpu.log") 2>&1
START=$SECONDS
left() { echo $(( BUDGET - (SECONDS - START) )); }
say() { echo "[replay_gpu +$((SECONDS - START))s] $*" >&2; }

say "host: $(hostname)  budget ${BUDGET}s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || say "nvidia-smi failed"
PY3="$(command -v python3 || true)"
[ -n "$PY3" ] || { say "no python3 on this machine: cannot run"; exit 2; }
say "python3: $($PY3 --version 2>&1)"

export VLLM_TARGET_DEVICE=cuda VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_LOGGING_LEVEL=ERROR PIP_DISABLE_PIP_VERSION_CHECK=1

PYTHONS=()
# 1. an interpreter that already has CUDA vLLM?
for cand in "$PY3" /usr/bin/python3 /opt/conda/bin/python /usr/local/bin/python3; do
  [ -x "$cand" ] || continue
  if v=$(timeout 120 "$cand" -c "import torch, vllm; assert torch.cuda.is_available(); print(vllm.__version__)" 2>/dev/null); then
    say "found vllm $v with CUDA at $cand"; PYTHONS+=("$cand"); break
  fi
done

install_release() {  # $1 = release; echoes the venv python on success
  local rel="$1" venv="$WORK/venv-$1" budget
  budget=$(( $(left) - 150 ))
  if [ "$budget" -lt 60 ]; then say "no time left to install vllm==$rel"; return 1; fi
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import vllm" 2>/dev/null; then echo "$venv/bin/python"; return 0; fi
  say "installing vllm==$rel into $venv (limit ${budget}s)"
  if command -v uv >/dev/null 2>&1; then
    uv venv -q -p "$PY3" "$venv" >&2 && timeout "$budget" uv pip install -q -p "$venv/bin/python" "vllm==$rel" >&2
  else
    "$PY3" -m venv "$venv" >&2 && timeout "$budget" "$venv/bin/python" -m pip install -q "vllm==$rel" >&2
  fi
  local rc=$?
  if [ $rc -ne 0 ]; then
    say "install of vllm==$rel failed (rc=$rc; 124 = out of time). Registry reachable? $(timeout 10 "$PY3" -c 'import urllib.request as u; u.urlopen("https://pypi.org/simple/vllm/", timeout=8); print("yes")' 2>&1 | tail -1)"
    return 1
  fi
  echo "$venv/bin/python"
}

if [ ${#PYTHONS[@]} -eq 0 ]; then
  for rel in "$NEW" "$OLD"; do
    if p=$(install_release "$rel"); then PYTHONS+=("$p"); else
      [ "$rel" = "$NEW" ] && { say "cannot install vLLM here: no GPU replay possible"; break; }
    fi
  done
fi
[ ${#PYTHONS[@]} -gt 0 ] || { echo "# GPU replay: vLLM could not be installed" > "$OUT/replay_gpu.md"; exit 3; }

say "booting on: ${PYTHONS[*]}"
PYTHONPATH="$PWD/src" KVPROOF_GPU_LEFT="$(left)" "$PY3" - "$OUT" "${PYTHONS[@]}" <<'PYEOF'
import json, os, sys, time
from kvproof.envs import from_python
from kvproof.tiers import boots as engine, classify
from kvproof.tiers.families import SEED_HIDDEN_STATES, Recipe

out_dir, pythons = sys.argv[1], sys.argv[2:]
deadline = time.monotonic() + int(os.environ.get("KVPROOF_GPU_LEFT", "400")) - 20
recipes = {
    "seed sliding-window fp8": Recipe(family="nemotron_h", pattern="M*M-", sliding_window=64, kv_cache_dtype="fp8",
                                      kv_cache_dtype_skip_layers=("sliding_window",)),
    "seed hidden-state extraction": SEED_HIDDEN_STATES,
    "seed sliding-window fp8 + OffloadingConnector": Recipe(
        family="nemotron_h", pattern="M*M-", sliding_window=64, kv_cache_dtype="fp8",
        kv_cache_dtype_skip_layers=("sliding_window",), kv_connector="OffloadingConnector"),
}
rows = []
for py in pythons:
    env = from_python(py)
    for name, recipe in recipes.items():
        left = deadline - time.monotonic()
        if left < 60:
            rows.append({"python": py, "recipe": name, "verdict": "SKIP", "detail": "out of time"}); continue
        b = engine.boot(env, recipe, timeout=min(420, left))
        ev = classify.engine_verdict(b)
        row = {"python": py, "vllm": b.release, "recipe": name, "verdict": ev.verdict.name, "tier": str(ev.tier),
               "contracts": list(ev.contracts), "detail": ev.detail, "cpu": b.cpu,
               "live": b.layout_summary(), "scheduler": b.scheduler_block_size, "hash": b.hash_block_size,
               "boot_s": b.boot_seconds, "import_s": b.import_seconds, "generate_s": b.generate_seconds,
               "rss_mb": b.peak_rss_mb, "tokens": b.token_ids[:1], "frame": b.error_frame,
               "error": f"{b.error_type}: {b.error_message}"[:300] if b.error_type else "", "log": b.log_tail[-5:]}
        rows.append(row)
        print(json.dumps(row), flush=True)
json.dump(rows, open(os.path.join(out_dir, "results.json"), "w"), indent=2)
with open(os.path.join(out_dir, "replay_gpu.md"), "w") as fh:
    fh.write("# kvproof engine replay on GPU\n\n| vLLM | recipe | verdict | live layout | sched/hash | boot s | RSS MB | detail |\n|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        fh.write(f"| {r.get('vllm', '-')} | {r['recipe']} | {r['verdict']} | {r.get('live', '-')} | "
                 f"{r.get('scheduler')}/{r.get('hash')} | {r.get('boot_s')} | {r.get('rss_mb')} | "
                 f"{r['detail'][:160].replace('|', '/')} |\n")
print(open(os.path.join(out_dir, "replay_gpu.md")).read())
PYEOF
say "done"
