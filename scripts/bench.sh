#!/usr/bin/env bash
# The main job: the OCCUR benchmark loop, headless, end to end.
# Extra arguments go to `python -m respec bench`. Unless they name an editor (or --smoke, --server),
# it runs the simulated world (respec/sim, docs/sim.md): by default the 63-scenario sim set, every
# config, the simulated editor with exact ground truth and oracle masks; no weights needed, and
# the configs differ for real reasons (the baseline re-invents revealed pixels, + HRS copies them
# from the reference the controller chose). `--smoke` is the install check with tiny random-weight models; real runs pass real
# options, e.g. `--config all --editor flux2`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${RESPEC_VENV:-.venv}
# The sim world unless the arguments name an editor, the smoke check or ComfyUI servers: `--limit 5`
# is a 5-scenario sim run, `--threads 1` the whole sim run on one thread.
real=0
for arg in "$@"; do
  case "$arg" in --editor|--editor=*|--smoke|--server|--server=*) real=1 ;; esac
done
if [ "$real" = 0 ]; then set -- --editor sim "$@"; fi
exec "$VENV/bin/python" -m respec bench "$@"
