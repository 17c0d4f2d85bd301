# kvproof: every target sets up what it needs (dev venv, vLLM environments).
PY        ?= python3
VENV      := .venv
VPY       := $(VENV)/bin/python
# Releases come from the one release list (src/kvproof/facts/__init__.py); RELEASES selects a subset of it:
# ci (oldest, seed pair, newest CPU, newest: what make test runs), all, cpu, python-only,
# or releases by name. `kvproof env releases SUBSET` prints one.
RELEASES  ?= ci
VLLM      ?= default
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= $(shell nproc)
# make fuzz: the resolver's contracts, then the consumers (seeded by what the reference models derive)
FUZZ_TARGETS ?= contracts consumers
VERIFY_ARGS ?=
PYTEST_ARGS ?=
# Test workers (pytest-xdist, one file per worker at a time): the cores, at most 4 (each
# worker drives vLLM subprocesses of a few hundred MB).
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
export KVPROOF_REQUIRE_ENVS := 1

.PHONY: verify test unit envs envs-all fuzz fuzz-continuous replay matrix bench bench-smoke clean

$(VENV)/.stamp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

envs: $(VENV)/.stamp
	$(VPY) -m kvproof env create $(RELEASES)

# Every managed release: verify checks each modelled revision against its real code.
envs-all: $(VENV)/.stamp
	$(VPY) -m kvproof env create all

verify: envs-all
	$(VPY) -m kvproof verify $(VERIFY_ARGS)

test: envs
	KVPROOF_RELEASES="$(RELEASES)" $(VPY) -m pytest -n $(TEST_JOBS) --dist loadfile --durations=25 $(PYTEST_ARGS)

unit: $(VENV)/.stamp
	$(VPY) -m pytest tests/unit

# Each target for FUZZ_SECONDS, one after the other; the exit code is the worst of them.
fuzz: envs
	@rc=0; for t in $(FUZZ_TARGETS); do \
	  $(VPY) -m kvproof fuzz --vllm $$($(VPY) -m kvproof env releases $(VLLM)) --target $$t --seconds $(FUZZ_SECONDS); \
	  r=$$?; [ $$r -gt $$rc ] && rc=$$r; done; exit $$rc

fuzz-continuous: envs
	$(VPY) -m kvproof fuzz --vllm $$($(VPY) -m kvproof env releases $(VLLM)) --continuous --jobs $(FUZZ_JOBS)

# Every known finding (the ledger under findings/, plus MATRIX files) x every managed release.
MATRIX ?= corpus/28ac3a5ad68a6bff.json

replay: envs
	$(VPY) -m kvproof replay corpus/ --tier all --no-synth

matrix: envs-all
	$(VPY) -m kvproof bisect --matrix $(MATRIX)
	@# a report: the regressions it lists (exit 1) do not fail the target; bad input (2) does
	$(VPY) -m kvproof compare --models --vllm all || [ $$? -eq 1 ]

# Every file in bench/results is written by one of these scripts (each reads the
# machine's load itself). BENCH=short (default: 97 min on a fresh clone on 2 cores shared with a
# make test and table regeneration, niced; its self-test matrices are most of it) or BENCH=full.
BENCH ?= short
ifeq ($(BENCH),full)
BENCH_BRIDGE  :=
BENCH_VERIFY  :=
BENCH_FUZZ    := --runs 50000 --rounds 3 --seeds 5 --cov-seconds 60
BENCH_REPLAY  :=
BENCH_CROSS   := --timeout 60
BENCH_CONSUMERS :=
BENCH_SELFTEST  :=
BENCH_SELFTEST_CONS := --campaign-seconds 60
BENCH_CONT    := --seconds 600 --box 60
BENCH_DIFF    := --campaign-seconds 300 --max 300
else
BENCH_BRIDGE  := --n 500 --naive 1
BENCH_VERIFY  := --max-n 4 --timeout 10
BENCH_FUZZ    := --runs 10000 --rounds 2 --seeds 2 --ttf-limit 30 --cov-seconds 15
BENCH_REPLAY  := --no-engine
BENCH_CROSS   := --timeout 10
BENCH_CONSUMERS := --n 1000 --seconds 120
BENCH_SELFTEST  := --seconds 3
BENCH_SELFTEST_CONS := --campaign-seconds 20
BENCH_CONT    := --seconds 120 --box 30
BENCH_DIFF    := --campaign-seconds 60 --max 50
endif

# Every bench script at its smallest setting (tests/integration/test_bench_scripts.py; make test runs the
# fast ones, this the slow ones too): each runs to the end and writes its table, into a temp folder.
bench-smoke: envs-all
	KVPROOF_BENCH_SMOKE=1 $(VPY) -m pytest -n $(TEST_JOBS) tests/integration/test_bench_scripts.py

bench: envs
	$(VPY) bench/bench_bridge.py $(BENCH_BRIDGE)
	$(VPY) bench/bench_zygote.py
	$(VPY) bench/bench_verify.py $(BENCH_VERIFY)
	$(VPY) bench/bench_fuzz.py $(BENCH_FUZZ)
	$(VPY) bench/bench_replay.py $(BENCH_REPLAY)
	$(VPY) bench/bench_crosshair.py $(BENCH_CROSS)
	if [ -f bench/bench_consumers.py ]; then $(VPY) bench/bench_consumers.py $(BENCH_CONSUMERS); fi
	if [ -f bench/bench_selftest.py ]; then $(VPY) bench/bench_selftest.py $(BENCH_SELFTEST); fi
	@# the behavioural consumer mutants (kvproof selftest --consumers) -> bench/results/selftest_consumers.md
	if [ -f bench/bench_selftest.py ]; then $(VPY) bench/bench_selftest.py --consumers $(BENCH_SELFTEST_CONS); fi
	$(VPY) bench/bench_continuous.py $(BENCH_CONT)
	$(VPY) bench/bench_derive.py
	$(VPY) bench/bench_spec.py --blocks 64,544
	@# the release differential along the releases `make envs` built (RELEASES=all: the whole chain)
	$(VPY) bench/bench_differential.py $(foreach r,$(RELEASES),--vllm $(r)) $(BENCH_DIFF)

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis build src/*.egg-info
	@echo "vLLM environments are kept in ~/.cache/kvproof/envs (remove by hand if wanted)"
