#!/usr/bin/env bash
# A short check for a session lent a GPU machine (one H100/H200 with PyTorch, transformers, accelerate and peft;
# no TRL, vLLM, provers or network), under 8 minutes: what the machine has; bf16 autocast over fp32 master weights
# moves the weights where bf16 storage does not; SFT and GRPO-style steps on a config-initialised model of
# Qwen2.5-0.5B's shape (nothing downloaded; rewards are real Coq verdicts recorded on CPU: the verifier does not
# travel). Prints `gpu_check: RESULT ...` lines and writes DIR/gpu_check.json with --out DIR; exits non-zero with
# one `gpu_check: FAIL: ...` line when something is missing (2) or broke (1).
#   scripts/gpu_check.sh --out runs/gpu_check   # on the GPU machine (the device tool's command; $OUT there)
#   scripts/gpu_check.sh --cpu-dry-run          # the same stages on CPU with a tiny model (a minute or two)
# It runs training/gpu_check.py as a plain file: torch and transformers only (`import proofgym` needs gymnasium,
# which that machine lacks).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
  PY="$(command -v python3 || true)"
fi
if [ -z "$PY" ]; then
  echo "gpu_check: FAIL: no python (set PYTHON=/path/to/python)"
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
# 8 minutes at most, whatever happens (the device machine's time is short)
PYTHONUNBUFFERED=1 /usr/bin/timeout --kill-after=10 480 "$PY" training/gpu_check.py "$@"
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "gpu_check: FAIL: did not finish in 8 minutes"
fi
exit "$rc"
