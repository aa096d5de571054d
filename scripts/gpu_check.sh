#!/usr/bin/env bash
# A short check for a session lent a GPU machine (under 8 minutes): what the machine has, then a few GRPO steps
# with vLLM colocate and bf16 on a config-initialised small model (nothing downloaded), the real Coq verifier
# pool as the reward (envs/tasks/data/coq-tiny.jsonl). Prints generation tokens/s, reward seconds / step seconds
# and peak GPU memory as `gpu_check: RESULT ...` lines; exits non-zero with one `gpu_check: FAIL: ...` line when
# something is missing.
#   scripts/gpu_check.sh                # on the GPU machine
#   scripts/gpu_check.sh --cpu-dry-run  # everything but the GPU, on CPU (the same python entry)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
  PY="$(command -v python3 || true)"
fi
if [ -z "$PY" ]; then
  echo "gpu_check: FAIL: no python: run scripts/setup.sh (or set PYTHON=/path/to/python)"
  exit 2
fi
if [ "${1:-}" != "--cpu-dry-run" ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: FAIL: nvidia-smi not found: this machine has no NVIDIA driver (--cpu-dry-run checks the rest)"
    exit 2
  fi
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv || {
    echo "gpu_check: FAIL: nvidia-smi could not read the GPU"; exit 2; }
fi
if ! "$PY" -c "import proofgym" 2>/dev/null; then
  echo "gpu_check: FAIL: $PY cannot import proofgym: pip install -e '.[train]' (and vllm on the GPU machine)"
  exit 2
fi
# 8 minutes at most, whatever happens (the device machine's time is short)
/usr/bin/timeout --kill-after=10 480 "$PY" -m proofgym.training.gpu_check "$@"
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "gpu_check: FAIL: did not finish in 8 minutes"
fi
exit "$rc"
