#!/usr/bin/env bash
# The test command: sets everything up, then runs the Python and the frontend tests (CPU, offline).
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh --fast     the inner loop: skips tests marked @pytest.mark.slow
# Other arguments go to pytest, e.g. `bash scripts/test.sh --fast tests/test_history_store.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${RESPEC_VENV:-.venv}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 YOLO_OFFLINE=1 RESPEC_PROGRESS=0
# One compute thread per test process: the tests use tiny models, where a thread pool per
# process only fights the other processes on a busy machine (10x slower on 2 shared cores).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
args=()
for a in "$@"; do
  if [ "$a" = "--fast" ]; then args+=(-m "not slow"); else args+=("$a"); fi
done
status=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ${args[@]+"${args[@]}"} || status=$?
if [ -d js/tests ]; then
  node --test js/tests/ || status=$?
fi
exit $status
