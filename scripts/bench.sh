#!/usr/bin/env bash
# The main job: the bundled OCCUR sample benchmark, headless, end to end.
# Extra arguments go to `python -m respec bench` (default: --smoke, tiny random-weight models
# on the CPU, for a machine without the real weights).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${RESPEC_VENV:-.venv}
if [ $# -eq 0 ]; then set -- --smoke; fi
exec "$VENV/bin/python" -m respec bench "$@"
