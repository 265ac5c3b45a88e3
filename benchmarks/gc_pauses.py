"""Full garbage collections under many sessions: Python's schedule against the server's.

    python -m benchmarks.gc_pauses [--sessions 20] [--seconds 60] [--device gpu] [--samples N] [--runs DIR] [--json F]

Each schedule runs in a fresh process: the run is prepared as the server prepares it (and frozen
out of the collector's sight), ``--sessions`` sessions are built in that process, then they brush
in turn (one brush on one chart per step, as fast as the process goes) for ``--seconds``. Under
``python`` the collector keeps Python's thresholds; under ``server`` it runs as a server process
has it (:mod:`dashboard.collector`): no automatic full collections, one every period when due,
called here between brushes where the server's event loop would call it. Reports each schedule's
session builds and brushes (median, p95, max, ms, server-side: the change and its serialized
patch), every full collection with its pause, and the share of the brushing time spent in
them: what every session waits through when it brushes at that moment.

See Also
--------
dashboard.collector : the schedule this compares.
benchmarks.gpu_dashboard : the load test through a real server (20 protocol sessions).
"""
from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time

import numpy as np

SCHEDULES = ("python", "server")


def ms(values) -> dict:
    a = np.asarray(values, dtype=float) * 1e3
    return {"n": int(a.size), "median": round(float(np.median(a)), 1), "p95": round(float(np.percentile(a, 95)), 1),
            "max": round(float(a.max()), 1)}


def measure(schedule: str, sessions: int, seconds: float, period_s: float, app_args: list[str]) -> dict:
    """One schedule, in this process."""
    from benchmarks import inprocess
    from dashboard import collector
    from dashboard.spec import LINKED

    run, shared = inprocess.load_shared(app_args)
    beats = inprocess.run_beats(run.path)
    if schedule == "server":
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, collector._NEVER)
    pauses, started = [], [0.0]

    def on_gc(phase, info):
        if info["generation"] == 2:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pauses.append(time.perf_counter() - started[0])
    gc.callbacks.append(on_gc)

    builds, open_ = [], []
    for _ in range(sessions):
        t0 = time.perf_counter()
        open_.append(inprocess.InProcessSession(shared))
        builds.append(time.perf_counter() - t0)
    pauses_opening = list(pauses)
    pauses.clear()

    rng, brushes, k = np.random.default_rng(0), [], 0
    end = due = time.perf_counter()
    end += seconds
    due += period_s
    while time.perf_counter() < end:
        view = LINKED[k % len(LINKED)]
        bounds = inprocess.brush_bounds(beats, view, rng) if rng.random() > 0.1 else None
        brushes.append(open_[k % sessions].brush(view, bounds).total_s)
        k += 1
        if schedule == "server" and time.perf_counter() >= due:
            collector.collect_if_needed()
            due += period_s
    return {"schedule": schedule, "sessions": sessions, "seconds": seconds, "period_s": period_s,
            "open_ms": ms(builds), "full_collections_opening_ms": [round(p * 1e3) for p in pauses_opening],
            "brush_ms": ms(brushes), "full_collections_ms": [round(p * 1e3) for p in pauses],
            "paused_share": round(sum(pauses) / seconds, 4)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gc_pauses", description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--seconds", type=float, default=60.0, help="brushing time per schedule (default 60)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--samples", type=int, default=2_000_000)
    p.add_argument("--runs", default="runs", help="run cache folder (default runs)")
    p.add_argument("--period", type=float, default=None, help="the server's period (default dashboard.collector's)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--one", choices=SCHEDULES, help=argparse.SUPPRESS)     # a child process's own schedule
    args = p.parse_args(argv)
    from dashboard.collector import PERIOD_S

    period = PERIOD_S if args.period is None else args.period
    if args.one:
        app_args = ["--device", args.device, "--samples", str(args.samples), "--out", args.runs]
        print(json.dumps(measure(args.one, args.sessions, args.seconds, period, app_args)))
        return {}
    results = {}
    for schedule in SCHEDULES:
        out = subprocess.run([sys.executable, "-m", "benchmarks.gc_pauses", "--one", schedule, "--sessions",
                              str(args.sessions), "--seconds", str(args.seconds), "--device", args.device,
                              "--samples", str(args.samples), "--runs", args.runs, "--period", str(period)], check=True, capture_output=True, text=True)
        results[schedule] = r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{schedule:>6}: open median {r['open_ms']['median']:.0f} ms, p95 {r['open_ms']['p95']:.0f} ms "
              f"(full collections {r['full_collections_opening_ms']}); brushes {r['brush_ms']['n']}: median "
              f"{r['brush_ms']['median']:.1f}, p95 {r['brush_ms']['p95']:.1f}, max {r['brush_ms']['max']:.0f} ms; "
              f"full collections while brushing {r['full_collections_ms']} ms, "
              f"{r['paused_share']:.1%} of the time", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
