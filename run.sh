#!/usr/bin/env bash
# Set up once, then run.   ./run.sh [serve|pipeline|ecg|test|test-all|bench] [ARGS...]
#   serve     (default) the dashboard on http://127.0.0.1:$PORT (5006); ARGS go to the app. ADDRESS=0.0.0.0
#             serves other machines too, with a warning (the dashboard has no authentication of its own);
#             ORIGIN=HOST:PORT then names the server as their browsers do
#   pipeline  python -m pipeline ARGS (default: run on the synthetic recording; options alone are run's)
#   ecg       the installed command: ecg ARGS (run, serve, batch, evaluate, synth, reference)
#   test      the fast layer of the test suite: every test not marked browser or slow (pytest ARGS; a
#             -m of your own replaces that selection)
#   test-all  every test, browser tests included (what CI runs; `test --all` is the same); installs
#             Chromium for them with apt-get when run as root and none is there, saying so first
#   bench     python -m benchmarks.run ARGS
# Installs into ./.venv (sharing the system's packages, so a GPU box's CUDA torch/RAPIDS are used),
# saying so first: the project in editable mode with its test extra (and the gpu extra when
# nvidia-smi sees a GPU), which puts the `ecg` command at .venv/bin/ecg.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

setup() {
  [ -x "$PY" ] || { echo "creating the virtualenv $VENV (python3 -m venv --system-site-packages)…" >&2
                    python3 -m venv --system-site-packages "$VENV"; }
  local extras="test" stamp
  has_gpu && extras="gpu,test"
  stamp="$VENV/.installed-$extras-$(sha1sum pyproject.toml | cut -c1-12)"
  [ -f "$stamp" ] && return
  echo "setting up $VENV: installing PyTorch (unless present) and this project (editable) with extras $extras" \
       "and their dependencies (pip)…" >&2
  # PyTorch first, unless the system has it: pip's newest with a GPU, 2.13.0 without one.
  "$PY" -c "import torch" 2>/dev/null || { has_gpu && "$PY" -m pip install -q torch || "$PY" -m pip install -q "torch==2.13.0"; }
  "$PY" -m pip install -q -e ".[$extras]"
  touch "$stamp"
}

browser() {
  command -v chromium >/dev/null 2>&1 && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests (apt-get install chromium, as root)…" >&2
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
  pipeline)
    # Options alone (`./run.sh pipeline --no-cache`) are the synthetic run's; a word is a command.
    case "${1:--}" in -h|--help) ;; -*) set -- run "$@" ;; esac
    exec "$PY" -m pipeline "$@" ;;
  ecg) exec "$VENV/bin/ecg" "$@" ;;
  # The fast layer: what a change needs before it is committed. A -m in ARGS comes later and wins.
  # Its ten slowest tests are listed at the end: candidates for the slow marker when it grows.
  test)
    if [ "${1:-}" = --all ]; then shift; browser; exec "$PY" -m pytest "$@"; fi
    exec "$PY" -m pytest -m "not browser and not slow" --durations=10 "$@" ;;
  test-all) browser; exec "$PY" -m pytest "$@" ;;
  bench) exec "$PY" -m benchmarks.run "$@" ;;
  *) echo "usage: ./run.sh [serve|pipeline|ecg|test|test-all|bench] [ARGS...]" >&2; exit 2 ;;
esac
