#!/usr/bin/env bash
# The one command: install the peers' venv (once) and run the comparison. Arguments go to run.py:
#   bash benchmarks/peers/run.sh                       # 10,000 memories and LoCoMo recall
#   bash benchmarks/peers/run.sh --sizes 10000,100000  # and 100,000
# Needs the project installed and its embedded servers up (`make services`, or `make run`).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$HERE/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.installed"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MEM0_TELEMETRY=False LITELLM_LOCAL_MODEL_COST_MAP=True

test -x "$ROOT/.venv/bin/python" || { echo "the project is not installed: run 'make install' (or 'make run') first"; exit 1; }
if [ ! -f "$STAMP" ] || [ "$HERE/requirements.txt" -nt "$STAMP" ]; then
  python3.11 -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip
  "$PY" -m pip install --quiet "torch==2.13.0"   # the local CPU build; any other spec pulls CUDA
  "$PY" -m pip install --quiet -r "$HERE/requirements.txt"
  # agent-memory-server asks for Python >=3.12,<3.13 (every release since 0.12.4) and this machine
  # has 3.11; its code compiles and runs on 3.11. 0.15.x needs agent-memory-client>=0.14.1, which
  # PyPI does not have: 0.14.0 is the newest that installs.
  "$PY" -m pip install --quiet --no-deps --ignore-requires-python "agent-memory-server==0.14.0"
  touch "$STAMP"
fi
cd "$HERE"
exec "$PY" run.py "$@"
