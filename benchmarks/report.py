"""What is made of the measurements: ratios from the same run, log-log slopes, the targets (measured,
not asserted), and the three result files: JSON (everything), Markdown (tables), PNG (log-log plot).

``python -m benchmarks.report RESULT.json`` renders the Markdown and the plot again from a JSON file.

See Also
--------
benchmarks.measure : the measurements.
benchmarks.run : the loop that collects them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from benchmarks.recordings import size_label

SLOPE_FLAG = 1.15
TARGETS = {
    "speedup": 100.0,          # GPU segmentation vs NeuroKit2 ecg_peaks, at 20M samples
    "speedup_samples": 20_000_000,
    "parse_mb_per_s": 2000.0,  # cuDF CSV parse
    "slope": SLOPE_FLAG,       # every GPU stage, log-log time vs samples
    "gpu_bytes_per_sample": 40.0,
}
PLOT_TITLES = {"load": "Load (CSV parse)", "segmentation": "Segmentation (NeuroKit2: detection only)",
               "vae": "VAE (train + score)", "end-to-end": "End to end (run_pipeline)"}
STAGE_TITLES = {
    "load": "Load: CSV parse, one value per line",
    "segmentation": "Segmentation: Ricker response + NMS + refinement + lengths + pruning/embedding "
                    "(NeuroKit2: R-peak detection only)",
    "vae": "VAE: train for a fixed number of epochs + score every beat",
    "end-to-end": "End to end: run_pipeline, CSV to written results, use_cache=False",
}


# --------------------------------------------------------------------------- summaries
def ok(results: list[dict], contender: str | None = None, samples: int | None = None) -> list[dict]:
    return [r for r in results if r["status"] == "ok" and (contender is None or r["contender"] == contender)
            and (samples is None or r["samples"] == samples)]


def _one(results, contender, samples):
    found = ok(results, contender, samples)
    return found[0] if found else None


def slopes(results: list[dict]) -> list[dict]:
    """Least-squares slope of log(median time) against log(samples), per contender: over every
    measured size, and over the top decade (sizes ≥ largest / 10), where fixed costs weigh least.
    Capped VAE runs (their work does not grow with the size) are left out."""
    out = []
    for contender in dict.fromkeys(r["contender"] for r in results):
        points = [(r["samples"], r["median_s"]) for r in ok(results, contender) if not r.get("capped")]
        if len(points) < 2:
            continue
        n, t = np.log([p[0] for p in points]), np.log([p[1] for p in points])
        top = [(s, m) for s, m in points if s >= max(p[0] for p in points) / 10]
        slope_top = None
        if len(top) >= 2:
            slope_top = float(np.polyfit(np.log([p[0] for p in top]), np.log([p[1] for p in top]), 1)[0])
        slope_all = float(np.polyfit(n, t, 1)[0])
        judged = slope_top if slope_top is not None else slope_all
        out.append({"contender": contender, "sizes": [p[0] for p in points], "slope_all": round(slope_all, 3),
                    "slope_top_decade": None if slope_top is None else round(slope_top, 3),
                    "top_decade_sizes": [p[0] for p in top], "flag": judged > SLOPE_FLAG})
    return out


def ratios(results: list[dict]) -> list[dict]:
    """Speed ratios between contenders measured at the same size in this run."""
    pairs = [
        ("segmentation", "segmentation/neurokit2", "segmentation/gpu", "NeuroKit2 ecg_peaks / pipeline GPU"),
        ("segmentation", "segmentation/neurokit2", "segmentation/cpu", "NeuroKit2 ecg_peaks / pipeline CPU"),
        ("segmentation", "segmentation/cpu", "segmentation/gpu", "pipeline CPU / pipeline GPU"),
        ("load", "load/pandas", "load/cudf", "pandas / cuDF"),
        ("load", "load/pyarrow", "load/cudf", "pyarrow / cuDF"),
        ("load", "load/pandas", "load/pyarrow", "pandas / pyarrow"),
        ("end-to-end", "end-to-end/cpu", "end-to-end/gpu", "CPU / GPU"),
    ]
    out = []
    samples = sorted({r["samples"] for r in results})
    for n in samples:
        for stage, slow, fast, what in pairs:
            a, b = _one(results, slow, n), _one(results, fast, n)
            if a and b:
                out.append({"stage": stage, "samples": n, "what": what, "slower": slow, "faster": fast,
                            "ratio": a["median_s"] / b["median_s"]})
        gpu, cpu = _one(results, "vae/gpu", n), _one(results, "vae/cpu", n)
        if gpu and cpu:
            ratio = gpu["metrics"]["train_beats_per_s"] / cpu["metrics"]["train_beats_per_s"]
            note = " (CPU capped)" if cpu.get("capped") else ""
            out.append({"stage": "vae", "samples": n, "what": f"training beats/s, GPU / CPU{note}",
                        "slower": "vae/cpu", "faster": "vae/gpu", "ratio": ratio})
    return out


def targets(results: list[dict], slope_rows: list[dict], gpu: bool) -> list[dict]:
    """The issue's targets, each with what was measured, met / missed and by how much."""
    rows = []

    def add(name, measured, status, margin):
        rows.append({"target": name, "measured": measured, "status": status, "margin": margin})

    if not gpu:
        for name in _target_names():
            add(name, "no GPU in this run", "not measured", "")
        return rows

    # 1. segmentation speed-up over NeuroKit2 at 20M samples
    n = TARGETS["speedup_samples"]
    nk, seg = _one(results, "segmentation/neurokit2", n), _one(results, "segmentation/gpu", n)
    if nk and seg:
        x = nk["median_s"] / seg["median_s"]
        add(_target_names()[0], f"{x:,.0f}× ({_t(nk['median_s'])} vs {_t(seg['median_s'])})",
            *_judge(x, TARGETS["speedup"], higher=True, unit="×"))
    else:
        add(_target_names()[0], f"not both measured at {size_label(n)}", "not measured", "")

    # 2. cuDF parse speed, at the largest size measured
    parsed = ok(results, "load/cudf")
    if parsed:
        r = max(parsed, key=lambda r: r["samples"])
        mbs = r["throughput"]["mb_per_s"]
        add(_target_names()[1], f"{mbs / 1000:.2f} GB/s at {size_label(r['samples'])} "
            f"(best {max(p['throughput']['mb_per_s'] for p in parsed) / 1000:.2f} GB/s)",
            *_judge(mbs / 1000, TARGETS["parse_mb_per_s"] / 1000, higher=True, unit=" GB/s"))
    else:
        add(_target_names()[1], "load/cudf not measured", "not measured", "")

    # 3. linear growth: every GPU stage's slope (top decade of sizes)
    gpu_slopes = [s for s in slope_rows if s["contender"].endswith("/gpu") or s["contender"] == "load/cudf"]
    if gpu_slopes:
        judged = [(s["contender"], s["slope_top_decade"] if s["slope_top_decade"] is not None else s["slope_all"])
                  for s in gpu_slopes]
        worst = max(judged, key=lambda p: p[1])
        largest = max(max(s["sizes"]) for s in gpu_slopes)
        text = ", ".join(f"{c} {v:.2f}" for c, v in judged) + f" (sizes up to {size_label(largest)})"
        add(_target_names()[2], text, *_judge(worst[1], TARGETS["slope"], higher=False, unit=""))
    else:
        add(_target_names()[2], "fewer than 2 sizes per GPU stage", "not measured", "")

    # 4. peak GPU memory per sample, end to end, at the largest size
    e2e = [r for r in ok(results, "end-to-end/gpu") if r.get("gpu_peak_bytes")]
    if e2e:
        r = max(e2e, key=lambda r: r["samples"])
        per = r["gpu_peak_bytes"] / r["samples"]
        worst = max(e2e, key=lambda r: r["gpu_peak_bytes"] / r["samples"])
        add(_target_names()[3], f"{per:.1f} B/sample at {size_label(r['samples'])} "
            f"({r['gpu_peak_bytes'] / 2**30:.2f} GiB; most: {worst['gpu_peak_bytes'] / worst['samples']:.1f} "
            f"B/sample at {size_label(worst['samples'])})",
            *_judge(per, TARGETS["gpu_bytes_per_sample"], higher=False, unit=" B/sample"))
    else:
        add(_target_names()[3], "end-to-end/gpu peak not measured", "not measured", "")
    return rows


def _target_names():
    return [f"GPU segmentation ≥ {TARGETS['speedup']:.0f}× faster than NeuroKit2 ecg_peaks at "
            f"{size_label(TARGETS['speedup_samples'])} samples",
            f"cuDF CSV parse ≥ {TARGETS['parse_mb_per_s'] / 1000:g} GB/s",
            f"time grows about linearly with samples (log-log slope ≤ {TARGETS['slope']}) for every GPU stage",
            f"peak GPU memory ≤ {TARGETS['gpu_bytes_per_sample']:g} bytes per sample (end to end)"]


def _judge(value: float, target: float, *, higher: bool, unit: str) -> tuple[str, str]:
    met = value >= target if higher else value <= target
    if higher:
        margin = f"{value / target:.2f}× the target" if met else f"short by {target - value:.3g}{unit} ({value / target:.2f}× the target)"
    else:
        margin = f"{target - value:.3g}{unit} under the limit" if met else f"over by {value - target:.3g}{unit} ({value / target:.2f}× the limit)"
    return ("met" if met else "missed"), margin


# --------------------------------------------------------------------------- files
def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=1, default=_json_default) + "\n")


def _json_default(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _t(seconds) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _throughput(r: dict) -> str:
    tp = r.get("throughput") or {}
    if "mb_per_s" in tp:
        return f"{tp['mb_per_s']:,.0f} MB/s"
    if "train_beats_per_s" in tp:
        return (f"{_t(tp['epoch_s'])}/epoch; train {tp['train_beats_per_s']:,.0f} beats/s; "
                f"score {tp['score_beats_per_s']:,.0f} beats/s")
    if "msamples_per_s" in tp:
        return f"{tp['msamples_per_s']:,.1f} Msamples/s"
    return ""


def write_markdown(report: dict, path: Path) -> None:
    m, o = report["machine"], report["options"]
    results = report["results"]
    lines = [f"# Benchmarks: {report['machine_name']}, {report['date']}", ""]
    gpu_text = f"{m['gpu']} ({m['gpu_memory_bytes'] / 2**30:.0f} GiB)" if "gpu" in m else "none"
    lines += [f"- Machine: {m['cpu']}, {m['cpu_cores_usable']} usable cores "
              f"({m['cpu_cores']} in all), {m['memory_bytes'] / 2**30:.0f} GiB RAM; GPU: {gpu_text}",
              f"- Libraries: python {m['python']}, " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
              f"- Load average at start / end: {m.get('load_average_start')} / {m.get('load_average_end')} "
              "(other processes share the machine; it was not reserved)",
              f"- Command: `{report['command']}`; took {report['elapsed_s']:.0f} s "
              f"(budget {o['budget_s']:.0f} s)",
              f"- Repeats: {o['repeats']} timed runs per cell after one first run, fewer when the timed runs "
              f"of a cell would pass {o['cell_budget_s']:g} s (column *runs*); host-side contenders skipped "
              f"where one run is predicted (linearly from the previous size) to take more than "
              f"{o['cap_s']:g} s; VAE {o['epochs']} epochs, CPU VAE capped at {o['cpu_vae_beats']} beats",
              ""]
    if report.get("stopped"):
        lines += [f"**Stopped early:** {report['stopped']}", ""]

    startup = report.get("startup", {})
    if startup:
        lines += ["## Start-up (paid once per process, e.g. by a server start)", "",
                  "| what | time |", "| --- | --- |"]
        lines += [f"| {k} | {_t(v)} |" for k, v in startup.items()]
        lines += ["", "The *first run* column below is each cell's untimed first run; at the smallest size it "
                  "also pays JIT compilation (Numba, CUDA), cuFFT plans, pool growth and library "
                  "initialisation.", ""]

    lines += ["## Recordings", "", "| samples | CSV | made | seconds |", "| --- | --- | --- | --- |"]
    for rec in report["recordings"]:
        lines.append(f"| {size_label(rec['samples'])} | {rec['nbytes'] / 1e6:,.{0 if rec['nbytes'] >= 1e7 else 2}f} MB | {rec['method']} | "
                     f"{rec['seconds']:.1f} |")
    lines.append("")

    for stage, title in STAGE_TITLES.items():
        rows = [r for r in results if r["stage"] == stage]
        if not rows:
            continue
        lines += [f"## {title}", "",
                  "| samples | contender | median | min – max | runs | first run | throughput | "
                  "peak GPU | host peak (extra) | notes |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in sorted(rows, key=lambda r: (r["samples"], r["order"])):
            if r["status"] != "ok":
                lines.append(f"| {size_label(r['samples'])} | {r['label']} | – | – | 0 | – | – | – | – | "
                             f"{r['status']}: {r['reason']} |")
                continue
            gpu_mem = (f"{r['gpu_peak_bytes'] / 2**20:,.0f} MiB ({r['gpu_peak_bytes'] / r['samples']:.1f} B/sample)"
                       if r.get("gpu_peak_bytes") is not None else "–")
            host = f"{r['host_peak_extra_bytes'] / 2**20:,.0f} MiB" if r.get("host_peak_extra_bytes") is not None else "–"
            runs = f"{r['repeats']}" + (" (budget)" if r["stopped_by_budget"] else "")
            lines.append(f"| {size_label(r['samples'])} | {r['label']} | {_t(r['median_s'])} | "
                         f"{_t(r['min_s'])} – {_t(r['max_s'])} | {runs} | {_t(r['first_s'])} | "
                         f"{_throughput(r)} | {gpu_mem} | {host} | {r.get('note', '')} |")
        lines.append("")

    if report["ratios"]:
        lines += ["## Ratios (same run): median of A / median of B", "", "| samples | stage | A / B | ratio |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {size_label(x['samples'])} | {x['stage']} | {x['what']} | {x['ratio']:,.1f} |"
                  for x in report["ratios"]]
        lines.append("")

    if report["slopes"]:
        lines += [f"## Scaling: log-log slope of median time against samples (flag > {SLOPE_FLAG})", "",
                  "| contender | sizes | slope, all sizes | slope, top decade | flag |", "| --- | --- | --- | --- | --- |"]
        for s in report["slopes"]:
            top = "–" if s["slope_top_decade"] is None else f"{s['slope_top_decade']:.2f}"
            lines.append(f"| {s['contender']} | {', '.join(size_label(n) for n in s['sizes'])} | "
                         f"{s['slope_all']:.2f} | {top} | {'**> ' + str(SLOPE_FLAG) + '**' if s['flag'] else 'ok'} |")
        lines += ["", "A slope below 1 over small sizes means fixed costs (launches, syncs, Python) still "
                  "dominate there; the top decade (sizes ≥ the largest / 10) is what the flag judges.", ""]

    lines += ["## Targets (measured, not asserted)", "", "| target | measured | status | margin |",
              "| --- | --- | --- | --- |"]
    lines += [f"| {t['target']} | {t['measured']} | **{t['status']}** | {t['margin']} |" for t in report["targets"]]
    lines += ["", "## Method", ""]
    lines += [f"- {note}" for note in report["notes"]]
    path.write_text("\n".join(lines) + "\n")


def write_plot(report: dict, path: Path) -> None:
    """Log-log time against samples, one panel per stage, one line per contender (min–max bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    stages = [s for s in STAGE_TITLES if any(r["stage"] == s for r in ok(results))]
    columns = 2 if len(stages) > 1 else 1
    rows_n = max(1, -(-len(stages) // columns))
    fig, axes = plt.subplots(rows_n, columns, figsize=(6.2 * columns, 4.4 * rows_n), squeeze=False)
    for ax in axes.flat[len(stages):]:
        ax.set_visible(False)
    for ax, stage in zip(axes.flat, stages):
        for contender in dict.fromkeys(r["contender"] for r in results if r["stage"] == stage):
            rows = sorted(ok(results, contender), key=lambda r: r["samples"])
            if not rows:
                continue
            x = np.array([r["samples"] for r in rows], dtype=float)
            y = np.array([r["median_s"] for r in rows])
            err = np.array([[r["median_s"] - r["min_s"] for r in rows], [r["max_s"] - r["median_s"] for r in rows]])
            style = "-" if contender.endswith("/gpu") or contender == "load/cudf" else \
                ":" if "neurokit" in contender else "--"
            line = ax.errorbar(x, y, yerr=err, fmt="o" + style, ms=4, capsize=2, label=rows[0]["label"])
            capped = [i for i, r in enumerate(rows) if r.get("capped")]
            if capped:
                ax.plot(x[capped], y[capped], "o", ms=8, mfc="none", color=line[0].get_color(),
                        label=f"{rows[0]['label']}: capped beats")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("samples")
        ax.set_ylabel("median time (s)")
        ax.set_title(PLOT_TITLES[stage], fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{report['machine_name']} {report['date']}: time vs samples (log-log)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(json_path: Path) -> None:
    """Write the Markdown and the plot beside ``json_path`` again, from the JSON alone."""
    json_path = Path(json_path)
    full = json.loads(json_path.read_text())
    write_markdown(full, json_path.with_suffix(".md"))
    write_plot(full, json_path.with_suffix(".png"))


if __name__ == "__main__":
    import sys

    for name in sys.argv[1:] or [None]:
        if name is None:
            raise SystemExit("usage: python -m benchmarks.report RESULT.json [...]")
        render(Path(name))
