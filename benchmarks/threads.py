"""CPU training under contention: the thread policy (``pipeline.threads``) against the libraries'
defaults, with and without another process keeping one core busy.

    PYTHONPATH=. python -m benchmarks.threads                 # 5 runs per cell, 40 steps each
    PYTHONPATH=. python -m benchmarks.threads --repeats 7 --policies default,policy,2

The workload is the CPU default run's training: the beats of the 2M-sample synthetic recording,
batches of the size ``fit_vae`` picks for them, plain steps. Each run is a fresh process (thread
settings are per process and OpenMP reads its environment once) that applies its policy, warms up
for 5 steps, then times ``--steps`` steps one by one; a second thread meanwhile asks to wake up
every 5 ms and records how late it wakes (how a web server thread beside the training fares).
Policies: ``default`` (nothing set: PyTorch, OpenMP and Numba use every CPU, as before the policy
existed), ``policy`` (``limit_threads()``), or a number of threads; a trailing ``p`` (``2p``,
``defaultp``) also sets ``OMP_WAIT_POLICY=PASSIVE`` (no spinning at OpenMP barriers). Conditions: ``idle`` and
``busy`` (a ``python -c 'while True: pass'`` process runs throughout). Cells are interleaved run by
run so that other load on a shared machine falls on all of them alike.

Prints per cell the median over runs of the median step time, the p95 of all its steps, the
busy/idle ratio of each policy (target: at most 1.5), the wake-up lateness, the machine and
the load average; the last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

BUSY = "while True: pass"


def make_beats(samples: int, path: Path) -> None:
    from pipeline import embed, peaks, synth, wavelet
    from pipeline.config import SignalConfig

    cfg = SignalConfig()
    ecg = synth.synthesize(synth.SynthConfig(n_samples=samples, seed=0))
    response = wavelet.ricker_response(ecg.signal, ecg.fs, cfg.ricker_width_s)
    positions = peaks.find_beats(response, ecg.signal, ecg.fs, cfg)
    np.save(path, embed.embed_beats(ecg.signal, positions, ecg.fs, width=cfg.window(ecg.fs)).rows)


def child(policy: str, beats: Path, steps: int) -> dict:
    """One measured run, in this (fresh) process."""
    if policy.endswith("p"):  # OpenMP threads sleep at once at a barrier instead of spinning first
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        policy = policy[:-1]
    if policy != "default":
        from pipeline import threads

        threads.limit_threads(None if policy == "policy" else int(policy))
    import torch

    from pipeline.config import VAEConfig
    from pipeline.model import VAE
    from pipeline.train import Adam, batch_lengths, build_step, epoch_batches, plan_training, split_train

    rows = torch.from_numpy(np.load(beats))
    cfg = VAEConfig()
    train = rows[split_train(len(rows), cfg.train_fraction, cfg.seed)]
    plan = plan_training(len(train), cfg)
    torch.manual_seed(0)
    model = VAE(rows.shape[1], cfg)
    generator = torch.Generator().manual_seed(0)
    step = build_step(model, Adam(model.parameters(), lr=plan.learning_rate), train,
                      batch_lengths(len(train), plan), generator)
    full = [b for b in epoch_batches(len(train), plan, generator) if len(b) == plan.batch]  # full-length steps

    lateness, stop = [], threading.Event()

    def server_thread():  # wakes every 5 ms, as an event loop polling its sockets would
        while not stop.is_set():
            asked = time.perf_counter()
            time.sleep(0.005)
            lateness.append((time.perf_counter() - asked - 0.005) * 1000)

    for k in range(5):
        step(full[k % len(full)])
    watcher = threading.Thread(target=server_thread, daemon=True)
    watcher.start()
    times = []
    for k in range(steps):
        started = time.perf_counter()
        step(full[k % len(full)])
        times.append((time.perf_counter() - started) * 1000)
    stop.set()
    watcher.join()
    import numba

    return {"step_ms": times, "late_ms": lateness, "batch": plan.batch, "torch_threads": torch.get_num_threads(),
            "numba_threads": numba.get_num_threads()}


def run_child(policy: str, beats: Path, steps: int, busy: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ECG_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                            "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")}
    competitor = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
    try:
        if competitor:
            time.sleep(0.5)  # let it settle on a core
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.threads", description=__doc__.splitlines()[0])
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
    folder = Path(tempfile.mkdtemp(prefix="threads-"))
    beats = folder / "beats.npy"
    make_beats(args.samples, beats)
    load_start = os.getloadavg()
    print(f"machine    {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} CPUs "
          f"(os.cpu_count {os.cpu_count()}), python {platform.python_version()}; "
          f"load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    cells = {(p, c): [] for p in policies for c in ("idle", "busy")}
    for i in range(args.repeats):
        for (policy, condition), runs in cells.items():
            result = run_child(policy, beats, args.steps, condition == "busy")
            runs.append(result)
            print(f"run {i + 1} {policy:>8} {condition:<5} median step {statistics.median(result['step_ms']):7.1f} ms "
                  f"(torch {result['torch_threads']}, numba {result['numba_threads']} threads, batch {result['batch']})",
                  flush=True)
    load_end = os.getloadavg()

    print()
    print(f"{'policy':>8} {'cond':<5} {'threads':>7} {'step ms':>8} {'p95 ms':>8} {'late p95':>8} {'late max':>8}")
    summary = {"cpus": len(os.sched_getaffinity(0)), "samples": args.samples, "steps": args.steps,
               "repeats": args.repeats, "load_average": {"start": load_start, "end": load_end}, "cells": []}
    medians = {}
    for (policy, condition), runs in cells.items():
        per_run = [statistics.median(r["step_ms"]) for r in runs]
        every = [t for r in runs for t in r["step_ms"]]
        late = [t for r in runs for t in r["late_ms"]]
        medians[policy, condition] = statistics.median(per_run)
        cell = {"policy": policy, "condition": condition, "torch_threads": runs[0]["torch_threads"],
                "step_ms_median": medians[policy, condition], "step_ms_p95": float(np.percentile(every, 95)),
                "step_ms_run_medians": per_run, "late_ms_p95": float(np.percentile(late, 95)) if late else None,
                "late_ms_max": max(late) if late else None}
        summary["cells"].append(cell)
        print(f"{policy:>8} {condition:<5} {cell['torch_threads']:>7} {cell['step_ms_median']:>8.1f} "
              f"{cell['step_ms_p95']:>8.1f} {cell['late_ms_p95'] or 0:>8.2f} {cell['late_ms_max'] or 0:>8.2f}")
    summary["busy_over_idle"] = {}
    for policy in policies:
        ratio = medians[policy, "busy"] / medians[policy, "idle"]
        summary["busy_over_idle"][policy] = ratio
        print(f"{policy:>8}: one busy core costs {ratio:.2f}× (target ≤ 1.5×)")
    if "default" in policies and "policy" in policies:
        print(f"policy vs default, busy core: {medians['default', 'busy'] / medians['policy', 'busy']:.1f}× faster; "
              f"idle: {medians['policy', 'idle'] / medians['default', 'idle']:.2f}× the default's step time")
    print(f"load average at the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
