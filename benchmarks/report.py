"""The results writer of every benchmark: JSON (everything) and Markdown (tables) through :func:`write`,
the number formats and target verdicts they share, and the two long layouts: the pipeline
benchmark's (``benchmarks.run``: stage tables, ratios, log-log slopes, targets, a PNG plot) and the
dashboard benchmark's (``benchmarks.interaction``).
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks.recordings import size_label

RESULTS = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------- files and formats
def parser(name: str, doc: str, out: bool = True) -> argparse.ArgumentParser:
    """``python -m benchmarks.<name>``'s parser: its docstring's first paragraph and (``out``) ``--out``."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=doc.split("\n\n")[0])
    if out:
        p.add_argument("--out", type=Path, default=RESULTS, help=f"folder for the results (default {RESULTS})")
    return p


def command(name: str, argv: list[str] | None) -> str:
    """The command line that ran benchmark ``name`` (``argv``: what its ``main`` was given, or ``sys.argv``)."""
    return f"python -m benchmarks.{name} " + shlex.join(sys.argv[1:] if argv is None else argv)


def paths(out, kind: str, machine: str, label: str | None = None, exts=("json", "md"), day: str | None = None) -> dict:
    """``{ext: out/<kind>-<machine>-<date>[-<label>].<ext>}``."""
    stem = "-".join(x for x in (kind, machine, day or date.today().isoformat(), label) if x)
    return {ext: Path(out) / f"{stem}.{ext}" for ext in exts}


def write(result: dict, where: dict, markdown: str | None = None) -> None:
    """``result`` as JSON to ``where["json"]`` and ``markdown`` to ``where["md"]``."""
    where["json"].parent.mkdir(parents=True, exist_ok=True)
    where["json"].write_text(json.dumps(result, indent=1, default=_plain) + "\n")
    if markdown is not None:
        where["md"].write_text(markdown.rstrip("\n") + "\n")


def _plain(value):
    return value.item() if isinstance(value, (np.integer, np.floating)) else str(value)


def seconds(s) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    return f"{s * 1e6:.3g} µs" if s < 1e-3 else f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def ms(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"


def sections(header: str, titled_items, rows_of, table_of, out: Path | None = None) -> str:
    """The Markdown of per-recording benchmarks: ``header``, then each (title, items) of
    ``titled_items`` as a '### title' and ``table_of(rows_of(items))``; printed, and written to
    ``out`` if given. Each section's recording count goes to stderr as it ends."""
    text = [header, ""]
    for title, items in titled_items:
        rows = rows_of(items)
        print(f"{title}: {len(rows)} recordings", file=sys.stderr)
        text += [f"### {title}", "", table_of(rows), ""]
    markdown = "\n".join(text)
    print(markdown)
    if out:
        out.write_text(markdown)
    return markdown


def table(header: list[str], rows: list) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]


def target(name: str, value, limit: float, unit: str, higher: bool = False, note: str = "") -> dict:
    """A target row: the measured value against its limit, met or missed and by how much."""
    row = {"target": name, "measured": value, "limit": limit, "unit": unit, "higher": higher, "note": note}
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return {**row, "measured": None, "status": "not measured"}
    met = value >= limit if higher else value <= limit
    return {**row, "status": "met" if met else f"missed by {abs(value / limit - 1):.0%}" if limit else "missed"}


def _value(row: dict, key: str) -> str:
    value, unit = row.get(key), row.get("unit")
    if value is None:
        return "–"
    if unit == "ms":
        return ms(value)
    if unit == "fraction":
        return f"{value:+.1%}" if key == "measured" else f"{value:.0%}"
    return f"{value:.2f}{unit or ''}" if key == "measured" else f"{value:g}{unit or ''}"


def target_lines(rows: list[dict]) -> list[str]:
    return table(["target", "measured", "limit", "status", "note"],
                 [[r["target"], _value(r, "measured"), f"{'≥' if r.get('higher') else '≤'} {_value(r, 'limit')}",
                   r["status"], r.get("note") or ""] for r in rows])


def load_line(m: dict) -> str:
    return (f"- Load average at start / end: {m.get('load_average_start')} / {m.get('load_average_end')} "
            "(other processes share the machine; it was not reserved)")


def machine_line(m: dict) -> str:
    memory = f", {m['memory_bytes'] / 2**30:.0f} GiB RAM" if m.get("memory_bytes") else ""
    gpu = f"; GPU {m['gpu']}" if m.get("gpu") else "; no GPU"
    gpu += f" × {m['gpu_count']}" if m.get("gpu_count", 1) > 1 else ""
    v = m.get("versions", {})
    libs = ", ".join(f"{k} {v[k]}" for k in ("panel", "bokeh", "datashader", "playwright") if k in v)
    browser = f"; {m['chromium']}" if m.get("chromium") else ""
    return (f"{m.get('cpu')}, {m.get('cpu_cores_usable')} usable cores{memory}{gpu}; python {m.get('python')}, "
            f"{libs}{browser}")


# --------------------------------------------------------------------------- the pipeline benchmark
SLOPE_FLAG = 1.15
TARGETS = {"speedup": 100.0, "speedup_samples": 20_000_000, "parse_mb_per_s": 2000.0, "slope": SLOPE_FLAG,
           "gpu_bytes_per_sample": 40.0}
STAGE_TITLES = {
    "load": ("Load (CSV parse)", "Load: CSV parse, one value per line"),
    "segmentation": ("Segmentation (NeuroKit2: detection only)", "Segmentation: the run's chain, Ricker response → "
                     "beats, episodes → lengths → rows, quality (NeuroKit2: R-peak detection only)"),
    "vae": ("VAE (train + score)", "VAE: train for a fixed number of epochs + score every beat"),
    "end-to-end": ("End to end (run_pipeline)", "End to end: run_pipeline, CSV to written results, use_cache=False"),
}
RATIOS = [("segmentation", "segmentation/neurokit2", "segmentation/gpu", "NeuroKit2 ecg_peaks / pipeline GPU"),
          ("segmentation", "segmentation/neurokit2", "segmentation/cpu", "NeuroKit2 ecg_peaks / pipeline CPU"),
          ("segmentation", "segmentation/cpu", "segmentation/gpu", "pipeline CPU / pipeline GPU"),
          ("load", "load/pandas", "load/cudf", "pandas / cuDF"), ("load", "load/pyarrow", "load/cudf", "pyarrow / cuDF"),
          ("load", "load/pandas", "load/pyarrow", "pandas / pyarrow"),
          ("end-to-end", "end-to-end/cpu", "end-to-end/gpu", "CPU / GPU")]


def ok(results: list[dict], contender: str | None = None, samples: int | None = None) -> list[dict]:
    return [r for r in results if r["status"] == "ok" and (contender is None or r["contender"] == contender)
            and (samples is None or r["samples"] == samples)]


def _one(results, contender, samples):
    return next(iter(ok(results, contender, samples)), None)


def slopes(results: list[dict]) -> list[dict]:
    """Per contender, the least-squares slope of log(median time) on log(samples), over every size
    and over the top decade (sizes ≥ the largest / 10), where fixed costs weigh least; capped VAE
    runs (work that does not grow with the size) are left out."""
    out = []
    for contender in dict.fromkeys(r["contender"] for r in results):
        points = [(r["samples"], r["median_s"]) for r in ok(results, contender) if not r.get("capped")]
        if len(points) < 2:
            continue
        fit = lambda pts: float(np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)[0])  # noqa: E731
        top = [p for p in points if p[0] >= max(p[0] for p in points) / 10]
        slope_top = fit(top) if len(top) >= 2 else None
        slope_all = fit(points)
        out.append({"contender": contender, "sizes": [p[0] for p in points], "slope_all": round(slope_all, 3),
                    "slope_top_decade": None if slope_top is None else round(slope_top, 3),
                    "top_decade_sizes": [p[0] for p in top],
                    "flag": (slope_top if slope_top is not None else slope_all) > SLOPE_FLAG})
    return out


def ratios(results: list[dict]) -> list[dict]:
    """Speed ratios between contenders measured at the same size in this run."""
    out = []
    for n in sorted({r["samples"] for r in results}):
        for stage, slow, fast, what in RATIOS:
            a, b = _one(results, slow, n), _one(results, fast, n)
            if a and b:
                out.append({"stage": stage, "samples": n, "what": what, "slower": slow, "faster": fast,
                            "ratio": a["median_s"] / b["median_s"]})
        gpu, cpu = _one(results, "vae/gpu", n), _one(results, "vae/cpu", n)
        if gpu and cpu:
            out.append({"stage": "vae", "samples": n, "slower": "vae/cpu", "faster": "vae/gpu",
                        "what": f"training beats/s, GPU / CPU{' (CPU capped)' if cpu.get('capped') else ''}",
                        "ratio": gpu["metrics"]["train_beats_per_s"] / cpu["metrics"]["train_beats_per_s"]})
    return out


def targets(results: list[dict], slope_rows: list[dict], gpu: bool) -> list[dict]:
    """The GPU targets: what was measured, met or missed and by how much."""
    n, rows = TARGETS["speedup_samples"], []
    nk, seg = _one(results, "segmentation/neurokit2", n), _one(results, "segmentation/gpu", n)
    rows.append(target(f"GPU segmentation ≥ {TARGETS['speedup']:.0f}× faster than NeuroKit2 ecg_peaks at "
                       f"{size_label(n)} samples", nk and seg and nk["median_s"] / seg["median_s"], TARGETS["speedup"],
                       "×", higher=True, note=nk and seg and f"{seconds(nk['median_s'])} vs {seconds(seg['median_s'])}"))
    parsed = sorted(ok(results, "load/cudf"), key=lambda r: r["samples"])
    rows.append(target(f"cuDF CSV parse ≥ {TARGETS['parse_mb_per_s'] / 1000:g} GB/s",
                       parsed[-1]["throughput"]["mb_per_s"] / 1000 if parsed else None, TARGETS["parse_mb_per_s"] / 1000,
                       " GB/s", higher=True, note=parsed and f"at {size_label(parsed[-1]['samples'])} (best "
                       f"{max(p['throughput']['mb_per_s'] for p in parsed) / 1000:.2f} GB/s)"))
    judged = [(s["contender"], s["slope_top_decade"] if s["slope_top_decade"] is not None else s["slope_all"])
              for s in slope_rows if s["contender"].endswith("/gpu") or s["contender"] == "load/cudf"]
    rows.append(target(f"time grows about linearly with samples (log-log slope ≤ {TARGETS['slope']}) for every GPU "
                       "stage", max((v for _, v in judged), default=None), TARGETS["slope"], "",
                       note=", ".join(f"{c} {v:.2f}" for c, v in judged)))
    e2e = sorted((r for r in ok(results, "end-to-end/gpu") if r.get("gpu_peak_bytes")), key=lambda r: r["samples"])
    worst = max(e2e, key=lambda r: r["gpu_peak_bytes"] / r["samples"], default=None)
    rows.append(target(f"peak GPU memory ≤ {TARGETS['gpu_bytes_per_sample']:g} bytes per sample (end to end)",
                       e2e[-1]["gpu_peak_bytes"] / e2e[-1]["samples"] if e2e else None,
                       TARGETS["gpu_bytes_per_sample"], " B/sample", note=worst and
                       f"at {size_label(e2e[-1]['samples'])}; most {worst['gpu_peak_bytes'] / worst['samples']:.1f} "
                       f"B/sample at {size_label(worst['samples'])}"))
    for row in rows:
        row["note"] = row["note"] or ("no GPU in this run" if not gpu else "")
    return rows


def _throughput(r: dict) -> str:
    tp = r.get("throughput") or {}
    if "mb_per_s" in tp:
        return f"{tp['mb_per_s']:,.0f} MB/s"
    if "train_beats_per_s" in tp:
        return (f"{seconds(tp['epoch_s'])}/epoch; train {tp['train_beats_per_s']:,.0f} beats/s; "
                f"score {tp['score_beats_per_s']:,.0f} beats/s")
    return f"{tp['msamples_per_s']:,.1f} Msamples/s" if "msamples_per_s" in tp else ""


def pipeline_markdown(report: dict) -> str:
    m, o, results = report["machine"], report["options"], report["results"]
    gpu_text = f"{m['gpu']} ({m['gpu_memory_bytes'] / 2**30:.0f} GiB)" if "gpu" in m else "none"
    lines = [f"# Benchmarks: {report['machine_name']}, {report['date']}", "",
             f"- Machine: {m['cpu']}, {m['cpu_cores_usable']} usable cores ({m['cpu_cores']} in all), "
             f"{m['memory_bytes'] / 2**30:.0f} GiB RAM; GPU: {gpu_text}",
             f"- Libraries: python {m['python']}, " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
             load_line(m),
             f"- Command: `{report['command']}`; took {report['elapsed_s']:.0f} s (budget {o['budget_s']:.0f} s)",
             f"- Repeats: {o['repeats']} timed runs per cell after one first run, fewer when a cell's timed runs "
             f"would pass {o['cell_budget_s']:g} s (column *runs*); host-side contenders skipped where one run is "
             f"predicted to take more than {o['cap_s']:g} s; VAE {o['epochs']} epochs, CPU VAE capped at "
             f"{o['cpu_vae_beats']} beats", ""]
    if report.get("stopped"):
        lines += [f"**Stopped early:** {report['stopped']}", ""]
    lines += ["## Recordings", "", *table(["samples", "CSV", "made", "seconds"], [
        [size_label(r["samples"]), f"{r['nbytes'] / 1e6:,.{0 if r['nbytes'] >= 1e7 else 2}f} MB", r["method"],
         f"{r['seconds']:.1f}"] for r in report["recordings"]])]
    for stage, (_, title) in STAGE_TITLES.items():
        rows = []
        for r in sorted((r for r in results if r["stage"] == stage), key=lambda r: (r["samples"], r["order"])):
            if r["status"] != "ok":
                rows.append([size_label(r["samples"]), r["label"], *["–"] * 2, 0, *["–"] * 4,
                             f"{r['status']}: {r['reason']}"])
                continue
            gpu = r.get("gpu_peak_bytes")
            host = r.get("host_peak_extra_bytes")
            rows.append([size_label(r["samples"]), r["label"], seconds(r["median_s"]),
                         f"{seconds(r['min_s'])} – {seconds(r['max_s'])}",
                         f"{r['repeats']}" + (" (budget)" if r["stopped_by_budget"] else ""), seconds(r["first_s"]),
                         _throughput(r), "–" if gpu is None else
                         f"{gpu / 2**20:,.0f} MiB ({gpu / r['samples']:.1f} B/sample)",
                         "–" if host is None else f"{host / 2**20:,.0f} MiB", r.get("note", "")])
        if rows:
            lines += [f"## {title}", "", *table(["samples", "contender", "median", "min – max", "runs", "first run",
                                                 "throughput", "peak GPU", "host peak (extra)", "notes"], rows)]
    if report["ratios"]:
        lines += ["## Ratios (same run): median of A / median of B", "", *table(
            ["samples", "stage", "A / B", "ratio"],
            [[size_label(x["samples"]), x["stage"], x["what"], f"{x['ratio']:,.1f}"] for x in report["ratios"]])]
    if report["slopes"]:
        lines += [f"## Scaling: log-log slope of median time against samples (flag > {SLOPE_FLAG})", "", *table(
            ["contender", "sizes", "slope, all sizes", "slope, top decade", "flag"],
            [[s["contender"], ", ".join(size_label(n) for n in s["sizes"]), f"{s['slope_all']:.2f}",
              "–" if s["slope_top_decade"] is None else f"{s['slope_top_decade']:.2f}",
              f"**> {SLOPE_FLAG}**" if s["flag"] else "ok"] for s in report["slopes"]])]
    lines += ["## Targets (measured, not asserted)", "", *target_lines(report["targets"])]
    return "\n".join(lines + ["## Method", "", *(f"- {note}" for note in report["notes"])])


def plot(report: dict, path: Path) -> None:
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
            x, y = np.array([r["samples"] for r in rows], dtype=float), np.array([r["median_s"] for r in rows])
            err = np.array([[r["median_s"] - r["min_s"] for r in rows], [r["max_s"] - r["median_s"] for r in rows]])
            style = "-" if contender.endswith("/gpu") or contender == "load/cudf" else \
                ":" if "neurokit" in contender else "--"
            line = ax.errorbar(x, y, yerr=err, fmt="o" + style, ms=4, capsize=2, label=rows[0]["label"])
            capped = [i for i, r in enumerate(rows) if r.get("capped")]
            if capped:
                ax.plot(x[capped], y[capped], "o", ms=8, mfc="none", color=line[0].get_color(),
                        label=f"{rows[0]['label']}: capped beats")
        ax.set(xscale="log", yscale="log", xlabel="samples", ylabel="median time (s)")
        ax.set_title(STAGE_TITLES[stage][0], fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{report['machine_name']} {report['date']}: time vs samples (log-log)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- the dashboard benchmark
def _row(label: str, s: dict, *extra) -> list:
    return [label, s["n"], ms(s["median"]), ms(s["p95"]), ms(s["max"]), *extra]


def _measured(section: dict, cores: int) -> str:
    """When and how a section was measured, and how busy the machine was meanwhile."""
    m = section.get("measured")
    if not m:
        return ""
    load = m["load_average"]
    options = f" (server options `{' '.join(m['server_options'])}`)" if m.get("server_options") else ""
    text = (f"Measured {m['date'].replace('T', ' ')} by `{m['command']}`{options}; 1-minute load average "
            f"meanwhile: mean {load['mean']}, max {load['max']} on {cores} cores.")
    if m.get("disturbed"):
        text += (" **Disturbed**: other work kept the machine busier than its core count, so these times are "
                 "what a user of a busy machine feels, not an idle one's.")
    return text


def invocation_lines(report: dict) -> list[str]:
    lines = []
    for inv in report.get("invocations", []):
        load, loop = inv.get("load_average") or {}, inv.get("python_loop_ms")
        line = (f"- `{inv['command']}` at {inv['date'].replace('T', ' ')}: load average mean {load.get('mean')}, "
                f"max {load.get('max')} (start {load.get('start')}, end {load.get('end')})")
        if loop:
            line += (f"; the cores' speed (a fixed Python loop, `benchmarks.measure.python_loop_ms`, lower is "
                     f"faster): {loop['start']} ms at the start, {loop['end']} ms at the end")
        lines.append(line + ("; **problems**: " + "; ".join(inv["problems"]) if inv.get("problems") else ""))
    return lines


def _server_lines(title: str, server: dict, cores: int) -> list[str]:
    rows = []
    for kind, s in server["kinds"].items():
        d = server["details"].get(kind, {})
        rows.append(_row(kind, s, f"{d['patch_bytes_median'] / 1024:.1f} KiB, {d['events_median']:.0f} events"
                         if "patch_bytes_median" in d else
                         f"{d.get('models', 0)} models, {d.get('document_bytes', 0) / 1024:.0f} KiB document"
                         if d else ""))
    return [f"## {title}", "", "From the property change the browser sends to the document patch serialized. "
            + _measured(server, cores), "", *table(["interaction", "n", "median", "p95", "max", "patch (median)"], rows)]


def _protocol_lines(title: str, proto: dict, cores: int) -> list[str]:
    rows = [_row(kind, s) for kind, s in proto.items() if isinstance(s, dict) and "median" in s]
    return [f"## {title}", "", "From the message sent to the last patch of the answer received. "
            + _measured(proto, cores), "", *table(["interaction", "n", "median", "p95", "max"], rows),
            f"Errors: {len(proto.get('errors', []))}" + (f" ({'; '.join(proto['errors'][:5])})"
                                                          if proto.get("errors") else "") + ".", ""]


def dashboard_markdown(report: dict) -> str:
    run, cores = report.get("run", {}), report["machine"].get("cpu_cores_usable")
    lines = [f"# Interaction benchmark: {report['machine'].get('name')}, {report['date'][:10]}", "",
             f"- Machine: {machine_line(report['machine'])}"]
    if run:
        lines.append(f"- Run: {run['n_samples']:,} samples, {run['beats']:,} beats, device {run['device']}, "
                     f"board {run['board']}; server ready after {run['server_ready_s']:.1f} s "
                     f"({'cached run' if run.get('cached') else 'pipeline ran at start'})")
    lines += ["- Server: `panel serve dashboard/app.py`, one process, as `./run.sh` serves it unless a section "
              "says otherwise; the soak test has a server of its own (below)",
              "- Runs of the benchmark that wrote this file (each section says which one measured it):",
              *invocation_lines(report), ""]
    if report.get("failed"):
        lines += ["**Failed steps:** " + "; ".join(report["failed"]), ""]
    lines += ["## Targets", "", *target_lines(report.get("targets", []))]
    browser = report.get("browser", {})
    if browser:
        rows = [_row(f"session open: navigation → {label}", s)
                for label, s in browser.get("session open", {}).get("milestones_ms", {}).items()]
        rows += [_row(f"{label} → every view repainted" if label != "clear" else
                      "double-click clear → every view repainted", s) for label, s in browser.get("brushes", {}).items()]
        rows += [_row(f"{label} → new window's picture painted", s) for label, s in browser.get("zoom", {}).items()]
        lines += ["## In Chromium, one session", "", "Each time runs in the page's own clock (`performance.now()`), "
                  "from the input event's timestamp to two animation frames after the result arrived. "
                  + _measured(browser, cores), "", *table(["interaction", "n", "median", "p95", "max"], rows)]
        failures = browser.get("brush_failures", []) + browser.get("zoom_failures", [])
        errors = browser.get("console_errors", []) + browser.get("session open", {}).get("console_errors", [])
        lines += [f"Failed gestures: {len(failures)}" + (f" ({'; '.join(failures[:5])})" if failures else "")
                  + f". Console errors: {len(errors)}" + (f" ({'; '.join(errors[:5])})" if errors else "") + ".", ""]
    if report.get("protocol"):
        lines += _protocol_lines("Over Bokeh's protocol, one session", report["protocol"], cores)
    if report.get("server"):
        lines += _server_lines(f"Server side ({report['server']['board']} board, in process)", report["server"], cores)
    load = report.get("load")
    if load:
        many = load["concurrent"]
        rows = [[r["sessions"], r["opened"], *_row("", r["brush_ms"])[1:], len(r["failed_interactions"]),
                 len(r["console_errors"]), f"{r['independent_sessions']}/{r['opened']}"]
                for r in (load["single"], load.get("in_turn"), many) if r]
        lines += [f"## Load test: {many['sessions']} sessions at once ({many['client']})", "",
                  _measured(load, cores), "", *table(["sessions", "opened", "brushes", "median", "p95", "max",
                                                      "failed", "console errors", "selections independent"], rows)]
        if load.get("p95_ratio"):
            lines += [f"p95 with {many['sessions']} sessions / p95 with one: {load['p95_ratio']:.2f}×", ""]
        if load.get("p95_ratio_in_turn"):
            lines += [f"p95 with {many['sessions']} sessions / p95 of the same brushes one session at a time "
                      f"(the second row): {load['p95_ratio_in_turn']:.2f}×", ""]
        if many.get("burst_ms", {}).get("n"):
            b = many["burst_ms"]
            lines += [f"Before those, every session brushed at the same instant once (the burst, not in the "
                      f"figures above): median {ms(b['median'])}, the last answered after {ms(b['max'])}.", ""]
        problems = many["failed_interactions"] + many["selection_mismatches"] + many["console_errors"]
        lines += ["Problems: " + "; ".join(problems[:10]), ""] if problems else []
    soak = report.get("soak")
    if soak:
        growth = soak.get("growth_after_first_10")
        lines += [f"## Soak test: {soak['cycles']} sessions opened, brushed once and closed", "",
                  _measured(soak, cores), "",
                  f"A server of its own with `{' '.join(soak['server_options'])}` (ms), so that Bokeh discards a "
                  "closed session within seconds (its default keeps it 15 s). Server RSS after every 10 sessions "
                  f"(each reading {soak['settle_s']:.0f} s after the last close); growth after the first 10: "
                  + (f"**{growth:+.1%}**" if growth is not None else "–") + f"; failed cycles: {len(soak['failures'])}.",
                  "", *table(["sessions", "RSS"], [[r["sessions"], f"{r['rss_bytes'] / 2**20:.0f} MiB"]
                                                    for r in soak["rss"]])]
    other = report.get("cuxfilter", {})
    if other.get("protocol"):
        lines += _protocol_lines("cuxfilter board over Bokeh's protocol", other["protocol"], cores)
    if other.get("server"):
        lines += _server_lines("cuxfilter board, server side (in process)", other["server"], cores)
    scale = report.get("scale")
    if scale:
        lines += [f"## {scale['beats']:,} beats ({scale['n_samples']:,} samples): server-side brushes", "",
                  *table(["board", "n", "median", "p95", "max"], [_row(board, b["kinds"]["all brushes"])
                                                                   for board, b in scale.get("boards", {}).items()])]
    return "\n".join(lines)
