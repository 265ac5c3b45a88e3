"""Benchmarks side by side: GPU pipeline, CPU pipeline and NeuroKit2 on the same recordings.

    python -m benchmarks.run                       # every contender this machine can run
    python -m benchmarks.run --sizes 1M,5M --repeats 5 --contenders segmentation,load/cudf
    python -m benchmarks.run --quick --out /tmp/b  # tiny sizes, one repeat (the test)

For each size the seeded synthetic recording is written once as CSV (see
:mod:`benchmarks.recordings`) and every contender runs on it in this one process, so that ratios
between contenders come from the same run. Cells run size by size; after each size the JSON and
Markdown (and the plot) in ``--out`` are rewritten, so that a run cut short keeps what it measured.

Time is kept in check three ways, all recorded in the results:

- ``--cell-budget-s``: a contender's timed repeats at one size stop once they would pass it
  (at least one timed run after the first run);
- ``--cap-s``: a host-side contender (pandas, pyarrow, NeuroKit2, the CPU pipeline) is skipped at
  a size where its run, predicted linearly from the previous size, would take longer;
- ``--budget-s``: before each size the whole size's time is predicted from the previous one; when
  it would pass the budget the host-side contenders are dropped first, and when the GPU ones alone
  would still pass it, no more sizes are added.

On the H200 test machine (no network; ``../shared/gpu/README.md`` loads the cuDF pack first, and
NeuroKit2 travels as wheels in ``.whl``), in one command of at most 10 minutes (default budget 480 s)::

    python3 .gpupack/meta/load.py && . .gpupack/meta/env.sh &&
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
    PYTHONPATH=/tmp/site:.:$PYTHONPATH python3 -m benchmarks.run --out benchmarks/results

See Also
--------
benchmarks.contenders : what is timed.
benchmarks.report : the result files and the targets.
"""
from __future__ import annotations

import argparse
import gc
import shlex
import statistics
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import contenders as contenders_module
from benchmarks import measure, report
from benchmarks.recordings import CHUNK, csv_path, recording_csv, size_label
from pipeline import backend

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = {"cpu": [1_000_000, 5_000_000, 20_000_000],
         "gpu": [1_000_000, 5_000_000, 20_000_000, 50_000_000, 100_000_000, 200_000_000]}
QUICK_SIZES = [50_000, 100_000]
BUDGET_S = {"cpu": 1080.0, "gpu": 480.0}   # 18 min on a CPU machine; 8 min in a 10-min GPU command
CAP_S = {"cpu": 60.0, "gpu": 10.0}         # longest predicted run of a host-side contender
CELL_BUDGET_S = {"cpu": 60.0, "gpu": 20.0}  # timed repeats of one contender at one size


def parse_size(text: str) -> int:
    """``'20M'`` → 20000000; also ``k`` and ``G`` suffixes, ``_`` separators and plain integers."""
    raw = text.strip().replace("_", "")
    scale = {"k": 10**3, "K": 10**3, "m": 10**6, "M": 10**6, "g": 10**9, "G": 10**9}.get(raw[-1:], 1)
    number = raw[:-1] if scale > 1 else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be a number of samples such as 50k, 1M or 20000000; "
                                         f"got {text!r}") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"size must be a whole positive number of samples; got {text!r}")
    return int(value)


def _sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=_sizes, help="comma-separated sample counts, e.g. 1M,5M,20M "
                   "(default: 1M,5M,20M on a CPU; 1M,5M,20M,50M,100M,200M on a GPU)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per cell after the first run (default 5)")
    p.add_argument("--contenders", help="comma-separated ids, stages or globs: load/cudf, segmentation, '*/cpu' "
                   "(default: all this machine can run)")
    p.add_argument("--out", type=Path, default=RESULTS, help=f"folder for the results (default {RESULTS})")
    p.add_argument("--quick", action="store_true", help="tiny sizes (50k, 100k), 1 repeat, 1 epoch: a smoke test")
    p.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto",
                   help="auto: use the GPU when there is one; cpu: CPU contenders only")
    p.add_argument("--budget-s", type=float, help="whole-run time budget in seconds (default 1080 on a CPU, "
                   "480 on a GPU)")
    p.add_argument("--cap-s", type=float, help="skip a host-side contender where one run is predicted to take "
                   "longer than this (default 60 on a CPU; 10 on a GPU, leaving the budget to the GPU sizes)")
    p.add_argument("--cell-budget-s", type=float, help="stop a cell's repeats once they would pass this many "
                   "seconds (default 60 on a CPU; 20 on a GPU)")
    p.add_argument("--epochs", type=int, default=3, help="VAE epochs, for vae/* and end-to-end/* (default 3)")
    p.add_argument("--cpu-vae-beats", type=int, default=8192, help="beats the CPU VAE trains on and scores "
                   "at most (default 8192)")
    p.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "ecg-benchmarks",
                   help="where the recordings are written once and reused (default: $TMPDIR/ecg-benchmarks)")
    p.add_argument("--chunk", type=parse_size, default=CHUNK, help="synthesise at most this many samples at "
                   "once; larger recordings tile it (default 20M)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic recordings (default 0)")
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
        args.sizes = args.sizes or QUICK_SIZES
        args.repeats, args.epochs = 1, 1
    args.sizes = sorted(set(args.sizes or SIZES[device]))
    args.budget_s = args.budget_s if args.budget_s is not None else BUDGET_S[device]
    args.cap_s = args.cap_s if args.cap_s is not None else CAP_S[device]
    args.cell_budget_s = args.cell_budget_s if args.cell_budget_s is not None else CELL_BUDGET_S[device]
    patterns = [p.strip() for p in args.contenders.split(",")] if args.contenders else None
    chosen = contenders_module.select(patterns, device == "gpu")
    command = "python -m benchmarks.run " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    return _Benchmark(args, device, chosen, command).run()


class _Benchmark:
    """One benchmark run: the sizes in turn, each contender at each size, the result files."""

    def __init__(self, args, device: str, chosen, command: str):
        self.args, self.device, self.chosen, self.command = args, device, chosen, command
        self.gpu = device == "gpu"
        self.started = time.perf_counter()
        self.startup = _start_up(chosen, self.gpu)  # RMM pool first: PyTorch cannot change its allocator later
        self.machine = measure.describe_machine(self.gpu)
        self.name = measure.machine_name(self.machine)
        self.date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        args.out.mkdir(parents=True, exist_ok=True)
        self.paths = {ext: args.out / f"{self.name}-{self.date}.{ext}" for ext in ("json", "md", "png")}
        self.settings = contenders_module.Settings(epochs=args.epochs, cpu_vae_beats=args.cpu_vae_beats,
                                                   work_dir=args.data_dir / "runs", gpu=self.gpu)
        self.host_peak = measure.HostPeak()
        self.results: list[dict] = []
        self.recordings: list[dict] = []
        self.stopped: str | None = None
        self.last: dict[str, dict] = {}  # contender id -> its last measured cell

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

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

    def run_size(self, n: int) -> bool:
        """Every contender at size ``n``; False (nothing run) when the budget leaves no room for it."""
        args, elapsed = self.args, self.elapsed()
        plan = {c.id: _predict(c, n, self.last.get(c.id), args) for c in self.chosen}
        dropped = _drop_for_budget(self.chosen, plan, args.budget_s - elapsed - _predict_recording(n, args))
        if dropped is None:
            needed = sum(plan[c.id]["cell_s"] for c in self.chosen if not c.baseline and not plan[c.id]["skip"])
            self.stopped = (f"after {elapsed:.0f} s no contender was left to run at {size_label(n)} within the "
                            f"--budget-s of {args.budget_s:.0f} s (the GPU contenders alone were predicted to need "
                            f"{needed:.0f} s; host-side ones are dropped first); from {size_label(n)} on, no size "
                            "was run")
            return False
        recording = recording_csv(n, args.data_dir, seed=args.seed, chunk=args.chunk)
        self.recordings.append({"samples": n, "path": str(recording.path), "nbytes": recording.nbytes,
                                "method": recording.method, "seconds": round(recording.seconds, 3)})
        print(f"[{self.elapsed():6.0f} s] {size_label(n)} samples: {recording.method}, "
              f"{recording.nbytes / 1e6:,.0f} MB", flush=True)
        ctx = contenders_module.SizeContext(recording, self.settings)
        for order, c in enumerate(self.chosen):
            p = plan[c.id]
            if p["skip"]:
                self.skip(c, n, order, p["skip"])
            elif c.id in dropped:
                self.skip(c, n, order, f"budget: dropped at this size (predicted {p['cell_s']:.0f} s) to stay "
                                       f"within --budget-s {args.budget_s:.0f}")
            elif self.elapsed() + p["cell_s"] > args.budget_s:
                self.skip(c, n, order, f"budget: predicted {p['cell_s']:.0f} s after {self.elapsed():.0f} s "
                                       f"(--budget-s {args.budget_s:.0f})")
            else:
                self.run_cell(c, n, order, ctx, recording)
        ctx.release()
        del ctx
        gc.collect()
        return True

    def run_cell(self, c, n: int, order: int, ctx, recording) -> None:
        prev = self.last.get(c.id)
        cell_started = time.perf_counter()
        try:
            prepared = c.prepare(ctx, self.settings)
            if prepared.workload and prev and prev.get("workload") == prepared.workload:
                self.skip(c, n, order, f"same work as at {size_label(prev['samples'])}: {prepared.workload}")
                return
            m = measure.measure(prepared, c.device, repeats=self.args.repeats, budget_s=self.args.cell_budget_s,
                                host_peak=self.host_peak, gpu_memory=c.device == "gpu")
        except Exception as err:  # one failing cell must not lose the others' numbers
            traceback.print_exc()
            self.skip(c, n, order, f"error: {type(err).__name__}: {str(err).strip().splitlines()[0][:200]}")
            return
        row = _record(c, n, order, status="ok", measurement=m, recording=recording, prepared=prepared,
                      wall_s=time.perf_counter() - cell_started)
        row["load_average_after"] = measure.load_average()
        cores = self.machine["cpu_cores_usable"]
        if row["load_average_after"] and row["load_average_after"][0] > cores:
            row["note"] = (row.get("note", "") + f"; machine busy: 1-min load {row['load_average_after'][0]:.1f} "
                           f"on {cores} cores").lstrip("; ")
        self.results.append(row)
        self.last[c.id] = {"samples": n, "median_s": row["median_s"], "wall_s": row["wall_s"],
                           "workload": prepared.workload, "beats": prepared.info.get("beats"),
                           "beats_available": prepared.info.get("beats_available")}
        print(f"[{self.elapsed():6.0f} s]   {c.id:24s} median {row['median_s']:.4g} s "
              f"({row['repeats']} runs; first {row['first_s']:.3g} s)", flush=True)

    def skip(self, c, n: int, order: int, reason: str) -> None:
        self.results.append(_record(c, n, order, status="skipped", reason=reason))

    def write(self, final: bool) -> dict:
        """Rewrite the JSON and Markdown (and the plot: always on a GPU run, which may be cut short)."""
        self.machine["load_average_end"] = measure.load_average()
        full = self.assemble()
        report.write_json(full, self.paths["json"])
        report.write_markdown(full, self.paths["md"])
        if final or self.gpu:
            report.write_plot(full, self.paths["png"])
        return full

    def assemble(self) -> dict:
        a = self.args
        options = {"sizes": a.sizes, "repeats": a.repeats, "contenders": [c.id for c in self.chosen],
                   "device": self.device, "budget_s": a.budget_s, "cap_s": a.cap_s, "cell_budget_s": a.cell_budget_s,
                   "epochs": a.epochs, "cpu_vae_beats": a.cpu_vae_beats, "chunk": a.chunk, "seed": a.seed,
                   "quick": a.quick, "data_dir": str(a.data_dir), "host_memory_method": self.host_peak.method}
        slope_rows = report.slopes(self.results)
        return {
            "schema": 1,
            "machine_name": self.name,
            "date": self.date,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": self.command,
            "elapsed_s": round(self.elapsed(), 1),
            "stopped": self.stopped,
            "machine": self.machine,
            "options": options,
            "startup": self.startup,
            "recordings": self.recordings,
            "results": self.results,
            "ratios": report.ratios(self.results),
            "slopes": slope_rows,
            "targets": report.targets(self.results, slope_rows, self.gpu),
            "notes": _notes(options, self.gpu),
        }


# --------------------------------------------------------------------------- helpers
def _start_up(chosen, gpu: bool) -> dict:
    """Import the libraries and (GPU) make the RMM pool, timing each: a server start pays these."""
    out = {}
    clock = time.perf_counter
    if gpu:
        t = clock()
        backend.use_rmm_pool()
        measure.synchronize("gpu")
        out["RMM pool + CUDA context (+ imports of CuPy, Numba CUDA, RMM, PyTorch)"] = clock() - t
        t = clock()
        import cudf  # noqa: F401

        out["import cudf"] = clock() - t
    t = clock()
    import torch  # noqa: F401

    from pipeline import embed, load, peaks, score, train, wavelet  # noqa: F401

    out["import torch + pipeline steps"] = clock() - t
    if any("neurokit2" in c.id for c in chosen):
        t = clock()
        import neurokit2  # noqa: F401

        out["import neurokit2"] = clock() - t
    return {k: round(v, 4) for k, v in out.items()}


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
        skip = (f"cap: one run predicted at {run_s:.0f} s from {size_label(prev['samples'])} "
                f"(> --cap-s {args.cap_s:g})")
    return {"run_s": run_s, "cell_s": 0.0 if skip else cell_s, "skip": skip}


def _drop_for_budget(chosen, plan: dict, remaining_s: float) -> set[str] | None:
    """Host-side contenders to leave out at this size, the costliest first, until the predicted
    time fits ``remaining_s``; None when even the rest does not fit (then no more sizes)."""
    running = [c for c in chosen if not plan[c.id]["skip"]]
    total = sum(plan[c.id]["cell_s"] for c in running)
    dropped = set()
    for c in sorted((c for c in running if c.baseline), key=lambda c: -plan[c.id]["cell_s"]):
        if total <= remaining_s:
            break
        dropped.add(c.id)
        total -= plan[c.id]["cell_s"]
    if total > remaining_s or len(dropped) == len(running):
        return None
    return dropped


def _predict_recording(n: int, args) -> float:
    """Seconds to make the recording: ~0.5 s per million samples to synthesise and write; tiling is
    ~25 times faster."""
    if csv_path(n, args.data_dir, seed=args.seed).exists():
        return 0.0
    return n * (0.5e-6 if n <= args.chunk else 0.02e-6)  # tiling copies bytes: ~1 GB/s


def _record(c, n, order, *, status, reason="", measurement=None, recording=None, prepared=None, wall_s=None) -> dict:
    row = {"stage": c.stage, "contender": c.id, "label": c.label, "device": c.device, "samples": n,
           "order": order, "status": status, "reason": reason}
    if measurement is None:
        return row
    m = measurement
    times = m.times_s
    row.update(first_s=m.first_s, times_s=times, median_s=statistics.median(times), min_s=min(times),
               max_s=max(times), repeats=len(times), stopped_by_budget=m.stopped_by_budget,
               gpu_peak_bytes=m.gpu_peak_bytes, host_peak_extra_bytes=m.host_peak_extra_bytes,
               wall_s=wall_s, metrics=_median_metrics(m.metrics), first_metrics=m.first_metrics,
               runs_metrics=m.metrics, workload=prepared.workload)
    if m.gpu_peak_bytes is not None:
        row["gpu_peak_bytes_per_sample"] = m.gpu_peak_bytes / n
    if c.stage == "load":
        row["throughput"] = {"mb_per_s": recording.nbytes / 1e6 / row["median_s"]}
    elif c.stage == "vae":
        row["throughput"] = {k: row["metrics"][k] for k in ("epoch_s", "train_beats_per_s", "score_beats_per_s")}
        row["capped"] = bool(prepared.workload)
        row["note"] = (f"{prepared.info['beats']:,} of {prepared.info['beats_available']:,} beats (capped)"
                       if prepared.workload else f"{prepared.info['beats']:,} beats")
    else:
        row["throughput"] = {"msamples_per_s": n / 1e6 / row["median_s"]}
    if c.stage == "segmentation":
        count = row["metrics"].get("beats", row["metrics"].get("r_peaks"))
        row["note"] = f"{count:,.0f} {'R peaks' if 'r_peaks' in row['metrics'] else 'beats kept'}"
    if c.stage == "end-to-end":
        stages = row["metrics"].get("stages_s", {})
        big = sorted(stages.items(), key=lambda kv: -kv[1])[:3]
        row["note"] = f"{row['metrics'].get('beats', 0):,.0f} beats; most time: " + ", ".join(
            f"{k} {report._t(v)}" for k, v in big)
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
    from pipeline.config import VAEConfig

    vae = VAEConfig()
    notes = [
        "All contenders ran in one process on the same recordings; every ratio compares medians from this run.",
        "Clocks are read with time.perf_counter after synchronising the device (CuPy's stream, then the whole "
        "device, since PyTorch and Numba may use other streams).",
        "Each cell (contender × size) runs once first; that run is reported as *first run* and left out of the "
        "median/min/max. Within a process, JIT compilation (Numba CPU kernels are cached on disk, CUDA ones "
        "are compiled), cuFFT plans, RMM pool growth and oneDNN/cuDNN set-up land there.",
        f"Host memory: peak resident memory during the run above the resident size at its start "
        f"({o['host_memory_method']}); the input already in memory is not counted. "
        + ("GPU memory: RMM statistics (backend.PeakMemory), bytes allocated during "
           "the run on top of what was held (the input on the device is not counted, except end to end, which "
           "loads it itself); the cuFFT plan cache is cleared before each GPU contender's first run at a size, "
           "so its work area counts in the peak, which is the maximum over all runs." if gpu else ""),
        "The CSV files are in the page cache when parsed (written or read just before): the load numbers are "
        "parse speed, not disk speed. MB/s counts the CSV's bytes (about 7.4 bytes per sample, '%.4f' values).",
        f"Recordings: pipeline.synth at 250 Hz, seed {o['seed']}; sizes above {size_label(o['chunk'])} repeat "
        f"the {size_label(o['chunk'])} recording's lines (synthesising 200M samples at once would take minutes "
        "and tens of GiB); each seam cuts at most one beat.",
        "Segmentation, project: ricker_response + find_beats (adaptive threshold, NMS kernel, refine to the "
        "extremum, T-wave and baseline-step rejection) + beat_lengths and length_histogram + embed_beats "
        "(every beat embedded into a 256-sample row, scaled), "
        "chained as run._compute does, on a signal already on the device. NeuroKit2: nk.ecg_peaks(signal, sampling_rate=250) with its default method "
        "('neurokit'), on the raw signal, single-threaded on the host: R-peak detection only — no ecg_clean "
        "(which nk.ecg_process would run first), no artefact correction, no pruning, no embedding.",
        f"VAE: train.fit_vae for {o['epochs']} epoch(s) with VAEConfig's other defaults (batch {vae.batch_size}, "
        f"{vae.train_fraction:.0%} of the beats, beta {vae.beta:g}, "
        f"{'bf16 autocast' if vae.mixed_precision else 'float32'} on the GPU) "
        f"then score.score_beats of every beat; beats/s count training beats × epochs over training time, and "
        f"scored beats over scoring time. The CPU VAE uses at most the first {o['cpu_vae_beats']} beats to fit the "
        "time budget (marked 'capped'); a capped size whose work equals the previous size's is not run again."
        + (" The CPU VAE's rows are the GPU segmentation's rows copied to the host (the same kernels' twins)."
           if gpu else ""),
        f"End to end: run_pipeline(RunRequest(input=csv, device, use_cache=False, vae epochs={o['epochs']})): "
        "hash of the input, kernel warm-up on a tiny signal, load, segmentation, training, scoring, writing the "
        "run directory (Parquet, .npy, model, SHA-256 of each) and reading it back; the run directory is "
        "removed between runs, off the clock.",
        f"Budgets: timed repeats of a cell stop once they would pass {o['cell_budget_s']:g} s (at least one); "
        f"host-side contenders are skipped where one run is predicted (linearly from the previous size) above "
        f"{o['cap_s']:g} s; before each size the whole size is predicted from the previous one and, past the "
        f"{o['budget_s']:.0f} s budget, host-side contenders are dropped first, then sizes.",
        "Other processes may share the machine (it is not reserved); the load average at start and end is "
        "recorded above.",
    ]
    return notes


if __name__ == "__main__":
    main()
