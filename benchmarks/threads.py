"""CPU training under contention: the thread policy (``pipeline.threads``) against the libraries'
defaults, with and without another process keeping one core busy.

    python -m benchmarks.threads [--repeats 5] [--steps 40] [--policies default,policy,2]

Each run is a fresh process (thread settings are per process) that applies its policy (``default``:
nothing set; ``policy``: ``limit_threads()``; or a number of threads), warms up for 5 steps of the
CPU default run's training (the 2M-sample recording's beats, full batches), then times ``--steps``
steps while a second thread asks to wake every 5 ms and records how late it wakes (a web server's
thread beside the training). Conditions ``idle`` and ``busy`` (a ``while True: pass`` process
throughout) are interleaved run by run. Prints per cell the median step, the p95 of all steps, the
wake-up lateness, and each policy's busy/idle ratio (target ≤ 1.5); the last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.measure import describe_machine, load_average
from benchmarks.train_speed import make_step, synthetic_beats
from pipeline.config import VAEConfig


def child(policy: str, beats: Path, steps: int) -> dict:
    """One measured run, in this (fresh) process."""
    if policy != "default":
        from pipeline import threads

        threads.limit_threads(None if policy == "policy" else int(policy))
    import torch

    from pipeline.train import split_train

    rows, cfg = torch.from_numpy(np.load(beats)), VAEConfig()
    step, batches, plan = make_step(rows, split_train(len(rows), cfg.train_fraction, cfg.seed), cfg, seed=0)
    full = [b for b in batches if len(b) == plan.batch]
    lateness, stop, times = [], threading.Event(), []

    def server_thread():  # wakes every 5 ms, as an event loop polling its sockets would
        while not stop.is_set():
            asked = time.perf_counter()
            time.sleep(0.005)
            lateness.append((time.perf_counter() - asked - 0.005) * 1000)

    for k in range(5):
        step(full[k % len(full)])
    watcher = threading.Thread(target=server_thread, daemon=True)
    watcher.start()
    for k in range(steps):
        started = time.perf_counter()
        step(full[k % len(full)])
        times.append((time.perf_counter() - started) * 1000)
    stop.set()
    watcher.join()
    return {"step_ms": times, "late_ms": lateness, "batch": plan.batch, "torch_threads": torch.get_num_threads()}


def run_child(policy: str, beats: Path, steps: int, busy: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ECG_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                            "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")}
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        time.sleep(0.5 if competitor else 0)  # let it settle on a core
        result = subprocess.run([sys.executable, "-m", "benchmarks.threads", "--child", policy, "--beats", str(beats),
                                 "--steps", str(steps)], capture_output=True, text=True, env=env, timeout=1800,
                                cwd=Path(__file__).resolve().parents[1])
    finally:
        if competitor:
            competitor.kill()
            competitor.wait()
    if result.returncode != 0:
        raise RuntimeError(f"child {policy} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = report.parser("threads", __doc__, out=False)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--policies", default="default,policy", help="comma-separated: default, policy, or N threads")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--beats", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.beats, args.steps)))
        return 0

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    beats = Path(tempfile.mkdtemp(prefix="threads-")) / "beats.npy"
    np.save(beats, synthetic_beats(args.samples)[0])
    machine = {k: v for k, v in describe_machine(gpu=False).items() if k != "versions"}
    cells = {(p, c): [] for p in policies for c in ("idle", "busy")}
    for i in range(args.repeats):
        for (policy, condition), runs in cells.items():
            runs.append(run_child(policy, beats, args.steps, condition == "busy"))
            print(f"run {i + 1} {policy:>8} {condition:<5} median step {statistics.median(runs[-1]['step_ms']):7.1f} ms",
                  flush=True)

    summary = {"machine": machine, "samples": args.samples, "steps": args.steps, "repeats": args.repeats,
               "load_average": {"start": machine["load_average_start"], "end": load_average()}, "cells": []}
    for (policy, condition), runs in cells.items():
        per_run, late = [statistics.median(r["step_ms"]) for r in runs], [t for r in runs for t in r["late_ms"]]
        summary["cells"].append({
            "policy": policy, "condition": condition, "torch_threads": runs[0]["torch_threads"],
            "step_ms_median": statistics.median(per_run),
            "step_ms_p95": float(np.percentile([t for r in runs for t in r["step_ms"]], 95)),
            "step_ms_run_medians": per_run, "late_ms_p95": float(np.percentile(late, 95)) if late else None,
            "late_ms_max": max(late) if late else None})
    print("\n".join(report.table(["policy", "condition", "threads", "step ms", "p95 ms", "late p95", "late max"], [
        [c["policy"], c["condition"], c["torch_threads"], f"{c['step_ms_median']:.1f}", f"{c['step_ms_p95']:.1f}",
         f"{c['late_ms_p95'] or 0:.2f}", f"{c['late_ms_max'] or 0:.2f}"] for c in summary["cells"]])))
    medians = {(c["policy"], c["condition"]): c["step_ms_median"] for c in summary["cells"]}
    summary["busy_over_idle"] = {p: medians[p, "busy"] / medians[p, "idle"] for p in policies}
    for policy, ratio in summary["busy_over_idle"].items():
        print(f"{policy:>8}: one busy core costs {ratio:.2f}× (target ≤ 1.5×)")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
