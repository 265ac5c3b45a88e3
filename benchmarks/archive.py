"""Archive throughput: recordings per minute through ``pipeline.batch``, per layout of GPUs (on a
CPU: workers) × worker processes per GPU.

    python -m benchmarks.archive                                  # CPU default: 8 × 2-minute recordings
    python -m benchmarks.archive --recordings 200 --samples 20M --workers 1,4 --per-gpu 1,4   # GPUs

Method and current figures: docs/benchmarking.md, "Archives". Results:
``archive-<machine>-<date>[-<tag>].{json,md}`` under ``--out``.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import report
from benchmarks.measure import describe_machine, load_average
from benchmarks.recordings import parse_size
from pipeline import backend
from pipeline.batch import Job, open_cluster, run_batch
from pipeline.cluster import mps_running
from pipeline.config import VAEConfig
from pipeline.run import RunRequest
from pipeline.sidecar import annotation_bytes, annotations_path
from pipeline.synth import SynthConfig, synthesize

FS = 250.0
DEFAULTS = {"cpu": dict(recordings=8, samples=30_000, repeats=3, budget_s=1200.0),
            "gpu": dict(recordings=40, samples=20_000_000, repeats=1, budget_s=420.0)}
# Issue 37's targets on 24-hour recordings: per GPU, busy, scaling (0.9 × GPUs), a thousand recordings.
TARGETS = {"per_gpu_minute": 60.0, "utilization": 80.0, "scaling": 0.9, "thousand_s": 300.0, "samples": 20_000_000}


# --------------------------------------------------------------------------- the archive
def make_archive(n: int, samples: int, folder: Path) -> tuple[list[Path], float]:
    """``n`` synthetic recordings (seeds 1000, 1001, …) as Parquet + sidecar, made in parallel where
    missing; their paths and the seconds spent making them."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"rec-{i:03d}-{samples}-seed{1000 + i}.parquet" for i in range(n)]
    missing = [(p, 1000 + i, samples) for i, p in enumerate(paths) if not (p.exists() and annotations_path(p).exists())]
    started = time.perf_counter()
    if missing:   # spawn, not fork: the caller may already hold threads or a CUDA context
        with ProcessPoolExecutor(max_workers=max(1, min(len(missing), os.cpu_count() or 1)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_write_recording, missing))
    return paths, time.perf_counter() - started if missing else 0.0


def _write_recording(spec: tuple[Path, int, int]) -> None:
    """One recording: float32 column ``ecg`` (uncompressed Parquet: cuDF reads it straight onto the
    GPU) and its annotation sidecar, each written beside its name, then renamed."""
    path, seed, samples = spec
    ecg = synthesize(SynthConfig(n_samples=samples, fs=FS, seed=seed))
    side = annotations_path(path)
    tmp_side, tmp = side.with_name(f".{side.name}.tmp-{os.getpid()}"), path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp_side.write_bytes(annotation_bytes(ecg.r_peaks, ecg.symbols))
    pq.write_table(pa.table({"ecg": ecg.signal.astype(np.float32)}), tmp, compression="none")
    os.replace(tmp_side, side)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the passes
def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    device = backend.resolve_device(args.device)
    for name, value in DEFAULTS[device].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    workers = sorted({int(w) for w in args.workers.split(",")}, reverse=True)
    per_gpu = sorted({int(k) for k in args.per_gpu.split(",")}, reverse=True) if device == "gpu" else [1]
    if min(workers + per_gpu) < 1 or args.recordings < 1 or args.repeats < 1:
        raise SystemExit("error: --workers, --per-gpu, --recordings and --repeats must be at least 1")
    started = time.perf_counter()
    print(f"archive: {args.recordings} × {args.samples:,} samples in {args.data_dir}", file=sys.stderr)
    paths, synth_s = make_archive(args.recordings, args.samples, args.data_dir)
    machine = describe_machine(device == "gpu")
    report_ = {"machine": machine, "machine_name": machine["name"],
               "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
               "command": report.command("archive", argv),
               "options": {"recordings": args.recordings, "samples": args.samples, "fs": FS, "workers": workers,
                           "per_gpu": per_gpu, "threads": args.threads, "repeats": args.repeats, "epochs": args.epochs,
                           "device": device, "budget_s": args.budget_s, "tag": args.tag},
               "archive": {"bytes": sum(p.stat().st_size for p in paths), "made_s": round(synth_s, 3)},
               "mps": device == "gpu" and mps_running(), "configs": []}
    where = report.paths(args.out, "archive", machine["name"], args.tag, day=report_["date"])
    out_root = Path(tempfile.mkdtemp(prefix="archive-runs-", dir=args.data_dir))

    def save() -> None:  # after every pass, so that a run cut short keeps what it measured
        machine["load_average_end"] = load_average()
        report_["elapsed_s"] = round(time.perf_counter() - started, 1)
        report_["summary"] = summarise(report_)
        report.write(report_, where, markdown(report_))

    layouts = [(w, k) for w in workers for k in per_gpu]
    # On a CPU the clusters stay open together and take turns pass by pass, so that load from other
    # processes falls on every layout alike; on GPUs each layout's workers hold device memory (an RMM
    # pool and a CUDA context each), so one layout runs at a time, its cluster closed before the next.
    groups = [[layout] for layout in layouts] if device == "gpu" else [layouts]
    template = RunRequest(device=device, out=str(out_root / "warmup"), use_cache=False,
                          vae=VAEConfig() if args.epochs is None else VAEConfig(epochs=args.epochs))
    try:
        for i, group in enumerate(groups):
            with contextlib.ExitStack() as stack:
                clusters = [_start(stack, report_, paths, args, device, layout, template, out_root) for layout in group]
                stopped = _passes(report_["configs"][-len(group):], clusters, paths, args, template, out_root, save,
                                  deadline=started + args.budget_s, later=len(groups) - i - 1)
            report_["stopped"] = report_.get("stopped") or stopped
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    save()
    print(where["md"].read_text())
    return {**report_, "paths": {k: str(v) for k, v in where.items()}}


def _start(stack, report_: dict, paths: list[Path], args, device: str, layout: tuple[int, int], template,
           out_root: Path):
    """Open a layout's cluster and warm it up with one untimed run per worker (imports, CUDA
    context, JIT, first training); its record goes into ``report_["configs"]``."""
    w, k = layout
    print(f"{w} {'GPU' if device == 'gpu' else 'worker'}(s) × {k}: starting the cluster", file=sys.stderr)
    cluster = stack.enter_context(open_cluster("auto", w, device=device, threads=args.threads, per_gpu=k))
    warm = _check(run_batch([Job(replace(template, input=str(p), out=str(out_root / f"warm-{w}-{k}")))
                             for p in paths[:cluster.workers]], cluster=cluster, progress=not args.quiet))
    report_["configs"].append({"workers": cluster.workers, "gpus": w if cluster.kind == "local-cuda" else 0,
                               "per_gpu": cluster.per_gpu, "threads": cluster.threads, "cluster": cluster.kind,
                               "startup_s": round(cluster.startup_s, 3), "warmup_s": round(warm.seconds, 3),
                               "warmup_recording_s": [round(r["wall_s"], 3) for r in warm.rows], "passes": []})
    return cluster


def _passes(configs: list[dict], clusters: list, paths: list[Path], args, template, out_root: Path, save,
            deadline: float, later: int) -> str | None:
    """``args.repeats`` rounds of one timed pass per cluster, in turns, while the budget lasts
    (``later`` layouts still to come share what is left); says so when the budget stopped them."""
    counts = _recordings_that_fit(configs, len(paths), args.repeats, deadline, later)
    for repeat in range(args.repeats):
        if repeat and time.perf_counter() > deadline:
            return f"budget spent after {repeat} round(s) of passes"
        for config, cluster, n in zip(configs, clusters, counts):
            out = out_root / f"w{config['workers']}-r{repeat}"
            with gpu_utilization() as busy:
                result = _check(run_batch([Job(replace(template, input=str(p), out=str(out))) for p in paths[:n]],
                                          cluster=cluster, progress=not args.quiet))
            config["passes"].append(_pass_record(result, {i: round(statistics.fmean(s), 1)
                                                          for i, s in busy.items() if s}))
            print(f"{_units(config)} {'GPU' if config['gpus'] else 'worker'}(s) × {config['per_gpu']}, pass "
                  f"{repeat + 1}: {n} recordings in {result.seconds:.1f} s ({result.per_minute:.1f} per minute)",
                  file=sys.stderr)
            shutil.rmtree(out, ignore_errors=True)
            save()
    return None


def _recordings_that_fit(configs: list[dict], n: int, repeats: int, deadline: float, later: int) -> list[int]:
    """Each layout's prefix of the archive: what its share of the time left fits (``later`` layouts
    to come take equal shares), predicted from its warm-up (a cold worker's first run overestimates
    a recording: safe side), at least two recordings per worker and at most the whole archive."""
    share = (deadline - time.perf_counter()) / ((len(configs) + later) * repeats)
    counts = []
    for c in configs:
        per_recording = statistics.median(c["warmup_recording_s"]) / c["workers"]
        fits = int(share / per_recording) if per_recording > 0 else n
        counts.append(min(n, max(2 * c["workers"], fits)))
    return counts


def _check(result):
    if result.failed:
        raise SystemExit(f"error: {result.failed[0]['name']}: {result.failed[0]['error']}")
    return result


def _pass_record(result, utilization: dict[int, float]) -> dict:
    rows = result.rows
    stage_s = [{name[5:-2]: round(value, 4) for name, value in row.items() if name.startswith("time_")}
               | {"segmentation": round(row["segmentation_s"], 4)} for row in rows]
    stages = {name: round(statistics.median(times.get(name, 0.0) for times in stage_s), 4) for name in stage_s[0]}
    return {"recordings": len(rows), "seconds": round(result.seconds, 3), "per_minute": round(result.per_minute, 3),
            "recording_s": [round(row["wall_s"], 4) for row in rows], "stage_median_s": stages,
            "stage_s": [{"name": row["name"], **times} for row, times in zip(rows, stage_s)],
            "gpu_utilization": utilization, "workers_used": len({row["worker"] for row in rows})}


@contextlib.contextmanager
def gpu_utilization(interval_s: float = 0.1):
    """NVML's utilization of each GPU (the share of its sample period, 1/6 s to 1 s, in which a kernel
    ran: never idle, not full), sampled in a thread while the block runs: ``{NVML index: [%, …]}``,
    empty without NVML (no nvidia-ml-py, no driver)."""
    samples, stop, handles = {}, threading.Event(), []
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        samples.update({i: [] for i in range(len(handles))})

    def sample() -> None:
        while not stop.wait(interval_s):
            for i, handle in enumerate(handles):
                with contextlib.suppress(Exception):
                    samples[i].append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()
        if handles:
            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()


# --------------------------------------------------------------------------- summary and report
def summarise(report_: dict) -> dict:
    """Per layout: pass time median/p95, throughput (all, per GPU), per-recording time median/p95,
    GPU utilization, minutes per 1,000 recordings; the speed-up; the targets (measured, not asserted)."""
    rows = []
    for config in report_["configs"]:
        passes = config["passes"]
        if not passes:
            continue
        seconds = [p["seconds"] for p in passes]
        per_recording = [t for p in passes for t in p["recording_s"]]
        per_minute = statistics.median(p["per_minute"] for p in passes)
        gpus = config.get("gpus", 0)   # a layout's GPUs are the first ones NVML numbers
        busy = [statistics.fmean(v for i, v in p["gpu_utilization"].items() if int(i) < gpus)
                for p in passes if any(int(i) < gpus for i in p["gpu_utilization"])]
        rows.append({"workers": config["workers"], "gpus": gpus, "per_gpu": config.get("per_gpu", 1),
                     "threads": config["threads"], "recordings": passes[0]["recordings"], "passes": len(passes),
                     "pass_median_s": statistics.median(seconds), "pass_p95_s": float(np.percentile(seconds, 95)),
                     "per_minute": per_minute, "per_unit_minute": per_minute / _units(config),
                     "gpu_utilization": statistics.median(busy) if busy else None, "thousand_min": 1000 / per_minute,
                     "recording_median_s": statistics.median(per_recording),
                     "recording_p95_s": float(np.percentile(per_recording, 95)),
                     "startup_s": config["startup_s"], "warmup_s": config["warmup_s"],
                     "stage_median_s": passes[0]["stage_median_s"]})
    if not rows:
        return {"rows": [], "speedup": None, "targets": []}
    most = max(rows, key=lambda r: (_units(r), r["per_minute"]))
    one = next((r for r in rows if _units(r) == 1 and r["per_gpu"] == most["per_gpu"]), None)
    speedup = most["per_minute"] / one["per_minute"] if one and _units(most) > 1 else None
    return {"rows": rows, "speedup": speedup, "speedup_units": _units(most), "speedup_per_gpu": most["per_gpu"],
            "targets": _targets(report_["options"], rows, most, speedup)}


def _units(layout: dict) -> int:
    """What a layout's throughput is shared by and scaled over: its GPUs, or else its workers."""
    return layout.get("gpus") or layout["workers"]


def _targets(o: dict, rows: list[dict], most: dict, speedup: float | None) -> list[dict]:
    t, n = report.target, _units(most)
    targets = [t(f"{n} {'GPU' if most['gpus'] else 'worker'}s vs 1", speedup, TARGETS["scaling"] * n, "×", higher=True)]
    if o["device"] != "gpu" or o["samples"] < TARGETS["samples"]:
        return targets
    best = max(rows, key=lambda r: r["per_unit_minute"])
    return targets + [
        t("recordings per minute per GPU", best["per_unit_minute"], TARGETS["per_gpu_minute"], "", higher=True,
          note=f"{best['gpus']} GPU × {best['per_gpu']}"),
        t("GPU utilization during a batch", most["gpu_utilization"], TARGETS["utilization"], " %", higher=True,
          note=f"{most['gpus']} GPUs × {most['per_gpu']}"),
        t(f"1,000 recordings on {most['gpus']} GPUs", most["thousand_min"], TARGETS["thousand_s"] / 60, " min",
          note=f"projected from {most['recordings']} recordings")]


def markdown(report_: dict) -> str:
    m, o, s = report_["machine"], report_["options"], report_["summary"]
    lines = [f"# Archive throughput: {report_['machine_name']}, {report_['date']}", "",
             f"- Machine: {report.machine_line(m)}",
             report.load_line(m),
             f"- Archive: {o['recordings']} synthetic recordings × {o['samples']:,} samples at {o['fs']:g} Hz "
             f"({o['samples'] / o['fs'] / 60:.1f} min each), Parquet, {report_['archive']['bytes'] / 1e6:,.0f} MB; "
             f"made in {report_['archive']['made_s']:.1f} s (0: reused)",
             f"- Each pass: `pipeline.batch` over the archive, cache off, device {o['device']}, "
             f"VAE epochs {o['epochs'] or 'default'}; {o['repeats']} timed pass(es) per layout after an "
             "untimed warm-up run on each worker; " + ("one layout at a time" if o["device"] == "gpu" else
                                                         "the clusters stay up together and take turns, pass by pass")
             + ("; under CUDA MPS" if report_.get("mps") else ""),
             f"- Command: `{report_['command']}`; took {report_['elapsed_s']:.0f} s (budget {o['budget_s']:.0f} s)", "",
             *report.table(["GPUs", "workers (per GPU)", "threads each", "recordings", "pass time (median / p95)",
                            "recordings per minute (per GPU or worker)", "GPU busy", "per recording (median / p95)",
                            "1,000 recordings", "cluster start", "warm-up"], [
                 [r["gpus"] or "–", f"{r['workers']} ({r['per_gpu'] if r['gpus'] else '–'})",
                  r["threads"] or "cluster", r["recordings"], f"{r['pass_median_s']:.1f} / {r['pass_p95_s']:.1f} s",
                  f"{r['per_minute']:.1f} ({r['per_unit_minute']:.1f})",
                  "–" if r["gpu_utilization"] is None else f"{r['gpu_utilization']:.0f} %",
                  f"{r['recording_median_s']:.2f} / {r['recording_p95_s']:.2f} s", f"{r['thousand_min']:.1f} min",
                  f"{r['startup_s']:.1f} s", f"{r['warmup_s']:.1f} s"] for r in s["rows"]])]
    if not s["rows"]:
        return "\n".join(lines + ["No pass finished."])
    if report_.get("stopped"):
        lines += [f"**Stopped early:** {report_['stopped']}", ""]
    stages = list(s["rows"][0]["stage_median_s"])
    lines += ["Median stage times per recording (s), first pass:", "",
              *report.table(["workers (per GPU)", *stages], [[f"{r['workers']} ({r['per_gpu']})",
                                                              *(f"{v:.3f}" for v in r["stage_median_s"].values())]
                                                             for r in s["rows"]]),
              *report.target_lines(s["targets"])]
    return "\n".join(lines)


def _parser():
    p = report.parser("archive", __doc__)
    p.add_argument("--recordings", type=int, help="recordings in the archive (default: 8 on a CPU, 40 on a GPU)")
    p.add_argument("--samples", type=parse_size, help="samples per recording (default: 30k on a CPU, 20M on a GPU)")
    p.add_argument("--workers", default="1,2", help="worker counts to compare; on GPUs, GPU counts (default: 1,2)")
    p.add_argument("--per-gpu", default="1", help="worker processes per GPU to compare, e.g. 1,4 (default: 1)")
    p.add_argument("--threads", type=int, help="thread budget per worker (default: the batch's, cores // workers)")
    p.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"))
    p.add_argument("--epochs", type=int, help="VAE epochs (default: the pipeline's)")
    p.add_argument("--repeats", type=int, help="timed passes per layout (default: 3 on a CPU, 1 on a GPU)")
    p.add_argument("--budget-s", type=float, help="time for everything (default: 1200 s on a CPU, 420 s on a GPU)")
    p.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "ecg-archive",
                   help="where the archive is written once and reused (default: $TMPDIR/ecg-archive)")
    p.add_argument("--tag", help="appended to the result files' names")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


if __name__ == "__main__":
    main()
