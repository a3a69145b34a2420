#!/usr/bin/env bash
# The test command: sets everything up, then runs the Python and the frontend tests (CPU, offline).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${RESPEC_VENV:-.venv}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 YOLO_OFFLINE=1 RESPEC_PROGRESS=0
status=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" || status=$?
if [ -d js/tests ]; then
  node --test js/tests/ || status=$?
fi
exit $status
