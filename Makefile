# kvproof: every target sets up what it needs (dev venv, vLLM environments).
PY        ?= python3
VENV      := .venv
VPY       := $(VENV)/bin/python
RELEASES  ?= 0.27.0 0.28.0 0.32.0
VLLM      ?= 0.32.0
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= $(shell nproc)
VERIFY_ARGS ?=
PYTEST_ARGS ?=
export KVPROOF_REQUIRE_ENVS := 1

.PHONY: verify test unit envs fuzz fuzz-continuous replay matrix bench clean

$(VENV)/.stamp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

envs: $(VENV)/.stamp
	$(VPY) -m kvproof env create $(RELEASES)

verify: envs
	$(VPY) -m kvproof verify $(VERIFY_ARGS)

test: envs
	$(VPY) -m pytest $(PYTEST_ARGS)

unit: $(VENV)/.stamp
	$(VPY) -m pytest tests/unit

fuzz: envs
	$(VPY) -m kvproof fuzz --vllm $(VLLM) --seconds $(FUZZ_SECONDS)

fuzz-continuous: envs
	$(VPY) -m kvproof fuzz --vllm $(VLLM) --continuous --jobs $(FUZZ_JOBS)

# The seed class by default; MATRIX=corpus/ runs every file (engine synthesis: slow).
MATRIX ?= corpus/28ac3a5ad68a6bff.json

replay: envs
	$(VPY) -m kvproof replay corpus/ --tier all --no-synth

matrix: envs
	$(VPY) -m kvproof bisect $(MATRIX) --matrix

bench: envs
	$(VPY) bench/bench_bridge.py
	$(VPY) bench/bench_verify.py
	$(VPY) bench/bench_fuzz.py
	$(VPY) bench/bench_replay.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis build src/*.egg-info
	@echo "vLLM environments are kept in ~/.cache/kvproof/envs (remove by hand if wanted)"
