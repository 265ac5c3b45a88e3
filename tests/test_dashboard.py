"""Tests of the dashboard without a server: DataStore selections, the views that read it, the
HoloViews board's brush sync, the startup job's progress states and the error page.

One tiny pipeline run (300k samples, 3 epochs, in a temporary folder) is shared by the module.
"""
from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pandas as pd
import panel as pn
import pytest
import torch
from bokeh.document import Document
from panel.io.state import set_curdoc

from dashboard import startup
from dashboard.data_store import TABLE_LIMIT, DataStore, SharedRun
from pipeline.config import VAEConfig
from pipeline.run import RunRequest, run_pipeline

TINY = dict(samples=300_000, vae=dataclasses.replace(VAEConfig(), epochs=3), device="cpu")


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_pipeline(RunRequest(out=str(tmp_path_factory.mktemp("runs")), **TINY))


@pytest.fixture(scope="module")
def shared(run) -> SharedRun:
    return SharedRun.from_run(run)


@pytest.fixture
def store(shared) -> DataStore:
    return DataStore(shared)


def f64(frame: pd.DataFrame) -> pd.DataFrame:
    """The beats table with float columns in float64: the DataStore compares brush edges in float64
    (NumPy 2 would compare a float32 column with a Python float in float32)."""
    return frame.astype({c: "float64" for c in frame.columns if frame[c].dtype == np.float32})


def middle_range(values, lo_q=0.3, hi_q=0.7):
    return float(np.quantile(values, lo_q)), float(np.quantile(values, hi_q))


def expected_outliers(beats: pd.DataFrame, mask, threshold) -> pd.DataFrame:
    """The ranked outlier table computed independently with pandas."""
    chosen = beats[mask & (beats["score"] > threshold)]
    return chosen.sort_values("score", ascending=False, kind="stable").head(TABLE_LIMIT)


# --------------------------------------------------------------------------- selections
def test_length_brush_filters_table_and_views(shared, store):
    from dashboard.views import VIEWS, OutlierTable, SelectionCentre, SelectionSummary

    table = OutlierTable(data_store=store, spec=VIEWS["outliers"])
    centre = SelectionCentre(data_store=store, spec=VIEWS["centre"])
    summary = SelectionSummary(data_store=store, spec=VIEWS["outliers"])
    rows_before = table.table.value.copy()
    mean_before = store.selection.mean_beat.copy()

    beats = f64(pd.read_parquet(shared.run.path / "beats.parquet"))      # from disk, not from the store
    lo, hi = middle_range(beats["length_s"], 0.1, 0.4)
    store.select_range("length_s", lo, hi)

    mask = ((beats["length_s"] >= lo) & (beats["length_s"] <= hi)).to_numpy()
    sel = store.selection
    assert 0 < sel.count < len(beats)
    assert sel.count == int(mask.sum())
    assert np.array_equal(sel.mask, mask)
    want = expected_outliers(beats, mask, store.threshold)
    assert sel.n_outliers == int((mask & (beats["score"] > store.threshold)).sum())
    assert table.table.value["beat_id"].tolist() == want["beat_id"].tolist()
    assert table.table.value["score"].is_monotonic_decreasing
    assert not table.table.value.equals(rows_before)
    assert f"{sel.count:,}</b> of" in summary.text.object
    assert f"{sel.count:,}</b> selected beats" in centre.info.object
    assert not np.allclose(sel.mean_beat, mean_before)
    np.testing.assert_allclose(sel.mean_beat, shared.embeddings[mask].mean(axis=0), rtol=1e-5, atol=1e-6)
    assert table.rendered == centre.rendered == summary.rendered == sel.version

    store.clear()
    assert store.selection.count == len(beats)


def test_brushes_intersect_and_time_window_and_split_filter(shared, store):
    beats = f64(shared.beats)
    lo, hi = middle_range(beats["length_s"], 0.2, 0.9)
    z_lo, z_hi = middle_range(beats["z1"], 0.1, 0.8)
    t0, t1 = 100.0, shared.duration_s / 2
    store.update(brush={"length_s": (lo, hi), "z1": (z_lo, z_hi)}, time_range=(t0, t1), split="test")
    mask = (beats["length_s"].between(lo, hi) & beats["z1"].between(z_lo, z_hi)
            & beats["time_s"].between(t0, t1) & (beats["split"] == "test")).to_numpy()
    assert store.selection.count == int(mask.sum()) > 0

    store.update(follow_window=False)  # the window no longer filters
    mask = (beats["length_s"].between(lo, hi) & beats["z1"].between(z_lo, z_hi) & (beats["split"] == "test"))
    assert store.selection.count == int(mask.sum())


def test_bad_brush_is_refused_with_a_clear_message(store):
    with pytest.raises(ValueError, match="brush column must be one of"):
        store.update(brush={"nonsense": (0, 1)})
    with pytest.raises(ValueError, match="lo <= hi"):
        store.update(brush={"score": (5, 1)})


def test_two_sessions_on_one_run_are_independent(shared):
    beats_before = shared.beats.copy()
    alice, bob = DataStore(shared), DataStore(shared)
    lo, hi = middle_range(shared.beats["length_s"])
    alice.select_range("length_s", lo, hi)
    alice.update(threshold=alice.threshold * 2, split="train")

    assert bob.brush == {} and bob.split == "all"
    assert bob.selection.count == len(shared.beats)
    assert bob.threshold == shared.default_threshold()
    assert alice.selection.count < bob.selection.count

    bob.select_range("score", *middle_range(shared.beats["score"]))
    assert alice.brush == {"length_s": (lo, hi)}
    pd.testing.assert_frame_equal(shared.beats, beats_before)  # shared data is never written


def test_threshold_changes_the_outlier_set(shared, store):
    scores = f64(shared.beats)["score"]
    low, high = float(np.quantile(scores, 0.9)), float(np.quantile(scores, 0.99))
    store.update(threshold=low)
    many = store.selection
    store.update(threshold=high)
    few = store.selection
    assert many.n_outliers == int((scores > low).sum())
    assert few.n_outliers == int((scores > high).sum())
    assert few.n_outliers < many.n_outliers
    assert (few.outliers["score"] > high).all()
    assert set(few.outliers["beat_id"]) < set(many.outliers["beat_id"])


def test_decoded_centre_is_the_decoder_at_the_mean_latent_position(run, shared, store):
    lo, hi = middle_range(shared.beats["score"], 0.0, 0.5)
    store.select_range("score", lo, hi)
    sel = store.selection
    chosen = shared.beats[f64(shared.beats)["score"].between(lo, hi)]
    mean_z = chosen[["z1", "z2"]].to_numpy(dtype=np.float64).mean(axis=0)
    np.testing.assert_allclose(sel.centre_z, mean_z, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        want = run.model("cpu").decode(torch.tensor(sel.centre_z[None, :], dtype=torch.float32)).numpy()[0]
    np.testing.assert_allclose(sel.centre_decoded, want, rtol=1e-5, atol=1e-6)

    store.update(brush={"score": (-2.0, -1.0)})  # nothing there
    assert store.selection.count == 0 and store.selection.centre_decoded is None


def test_focused_beat_and_its_reconstruction(run, shared, store):
    from dashboard.views import VIEWS, BeatDetail

    detail = BeatDetail(data_store=store, spec=VIEWS["beat"])
    assert "Click a row" in detail.info.object
    beat_id = int(store.selection.outliers["beat_id"].iloc[0])
    store.update(focus=beat_id)
    beat, row, recon = store.focused()
    assert int(beat["beat_id"]) == beat_id and f"Beat <b>{beat_id}</b>" in detail.info.object
    with torch.no_grad():
        mu, _ = run.model("cpu").encode(torch.tensor(np.asarray(run.embeddings[beat_id])[None, :]))
        want = run.model("cpu").decode(mu).numpy()[0]
    np.testing.assert_allclose(recon, want, rtol=1e-5, atol=1e-6)
    lo, hi = store.focus_window(beat_id, 4.0)
    assert lo < beat["time_s"] < hi and hi - lo == pytest.approx(4.0)


# --------------------------------------------------------------------------- the HoloViews board
def test_holoviews_board_mirrors_brushes_both_ways(shared):
    import holoviews as hv

    from dashboard.holoviews_board import HoloViewsBoard, expr_from_ranges, ranges_from_expr
    from dashboard.views import layout

    doc = Document()
    with set_curdoc(doc):
        store = DataStore(shared)
        board = HoloViewsBoard(store)
        body, views = layout(store, board)
        doc.add_root(body.get_root(doc))
        assert set(views) == {"signal", "lengths", "latent", "scores", "outliers", "beat", "decoded", "centre"}

        lo, hi = middle_range(shared.beats["length_s"])
        store.select_range("length_s", lo, hi)          # store -> link_selections
        assert ranges_from_expr(board.links.selection_expr) == {"length_s": (lo, hi)}

        z = {"z1": middle_range(shared.beats["z1"]), "z2": middle_range(shared.beats["z2"])}
        board.links.selection_expr = expr_from_ranges(z)  # a chart's brush -> store
        assert store.brush == z
        mask = np.ones(len(shared.beats), bool)
        for column, (a, b) in z.items():
            mask &= f64(shared.beats)[column].between(a, b).to_numpy()
        assert store.selection.count == int(mask.sum())
        assert views["outliers"].table.value["beat_id"].isin(shared.beats["beat_id"][mask]).all()

        markers = views["signal"]._markers(None, store.selection)   # view 1's selected-beat markers
        assert set(markers.data["beat_id"]) <= set(shared.beats["beat_id"][mask])

        store.clear()
        assert board.links.selection_expr is None
        assert ranges_from_expr(hv.dim("z1").isin([1, 2])) is None   # not a range: ignored


def test_ranges_and_expressions_round_trip():
    from dashboard.holoviews_board import expr_from_ranges, ranges_from_expr

    ranges = {"length_s": (0.5, 0.9), "z1": (-1.0, 2.0), "z2": (0.0, 0.25)}
    assert ranges_from_expr(expr_from_ranges(ranges)) == ranges
    assert ranges_from_expr(None) == {} and expr_from_ranges({}) is None


# --------------------------------------------------------------------------- startup
def test_settings_come_from_arguments_then_environment():
    env = {"ECG_INPUT": "/data/rec.csv", "ECG_DEVICE": "cpu", "ECG_SAMPLES": "1000", "ECG_EPOCHS": "2"}
    s = startup.settings_from(["--samples", "5000", "--board", "holoviews"], env)
    assert s.request.input == "/data/rec.csv" and s.request.device == "cpu"
    assert s.request.samples == 5000 and s.request.vae.epochs == 2 and s.board == "holoviews"
    assert startup.settings_from([], {}).request == RunRequest()
    with pytest.raises(ValueError, match="samples must be an integer; got 'many'"):
        startup.settings_from(["--samples", "many"], {})
    with pytest.raises(ValueError, match="device must be one of"):
        startup.settings_from([], {"ECG_DEVICE": "tpu"})
    with pytest.raises(ValueError, match="unknown"):
        startup.settings_from(["--inptu", "x"], {})


class _FakeRun:
    cached, path = False, "fake"


def test_progress_goes_from_running_to_ready():
    gate = threading.Event()

    def runner(request, progress):
        progress("load", 0.0, "")
        progress("load", 1.0, "")
        progress("train", 0.5, "epoch 1/2")
        gate.wait(10)
        progress("train", 1.0, "")
        return _FakeRun()

    job = startup.PipelineJob(startup.Settings(), runner=runner, prepare=lambda run: ("prepared", run),
                              log=lambda message: None)
    assert job.snapshot().state == "waiting"
    job.start()
    deadline = time.time() + 10
    while job.snapshot().stage != "train" and time.time() < deadline:
        time.sleep(0.01)
    running = job.snapshot()
    assert running.state == "running" and running.label == "Training the VAE" and running.message == "epoch 1/2"
    assert 0 < running.percent < 100 and running.done == (("Loading", running.done[0][1]),)
    gate.set()
    ready = job.wait(10)
    assert ready.state == "ready" and ready.percent == 100 and job.result[0] == "prepared"
    assert job.start() is job and job.wait(1).state == "ready"   # starts once


@pytest.mark.parametrize("error, shown", [(ValueError("no such file: /x.csv"), "no such file: /x.csv"),
                                          (RuntimeError("boom"), "RuntimeError: boom")])
def test_progress_goes_from_running_to_error(error, shown):
    def runner(request, progress):
        progress("load", 0.0, "")
        raise error

    job = startup.PipelineJob(startup.Settings(), runner=runner, log=lambda message: None).start()
    failed = job.wait(10)
    assert failed.state == "error" and failed.error == shown and job.result is None


def _text(viewable) -> str:
    """All text of a Panel tree (HTML/Markdown/Alert objects)."""
    out = []
    for obj in viewable.select(lambda o: isinstance(getattr(o, "object", None), str)):
        out.append(obj.object)
    return "\n".join(out)


def test_bad_input_shows_an_error_page_not_an_exception(tmp_path):
    from dashboard import app

    settings = startup.settings_from(["--input", str(tmp_path / "missing.csv"), "--device", "cpu",
                                      "--out", str(tmp_path)], {})
    job = startup.PipelineJob(settings, prepare=app.prepare(settings), log=lambda message: None).start()
    assert job.wait(60).state == "error"
    page = app.App(job=job)
    assert page.state == "error"
    assert "no such file" in _text(page.main) and "missing.csv" in _text(page.main)

    bad_args = app.serve_page(["--epochs", "zero"])
    assert bad_args.state == "error" and "epochs must be an integer" in _text(bad_args.main)


def test_app_shows_progress_then_the_dashboard_without_reload(shared):
    from dashboard import app

    class Job:
        progress = startup.Progress(state="running", stage="train", label="Training the VAE", overall=0.4,
                                    elapsed_s=12.0, done=(("Loading", 0.5),))
        result = shared

        def snapshot(self):
            return self.progress

    job = Job()
    doc = Document()
    with set_curdoc(doc):
        page = app.App(job=job)
        assert page.state == "running" and page._callback is not None
        assert "Training the VAE" in _text(page.main) and "40%" in _text(page.main)
        job.progress = dataclasses.replace(job.progress, state="ready", overall=1.0)
        page._poll()                                   # what the periodic callback does
        assert page.state == "ready" and page._callback is None
        assert page.store is not None and page.board.name == "holoviews"
        assert "Beats kept" in page.statusbar.object and "Device</b> cpu" in page.statusbar.object
        template = page.template()
        assert isinstance(template, pn.template.FastListTemplate)


def test_cpu_dashboard_never_imports_gpu_libraries(run):
    """The CPU path (app, DataStore, HoloViews board, a brush) loads no cuDF/cuxfilter/CuPy/RMM;
    checked in a fresh process."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = f"""
import json, sys
from bokeh.document import Document
from panel.io.state import set_curdoc
import dashboard.app
from dashboard.data_store import DataStore, SharedRun
from dashboard.holoviews_board import HoloViewsBoard
from dashboard.views import layout
from pipeline.results import load_run
shared = SharedRun.from_run(load_run({str(run.path)!r}))
doc = Document()
with set_curdoc(doc):
    store = DataStore(shared)
    body, views = layout(store, HoloViewsBoard(store))
    doc.add_root(body.get_root(doc))
    store.select_range("length_s", *shared.extent("length_s"))
gpu = ("cupy", "cupyx", "cudf", "rmm", "dask_cudf", "cuxfilter")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in gpu)))
"""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
