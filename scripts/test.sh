#!/usr/bin/env bash
# The test command: sets everything up, then runs the Python and the frontend tests (CPU, offline).
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh --fast     the inner loop: skips tests marked @pytest.mark.slow
# Other arguments go to pytest, e.g. `bash scripts/test.sh --fast tests/test_history_store.py`.
# Without test paths it then runs the controller, editor and store tests again on the lowest
# supported transformers / diffusers (.ci/requirements-floor.txt; RESPEC_FLOOR=0 skips that).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${RESPEC_VENV:-.venv}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 YOLO_OFFLINE=1 RESPEC_PROGRESS=0
# One compute thread per test process: the tests use tiny models, where a thread pool per
# process only fights the other processes on a busy machine (10x slower on 2 shared cores).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
args=()
paths=0
for a in "$@"; do
  if [ "$a" = "--fast" ]; then args+=(-m "not slow"); else args+=("$a"); fi
  case "$a" in tests/*|*.py|*::*) paths=1 ;; esac
done
status=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ${args[@]+"${args[@]}"} || status=$?
if [ "${RESPEC_FLOOR:-1}" != "0" ] && [ "$paths" = "0" ]; then
  FLOOR=${RESPEC_FLOOR_DIR:-.venv-floor}
  echo "== again on the floor versions: $(grep -v '^#' .ci/requirements-floor.txt | tr '\n' ' ')"
  PYTHONPATH="$FLOOR" "$VENV/bin/python" -m pytest -q -p no:cacheprovider ${args[@]+"${args[@]}"} \
    tests/test_controller_*.py tests/test_editors_*.py tests/test_history_*.py || status=$?
fi
if [ -d js/tests ]; then
  node --test js/tests/ || status=$?
fi
exit $status
