"""benchmarks: the script end to end on tiny recordings (CPU, one repeat), and its input checks; the
interaction benchmark's quick run, its load test's client against a served dashboard, and the parts
that only a GPU run reaches (options, targets, the report of every section)."""
from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import contenders, interaction, recordings, report, run, sessions
from dashboard.spec import LINKED
from pipeline import synth
from tests.support.bokeh_session import DASHBOARD_MARKER, ProtocolSession
from tests.support.served import CHROMIUM, Server

CPU_CONTENDERS = {"load/pyarrow", "load/pandas", "segmentation/cpu", "segmentation/neurokit2", "vae/cpu",
                  "end-to-end/cpu"}


def test_quick_run_writes_json_markdown_and_plot(tmp_path):
    out = tmp_path / "results"
    returned = run.main(["--quick", "--device", "cpu", "--out", str(out), "--data-dir", str(tmp_path / "data")])

    data = json.loads(Path(returned["paths"]["json"]).read_text())
    assert data["options"]["sizes"] == run.QUICK_SIZES and data["options"]["repeats"] == 1
    measured = [r for r in data["results"] if r["status"] == "ok"]
    assert {r["contender"] for r in measured} == CPU_CONTENDERS
    assert {r["samples"] for r in measured} == set(run.QUICK_SIZES)
    for r in measured:
        for key in ("median_s", "min_s", "max_s", "first_s"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["contender"], key, r[key])
        assert r["repeats"] == 1 and len(r["times_s"]) == 1
    seg = {r["contender"]: r for r in measured if r["stage"] == "segmentation" and r["samples"] == 100_000}
    beats, peaks = seg["segmentation/cpu"]["metrics"]["beats"], seg["segmentation/neurokit2"]["metrics"]["r_peaks"]
    assert abs(beats - peaks) <= 0.05 * peaks  # both find about every beat of the same recording
    assert {s["contender"] for s in data["slopes"]} == CPU_CONTENDERS
    assert [t["status"] for t in data["targets"]] == ["not measured"] * 4  # GPU targets, no GPU here
    assert data["machine"]["cpu_cores"] >= 1 and "numpy" in data["machine"]["versions"]

    markdown = Path(returned["paths"]["md"]).read_text()
    assert "## Targets" in markdown and "NeuroKit2 ecg_peaks (detection only)" in markdown
    assert Path(returned["paths"]["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_large_recordings_tile_the_chunk_and_its_annotations(tmp_path):
    made = recordings.recording_csv(25_000, tmp_path, seed=3, chunk=10_000)
    assert made.method.startswith("tiled")
    values = np.loadtxt(made.path, dtype=np.float32)
    base = np.loadtxt(recordings.recording_csv(10_000, tmp_path, seed=3, chunk=10_000).path, dtype=np.float32)
    np.testing.assert_array_equal(values, np.concatenate([base, base, base[:5_000]]))
    samples, symbols = synth.read_annotations(made.path)
    assert np.all(np.diff(samples) > 0) and samples.max() < 25_000 and len(samples) == len(symbols)
    assert recordings.recording_csv(25_000, tmp_path, seed=3, chunk=10_000).seconds == 0.0  # reused


def test_gpu_targets_of_the_pipeline_benchmark():
    """The four GPU targets from a GPU run's rows (made up here: no GPU on the test machine)."""
    def row(contender, samples, median_s, **extra):
        return {"contender": contender, "samples": samples, "median_s": median_s, "status": "ok", **extra}

    rows = [row("segmentation/neurokit2", 20_000_000, 3.0), row("segmentation/gpu", 20_000_000, 0.0075),
            *(row("load/cudf", n, n / 5.5e9 * 7.4, throughput={"mb_per_s": 5500.0}) for n in (2_000_000, 20_000_000)),
            *(row("end-to-end/gpu", n, n / 2e6, gpu_peak_bytes=45 * n) for n in (2_000_000, 20_000_000))]
    targets = report.targets(rows, report.slopes(rows), gpu=True)
    assert [t["status"] for t in targets] == ["met", "met", "met", "missed by 12%"]
    assert targets[0]["measured"] == 400.0 and targets[3]["note"].startswith("at 20M; most 45.0 B/sample")


def test_sizes_read_with_suffixes_and_a_bad_one_is_refused():
    assert [recordings.parse_size(text) for text in ("50k", "1M", "2.5M", "200_000_000")] == [
        50_000, 1_000_000, 2_500_000, 200_000_000]
    with pytest.raises(SystemExit):
        run.main(["--sizes", "lots"])


def test_contenders_unknown_or_needing_a_gpu_are_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match=r"'segmentaton' matches none of load/cudf, .*segmentation/neurokit2"):
        contenders.select(["segmentaton"], gpu=False)
    with pytest.raises(ValueError, match=r"load/cudf need a GPU"):
        contenders.select(["load"], gpu=False)
    assert [c.id for c in contenders.select(["*/cpu", "load/pandas"], gpu=False)] == [
        "load/pandas", "segmentation/cpu", "vae/cpu", "end-to-end/cpu"]


def test_importing_the_benchmarks_loads_no_gpu_library():
    code = ("import sys, benchmarks.run, benchmarks.contenders, benchmarks.measure, benchmarks.report, "
            "benchmarks.recordings; print(sorted({'cupy', 'cudf', 'rmm', 'numba.cuda'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the interaction benchmark
INTERACTION_KINDS = {f"brush {view}" for view in LINKED} | {"clear", "select family"}   # Poincaré plane included
GESTURE_KINDS = {"zoom (wheel)", "pan (drag)"}
SERVER_KINDS = INTERACTION_KINDS | {"zoom in", "pan", "zoom out", "session open"}


def _finite_summary(s: dict, what: str) -> None:
    assert s["n"] >= 1, what
    for key in ("median", "p95", "max"):
        assert math.isfinite(s[key]) and s[key] > 0, (what, key, s[key])
    assert s["median"] <= s["p95"] <= s["max"], what


@pytest.mark.browser
def test_interaction_benchmark_quick_measures_every_kind(tmp_path):
    """``python -m benchmarks.interaction --quick`` against a real server in headless Chromium, with
    a small load test and soak: every interaction kind has finite times, nothing failed."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)")
    pytest.importorskip("playwright.async_api")
    report = interaction.main(["--quick", "--sessions", "2", "--load-brushes", "2", "--soak", "20",
                               "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "results")])

    data = json.loads(Path(report["paths"]["json"]).read_text())
    assert Path(report["paths"]["md"]).read_text().startswith("# Interaction benchmark")
    browser = data["browser"]
    for label in ("first paint", "every view populated, painted"):
        _finite_summary(browser["session open"]["milestones_ms"][label], f"session open: {label}")
    assert INTERACTION_KINDS <= set(browser["brushes"]) and GESTURE_KINDS <= set(browser["zoom"])
    for kind, s in {**browser["brushes"], **browser["zoom"]}.items():
        _finite_summary(s, f"browser {kind}")
    assert not browser["brush_failures"] and not browser["zoom_failures"] and not browser["console_errors"]
    assert SERVER_KINDS <= set(data["server"]["kinds"])
    for kind, s in data["server"]["kinds"].items():
        _finite_summary(s, f"server {kind}")
    load = data["load"]["concurrent"]
    _finite_summary(load["brush_ms"], "load test brushes")
    _finite_summary(load["burst_ms"], "load test burst")
    assert load["brush_ms"]["n"] == 2 * 2 and load["burst_ms"]["n"] == 2     # the burst apart
    assert load["opened"] == 2 and load["independent_sessions"] == 2 and not load["failed_interactions"]
    soak = data["soak"]
    assert [r["sessions"] for r in soak["rss"]] == [0, 10, 20] and not soak["failures"]
    assert math.isfinite(soak["growth_after_first_10"])
    assert all(t["status"] == "not measured" or math.isfinite(t["measured"]) for t in data["targets"])
    assert data["machine"]["cpu_cores_usable"] >= 1 and data["invocations"][-1]["load_average"]["max"] is not None
    loop = data["invocations"][-1]["python_loop_ms"]          # the cores' speed, at the start and the end
    assert loop["start"] > 0 and loop["end"] > 0 and "fixed Python loop" in Path(report["paths"]["md"]).read_text()
    assert all(data[name]["measured"]["command"].startswith("python -m benchmarks.interaction --quick")
               for name in ("run", "browser", "server", "load", "soak"))
    assert not data["failed"] and all(step["ok"] for step in data["steps"].values()), data["steps"]


@pytest.mark.parametrize("bad", [["--brushes", "0"], ["--boards", "bokeh,teleport"],
                                 ["--client", "browser", "--boards", "bokeh,cuxfilter"]])
def test_interaction_benchmark_refuses_bad_options(bad):
    with pytest.raises(SystemExit):
        interaction.parse_args(bad)


def test_gpu_run_options_parse():
    """What benchmarks/gpu_session.sh asks of the dashboard benchmark on the GPU machine."""
    args = interaction.parse_args(["--device", "gpu", "--client", "bokeh", "--boards", "bokeh,cuxfilter",
                                   "--sessions", "20", "--soak", "200", "--budget-s", "540"])
    assert args.boards == ["bokeh", "cuxfilter"] and args.sessions == 20 and args.soak == 200
    assert interaction.app_args(args, "cuxfilter")[:4] == ["--device", "gpu", "--board", "cuxfilter"]
    assert interaction.parse_args(["--scale", "--boards", "bokeh,cuxfilter"]).scale


def _summary(median: float) -> dict:
    return {"n": 3, "median": median, "p95": 1.5 * median, "max": 2 * median, "min": median / 2, "values": []}


def _dashboard_report() -> dict:
    """A report with every section a CPU or GPU run of the dashboard benchmark writes."""
    kinds = {"brush lengths": _summary(5.0), "all brushes": _summary(5.0), "session open": _summary(600.0)}
    details = {"brush lengths": {"events_median": 4, "patch_bytes_median": 2048.0},
               "session open": {"models": 900, "document_bytes": 2e6}}
    proto = {**kinds, "all zoom/pan": _summary(30.0), "errors": [], "document": {}}
    load_round = {"client": "bokeh protocol", "sessions": 20, "opened": 20, "brush_ms": _summary(12.0),
                  "burst_ms": _summary(40.0), "failed_interactions": [], "console_errors": [],
                  "selection_mismatches": [], "independent_sessions": 20}
    return {"machine": {"name": "h200", "cpu": "x", "cpu_cores_usable": 16, "gpu": "NVIDIA H200", "versions": {}},
            "date": "2026-11-27T10:00:00", "invocations": [], "failed": [], "steps": {},
            "run": {"n_samples": 20_000_000, "beats": 93_537, "device": "gpu", "board": "bokeh", "server_ready_s": 3.0},
            "protocol": proto, "server": {"board": "bokeh", "kinds": kinds, "details": details},
            "load": {"single": {**load_round, "sessions": 1, "opened": 1, "independent_sessions": 1},
                     "in_turn": load_round, "concurrent": load_round, "p95_ratio": 1.4, "p95_ratio_in_turn": 1.2},
            "soak": {"cycles": 20, "rss": [{"sessions": 0, "rss_bytes": 2**30}, {"sessions": 10, "rss_bytes": 2**30}],
                     "failures": [], "settle_s": 2.0, "server_options": ["--unused-session-lifetime", "500"],
                     "growth_after_first_10": -0.004},
            "cuxfilter": {"protocol": proto, "server": {"board": "cuxfilter", "kinds": kinds, "details": details}},
            "scale": {"beats": 935_369, "n_samples": 200_000_000, "boards": {"bokeh": {"kinds": kinds}}}}


def test_gpu_targets_and_report_of_every_section():
    data = _dashboard_report()
    rows = {r["target"]: r for r in interaction.targets(data)}
    assert rows["brush, end to end p95"]["status"] == "met"                           # 7.5 ms ≤ 50 ms
    assert rows["cuxfilter: session open (protocol) median"]["status"] == "met"
    assert rows["bokeh: 935,369 beats, brush server side p95"]["measured"] == 7.5
    assert rows["20 sessions: p95 brush / single-session p95"]["status"] == "met"
    assert rows["memory over 20 session open/close cycles: growth after the first 10"]["status"] == "met"
    data["targets"] = list(rows.values())
    text = report.dashboard_markdown(data)
    for heading in ("## Over Bokeh's protocol", "## Server side (bokeh board", "## Load test: 20 sessions",
                    "## Soak test", "## cuxfilter board over", "## 935,369 beats"):
        assert heading in text, heading


# --------------------------------------------------------------------------- the load test's client
APP_ARGS = ["--samples", "300000", "--epochs", "3", "--device", "cpu"]
TIMEOUT_S = 240      # a tiny run on a busy 2-core machine, generously


def test_deferred_patches_still_give_the_version_and_are_applied_later(tmp_path):
    """The load test's sessions keep the server's patches unapplied while they brush: the version
    they wait for still follows the answer, the document stays as it was, and once the patches are
    applied it shows the count that the session's brush selects in the run's own table."""
    server = Server([*APP_ARGS, "--out", str(tmp_path / "runs")], tmp_path / "server.log")

    async def brush(beats) -> dict:
        session = ProtocolSession(server.url)
        await session.open(TIMEOUT_S)
        try:
            marker = session.doc.get_model_by_name(DASHBOARD_MARKER)
            before = marker.text
            session.defer_patches()
            bounds = sessions.brush_bounds(beats, "scores", np.random.default_rng(1))
            await sessions.protocol_brush(session, "scores", bounds)
            seen = {"before": before, "version": session.version, "document": marker.text}
            session.apply_deferred()
            return {**seen, "applied": marker.text, "shown": sessions.shown_count(session),
                    "expected": sessions.expected_count(beats, {"scores": bounds})}
        finally:
            await session.close()

    try:
        server.wait_ready(TIMEOUT_S)
        seen = asyncio.run(brush(sessions.run_beats(sessions.run_from_log(server.log()))))
    finally:
        server.stop()
    assert seen["version"] != seen["before"] and seen["document"] == seen["before"], seen
    assert seen["applied"] == seen["version"], seen
    assert seen["shown"] == seen["expected"], seen
