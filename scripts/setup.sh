#!/usr/bin/env bash
# Set up everything on a fresh machine that has only Python: a venv in .venv with the pinned
# torch, the pack's requirements (core + the eval extra) and the test tools, and .venv-floor/, the
# lowest supported transformers / diffusers as an overlay for the second test run (scripts/test.sh).
# Safe to run again (fast when done).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${RESPEC_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.respec-installed"
# Re-install when what is installed changes (the requirements or this script's pins), not when
# pyproject.toml's pytest settings do.
WANT="$(cat requirements.txt requirements-eval.txt requirements-test.txt scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Exactly these: a looser pin can pull another multi-GB build.
  "$VENV/bin/python" -m pip install -q torch==2.14.1 torchvision==0.29.1
  "$VENV/bin/python" -m pip install -q -r requirements.txt -r requirements-eval.txt -r requirements-test.txt
  echo "$WANT" > "$STAMP"
fi
# The floor overlay: only the packages whose versions differ, so torch and the rest are reused.
FLOOR=${RESPEC_FLOOR_DIR:-.venv-floor}
FLOOR_WANT="$(cat .ci/requirements-floor.txt | sha256sum | cut -c1-16)"
if [ "${RESPEC_FLOOR:-1}" != "0" ] && { [ ! -f "$FLOOR/.respec-installed" ] || [ "$(cat "$FLOOR/.respec-installed")" != "$FLOOR_WANT" ]; }; then
  rm -rf "$FLOOR"
  "$VENV/bin/python" -m pip install -q --no-deps --target "$FLOOR" -r .ci/requirements-floor.txt
  echo "$FLOOR_WANT" > "$FLOOR/.respec-installed"
fi
# The frontend's unit tests use Node's built-in test runner (no npm packages).
if ! command -v node >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq nodejs) >/dev/null
  else
    echo "Node.js is needed for the frontend tests; install it (https://nodejs.org)." >&2
    exit 1
  fi
fi
