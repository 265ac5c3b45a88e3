"""Where a brush's work is cheaper: the beat columns in NumPy on the host or in CuPy on the GPU.

    PYTHONPATH=. python -m benchmarks.columns_device [--rounds 4] [--brushes 10] [-- APP ARGS ...]

Loads the run the server would show (``APP ARGS`` as for ``panel serve dashboard/app.py --args``;
default: the device's synthetic default, from the cache) and times, in process, a session's brushes
on every linked chart with the run's beat columns on the host and on the GPU: the same brushes,
alternating between the two in rounds so that a drift of the machine falls on both. A brush is
timed from the brush's change to its patch serialized (``benchmarks.inprocess``), after one untimed
brush and clear of each chart. Prints median and p95 per placement and the run's beat count; the
last line is a JSON summary. Needs a GPU run (``GPU_COLUMNS_MIN_BEATS`` in ``dashboard.data_store``
is chosen from this).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks import inprocess
from benchmarks.stats import summary


def brushes_ms(shared, n: int, seed: int) -> list[float]:
    """``n`` brushes on each linked chart in a fresh session, in ms (after a warm-up of each)."""
    from dashboard.spec import LINKED

    rng = np.random.default_rng(seed)
    session = inprocess.InProcessSession(shared)
    try:
        for view in LINKED:
            session.brush(view, inprocess.brush_bounds(shared.beats, view, rng))
            session.brush(view, None)
        plan = [(view, inprocess.brush_bounds(shared.beats, view, rng)) for _ in range(n) for view in LINKED]
        return [1e3 * session.brush(view, bounds).total_s for view, bounds in plan]
    finally:
        session.close()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4, help="alternations of host and GPU sessions")
    p.add_argument("--brushes", type=int, default=10, help="brushes per linked chart per round")
    p.add_argument("app_args", nargs=argparse.REMAINDER, help="arguments for the app, after --")
    args = p.parse_args(argv)
    from dashboard.shared_run import SharedRun

    run, _ = inprocess.load_shared([a for a in args.app_args if a != "--"])
    if run.report["device"]["name"] != "gpu":
        sys.exit("columns_device: needs a GPU run (the comparison is NumPy against CuPy)")
    placements = {device: SharedRun.from_run(run, columns_device=device) for device in ("cpu", "gpu")}
    times: dict[str, list[float]] = {device: [] for device in placements}
    for k in range(args.rounds):
        for device, shared in placements.items():
            times[device] += brushes_ms(shared, args.brushes, seed=k)
    result = {"beats": len(run.beats), **{f"columns on {'host' if d == 'cpu' else 'GPU'}": summary(v)
                                          for d, v in times.items()}}
    for name, s in result.items():
        if name != "beats":
            print(f"{name}: {result['beats']:,} beats, {s['n']} brushes: median {s['median']} ms, p95 {s['p95']} ms")
    print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "values"} if isinstance(v, dict) else v)
                      for k, v in result.items()}))
    return result


if __name__ == "__main__":
    main()
