#!/usr/bin/env bash
# The GPU machine's measurements, one long command a stage (device time is scarce and the machine
# forgets /tmp when idle). From the repository root, the pack loaded (../shared/gpu/README.md):
#
#   benchmarks/gpu_session.sh tests|startup|serve|segment|quality|dashboard|scale|batch
#
# Logs and JSON go to $OUT (default benchmarks/results). serve: STARTS=N fresh servers each (default
# 3); segment: PROCESSES=N fresh processes (default 8); dashboard, scale: BOARDS=bokeh or cuxfilter
# for one board; batch: GPUS, PER_GPU, RECORDINGS, BUDGET choose the archive's layouts, TESTS=0
# skips the batch tests, MPS=1 runs under CUDA MPS.
set -uo pipefail
cd "$(dirname "$0")/.."
. .gpupack/meta/env.sh
export PYTHONPATH=".:${PYTHONPATH:-}"
# The test machine sets PYTHONDONTWRITEBYTECODE=1 and its packages ship no bytecode: every process
# recompiled ~3,000 modules (PyTorch, Panel, pandas: 3-6 s of each start). An ordinary pip install
# compiles them once; a bytecode cache folder does the same here.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/ecg-pycache
# And compiles them at install time, not in a user's first process (once per machine).
if [ ! -e "$PYTHONPYCACHEPREFIX/.compiled" ]; then
    python3 -m compileall -q -j 0 $(python3 -c 'import sys, sysconfig
print(" ".join({sysconfig.get_paths()["stdlib"], *(p for p in sys.path if p.endswith(("site-packages", "/site")))}))') \
        >/dev/null 2>&1
    touch "$PYTHONPYCACHEPREFIX/.compiled"
fi
OUT="${OUT:-benchmarks/results}"
RUNS=/tmp/ecg-runs
mkdir -p "$OUT" "$RUNS"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import sys; print('bytecode written:', not sys.flags.dont_write_bytecode, sys.pycache_prefix)"

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, say how it ended
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "[$name] exit $rc after $((SECONDS - started)) s"
    tail -n 25 "$OUT/$name.log"
    return $rc
}

case "${1:-}" in
tests)
    step gpu-tests 560 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests ;;
startup)
    step startup-cold 200 python3 -m benchmarks.serve_start --pipeline --cold --out "$OUT" -- --device gpu --out "$RUNS"
    step startup-cached 120 python3 -m benchmarks.serve_start --pipeline --out "$OUT" -- --device gpu --out "$RUNS"
    step train-speed 120 python3 -m benchmarks.train_speed --repeats 3
    bash "$0" serve ;;
serve)
    # STARTS fresh servers each (default 3). A machine's first process compiles CuPy's and Numba's
    # kernels (~70 s): when none has run here yet, one pipeline run does that first, untimed.
    [ -e /tmp/ecg-kernels-compiled ] || { step first-run 200 python3 -m pipeline run --no-cache --out "$RUNS" \
        && touch /tmp/ecg-kernels-compiled; }
    step serve-cold $((40 * ${STARTS:-3})) python3 -m benchmarks.serve_start --no-browser --cold --runs "${STARTS:-3}" \
        --out "$OUT" -- --out "$RUNS"
    step serve-cached $((25 * ${STARTS:-3})) python3 -m benchmarks.serve_start --no-browser --runs "${STARTS:-3}" \
        --out "$OUT" -- --out "$RUNS"
    cp -r /tmp/serve-start-* "$OUT/" 2>/dev/null ;;
segment)
    # The segmentation's time inside a run (the report's 'segment' line) in PROCESSES fresh processes on
    # the 20M default: what a server start pays, with the kernel caches filled. The first process on
    # a machine compiles the kernels (~80 s) and is left out.
    [ -e /tmp/ecg-kernels-compiled ] || { step first-run 200 python3 -m pipeline run --no-cache --out "$RUNS" \
        && touch /tmp/ecg-kernels-compiled; }
    for i in $(seq "${PROCESSES:-8}"); do
        timeout 60 python3 -m pipeline run --no-cache --out "$RUNS" 2>/dev/null | grep "^segment"
    done | tee "$OUT/segment-in-run.log" ;;
quality)
    step evaluate-mitdb 300 python3 -m pipeline evaluate .gpudata/mitdb --device gpu --no-neurokit --out "$RUNS/mitdb" ;;
dashboard)
    step dashboard 580 python3 -m benchmarks.interaction --device gpu --client bokeh --runs "$RUNS" --out "$OUT" \
        --sessions 20 --load-timeout 180 --soak 200 --boards "${BOARDS:-bokeh,cuxfilter}" --budget-s 540 ;;
scale)
    step scale 580 python3 -m benchmarks.interaction --device gpu --scale --boards "${BOARDS:-bokeh,cuxfilter}" \
        --runs "$RUNS" --out "$OUT" --label scale --budget-s 540 ;;
batch)
    # MPS's daemon lets the kernels of a GPU's several workers run side by side instead of in turns.
    [ "${TESTS:-1}" = 1 ] && step batch-tests 300 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_batch.py
    [ "${MPS:-0}" = 1 ] && nvidia-cuda-mps-control -d && echo "CUDA MPS daemon started"
    step archive $((${BUDGET:-360} + 200)) python3 -m benchmarks.archive --recordings "${RECORDINGS:-40}" \
        --samples 20000000 --workers "${GPUS:-1,2}" --per-gpu "${PER_GPU:-1}" --repeats 1 --device gpu \
        --budget-s "${BUDGET:-360}" --data-dir /tmp/ecg-archive --tag "${TAG:-gpus}" --out "$OUT"
    [ "${MPS:-0}" = 1 ] && echo quit | nvidia-cuda-mps-control ;;
*)
    echo "usage: benchmarks/gpu_session.sh tests|startup|serve|segment|quality|dashboard|scale|batch" >&2
    exit 2 ;;
esac
