"""Archive throughput: recordings per minute through ``pipeline.batch`` with 1 worker and with more.

    python -m benchmarks.archive                                  # CPU default: 8 × 2-minute recordings
    python -m benchmarks.archive --recordings 40 --samples 20M    # the GPU archive (see below)

A synthetic archive (distinct seeds, one Parquet file per recording with its annotation sidecar,
synthesised in parallel on every core) is written once to ``--data-dir`` and reused. For each
worker count (on ``local-cuda``: GPUs) and each ``--per-gpu`` (worker processes sharing a GPU)
one cluster is started (its start-up timed apart) and warmed up with one untimed run per worker
(imports, CUDA context, JIT, first training); the clusters stay up together and take turns, pass
by pass, so that load from other processes falls on each alike. A pass runs a prefix of the
archive with the cache off into a fresh output folder, deleted afterwards, and is timed from the
first task sent to the last result; throughput is recordings / pass time. While a pass runs, NVML
samples each GPU's utilization (:mod:`benchmarks.gpu_utilization`). The speed-up is the
throughput with the most workers (GPUs) over that with 1, at the same ``--per-gpu``.

Time is kept within ``--budget-s``: each configuration's passes get an equal share of it, and
its prefix of the archive (``recordings`` in the results) is what its warm-up predicts will fit,
at least two recordings per worker; no new round of passes starts after the budget is spent.

Results: ``benchmarks/results/archive-<machine>-<date>[-<tag>].{json,md}``. ``--inputs`` times an
existing archive instead (e.g. the four MIT-BIH records).

On the 2-GPU H200 machine (pack loaded as in ``../shared/gpu/README.md``), one command::

    python3 .gpupack/meta/load.py && . .gpupack/meta/env.sh &&
    PYTHONPATH=.:$PYTHONPATH python3 -m benchmarks.archive --recordings 40 --samples 20M \\
        --workers 1,2 --repeats 1 --budget-s 420 --data-dir /tmp/ecg-archive --out benchmarks/results

and the MIT-BIH records (``$ECG_MITDB``: the folder of 100, 119, 208, 233)::

    PYTHONPATH=.:$PYTHONPATH python3 -m benchmarks.archive --inputs $ECG_MITDB --workers 1,2 --repeats 3 \
        --tag mitdb --out benchmarks/results

See Also
--------
pipeline.batch : what is timed.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
FS = 250.0
DEFAULTS = {"cpu": dict(recordings=8, samples=30_000, repeats=3, budget_s=1200.0),
            "gpu": dict(recordings=40, samples=20_000_000, repeats=1, budget_s=420.0)}
# The GPU archive's targets: per GPU, busy, scaling (0.9 × GPUs), a thousand 24-hour recordings.
TARGETS = {"per_gpu_minute": 60.0, "utilization": 80.0, "scaling": 0.9, "thousand_s": 300.0,
           "samples": 20_000_000}


# --------------------------------------------------------------------------- the archive
def make_archive(n: int, samples: int, folder: Path, processes: int | None = None) -> tuple[list[Path], float]:
    """``n`` synthetic recordings of ``samples`` samples (seeds 1000, 1001, …) as Parquet + sidecar,
    made in parallel where missing. Returns the paths and the seconds spent making them."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"rec-{i:03d}-{samples}-seed{1000 + i}.parquet" for i in range(n)]
    missing = [(path, 1000 + i, samples) for i, path in enumerate(paths) if not _complete(path)]
    started = time.perf_counter()
    if missing:
        import multiprocessing

        workers = max(1, min(len(missing), processes or os.cpu_count() or 1))
        # spawn, not fork: the caller may already hold threads or a CUDA context
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_write_recording, missing))
    return paths, time.perf_counter() - started if missing else 0.0


def _complete(path: Path) -> bool:
    from pipeline.sidecar import annotations_path

    return path.exists() and annotations_path(path).exists()


def _write_recording(spec: tuple[Path, int, int]) -> None:
    """One recording: float32 column ``ecg`` (uncompressed Parquet: cuDF reads it straight onto the
    GPU) and ``<stem>.annotations.csv``; both written beside their names, then renamed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.sidecar import annotations_path
    from pipeline.synth import SynthConfig, synthesize

    path, seed, samples = spec
    ecg = synthesize(SynthConfig(n_samples=samples, fs=FS, seed=seed))
    side = annotations_path(path)
    tmp_side, tmp = side.with_name(f".{side.name}.tmp-{os.getpid()}"), path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp_side.write_text("sample,symbol\n" + "".join(f"{s},{c}\n" for s, c in zip(ecg.r_peaks.tolist(),
                                                                                   ecg.symbols.tolist())))
    pq.write_table(pa.table({"ecg": ecg.signal.astype(np.float32)}), tmp, compression="none")
    os.replace(tmp_side, side)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the passes
def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    from benchmarks.measure import describe_machine, load_average, machine_name
    from pipeline import backend

    device = backend.resolve_device(args.device)
    for name, value in DEFAULTS[device].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    workers = sorted({int(w) for w in args.workers.split(",")}, reverse=True)
    per_gpu = sorted({int(k) for k in args.per_gpu.split(",")}, reverse=True) if device == "gpu" else [1]
    if min(workers + per_gpu) < 1 or args.recordings < 1 or args.repeats < 1:
        raise SystemExit("error: --workers, --per-gpu, --recordings and --repeats must be at least 1")
    started = time.perf_counter()
    if args.inputs:  # an existing archive, e.g. the MIT-BIH records
        from pipeline.recordings import find_recordings

        paths, synth_s = find_recordings(args.inputs), 0.0
        args.recordings, args.samples = len(paths), None
    else:
        print(f"archive: {args.recordings} × {args.samples:,} samples in {args.data_dir}", file=sys.stderr)
        paths, synth_s = make_archive(args.recordings, args.samples, args.data_dir)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    machine = describe_machine(device == "gpu")
    report = {
        "machine": machine, "machine_name": machine_name(machine),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": "python -m benchmarks.archive " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                       else sys.argv[1:])),
        "options": {"recordings": args.recordings, "samples": args.samples, "fs": FS, "inputs": args.inputs,
                    "workers": workers, "per_gpu": per_gpu, "threads": args.threads, "repeats": args.repeats,
                    "epochs": args.epochs,
                    "cluster": args.cluster, "device": device, "budget_s": args.budget_s, "tag": args.tag},
        "archive": {"bytes": sum(_bytes(p) for p in paths), "made_s": round(synth_s, 3)},
        "mps": device == "gpu" and _mps_running(),
        "configs": [],
    }
    out_root = Path(tempfile.mkdtemp(prefix="archive-runs-", dir=args.data_dir))

    def save() -> dict:  # after every pass, so that a run cut short keeps what it measured
        machine["load_average_end"] = load_average()
        report["elapsed_s"] = round(time.perf_counter() - started, 1)
        report["summary"] = summarise(report)
        return _write(report, args.out)

    try:
        _measure(report, paths, args, device, [(w, k) for w in workers for k in per_gpu], out_root, save,
                 deadline=started + args.budget_s)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    paths_out = save()
    print(Path(paths_out["md"]).read_text())
    return {**report, "paths": paths_out}


def _measure(report: dict, paths: list[Path], args, device: str, layouts: list[tuple[int, int]], out_root: Path,
             save: Callable[[], dict], deadline: float) -> None:
    """Start a cluster per layout (worker count, workers per GPU), warm each up, then run its
    passes. On a CPU the clusters stay open together and take turns (w=2, w=1, w=2, w=1, …): load
    from other processes that comes and goes then falls on every layout alike. On GPUs each
    layout's workers hold device memory (an RMM pool and a CUDA context each), so one layout runs
    at a time and its cluster closes before the next starts."""
    template = _request(args, device, out_root / "warmup")
    if device == "gpu":
        for i, layout in enumerate(layouts):
            with contextlib.ExitStack() as stack:
                cluster = _start(stack, report, paths, args, device, layout, template, out_root)
                stopped = _passes(report["configs"][-1:], [cluster], paths, args, template, out_root, save, deadline,
                                  later=len(layouts) - i - 1)
            report["stopped"] = report.get("stopped") or stopped
        return
    with contextlib.ExitStack() as stack:
        clusters = [_start(stack, report, paths, args, device, layout, template, out_root) for layout in layouts]
        report["stopped"] = _passes(report["configs"], clusters, paths, args, template, out_root, save, deadline)


def _start(stack, report: dict, paths: list[Path], args, device: str, layout: tuple[int, int], template,
           out_root: Path):
    """Open a layout's cluster and warm it up with one untimed run per worker (imports, CUDA
    context, JIT, first training); its record goes into ``report["configs"]``."""
    from pipeline.batch import run_batch
    from pipeline.batch_task import Job
    from pipeline.cluster import open_cluster

    w, k = layout
    print(f"{_layout(w, k, device == 'gpu')}: starting the cluster", file=sys.stderr)
    cluster = stack.enter_context(open_cluster(args.cluster, w, device=device, threads=args.threads, per_gpu=k))
    warm = run_batch([Job(replace(template, input=str(p), out=str(out_root / f"warm-{w}-{k}")))
                      for p in paths[:cluster.workers]], cluster=cluster, progress=not args.quiet)
    _check(warm)
    report["configs"].append({"workers": cluster.workers, "gpus": w if cluster.kind == "local-cuda" else 0,
                              "per_gpu": cluster.per_gpu, "threads": cluster.threads, "cluster": cluster.kind,
                              "startup_s": round(cluster.startup_s, 3), "warmup_s": round(warm.seconds, 3),
                              "warmup_recording_s": [round(r["wall_s"], 3) for r in warm.rows], "passes": []})
    return cluster


def _passes(configs: list[dict], clusters: list, paths: list[Path], args, template, out_root: Path,
            save: Callable[[], dict], deadline: float, later: int = 0) -> str | None:
    """``args.repeats`` rounds of one timed pass per cluster, in turns, while the budget lasts
    (``later`` layouts still to come share what is left); says so when the budget stopped them."""
    from benchmarks.gpu_utilization import GpuUtilization
    from pipeline.batch import run_batch
    from pipeline.batch_task import Job

    counts = _recordings_that_fit(configs, len(paths), args.repeats, deadline, later)
    for repeat in range(args.repeats):
        if repeat and time.perf_counter() > deadline:
            return f"budget spent after {repeat} round(s) of passes"
        for config, cluster, n in zip(configs, clusters, counts):
            out = out_root / f"w{config['workers']}-r{repeat}"
            jobs = [Job(replace(template, input=str(p), out=str(out))) for p in paths[:n]]
            with GpuUtilization() as busy:
                result = run_batch(jobs, cluster=cluster, progress=not args.quiet)
            _check(result)
            config["passes"].append(_pass_record(result, busy.mean()))
            print(f"{_layout(_units(config), config['per_gpu'], bool(config['gpus']))}, pass "
                  f"{repeat + 1}: {len(jobs)} recordings in {result.seconds:.1f} s "
                  f"({result.per_minute:.1f} per minute)", file=sys.stderr)
            shutil.rmtree(out, ignore_errors=True)
            save()
    return None


def _layout(w: int, k: int, gpus: bool) -> str:
    if not gpus:
        return f"{w} worker{'s' if w != 1 else ''}"
    return f"{w} GPU{'s' if w != 1 else ''} × {k} worker{'s' if k != 1 else ''}"


def _recordings_that_fit(configs: list[dict], n: int, repeats: int, deadline: float, later: int = 0) -> list[int]:
    """Each layout's prefix of the archive: what its share of the time left fits (``later``
    layouts to come take equal shares), predicted from its warm-up (a cold worker's first run
    overestimates a recording: safe side), at least two recordings per worker and at most the
    whole archive."""
    share = (deadline - time.perf_counter()) / ((len(configs) + later) * repeats)
    counts = []
    for c in configs:
        per_recording = statistics.median(c["warmup_recording_s"]) / c["workers"]
        fits = int(share / per_recording) if per_recording > 0 else n
        counts.append(min(n, max(2 * c["workers"], fits)))
    return counts


def _request(args, device: str, out: Path):
    from pipeline.config import VAEConfig
    from pipeline.run import RunRequest

    vae = VAEConfig() if args.epochs is None else VAEConfig(epochs=args.epochs)
    return RunRequest(device=device, out=str(out), vae=vae, use_cache=False)


def _check(result) -> None:
    if result.failed:
        raise SystemExit(f"error: {result.failed[0]['name']}: {result.failed[0]['error']}")


def _pass_record(result, utilization: dict[int, float]) -> dict:
    rows = result.rows
    stage_s = [{name[5:-2]: round(value, 4) for name, value in row.items() if name.startswith("time_")}
               | {"segmentation": round(row["segmentation_s"], 4)} for row in rows]
    stages = {name: round(statistics.median(times.get(name, 0.0) for times in stage_s), 4) for name in stage_s[0]}
    return {"recordings": len(rows), "seconds": round(result.seconds, 3), "per_minute": round(result.per_minute, 3),
            "recording_s": [round(row["wall_s"], 4) for row in rows], "stage_median_s": stages,
            "stage_s": [{"name": row["name"], **times} for row, times in zip(rows, stage_s)],
            "gpu_utilization": utilization, "workers_used": len({row["worker"] for row in rows})}


# --------------------------------------------------------------------------- summary and files
def summarise(report: dict) -> dict:
    """Per layout: pass time median/p95, throughput (all, per GPU), per-recording time median/p95,
    GPU utilization, minutes per 1,000 recordings; the speed-up; the targets (measured, not asserted)."""
    rows = []
    for config in report["configs"]:
        passes = config["passes"]
        if not passes:
            continue
        seconds = [p["seconds"] for p in passes]
        per_recording = [t for p in passes for t in p["recording_s"]]
        per_minute = statistics.median(p["per_minute"] for p in passes)
        gpus = config.get("gpus", 0)   # a layout's GPUs are the first ones NVML numbers
        busy = [statistics.fmean(v for i, v in p["gpu_utilization"].items() if int(i) < gpus)
                for p in passes if any(int(i) < gpus for i in p["gpu_utilization"])]
        rows.append({"workers": config["workers"], "gpus": config.get("gpus", 0), "per_gpu": config.get("per_gpu", 1),
                     "threads": config["threads"], "recordings": passes[0]["recordings"],
                     "passes": len(passes), "pass_median_s": statistics.median(seconds),
                     "pass_p95_s": _p95(seconds), "per_minute": per_minute,
                     "per_unit_minute": per_minute / _units(config),
                     "gpu_utilization": statistics.median(busy) if busy else None,
                     "thousand_min": 1000 / per_minute,
                     "recording_median_s": statistics.median(per_recording), "recording_p95_s": _p95(per_recording),
                     "startup_s": config["startup_s"], "warmup_s": config["warmup_s"],
                     "stage_median_s": passes[0]["stage_median_s"]})
    if not rows:
        return {"rows": [], "speedup": None, "targets": []}
    most = max(rows, key=lambda r: (_units(r), r["per_minute"]))
    one = next((r for r in rows if _units(r) == 1 and r["per_gpu"] == most["per_gpu"]), None)
    speedup = most["per_minute"] / one["per_minute"] if one and _units(most) > 1 else None
    return {"rows": rows, "speedup": speedup, "speedup_units": _units(most), "speedup_per_gpu": most["per_gpu"],
            "targets": _targets(report, rows, most, speedup)}


def _units(layout: dict) -> int:
    """What a layout's throughput is shared by and scaled over: its GPUs, or else its workers."""
    return layout.get("gpus") or layout["workers"]


def _p95(values: list[float]) -> float:
    return float(np.percentile(values, 95)) if values else math.nan


def _targets(report: dict, rows: list[dict], most: dict, speedup: float | None) -> list[dict]:
    o = report["options"]
    n = most["gpus"] or most["workers"]
    unit = "GPU" if most["gpus"] else "worker"
    want = TARGETS["scaling"] * n
    targets = [{"target": f"{n} {unit}s vs 1 ≥ {want:.1f}×",
                "measured": "–" if speedup is None else f"{speedup:.2f}×",
                "status": "not measured" if speedup is None else "met" if speedup >= want else "missed"}]
    if o["device"] != "gpu" or (o["samples"] or 0) < TARGETS["samples"]:
        return targets
    best = max(rows, key=lambda r: r["per_unit_minute"])
    busy = most["gpu_utilization"]
    thousand_s = most["thousand_min"] * 60
    targets += [
        {"target": f"recordings per minute per GPU ≥ {TARGETS['per_gpu_minute']:.0f}",
         "measured": f"{best['per_unit_minute']:.1f} ({best['gpus']} GPU × {best['per_gpu']})",
         "status": "met" if best["per_unit_minute"] >= TARGETS["per_gpu_minute"] else "missed"},
        {"target": f"GPU utilization during a batch ≥ {TARGETS['utilization']:.0f} %",
         "measured": "not measured" if busy is None else f"{busy:.0f} % ({most['gpus']} GPUs × {most['per_gpu']})",
         "status": "not measured" if busy is None else "met" if busy >= TARGETS["utilization"] else "missed"},
        {"target": f"1,000 recordings on {most['gpus']} GPUs ≤ {TARGETS['thousand_s'] / 60:.0f} min",
         "measured": f"{thousand_s / 60:.1f} min, projected from {most['recordings']}",
         "status": "met (projected)" if thousand_s <= TARGETS["thousand_s"] else "missed (projected)"}]
    return targets


def _write(report: dict, out: Path) -> dict:
    import json

    out.mkdir(parents=True, exist_ok=True)
    tag = report["options"].get("tag")
    stem = out / f"archive-{report['machine_name']}-{report['date']}{'-' + tag if tag else ''}"
    Path(f"{stem}.json").write_text(json.dumps(report, indent=1, default=str))
    Path(f"{stem}.md").write_text(markdown(report))
    return {"json": f"{stem}.json", "md": f"{stem}.md"}


def markdown(report: dict) -> str:
    m, o, s = report["machine"], report["options"], report["summary"]
    gpu = f"{m['gpu']} × {m.get('gpu_count', 1)}" if "gpu" in m else "none"
    lines = [f"# Archive throughput: {report['machine_name']}, {report['date']}", "",
             f"- Machine: {m['cpu']}, {m['cpu_cores_usable']} usable cores, {m['memory_bytes'] / 2**30:.0f} GiB RAM; "
             f"GPU: {gpu}",
             f"- Load average at start / end: {m.get('load_average_start')} / {m.get('load_average_end')} "
             "(other processes share the machine; it was not reserved)",
             _archive_line(report),
             f"- Each pass: `pipeline.batch` over the archive, cache off, device {o['device']}, "
             f"VAE epochs {o['epochs'] or 'default'}; {o['repeats']} timed pass(es) per layout after an "
             "untimed warm-up run on each worker; " + ("one layout at a time" if o["device"] == "gpu" else
                                                         "the clusters stay up together and take turns, pass by pass")
             + ("; under CUDA MPS" if report.get("mps") else ""),
             f"- Command: `{report['command']}`; took {report['elapsed_s']:.0f} s (budget {o['budget_s']:.0f} s)", "",
             "| GPUs | workers (per GPU) | threads each | recordings | pass time (median / p95) | recordings per minute "
             "(per GPU or worker) | GPU busy | per recording (median / p95) | 1,000 recordings | cluster start | "
             "warm-up |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in s["rows"]:
        busy = "–" if r["gpu_utilization"] is None else f"{r['gpu_utilization']:.0f} %"
        lines.append(f"| {r['gpus'] or '–'} | {r['workers']} ({r['per_gpu'] if r['gpus'] else '–'}) | "
                     f"{r['threads'] or 'cluster'} | {r['recordings']} | "
                     f"{r['pass_median_s']:.1f} / {r['pass_p95_s']:.1f} s | {r['per_minute']:.1f} "
                     f"({r['per_unit_minute']:.1f}) | {busy} | "
                     f"{r['recording_median_s']:.2f} / {r['recording_p95_s']:.2f} s | "
                     f"{r['thousand_min']:.1f} min | {r['startup_s']:.1f} s | {r['warmup_s']:.1f} s |")
    if not s["rows"]:
        return "\n".join(lines) + "\n\nNo pass finished.\n"
    if report.get("stopped"):
        lines += ["", f"**Stopped early:** {report['stopped']}"]
    lines += ["", "Median stage times per recording (s), first pass:", "",
              "| workers (per GPU) | " + " | ".join(s["rows"][0]["stage_median_s"]) + " |",
              "| --- |" + " --- |" * len(s["rows"][0]["stage_median_s"])]
    lines += [f"| {r['workers']} ({r['per_gpu']}) | " + " | ".join(f"{v:.3f}" for v in r["stage_median_s"].values())
              + " |" for r in s["rows"]]
    lines += ["", "| target | measured | status |", "| --- | --- | --- |"]
    lines += [f"| {t['target']} | {t['measured']} | **{t['status']}** |" for t in s["targets"]]
    return "\n".join(lines) + "\n"


def _mps_running() -> bool:
    """Whether a CUDA MPS control daemon runs on this machine (its workers' kernels then share
    each GPU side by side)."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "nvidia-cuda-mps":
                return True
        except OSError:
            continue
    return False


def _bytes(path: Path) -> int:
    """Size of a recording's data (a WFDB record: its .dat beside the .hea)."""
    path = Path(path)
    data = path.with_suffix(".dat") if path.suffix.lower() == ".hea" else path
    return data.stat().st_size if data.exists() else path.stat().st_size


def _archive_line(report: dict) -> str:
    o, size = report["options"], f"{report['archive']['bytes'] / 1e6:,.0f} MB"
    if o.get("inputs"):
        return f"- Archive: {o['recordings']} recordings from {' '.join(o['inputs'])}, {size}"
    return (f"- Archive: {o['recordings']} synthetic recordings × {o['samples']:,} samples at {o['fs']:g} Hz "
            f"({o['samples'] / o['fs'] / 60:.1f} min each), Parquet, {size}; made in "
            f"{report['archive']['made_s']:.1f} s (0: reused)")


def _parser() -> argparse.ArgumentParser:
    from benchmarks.run import parse_size

    p = argparse.ArgumentParser(prog="python -m benchmarks.archive", description=__doc__.splitlines()[0])
    p.add_argument("--inputs", nargs="+", help="time these recordings (files, folders, globs) instead of a "
                   "synthetic archive, e.g. the MIT-BIH folder")
    p.add_argument("--recordings", type=int, help="recordings in the archive (default: 8 on a CPU, 40 on a GPU)")
    p.add_argument("--samples", type=parse_size, help="samples per recording, e.g. 30000, 20M "
                   "(default: 30,000 = 2 min on a CPU; 20M = 22 h on a GPU)")
    p.add_argument("--workers", default="1,2", help="worker counts to compare; on local-cuda, GPUs (default: 1,2)")
    p.add_argument("--per-gpu", default="1", help="worker processes per GPU to compare, e.g. 1,4 (default: 1)")
    p.add_argument("--threads", type=int, help="thread budget per worker (default: the batch's, cores // workers)")
    p.add_argument("--cluster", default="auto", help="auto | local | local-cuda (default: auto)")
    p.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"))
    p.add_argument("--epochs", type=int, help="VAE epochs (default: the pipeline's)")
    p.add_argument("--repeats", type=int, help="timed passes per worker count (default: 3 on a CPU, 1 on a GPU)")
    p.add_argument("--budget-s", type=float, help="time for everything (default: 1200 s on a CPU, 420 s on a GPU)")
    p.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "ecg-archive",
                   help="where the archive is written once and reused (default: $TMPDIR/ecg-archive)")
    p.add_argument("--out", type=Path, default=RESULTS, help="result folder (default: benchmarks/results)")
    p.add_argument("--tag", help="appended to the result files' names (e.g. threads1)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


if __name__ == "__main__":
    main()
