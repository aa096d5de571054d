# The README's two commands: `make eval` (main job on the built-in default) and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PROOFGYM_CACHE ?= $(CURDIR)/.cache/proofgym
WORKERS ?= 2

.PHONY: setup suite eval test test-fast test-slow bench lint typecheck docs clean

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

## the fast tier and the real provers, in TEST_WORKERS pytest-xdist workers (TEST_WORKERS=0: one process);
## the run-wide HOL Light server's tests stay in one worker (tests/conftest.py); the 15 slowest tests at the end
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) --durations=15 -m "not slow or train_smoke" tests

## no prover: a minute or two
test-fast: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not prover and not slow" tests

## the slow tier, by hand (about 17 minutes): TRL and model serving on a tiny model, and the HOL Light tests
## that pay a second two-minute load (a root killed mid-check, a fresh CLI process, a pool worker's start-up)
test-slow: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 -m "slow and not train_smoke" tests

bench: setup
	$(BIN)/python scripts/bench_verifiers.py

## the gates CI runs first: ruff (style, imports, complexity and length bounds) and mypy (scripts/typecheck.sh)
lint: setup
	$(BIN)/ruff check .

typecheck: setup
	bash scripts/typecheck.sh

## the manual in docs/ as a site, in site/ (mkdocs.yml; --strict: a broken link or anchor, or a page not in nav,
## fails it). Preview with $(BIN)/mkdocs serve
docs: setup
	$(BIN)/mkdocs build --strict

clean:
	rm -rf .cache runs build site *.egg-info
