"""Start-up of ``python -m pipeline run`` in fresh processes: from scratch (``--no-cache``) and from
the cache, with the stage breakdown of each run's report.

    python -m benchmarks.startup                          # this checkout, its device's default
    python -m benchmarks.startup --device gpu --repeats 3  # on the GPU box (20M samples)
    python -m benchmarks.startup --compare /path/to/other/checkout   # before/after, interleaved

Each timed run is a new ``python -m pipeline run … --quiet`` process, timed from outside. One
untimed run first makes the input and fills Numba's disk cache; *cold* runs then pass
``--no-cache``, *cached* runs find the run directory. ``--compare`` makes the same runs with another
checkout, alternating, so that other load on a shared machine falls on both alike. Prints median,
p95, min and max seconds, each stage's median from the cold runs, and what the last cold run found;
the last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.measure import describe_machine, load_average

REPO = Path(__file__).resolve().parents[1]


def pipeline_run(repo: Path, out: Path, device: str, samples: int | None, *extra: str) -> tuple[float, Path]:
    """Wall seconds of one ``python -m pipeline run`` in ``repo`` and the run directory it printed."""
    command = [sys.executable, "-m", "pipeline", "run", "--device", device, "--out", str(out), "--quiet", *extra]
    command += ["--samples", str(samples)] if samples else []
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--samples", type=int, help="synthetic default length (default: the device's, 2M / 20M)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="another checkout to measure the same way (e.g. before a change)")
    parser.add_argument("--out", type=Path, help="runs folder (default: a temporary one per checkout)")
    args = parser.parse_args(argv)

    checkouts = {"this": REPO} | ({"compare": args.compare.resolve()} if args.compare else {})
    base = args.out or Path(tempfile.mkdtemp(prefix="startup-"))
    machine = {k: v for k, v in describe_machine(gpu=False).items() if k != "versions"}
    print(f"machine    {json.dumps(machine)}")
    for name, repo in checkouts.items():  # untimed: the input, Numba's disk cache, a run to find later
        seconds, _ = pipeline_run(repo, base / name, args.device, args.samples)
        print(f"prepared   {name} ({repo}): first run {seconds:.1f} s", flush=True)
    times = {(name, kind): [] for name in checkouts for kind in ("cold", "cached")}
    stages, quality = {name: [] for name in checkouts}, {}
    for kind, extra in (("cold", ("--no-cache",)), ("cached", ())):
        for i in range(args.repeats):
            for name, repo in checkouts.items():
                seconds, run_dir = pipeline_run(repo, base / name, args.device, args.samples, *extra)
                times[name, kind].append(seconds)
                if kind == "cold":
                    report = json.loads((run_dir / "report.json").read_text())
                    stages[name].append(report["stages_s"])
                    quality[name] = outcome(run_dir, report)
                print(f"{kind:<7} {name:<8} run {i + 1}: {seconds:6.2f} s", flush=True)

    print(f"\n{'checkout':<9} {'kind':<7} {'median s':>9} {'p95 s':>7} {'min s':>7} {'max s':>7}")
    summary = {"device": args.device, "samples": args.samples, "machine": machine, "checkouts": {},
               "load_average": {"start": machine["load_average_start"], "end": load_average()}}
    for name, repo in checkouts.items():
        entry = {"repo": str(repo), "outcome": quality[name]}
        for kind in ("cold", "cached"):
            t = times[name, kind]
            s = entry[kind] = {"median_s": statistics.median(t), "p95_s": float(np.percentile(t, 95)), "min_s": min(t),
                               "max_s": max(t), "runs": len(t), "all_s": [round(x, 3) for x in t]}
            print(f"{name:<9} {kind:<7} {s['median_s']:>9.2f} {s['p95_s']:>7.2f} {s['min_s']:>7.2f} {s['max_s']:>7.2f}")
        names = list(dict.fromkeys(k for run in stages[name] for k in run))
        entry["cold_stages_median_s"] = {k: statistics.median(run.get(k, 0.0) for run in stages[name]) for k in names}
        print(f"{'':<9} cold stages (median): " + "  ".join(f"{k} {v:.2f}" for k, v in entry["cold_stages_median_s"].items()))
        print(f"{'':<9} last cold run: {json.dumps(quality[name])}")
        summary["checkouts"][name] = entry
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
