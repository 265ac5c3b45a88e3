"""Benchmarks side by side: GPU pipeline, CPU pipeline and NeuroKit2 on the same recordings.

    python -m benchmarks.run                       # every contender this machine can run
    python -m benchmarks.run --sizes 1M,5M --repeats 5 --contenders segmentation,load/cudf
    python -m benchmarks.run --quick --out /tmp/b  # tiny sizes, one repeat (the test)

How it measures (one process, first run apart, budgets): docs/benchmarking.md. The JSON, Markdown
and plot in ``--out`` are rewritten after each size.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import traceback
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import contenders as contenders_module
from benchmarks import measure, report
from benchmarks.recordings import CHUNK, csv_path, parse_size, recording_csv, size_label
from pipeline import backend

SIZES = {"cpu": [1_000_000, 5_000_000, 20_000_000],
         "gpu": [1_000_000, 5_000_000, 20_000_000, 50_000_000, 100_000_000, 200_000_000]}
QUICK_SIZES = [50_000, 100_000]
# The whole run (8 min fits a 10-min GPU command), a host-side contender's longest predicted run, a cell's repeats.
DEFAULTS = {"cpu": dict(budget_s=1080.0, cap_s=60.0, cell_budget_s=60.0),
            "gpu": dict(budget_s=480.0, cap_s=10.0, cell_budget_s=20.0)}
HOST_MEMORY_METHOD = "VmHWM reset through /proc/self/clear_refs"


def _parser() -> argparse.ArgumentParser:
    p = report.parser("run", __doc__)
    p.add_argument("--sizes", type=lambda t: [parse_size(x) for x in t.split(",") if x.strip()],
                   help="sample counts, e.g. 1M,5M,20M (default: up to 20M on a CPU, 200M on a GPU)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per cell after the first run (default 5)")
    p.add_argument("--contenders", help="ids, stages or globs: load/cudf, segmentation, '*/cpu' (default: all "
                   "this machine can run)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (50k, 100k), 1 repeat, 1 epoch: a smoke test")
    p.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto")
    p.add_argument("--budget-s", type=float, help="whole-run budget (default 1080 s on a CPU, 480 s on a GPU)")
    p.add_argument("--cap-s", type=float, help="longest predicted run of a host-side contender (default 60 s on a "
                   "CPU, 10 s on a GPU)")
    p.add_argument("--cell-budget-s", type=float, help="a cell's timed runs (default 60 s on a CPU, 20 s on a GPU)")
    p.add_argument("--epochs", type=int, default=3, help="VAE epochs, for vae/* and end-to-end/* (default 3)")
    p.add_argument("--cpu-vae-beats", type=int, default=8192, help="the CPU VAE's beats at most (default 8192)")
    p.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "ecg-benchmarks",
                   help="where the recordings are written once and reused (default: $TMPDIR/ecg-benchmarks)")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; return the report (also written to ``--out``) with the files' paths."""
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("repeats", "epochs", "cpu_vae_beats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1; got {getattr(args, name)}")
    device = backend.resolve_device(args.device)
    if args.quick:
        args.sizes, args.repeats, args.epochs = args.sizes or QUICK_SIZES, 1, 1
    args.sizes = sorted(set(args.sizes or SIZES[device]))
    for name, value in DEFAULTS[device].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    chosen = contenders_module.select([p.strip() for p in args.contenders.split(",")] if args.contenders else None,
                                      device == "gpu")
    return _Benchmark(args, device, chosen, report.command("run", argv)).run()


class _Benchmark:
    """One benchmark run: the sizes in turn, each contender at each size, the result files."""

    def __init__(self, args, device: str, chosen, command: str):
        self.args, self.device, self.chosen, self.command = args, device, chosen, command
        self.gpu = device == "gpu"
        self.budget = measure.Budget(args.budget_s)
        _start_up(chosen, self.gpu)  # RMM pool first: PyTorch cannot change its allocator later
        self.machine = measure.describe_machine(self.gpu)
        self.name = self.machine["name"]
        self.date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        self.paths = report.paths(args.out, "", self.name, exts=("json", "md", "png"), day=self.date)
        self.settings = contenders_module.Settings(epochs=args.epochs, cpu_vae_beats=args.cpu_vae_beats,
                                                   work_dir=args.data_dir / "runs", gpu=self.gpu)
        with backend.PeakMemory("cpu") as probe:   # whether this machine lets a run reset the host peak
            self.host_memory_method = HOST_MEMORY_METHOD if probe.host_scope == "run" else "none"
        self.results, self.recordings, self.stopped = [], [], None
        self.last: dict[str, dict] = {}  # contender id -> its last measured cell

    def run(self) -> dict:
        try:
            for index, n in enumerate(self.args.sizes):
                if not self.run_size(n):
                    for m in self.args.sizes[index:]:
                        for order, c in enumerate(self.chosen):
                            self.skip(c, m, order, "budget: size not run")
                    break
                self.write(final=False)
        finally:
            full = self.write(final=True)
        print(f"wrote {self.paths['json']}, {self.paths['md'].name}, {self.paths['png'].name}", flush=True)
        full["paths"] = {k: str(v) for k, v in self.paths.items()}
        return full

    def log(self, text: str) -> None:
        print(f"[{self.budget.elapsed():6.0f} s] {text}", flush=True)

    def run_size(self, n: int) -> bool:
        """Every contender at size ``n``; False (nothing run) when the budget leaves no room for it."""
        args, elapsed = self.args, self.budget.elapsed()
        plan = {c.id: _predict(c, n, self.last.get(c.id), args) for c in self.chosen}
        dropped = _drop_for_budget(self.chosen, plan, self.budget.left() - _predict_recording(n, args))
        if dropped is None:
            needed = sum(plan[c.id]["cell_s"] for c in self.chosen if not c.baseline and not plan[c.id]["skip"])
            self.stopped = (f"after {elapsed:.0f} s no contender was left to run at {size_label(n)} within the "
                            f"--budget-s of {args.budget_s:.0f} s (the GPU contenders alone were predicted to need "
                            f"{needed:.0f} s; host-side ones are dropped first); from {size_label(n)} on, no size "
                            "was run")
            return False
        recording = recording_csv(n, args.data_dir)
        self.recordings.append({"samples": n, "path": str(recording.path), "nbytes": recording.nbytes,
                                "method": recording.method, "seconds": round(recording.seconds, 3)})
        self.log(f"{size_label(n)} samples: {recording.method}, {recording.nbytes / 1e6:,.0f} MB")
        ctx = contenders_module.SizeContext(recording, self.settings)
        for order, c in enumerate(self.chosen):
            p = plan[c.id]
            if p["skip"]:
                self.skip(c, n, order, p["skip"])
            elif c.id in dropped:
                self.skip(c, n, order, f"budget: dropped at this size (predicted {p['cell_s']:.0f} s) to stay "
                                       f"within --budget-s {args.budget_s:.0f}")
            elif p["cell_s"] > self.budget.left():
                self.skip(c, n, order, f"budget: predicted {p['cell_s']:.0f} s after {self.budget.elapsed():.0f} s "
                                       f"(--budget-s {args.budget_s:.0f})")
            else:
                self.run_cell(c, n, order, ctx, recording)
        del ctx   # the size's signals and beats, before the next size's are made
        gc.collect()
        return True

    def run_cell(self, c, n: int, order: int, ctx, recording) -> None:
        prev, started = self.last.get(c.id), measure.Budget(None)
        try:
            prepared = c.prepare(ctx)
            if prepared.workload and prev and prev.get("workload") == prepared.workload:
                self.skip(c, n, order, f"same work as at {size_label(prev['samples'])}: {prepared.workload}")
                return
            m = measure.measure(prepared, c.device, repeats=self.args.repeats, budget_s=self.args.cell_budget_s,
                                gpu_memory=c.device == "gpu")
        except Exception as err:  # one failing cell must not lose the others' numbers
            traceback.print_exc()
            self.skip(c, n, order, f"error: {type(err).__name__}: {str(err).strip().splitlines()[0][:200]}")
            return
        row = _record(c, n, order, status="ok", measurement=m, recording=recording, prepared=prepared,
                      wall_s=started.elapsed())
        row["load_average_after"] = load = measure.load_average()
        cores = self.machine["cpu_cores_usable"]
        if load and load[0] > cores:
            row["note"] = f"{row.get('note', '')}; machine busy: 1-min load {load[0]:.1f} on {cores} cores".lstrip("; ")
        self.results.append(row)
        self.last[c.id] = {"samples": n, "median_s": row["median_s"], "wall_s": row["wall_s"],
                           "workload": prepared.workload, "beats": prepared.info.get("beats"),
                           "beats_available": prepared.info.get("beats_available")}
        self.log(f"  {c.id:24s} median {row['median_s']:.4g} s ({row['repeats']} runs; first {row['first_s']:.3g} s)")

    def skip(self, c, n: int, order: int, reason: str) -> None:
        self.results.append(_record(c, n, order, status="skipped", reason=reason))

    def write(self, final: bool) -> dict:
        """Rewrite the JSON and Markdown (and the plot: always on a GPU run, which may be cut short)."""
        self.machine["load_average_end"] = measure.load_average()
        a = self.args
        options = {"sizes": a.sizes, "repeats": a.repeats, "contenders": [c.id for c in self.chosen],
                   "device": self.device, "budget_s": a.budget_s, "cap_s": a.cap_s, "cell_budget_s": a.cell_budget_s,
                   "epochs": a.epochs, "cpu_vae_beats": a.cpu_vae_beats, "chunk": CHUNK, "seed": 0,
                   "quick": a.quick, "data_dir": str(a.data_dir), "host_memory_method": self.host_memory_method}
        slope_rows = report.slopes(self.results)
        full = {"schema": 1, "machine_name": self.name, "date": self.date,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": self.command,
                "elapsed_s": round(self.budget.elapsed(), 1), "stopped": self.stopped, "machine": self.machine,
                "options": options, "recordings": self.recordings, "results": self.results,
                "ratios": report.ratios(self.results), "slopes": slope_rows,
                "targets": report.targets(self.results, slope_rows, self.gpu), "notes": _notes(options, self.gpu)}
        report.write(full, self.paths, report.pipeline_markdown(full))
        if final or self.gpu:
            report.plot(full, self.paths["png"])
        return full


def _start_up(chosen, gpu: bool) -> None:
    """Make the RMM pool (GPU) and import the libraries once, so that no cell's first run or peak memory
    holds them."""
    if gpu:
        backend.use_rmm_pool()
        import cudf  # noqa: F401
    import torch  # noqa: F401

    from pipeline import embed, load, peaks, score, train, wavelet  # noqa: F401
    if any("neurokit2" in c.id for c in chosen):
        import neurokit2  # noqa: F401


def _predict(c, n: int, prev: dict | None, args) -> dict:
    """One run's and the whole cell's predicted seconds at size ``n``, scaled linearly from the
    contender's previous size (by beats for the VAE, whose CPU beat count is capped); and why it will
    be skipped, if it will."""
    if prev is None:
        return {"run_s": None, "cell_s": 0.0, "skip": None}
    scale = n / prev["samples"]
    if prev.get("beats"):
        beats = prev["beats_available"] * scale
        if c.id == "vae/cpu":
            beats = min(beats, args.cpu_vae_beats)
            if prev["workload"] and int(beats) == prev["beats"]:
                return {"run_s": prev["median_s"], "cell_s": 0.0,
                        "skip": f"same work as at {size_label(prev['samples'])}: {prev['workload']}"}
        scale = beats / prev["beats"]
    run_s, cell_s = prev["median_s"] * scale, prev["wall_s"] * scale
    skip = None
    if c.baseline and run_s > args.cap_s:
        skip = f"cap: one run predicted at {run_s:.0f} s from {size_label(prev['samples'])} (> --cap-s {args.cap_s:g})"
    return {"run_s": run_s, "cell_s": 0.0 if skip else cell_s, "skip": skip}


def _drop_for_budget(chosen, plan: dict, remaining_s: float) -> set[str] | None:
    """Host-side contenders to leave out at this size, the costliest first, until the predicted
    time fits ``remaining_s``; None when even the rest does not fit (then no more sizes)."""
    running = [c for c in chosen if not plan[c.id]["skip"]]
    total, dropped = sum(plan[c.id]["cell_s"] for c in running), set()
    for c in sorted((c for c in running if c.baseline), key=lambda c: -plan[c.id]["cell_s"]):
        if total <= remaining_s:
            break
        dropped.add(c.id)
        total -= plan[c.id]["cell_s"]
    return None if total > remaining_s or len(dropped) == len(running) else dropped


def _predict_recording(n: int, args) -> float:
    """Seconds to make the recording: ~0.5 s per million samples synthesised, tiling ~25 times faster."""
    if csv_path(n, args.data_dir).exists():
        return 0.0
    return n * (0.5e-6 if n <= CHUNK else 0.02e-6)


def _record(c, n, order, *, status, reason="", measurement=None, recording=None, prepared=None, wall_s=None) -> dict:
    row = {"stage": c.stage, "contender": c.id, "label": c.label, "device": c.device, "samples": n,
           "order": order, "status": status, "reason": reason}
    if measurement is None:
        return row
    m, times = measurement, measurement.times_s
    row.update(first_s=m.first_s, times_s=times, median_s=statistics.median(times), min_s=min(times),
               max_s=max(times), repeats=len(times), stopped_by_budget=m.stopped_by_budget,
               gpu_peak_bytes=m.gpu_peak_bytes, host_peak_extra_bytes=m.host_peak_extra_bytes,
               wall_s=wall_s, metrics=_median_metrics(m.metrics), first_metrics=m.first_metrics,
               runs_metrics=m.metrics, workload=prepared.workload)
    if m.gpu_peak_bytes is not None:
        row["gpu_peak_bytes_per_sample"] = m.gpu_peak_bytes / n
    metrics = row["metrics"]
    if c.stage == "load":
        row["throughput"] = {"mb_per_s": recording.nbytes / 1e6 / row["median_s"]}
    elif c.stage == "vae":
        row["throughput"] = {k: metrics[k] for k in ("epoch_s", "train_beats_per_s", "score_beats_per_s")}
        row["capped"] = bool(prepared.workload)
        row["note"] = (f"{prepared.info['beats']:,} of {prepared.info['beats_available']:,} beats (capped)"
                       if prepared.workload else f"{prepared.info['beats']:,} beats")
    else:
        row["throughput"] = {"msamples_per_s": n / 1e6 / row["median_s"]}
    if c.stage == "segmentation":
        row["note"] = (f"{metrics.get('beats', metrics.get('r_peaks')):,.0f} "
                       f"{'R peaks' if 'r_peaks' in metrics else 'beats kept'}")
    if c.stage == "end-to-end":
        big = sorted(metrics.get("stages_s", {}).items(), key=lambda kv: -kv[1])[:3]
        row["note"] = (f"{metrics.get('beats', 0):,.0f} beats; most time: "
                       + ", ".join(f"{k} {report.seconds(v)}" for k, v in big))
    return row


def _median_metrics(runs: list[dict]) -> dict:
    """Median of each numeric metric over the timed runs (dicts of numbers: per key)."""
    out = {}
    for key in runs[0] if runs else {}:
        values = [r[key] for r in runs if key in r]
        if all(isinstance(v, (int, float)) for v in values):
            out[key] = statistics.median(values)
        elif all(isinstance(v, dict) for v in values):
            out[key] = {k: statistics.median([v[k] for v in values if k in v]) for k in values[0]}
    return out


def _notes(o: dict, gpu: bool) -> list[str]:
    """What a result's Markdown says of its method beyond docs/benchmarking.md (its values in this run)."""
    from pipeline.config import VAEConfig

    vae = VAEConfig()
    return ["How every figure is measured: docs/benchmarking.md, 'How benchmarks.run measures'.",
            f"Host memory: {o['host_memory_method']}." + (" GPU memory: RMM statistics." if gpu else ""),
            f"Recordings: pipeline.synth at 250 Hz, seed {o['seed']}, tiled above {size_label(o['chunk'])} samples.",
            f"VAE: {o['epochs']} epoch(s), batch {vae.batch_size}, {vae.train_fraction:.0%} of the beats trained on, "
            f"beta {vae.beta:g}, {'bf16 autocast' if vae.mixed_precision else 'float32'} on the GPU; the CPU VAE "
            f"at most {o['cpu_vae_beats']} beats."]


if __name__ == "__main__":
    main()
