"""Start-up of ``python -m pipeline run`` in fresh processes: from scratch (``--no-cache``) and from
the cache, with the stage breakdown of each run's report.

    PYTHONPATH=. python -m benchmarks.startup                          # this checkout, its device's default
    PYTHONPATH=. python -m benchmarks.startup --device gpu --repeats 3  # on the GPU box (20M samples)
    PYTHONPATH=. python -m benchmarks.startup --compare /path/to/other/checkout   # before/after, interleaved

Each timed run is a new ``python -m pipeline run … --quiet`` process (imports, CUDA context, warm-up
and all), timed from outside by the wall clock. The synthetic input and one run are made first,
untimed, so that the input exists and Numba's on-disk cache is filled; *cold* runs then pass
``--no-cache`` and recompute everything, *cached* runs find the run directory. With ``--compare``
the same runs are made with another checkout, alternating A, B, A, B … so that load from other
processes on a shared machine falls on both alike. Prints median, p95, min and max wall seconds,
the median of each stage from the cold runs' reports, the machine and its load average; the
last line is JSON.
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
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def pipeline_run(repo: Path, out: Path, device: str, samples: int | None, *extra: str) -> tuple[float, Path]:
    """Wall seconds of one ``python -m pipeline run`` in ``repo`` and the run directory it printed."""
    command = [sys.executable, "-m", "pipeline", "run", "--device", device, "--out", str(out), "--quiet", *extra]
    if samples:
        command += ["--samples", str(samples)]
    env = {**os.environ, "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env, timeout=1800)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {repo} failed ({result.returncode}):\n{result.stderr}")
    return seconds, Path(result.stdout.splitlines()[0].split()[1])


def outcome(run_dir: Path, report: dict) -> dict:
    """What the run found: beats, training epochs and final loss, outlier AUROC of the injected beats."""
    import pandas as pd

    from pipeline.metrics import auroc

    beats = pd.read_parquet(run_dir / "beats.parquet")
    labelled = beats[beats["label"] != ""] if "label" in beats else beats.iloc[:0]
    history = report["training"]["loss_history"]
    return {"beats": len(beats), "epochs": len(history), "final_loss": history[-1],
            "auroc": round(auroc(labelled["score"], labelled["abnormal"]), 4) if len(labelled) else None}


def summarise(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "p95_s": float(np.percentile(times, 95)),
            "min_s": min(times), "max_s": max(times), "runs": len(times), "all_s": [round(t, 3) for t in times]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--samples", type=int, help="synthetic default length (default: the device's, 2M / 20M)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="another checkout to measure the same way (e.g. before a change)")
    parser.add_argument("--out", type=Path, help="runs folder (default: a temporary one per checkout)")
    args = parser.parse_args(argv)

    checkouts = {"this": REPO}
    if args.compare:
        checkouts["compare"] = args.compare.resolve()
    base = args.out or Path(tempfile.mkdtemp(prefix="startup-"))
    outs = {name: base / name for name in checkouts}
    load_start = os.getloadavg()
    print(f"machine    {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, "
          f"python {platform.python_version()}; load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    for name, repo in checkouts.items():  # untimed: the input, Numba's disk cache, a run to find later
        seconds, _ = pipeline_run(repo, outs[name], args.device, args.samples)
        print(f"prepared   {name} ({repo}): first run {seconds:.1f} s", flush=True)

    times = {(name, kind): [] for name in checkouts for kind in ("cold", "cached")}
    stages = {name: [] for name in checkouts}
    quality = {}
    for kind, extra in (("cold", ("--no-cache",)), ("cached", ())):
        for i in range(args.repeats):
            for name, repo in checkouts.items():
                seconds, run_dir = pipeline_run(repo, outs[name], args.device, args.samples, *extra)
                times[name, kind].append(seconds)
                if kind == "cold":
                    report = json.loads((run_dir / "report.json").read_text())
                    stages[name].append(report["stages_s"])
                    quality[name] = outcome(run_dir, report)
                print(f"{kind:<7} {name:<8} run {i + 1}: {seconds:6.2f} s", flush=True)
    load_end = os.getloadavg()

    print()
    print(f"{'checkout':<9} {'kind':<7} {'median s':>9} {'p95 s':>7} {'min s':>7} {'max s':>7}")
    summary = {"device": args.device, "samples": args.samples, "cpus": len(os.sched_getaffinity(0)),
               "load_average": {"start": load_start, "end": load_end}, "checkouts": {}}
    for name, repo in checkouts.items():
        entry = {"repo": str(repo)}
        for kind in ("cold", "cached"):
            entry[kind] = summarise(times[name, kind])
            s = entry[kind]
            print(f"{name:<9} {kind:<7} {s['median_s']:>9.2f} {s['p95_s']:>7.2f} {s['min_s']:>7.2f} {s['max_s']:>7.2f}")
        names = list(dict.fromkeys(k for run in stages[name] for k in run))
        entry["cold_stages_median_s"] = {k: statistics.median(run.get(k, 0.0) for run in stages[name]) for k in names}
        entry["outcome"] = quality[name]
        print(f"{'':<9} cold stages (median): " + "  ".join(f"{k} {v:.2f}" for k, v in entry["cold_stages_median_s"].items()))
        print(f"{'':<9} last cold run: {json.dumps(quality[name])}")
        summary["checkouts"][name] = entry
    print(f"load average at the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
