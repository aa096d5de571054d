# The README's two commands: `make eval` (main job on the built-in default) and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PROOFGYM_CACHE ?= $(CURDIR)/.cache/proofgym
WORKERS ?= 2

.PHONY: setup suite eval test test-fast bench lint clean

setup: $(BIN)/proofgym
$(BIN)/proofgym: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	@touch $@

$(PROOFGYM_CACHE)/suites/coq-stdlib.jsonl: | setup
	$(BIN)/proofgym build coq-stdlib --workers $(WORKERS)

suite: $(PROOFGYM_CACHE)/suites/coq-stdlib.jsonl

## main job: build + validate the default Coq suite, evaluate the base policy on held-out tasks, a short GRPO with
## the real Coq verifier as reward, evaluate the checkpoint, write the report. A GPU machine: TRAIN_CONFIG=configs/train/grpo_gpu.yaml
TRAIN_CONFIG ?= configs/train/grpo_cpu.yaml
eval: suite
	$(BIN)/python scripts/main_job.py --config $(TRAIN_CONFIG) --verifier_workers $(WORKERS)

## all tiers that run on this machine (fast + real provers)
test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 tests

test-fast: setup
	$(BIN)/python -m pytest -q -m "not prover and not slow" tests

bench: setup
	$(BIN)/python scripts/bench_verifiers.py

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf .cache runs build *.egg-info
