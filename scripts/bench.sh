#!/usr/bin/env bash
# The main job: the OCCUR benchmark loop, headless, end to end.
# Extra arguments go to `python -m respec bench`. Without any, it runs the simulated world
# (respec/sim, docs/sim.md): the 63-scenario sim set, every config, the simulated editor with
# exact ground truth and oracle masks; no weights needed, and the configs differ for real reasons
# (the baseline re-invents revealed pixels, + HRS copies them from the reference the controller
# chose). `--smoke` is the install check with tiny random-weight models; real runs pass real
# options, e.g. `--config all --editor flux2`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${RESPEC_VENV:-.venv}
if [ $# -eq 0 ]; then set -- --editor sim --masks oracle --config all; fi
exec "$VENV/bin/python" -m respec bench "$@"
