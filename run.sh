#!/usr/bin/env bash
# Set up once, then run.   ./run.sh [serve|pipeline|test|bench] [ARGS...]
#   serve     (default) the dashboard on http://127.0.0.1:$PORT (5006); ARGS go to the app. ADDRESS=0.0.0.0
#             serves other machines too, with a warning (the dashboard has no authentication of its own);
#             ORIGIN=HOST:PORT then names the server as their browsers do
#   pipeline  python -m pipeline ARGS (default: run on the synthetic recording)
#   test      the test suite (pytest ARGS); installs Chromium for the browser tests if missing
#   bench     python -m benchmarks.run ARGS
# Installs into ./.venv (sharing the system's packages, so a GPU box's CUDA torch/RAPIDS are used).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

setup() {
  [ -x "$PY" ] || python3 -m venv --system-site-packages "$VENV"
  local extras="test" stamp
  has_gpu && extras="gpu,test"
  stamp="$VENV/.installed-$extras-$(sha1sum pyproject.toml | cut -c1-12)"
  [ -f "$stamp" ] && return
  echo "setting up $VENV (extras: $extras)…" >&2
  # Without a GPU take the CPU build of torch; with one, pip's default (CUDA) build.
  "$PY" -c "import torch" 2>/dev/null || { has_gpu && "$PY" -m pip install -q torch || "$PY" -m pip install -q "torch==2.13.0"; }
  "$PY" -m pip install -q -e ".[$extras]"
  touch "$stamp"
}

browser() {
  command -v chromium >/dev/null 2>&1 && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium for the browser tests…" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium not found: browser tests will be skipped (apt-get install chromium)" >&2
  fi
}

cmd=${1:-serve}; [ $# -gt 0 ] && shift
setup
case "$cmd" in
  serve)
    port=${PORT:-5006}; address=${ADDRESS:-127.0.0.1}
    echo "dashboard: http://$address:$port/app" >&2
    # `panel serve`, with the collector paused while it imports (dashboard/serve.py, which lets pages
    # at 127.0.0.1 and localhost connect when no ORIGIN is given). --warm runs the app once at start:
    # the pipeline starts now, not at the first visit.
    exec "$PY" -m dashboard.serve dashboard/app.py --address "$address" --port "$port" \
      ${ORIGIN:+--allow-websocket-origin "$ORIGIN"} --num-procs 1 --warm --args "$@" ;;
  pipeline) exec "$PY" -m pipeline "${@:-run}" ;;
  test) browser; exec "$PY" -m pytest "$@" ;;
  bench) exec "$PY" -m benchmarks.run "$@" ;;
  *) echo "usage: ./run.sh [serve|pipeline|test|bench] [ARGS...]" >&2; exit 2 ;;
esac
