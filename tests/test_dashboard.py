"""Tests of the dashboard without a server: DataStore selections, the linked charts' counts against
independent NumPy histograms (crossfilter semantics), brushes from the browser's model, the
recording's raster against Datashader on the raw samples, the startup job's progress states and
the error page; and one session in a Bokeh server of this process, told of another server's label
while it is busy.

One tiny pipeline run (300k samples, 3 epochs, in a temporary folder) is shared by the module.
"""
from __future__ import annotations

import dataclasses
import html
import re
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import panel as pn
import pytest
import torch
from bokeh.core.validation import check_integrity
from bokeh.document import Document
from panel.io.state import set_curdoc

from dashboard import startup
from dashboard.data_store import TABLE_LIMIT, DataStore
from dashboard.recording_view import MARKER_COLUMNS, MAX_OUTLIER_MARKERS
from dashboard.shared_run import SharedRun
from pipeline.config import VAEConfig
from pipeline.quality import LOW_QUALITY
from pipeline.run import RunRequest, run_pipeline

TINY = dict(samples=300_000, vae=dataclasses.replace(VAEConfig(), epochs=3), device="cpu")


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_pipeline(RunRequest(out=str(tmp_path_factory.mktemp("runs")), **TINY))


@pytest.fixture(scope="module")
def shared(run) -> SharedRun:
    from dashboard.recording_view import signal_raster

    shared = SharedRun.from_run(run)
    signal_raster(shared).compile()
    return shared


@pytest.fixture
def store(shared) -> DataStore:
    return DataStore(shared)


@pytest.fixture
def page(shared):
    """One session's whole dashboard (store, board, views) in a Bokeh document."""
    from dashboard.app import make_board
    from dashboard.page import layout

    doc = Document()
    with set_curdoc(doc):
        store = DataStore(shared)
        board = make_board(store)
        body, views = layout(store, board)
        doc.add_root(body.get_root(doc))
        yield store, board, views


def f64(frame: pd.DataFrame) -> pd.DataFrame:
    """The beats table with float columns in float64: the DataStore compares brush edges in float64
    (NumPy 2 would compare a float32 column with a Python float in float32)."""
    return frame.astype({c: "float64" for c in frame.columns if frame[c].dtype == np.float32})


def middle_range(values, lo_q=0.3, hi_q=0.7):
    return float(np.nanquantile(values, lo_q)), float(np.nanquantile(values, hi_q))  # the last beat's length is NaN


def clean(beats: pd.DataFrame) -> pd.Series:
    """The beats the ranking considers by default: not of low quality (noise, artefacts)."""
    return beats["quality"] >= LOW_QUALITY


def expected_outliers(beats: pd.DataFrame, mask, threshold) -> pd.DataFrame:
    """The ranked outlier table computed independently with pandas."""
    chosen = beats[mask & clean(beats) & (beats["score"] >= threshold)]
    return chosen.sort_values("score", ascending=False, kind="stable").head(TABLE_LIMIT)


# --------------------------------------------------------------------------- selections
def test_length_brush_filters_table_and_views(shared, page):
    store, board, views = page
    table, centre, rows_before = views["outliers"], views["centre"], dict(views["outliers"].source.data)
    mean_before = store.selection.centre.mean_beat.copy()

    beats = f64(pd.read_parquet(shared.run.path / "beats.parquet"))      # from disk, not from the store
    lo, hi = middle_range(beats["length_s"], 0.1, 0.4)
    store.select_range("length_s", lo, hi)

    mask = ((beats["length_s"] >= lo) & (beats["length_s"] <= hi)).to_numpy()
    sel = store.selection
    assert 0 < sel.count < len(beats)
    assert sel.count == int(mask.sum())
    assert np.array_equal(sel.mask, mask)
    want = expected_outliers(beats, mask, store.threshold)
    assert sel.n_outliers == int((mask & clean(beats) & (beats["score"] >= store.threshold)).sum())
    assert table.source.data["beat_id"].tolist() == want["beat_id"].tolist()
    assert np.all(np.diff(table.source.data["score"]) <= 0)
    assert table.source.data["beat_id"].tolist() != rows_before["beat_id"].tolist()
    assert table.source.data["beat_id"].dtype == np.int32 and table.source.data["score"].dtype == np.float32
    assert f"{sel.count:,}</b> selected beats" in centre.info.object
    assert not np.allclose(sel.centre.mean_beat, mean_before)
    np.testing.assert_allclose(sel.centre.mean_beat, shared.embeddings[mask].mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(centre.source.data["mean"], sel.centre.mean_beat, rtol=1e-6)
    assert all(v.rendered == sel.version for v in views.values() if hasattr(v, "rendered") and v.spec.kind not in ("beat", "strip", "families", "decoded"))
    assert board.version.text == str(sel.version)

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
    scores = f64(shared.beats)["score"].where(clean(shared.beats), -np.inf)
    low, high = float(np.quantile(scores, 0.9)), float(np.quantile(scores, 0.99))
    store.update(threshold=low)
    many = store.selection
    store.update(threshold=high)
    few = store.selection
    assert many.n_outliers == int((scores >= low).sum())
    assert few.n_outliers == int((scores >= high).sum())
    assert few.n_outliers < many.n_outliers
    assert (few.outliers["score"] >= high).all()
    assert set(few.outliers["beat_id"]) < set(many.outliers["beat_id"])


def test_outlier_table_keeps_the_top_scores_when_there_are_too_many(shared, store):
    store.update(threshold=float(shared.beats["score"].min()))            # every beat is an outlier
    sel = store.selection
    want = expected_outliers(f64(shared.beats), np.ones(len(shared.beats), bool), store.threshold)
    assert sel.n_outliers == int((clean(shared.beats) & (f64(shared.beats)["score"] >= store.threshold)).sum()) > TABLE_LIMIT
    assert sel.outliers["beat_id"].tolist() == want["beat_id"].tolist()


def test_low_quality_beats_are_ranked_only_when_asked(shared, store):
    noisy = ~clean(shared.beats)
    assert noisy.any()                     # the synthetic recording's noise bursts
    lowest = float(shared.beats["score"].min())
    store.update(threshold=lowest)                                   # every beat
    above = f64(shared.beats)["score"] >= lowest
    left_out = set(shared.beats.loc[noisy, "beat_id"])
    assert not left_out & set(store.selection.outliers["beat_id"])
    assert store.selection.n_outliers == int((above & ~noisy).sum())
    store.update(rank_low_quality=True)
    assert store.selection.n_outliers == int(above.sum())


def test_decoded_centre_is_the_decoder_at_the_mean_latent_position(run, shared, store):
    lo, hi = middle_range(shared.beats["score"], 0.0, 0.5)
    store.select_range("score", lo, hi)
    sel = store.selection
    chosen = shared.beats[f64(shared.beats)["score"].between(lo, hi)]
    mean_z = chosen[["z1", "z2"]].to_numpy(dtype=np.float64).mean(axis=0)
    np.testing.assert_allclose(sel.centre.z, mean_z, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        want = run.model("cpu").decode(torch.tensor(sel.centre.z[None, :], dtype=torch.float32)).numpy()[0]
    np.testing.assert_allclose(sel.centre.decoded, want, rtol=1e-5, atol=1e-6)

    store.update(brush={"score": (-2.0, -1.0)})  # nothing there
    assert store.selection.count == 0 and store.selection.centre.decoded is None


def test_the_centre_is_computed_when_asked_and_kept_while_the_beats_stay(shared, store, monkeypatch):
    from dashboard.data_store import Centre

    computed = []
    real = Centre.of
    monkeypatch.setattr(Centre, "of", classmethod(lambda cls, *args: computed.append(args[2]) or real(*args)))
    lo, hi = middle_range(shared.beats["length_s"])
    store.update(brush={"length_s": (lo, hi)})
    store.update(threshold=store.threshold + 0.1)
    assert computed == [], "no view asked for the centre: brushes do not pay for it"

    centre = store.selection.centre
    assert computed == [store.selection.count]
    store.update(threshold=store.threshold + 0.1)         # the same beats: the same centre, not recomputed
    assert store.selection.centre is centre and len(computed) == 1
    store.update(brush={"length_s": (lo, (lo + hi) / 2)})
    assert store.selection.centre is not centre and len(computed) == 2


def test_focused_beat_and_its_reconstruction(run, shared, page):
    store, board, views = page
    detail = views["beat"]
    assert "Click a row" in detail.info.object
    beat_id = int(store.selection.outliers["beat_id"].iloc[0])
    views["outliers"].source.selected.indices = [0]                     # a click on the table's first row
    assert store.focus == beat_id
    beat, row, recon = store.focused()
    assert int(beat["beat_id"]) == beat_id and f"Beat <b>{beat_id}</b>" in detail.info.object
    with torch.no_grad():
        mu, _ = run.model("cpu").encode(torch.tensor(np.asarray(run.embeddings[beat_id])[None, :]))
        want = run.model("cpu").decode(mu).numpy()[0]
    np.testing.assert_allclose(recon, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(detail.source.data["recon"], want, rtol=1e-5, atol=1e-6)
    lo, hi = store.focus_window(beat_id, 4.0)
    assert lo < beat["time_s"] < hi and hi - lo == pytest.approx(4.0)
    signal = board.charts["signal"]
    assert (signal.figure.x_range.start, signal.figure.x_range.end) == pytest.approx((lo, hi))
    assert store.time_range is None, "zooming to a beat keeps the beat views' window"


# --------------------------------------------------------------------------- linked charts
def _histogram(values, edges, mask) -> np.ndarray:
    """np.histogram with the charts' rule: the last bin includes its right edge, nothing is lost."""
    return np.histogram(np.clip(values[mask], edges[0], edges[-1]), bins=edges)[0]


def test_each_chart_counts_what_the_other_brushes_select(shared, page):
    store, board, views = page
    beats = f64(shared.beats)
    length, score = middle_range(beats["length_s"], 0.2, 0.8), middle_range(beats["score"], 0.0, 0.7)
    store.update(brush={"length_s": length, "score": score}, split="train")
    base = (beats["split"] == "train").to_numpy()
    by_length = beats["length_s"].between(*length).to_numpy()
    by_score = beats["score"].between(*score).to_numpy()

    lengths, scores = views["lengths"], views["scores"]
    edges = np.linspace(*shared.extent("length_s"), lengths.spec.bins + 1)
    assert np.array_equal(np.nan_to_num(lengths.source.data["selected"]),
                          _histogram(beats["length_s"].to_numpy(), edges, base & by_score))   # not its own brush
    assert np.array_equal(lengths.source.data["all"], _histogram(beats["length_s"].to_numpy(), edges, base))
    edges = np.linspace(*shared.extent("score"), scores.spec.bins + 1)
    want = _histogram(beats["score"].to_numpy(), edges, base & by_length).astype(float)
    want[want < 0.5] = np.nan                                                # empty bars on a log axis
    np.testing.assert_array_equal(scores.source.data["selected"], want)
    assert lengths.box.visible and (lengths.box.left, lengths.box.right) == length

    latent = views["latent"]
    (x0, x1), (y0, y1) = latent.home
    counts, _, _ = np.histogram2d(beats["z2"][base & by_length & by_score], beats["z1"][base & by_length & by_score],
                                  bins=latent.bins.shape, range=[[y0, y1], [x0, x1]])
    image = latent.foreground.data["image"][0]
    assert image.shape == latent.bins.shape
    assert np.array_equal(image > 0, counts > 0), "drawn pixels are where the selected beats are"


def test_moving_a_charts_own_brush_redraws_only_the_other_charts(shared, page):
    store, board, views = page
    beats = f64(shared.beats)
    lengths, scores, latent = views["lengths"], views["scores"], views["latent"]
    edges = {view: np.linspace(*shared.extent(view.spec.x), view.spec.bins + 1) for view in (lengths, scores)}

    def selected(view, mask):
        counts = _histogram(beats[view.spec.x].to_numpy(), edges[view], mask).astype(float)
        if view.spec.logy:
            counts[counts < 0.5] = np.nan
        return counts

    score = middle_range(beats["score"], 0.0, 0.7)
    by_score = beats["score"].between(*score).to_numpy()
    store.update(brush={"score": score})
    for lo_q, hi_q in [(0.2, 0.8), (0.4, 0.6), (0.1, 0.5)]:       # the lengths brush moves, alone
        drawn_lengths, drawn_scores = lengths.source.data["selected"], scores.source.data["selected"]
        drawn_latent = latent.foreground.data["image"][0]
        length = middle_range(beats["length_s"], lo_q, hi_q)
        store.update(brush={"score": score, "length_s": length})
        by_length = beats["length_s"].between(*length).to_numpy()
        assert lengths.source.data["selected"] is drawn_lengths, "its own brush does not change what it shows"
        np.testing.assert_array_equal(lengths.source.data["selected"], selected(lengths, by_score))
        assert scores.source.data["selected"] is not drawn_scores
        np.testing.assert_array_equal(scores.source.data["selected"], selected(scores, by_length))
        assert latent.foreground.data["image"][0] is not drawn_latent
        assert lengths.rendered == scores.rendered == store.selection.version
        assert (lengths.box.left, lengths.box.right) == length

    store.update(brush={"length_s": length})                         # the other brush goes: redrawn
    np.testing.assert_array_equal(np.nan_to_num(lengths.source.data["selected"]),
                                  _histogram(beats["length_s"].to_numpy(), edges[lengths], np.ones(len(beats), bool)))
    store.update(brush={"length_s": length, "score": score})         # and comes back with the same bounds
    np.testing.assert_array_equal(lengths.source.data["selected"], selected(lengths, by_score))


def test_poincare_plot_is_rr_before_against_rr_after_and_brushable(run, shared, page):
    store, board, views = page
    fiducials = np.asarray(run.fiducials)
    beats = f64(shared.beats)
    index = np.searchsorted(fiducials, beats["fiducial"].to_numpy())
    want_prev = np.where(index > 0, (fiducials[index] - fiducials[np.maximum(index - 1, 0)]) / shared.fs, np.nan)
    np.testing.assert_allclose(beats["rr_prev_s"], want_prev, rtol=1e-6)
    np.testing.assert_allclose(beats["rr_next_s"], beats["length_s"], rtol=1e-6)

    poincare = board.charts["poincare"]
    rr = middle_range(beats["rr_prev_s"].dropna(), 0.05, 0.5)
    poincare.brush.bounds = [*rr, *shared.extent("rr_next_s")]
    # a box on the plane holds beats with both intervals: not the last beat, which has none after it
    chosen = (beats["rr_prev_s"].between(*rr) & beats["rr_next_s"].notna()).to_numpy()
    assert store.selection.count == int(chosen.sum()) > 0
    edges = np.linspace(*shared.extent("length_s"), views["lengths"].spec.bins + 1)
    assert np.array_equal(np.nan_to_num(views["lengths"].source.data["selected"]),
                          _histogram(beats["length_s"].to_numpy(), edges, chosen))


def test_tachogram_follows_the_recordings_window(shared, page):
    store, board, views = page
    signal, rhythm = board.charts["signal"], board.charts["rhythm"]
    assert rhythm.figure.x_range is signal.figure.x_range
    t0, t1 = shared.duration_s * 0.1, shared.duration_s * 0.3
    signal.zoom(t0, t1)
    assert rhythm.image.data["x"] == [t0] and rhythm.image.data["dw"] == [pytest.approx(t1 - t0)]
    lengths = middle_range(shared.beats["length_s"], 0.0, 0.3)
    store.select_range("length_s", *lengths)
    beats = f64(shared.beats)
    want = beats["time_s"][beats["length_s"].between(*lengths) & beats["time_s"].between(t0, t1)].to_numpy()
    shown = np.asarray(rhythm.selected.data["t"])
    assert np.isin(shown, want).all()             # only selected beats in the window
    column = lambda t: np.floor((t - t0) / (t1 - t0) * MARKER_COLUMNS)   # noqa: E731
    assert len(shown) == len(set(column(shown))) == len(set(column(want)))   # one per column that has any


def test_markers_keep_one_beat_per_column_and_the_top_outliers(shared, page):
    store, board, views = page
    signal = board.charts["signal"]
    store.update(threshold=float(np.quantile(shared.beats["score"], 0.5)))
    t0, t1 = signal._shown or signal._extent
    beats = f64(shared.beats)
    times, scores = beats["time_s"].to_numpy(), beats["score"].to_numpy()
    flagged = scores > store.selection.threshold
    column = np.minimum(np.floor((times - t0) / (t1 - t0) * MARKER_COLUMNS), MARKER_COLUMNS - 1)
    top_per_column = pd.Series(scores[flagged]).groupby(column[flagged]).max()
    want = np.sort(top_per_column.to_numpy())[::-1][:MAX_OUTLIER_MARKERS]
    np.testing.assert_allclose(np.sort(signal.outliers.data["score"])[::-1], want, rtol=1e-6)


def test_brush_from_the_browser_reaches_the_store_and_back(shared, page):
    store, board, views = page
    lengths, latent = board.charts["lengths"], board.charts["latent"]
    lo, hi = middle_range(shared.beats["length_s"])
    lengths.brush.bounds = [hi, lo]                                       # a right-to-left drag
    assert store.brush == {"length_s": (lo, hi)}
    z1, z2 = middle_range(shared.beats["z1"]), middle_range(shared.beats["z2"])
    latent.brush.bounds = [*z1, *z2]
    assert store.brush == {"length_s": (lo, hi), "z1": z1, "z2": z2}
    assert latent.box.visible and (latent.box.bottom, latent.box.top) == z2
    lengths.brush.bounds = None                                           # a double-click clears it
    assert store.brush == {"z1": z1, "z2": z2} and not lengths.box.visible
    store.clear()
    assert not latent.box.visible


def test_zooming_the_latent_plane_rebins_it(shared, page):
    store, board, views = page
    latent = board.charts["latent"]
    beats = f64(shared.beats)
    z1, z2 = middle_range(beats["z1"], 0.1, 0.6), middle_range(beats["z2"], 0.2, 0.9)
    latent.figure.x_range.update(start=z1[0], end=z1[1])
    latent.figure.y_range.update(start=z2[0], end=z2[1])
    assert latent.bins_view == (z1, z2)
    inside = beats["z1"].between(*z1) & beats["z2"].between(*z2)
    counts, _, _ = np.histogram2d(beats["z2"][inside], beats["z1"][inside], bins=latent.bins.shape, range=[z2, z1])
    assert np.array_equal(latent.background.data["image"][0] > 0, counts > 0)
    assert latent.foreground.data["x"] == [z1[0]] and latent.foreground.data["dw"] == [pytest.approx(z1[1] - z1[0])]


def test_zooming_the_recording_filters_the_beat_views(shared, page):
    store, board, views = page
    signal = board.charts["signal"]
    t0, t1 = shared.duration_s * 0.25, shared.duration_s * 0.5
    signal.figure.x_range.update(start=t0, end=t1)
    assert store.time_range == (t0, t1)
    assert store.selection.count == int(f64(shared.beats)["time_s"].between(t0, t1).sum())
    assert signal.image.data["x"] == [t0] and signal.image.data["image"][0].shape[0] > 1
    signal.zoom(*signal._extent)
    assert store.time_range is None and store.selection.count == len(shared.beats)


def test_recording_view_draws_single_samples_when_zoomed_in(shared, page):
    store, board, views = page
    signal = board.charts["signal"]
    signal.zoom(10.0, 12.0)
    t, y = signal.samples.data["t"][0], signal.samples.data["y"][0]
    first = int(np.ceil(10.0 * shared.fs))
    assert t[1] == pytest.approx(first / shared.fs) and np.array_equal(y[1:-1], shared.signal[first:first + len(y) - 2])


# --------------------------------------------------------------------------- the raster
def test_min_max_trace_keeps_each_blocks_extremes_in_order():
    from dashboard.signal_raster import min_max_trace

    rng = np.random.default_rng(3)
    signal = rng.standard_normal(1000).astype(np.float32)
    t, y = min_max_trace(signal, 16, fs=100.0)
    blocks = signal[:992].reshape(-1, 16)
    assert np.array_equal(np.minimum(y[0::2], y[1::2]), blocks.min(axis=1))
    assert np.array_equal(np.maximum(y[0::2], y[1::2]), blocks.max(axis=1))
    assert np.all(np.diff(t) > 0)


def test_raster_levels_draw_the_same_pixels_as_the_raw_samples():
    """The level a render picks never goes beyond the raw samples' lowest and highest value in any
    pixel column and reaches them in nearly every column (a block straddling two columns gives its
    extremes to one of them); and its raster covers the same rows as Datashader's rendering of
    every raw sample (the reference) within one pixel in nearly every column."""
    import datashader as ds

    from dashboard.signal_raster import SignalRaster
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=400_000, seed=5))
    signal = ecg.signal.astype(np.float32)
    raster = SignalRaster(signal, ecg.fs)
    width, height, x0, x1 = 800, 200, 100.0, 1500.0
    level = raster.level_for(x0, x1, width)
    assert level.block > 1 and len(raster.levels) > 2

    column_of = lambda t: np.floor((t - x0) / (x1 - x0) * width).astype(int)   # noqa: E731
    raw_t = np.arange(len(signal)) / ecg.fs
    inside = (raw_t >= x0) & (raw_t < x1)
    frame = pd.DataFrame({"t": level.t, "y": level.y})
    frame = frame[(frame["t"] >= x0) & (frame["t"] < x1)]
    raw = pd.Series(signal[inside]).groupby(column_of(raw_t[inside])).agg(["min", "max"])
    got = frame["y"].groupby(column_of(frame["t"].to_numpy())).agg(["min", "max"])
    assert got.index.equals(raw.index)
    assert (got["min"] >= raw["min"]).all() and (got["max"] <= raw["max"]).all()
    assert ((got["min"] == raw["min"]) & (got["max"] == raw["max"])).mean() > 0.97

    image = raster.render(x0, x1, width, height)[::-1]                    # row 0 at the top, like Datashader
    reference = ds.Canvas(plot_width=width, plot_height=height, x_range=(x0, x1), y_range=raster.y_range).line(
        pd.DataFrame({"t": raw_t, "y": signal}), "t", "y", agg=ds.count()).data > 0
    drawn = image > 0                                                      # opaque pixels
    same = [abs(np.flatnonzero(drawn[:, c]).min() - np.flatnonzero(reference[:, c]).min()) <= 1
            and abs(np.flatnonzero(drawn[:, c]).max() - np.flatnonzero(reference[:, c]).max()) <= 1
            for c in range(width)]
    assert np.mean(same) > 0.95


def test_raster_shows_the_whole_recording_before_building_its_levels():
    """A page's first picture, the whole recording, comes from the overview built with the raster
    (on the host) and equals the coarsest level; the levels are built at the first zoom."""
    from dashboard.signal_raster import SignalRaster
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=400_000, seed=5))
    raster = SignalRaster(ecg.signal.astype(np.float32), ecg.fs)
    t, y = raster.trace(0.0, raster.duration_s, 1400)
    assert raster._levels is None, "the whole recording needed the levels"
    assert raster.blocks[-1] > 1 and len(t) == 2 * (len(ecg.signal) // raster.blocks[-1])
    coarsest = raster.levels[-1]
    assert np.array_equal(t, coarsest.t) and np.array_equal(y, coarsest.y)
    zoomed_t, _ = raster.trace(100.0, 110.0, 1400)
    assert raster.level_for(100.0, 110.0, 1400).block < raster.blocks[-1] and len(zoomed_t) > 0


def test_a_recording_view_drawn_while_datashader_compiles_swaps_in_the_raster(store, shared):
    """A session opened before Datashader is compiled draws the levels as a line, and the raster
    replaces it from the compilation's callback. The session's redraw runs on the server's loop,
    possibly while the compiling thread is still calling back: it must then find the compilation
    done (else it drew the line again, and the line stayed for good)."""
    from dashboard.announcement import Announcement
    from dashboard.recording_view import DEFAULT_WIDTH, RASTER_HEIGHT, SignalChart
    from dashboard.signal_raster import SignalRaster
    from dashboard.spec import VIEWS

    raster = SignalRaster(shared.signal, shared.fs)            # not compiled yet, unlike the run's
    chart = SignalChart(store, VIEWS["signal"], raster)
    assert len(chart.samples.data["t"]) == 1 and chart.image.data["image"][0].shape == (1, 1)
    raster.when_compiled(lambda: chart.render(*chart._shown))  # the redraw, run inside the announcement
    raster.compile()
    assert len(chart.samples.data["t"]) == 0, "the line stayed"
    assert chart.image.data["image"][0].shape == (RASTER_HEIGHT, DEFAULT_WIDTH)

    announced, seen = Announcement(), []
    announced.then(lambda: seen.append(announced.is_set()))
    announced.set()
    assert seen == [True] and announced.wait(0)


def test_the_raster_swapped_in_after_compiling_goes_out_in_one_panel_patch(store, shared):
    """The compilation's redraw reaches the page through Panel's hold, not as Bokeh's own message per
    change: those were written as soon as the websocket was free, ahead of the message (held back by
    Panel on a busy websocket) that brought a dashboard built at that moment to the page, and the
    browser got data for sources it did not know yet."""
    from bokeh.document import Document
    from panel.io.state import set_curdoc

    from dashboard.recording_view import DEFAULT_WIDTH, RASTER_HEIGHT, SignalChart
    from dashboard.signal_raster import SignalRaster
    from dashboard.spec import VIEWS

    raster = SignalRaster(shared.signal, shared.fs)            # not compiled yet: the line is drawn
    chart = SignalChart(store, VIEWS["signal"], raster)
    doc = Document()
    doc.add_root(chart.figure)
    dispatched = []
    doc.on_change(dispatched.append)    # how a server session hears of a change to send on its own
    raster.compile()
    with set_curdoc(doc):
        chart.swap_in_raster()
    assert chart.image.data["image"][0].shape == (RASTER_HEIGHT, DEFAULT_WIDTH) and not len(chart.samples.data["t"])
    assert not dispatched, [type(e).__name__ for e in dispatched]


# --------------------------------------------------------------------------- startup
def test_settings_come_from_arguments_then_environment():
    env = {"ECG_INPUT": "/data/rec.csv", "ECG_DEVICE": "cpu", "ECG_SAMPLES": "1000", "ECG_EPOCHS": "2"}
    s = startup.settings_from(["--samples", "5000", "--board", "bokeh"], env)
    assert s.request.input == "/data/rec.csv" and s.request.device == "cpu"
    assert s.request.samples == 5000 and s.request.vae.epochs == 2 and s.board == "bokeh"
    assert startup.settings_from([], {}).request == RunRequest(warm_up=False)  # the server skips the warm-up
    with pytest.raises(ValueError, match="samples must be an integer; got 'many'"):
        startup.settings_from(["--samples", "many"], {})
    with pytest.raises(ValueError, match="device must be one of"):
        startup.settings_from([], {"ECG_DEVICE": "tpu"})
    with pytest.raises(ValueError, match="board must be one of auto, bokeh, cuxfilter"):
        startup.settings_from(["--board", "holoviews"], {})
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


def test_waiting_for_a_cached_run_ends_once_the_run_must_be_computed():
    gate = threading.Event()

    def cached(request, progress):
        progress("hash", 0.0, ""), progress("hash", 1.0, ""), progress("results", 1.0, "cached run x")
        time.sleep(0.3)                                   # reading the cached run
        return _FakeRun()

    def computed(request, progress):
        progress("hash", 1.0, ""), progress("load", 0.0, "")
        gate.wait(10)
        return _FakeRun()

    job = startup.PipelineJob(startup.Settings(), runner=cached, log=lambda message: None).start()
    assert job.wait_unless_computing(10).state == "ready"
    job = startup.PipelineJob(startup.Settings(), runner=computed, log=lambda message: None).start()
    started = time.perf_counter()
    assert job.wait_unless_computing(10).state == "running" and time.perf_counter() - started < 5
    gate.set()
    assert job.wait(10).state == "ready"


@pytest.mark.parametrize("fails", [False, True])
def test_pages_waiting_for_the_run_are_told_once_when_it_ends(fails):
    gate = threading.Event()

    def runner(request, progress):
        progress("load", 0.0, "")
        gate.wait(10)
        if fails:
            raise ValueError("no beats")
        return _FakeRun()

    job = startup.PipelineJob(startup.Settings(), runner=runner, log=lambda message: None).start()
    told = []

    def closed_page():
        raise RuntimeError("this page's session has ended")

    job.when_done(lambda: told.append(("first", threading.current_thread().name, job.snapshot().state)))
    job.when_done(closed_page)
    job.when_done(lambda: told.append(("second", threading.current_thread().name, job.snapshot().state)))
    time.sleep(0.05)
    assert told == []                                  # not while the run goes on
    gate.set()
    state = "error" if fails else "ready"
    assert job.wait(10).state == state
    assert told == [("first", "ecg-pipeline", state), ("second", "ecg-pipeline", state)]
    job.when_done(lambda: told.append(("late", threading.current_thread().name, job.snapshot().state)))
    assert told[-1] == ("late", threading.main_thread().name, state)   # at once, by the caller
    assert len(told) == 3


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
        assert page.store is not None and page.board.name == "bokeh"
        header = page.views["header"]
        assert "beats" in header.text.object and "Heart rate" in header.text.object
        assert header.details.collapsed and "Device</b> cpu" in _text(header.details)
        root = page.page().get_root(doc)
        doc.add_root(root)
        # The page before the redesign had 526 models with four views fewer (HoloViews, Tabulator,
        # FastListTemplate); tabs build only the open view. The episode list and the episode bands
        # on the recording and the tachogram (this run has a noise episode) add about 15, the
        # episode verdict buttons about 12.
        assert len(doc.models) < 495, f"a session's page should stay small; it has {len(doc.models)} models"
        # The server skips Bokeh's per-session validation (dashboard/app.py): it is done here.
        issues = check_integrity(doc.models)
        assert not issues.error and not issues.warning, issues


def test_views_behind_closed_tabs_are_built_when_their_tab_opens(shared):
    from dashboard.app import make_board
    from dashboard.page import Deferred, layout

    doc = Document()
    with set_curdoc(doc):
        store = DataStore(shared)
        body, views = layout(store, make_board(store))
        doc.add_root(body.get_root(doc))
        closed = {name for name, view in views.items() if isinstance(view, Deferred)}
        assert closed == {"strip", "families", "centre", "decoded"}
        assert all(views[name]._view is None for name in closed)      # nothing built for the first page
        assert doc.get_model_by_name("ecg-centre") is None
        store.select_range("length_s", *middle_range(shared.beats["length_s"], 0.2, 0.6))
        tabs = next(t for t in body.select(pn.Tabs) if "Centre" in t._names)
        tabs.active = tabs._names.index("Centre")                      # what a click on the tab sends
        assert views["centre"]._view is not None and doc.get_model_by_name("ecg-centre") is not None
        # drawn for the selection made before it existed
        assert f"{store.selection.count:,}</b> selected beats" in views["centre"].info.object
        assert store.selection.count < shared.n_beats
        assert all(views[name]._view is None for name in closed - {"centre"})


def test_cpu_dashboard_never_imports_gpu_libraries(run):
    """The CPU path (app, DataStore, board, a brush) loads no cuDF/cuxfilter/CuPy/RMM; checked in a
    fresh process."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = f"""
import json, sys
from bokeh.document import Document
from panel.io.state import set_curdoc
import dashboard.app
from dashboard.data_store import DataStore
from dashboard.shared_run import SharedRun
from dashboard.page import layout
from pipeline.results import load_run
shared = SharedRun.from_run(load_run({str(run.path)!r}))
doc = Document()
with set_curdoc(doc):
    store = DataStore(shared)
    body, views = layout(store, dashboard.app.make_board(store))
    doc.add_root(body.get_root(doc))
    store.select_range("length_s", *shared.extent("length_s"))
gpu = ("cupy", "cupyx", "cudf", "rmm", "dask_cudf", "cuxfilter")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in gpu)))
"""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


# --------------------------------------------------------------------------- review tools
@pytest.fixture
def review_page(shared, tmp_path, monkeypatch):
    """A page whose reviewer labels live in a fresh folder (the module's run is shared by tests)."""
    from dashboard.labels import ReviewLabels

    shared._derived.pop("review-labels", None)
    monkeypatch.setattr(ReviewLabels, "for_run", classmethod(lambda cls, run: cls(tmp_path / "labels.sqlite", run.fs)))
    yield shared
    shared._derived.pop("review-labels", None)


def test_selecting_a_family_selects_its_beats_everywhere(review_page, page):
    store, board, views = page
    families = views["families"]
    beats = review_page.beats
    assert families.source.data["count"].tolist() == np.bincount(beats["family"]).tolist()
    second = 1 if len(families.source.data["family"]) > 1 else 0
    families.source.selected.indices = [second]                      # a click on that family's row
    assert store.brush == {"family": (float(second), float(second))}
    assert store.selection.count == int((beats["family"] == second).sum())
    assert f"#{second}</b> selected" in families.caption.object


def test_labels_reach_the_table_other_sessions_and_undo(review_page, page):
    from dashboard.review import ReviewPanel

    store, board, views = page
    other = DataStore(review_page)                                    # a second session
    panel = ReviewPanel(store)
    beat_id = int(store.selection.outliers["beat_id"].iloc[0])
    store.update(focus=beat_id)
    panel.apply("V")
    assert views["outliers"].source.data["review"][0] == "V"
    assert other.labels_version == store.labels_version > 0
    assert review_page.review_of_beats()[beat_id] == "V" and other.brush == {}
    saved = review_page.review_labels().frame()
    assert saved["sample"].tolist() == [int(review_page.beats["fiducial"].iloc[beat_id])]

    panel.scope.value = "selection"
    store.select_range("length_s", *middle_range(review_page.beats["length_s"], 0.4, 0.5))
    panel.apply("check")
    assert (review_page.review_of_beats()[store.selection.ids] == "check").all()
    panel.undo()
    assert (review_page.review_of_beats() != "check").all() and review_page.review_of_beats()[beat_id] == "V"
    panel.scope.value = "family"
    panel.apply("N")
    family = review_page.beats["family"].iloc[beat_id]
    assert (review_page.review_of_beats()[(review_page.beats["family"] == family).to_numpy()] == "N").all()
    panel.apply("  ")
    assert "label must be" in panel.status.object


def test_another_servers_label_committed_while_the_labels_are_read_is_shown_next(review_page, monkeypatch):
    """Another server commits a label while this one reads the beats' labels: the next read shows
    it (the labels read are kept under the version read before them, never under a newer one)."""
    from dashboard.labels import ReviewLabels

    labels = review_page.review_labels()
    other_server = ReviewLabels(labels.path, review_page.fs)
    fiducial = review_page.beats["fiducial"].to_numpy()
    review_page.review_of_beats()
    labels.set([int(fiducial[1])], "N")          # a change here: the next call reads the labels again
    read = labels.labels_of

    def read_while_the_other_server_commits(fiducials):
        found = read(fiducials)
        monkeypatch.setattr(labels, "labels_of", read)
        other_server.set([int(fiducial[0])], "V")
        return found

    monkeypatch.setattr(labels, "labels_of", read_while_the_other_server_commits)
    assert review_page.review_of_beats()[:2].tolist() == ["", "N"]
    assert review_page.review_of_beats()[:2].tolist() == ["V", "N"]


SERVER_THREAD = "test-bokeh-server"


@pytest.fixture
def served_session(review_page):
    """One session of the dashboard (store and views) in a Bokeh server of this process, whose
    thread (``SERVER_THREAD``) is kept busy in one of that session's callbacks until ``release``
    is set, as a server is while it handles a click; yields ``(store, views, release)``."""
    import asyncio
    import urllib.request

    from bokeh.application import Application
    from bokeh.application.handlers.function import FunctionHandler
    from bokeh.server.server import Server
    from tornado.ioloop import IOLoop

    from dashboard.app import make_board
    from dashboard.page import layout

    built, busy, release, up = {}, threading.Event(), threading.Event(), threading.Event()

    def make_doc(doc) -> None:
        with set_curdoc(doc):
            store = DataStore(review_page)
            body, views = layout(store, make_board(store))
            doc.add_root(body.get_root(doc))
        built.update(store=store, views=views)

        def busy_callback() -> None:
            busy.set()
            release.wait(60)
        doc.add_next_tick_callback(busy_callback)

    def serve() -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        built["server"] = Server({"/": Application(FunctionHandler(make_doc))}, io_loop=IOLoop.current(),
                                 address="127.0.0.1", port=0)
        built["server"].start()
        up.set()
        IOLoop.current().start()

    thread = threading.Thread(target=serve, name=SERVER_THREAD, daemon=True)
    thread.start()
    assert up.wait(30)
    server = built["server"]
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=60).read()   # opens a session
        assert busy.wait(30), "the session's callback never ran"
        yield built["store"], built["views"], release
    finally:
        release.set()
        server.io_loop.add_callback(server.stop)
        server.io_loop.add_callback(server.io_loop.stop)
        thread.join(30)


def test_another_servers_label_reaches_a_busy_session_on_the_servers_thread(review_page, served_session):
    """Another server's label, told by the labels' watcher thread while this server's thread runs
    one of the session's callbacks, changes the session's store and table on the server's thread
    once that callback ends, never on the watcher thread (where it raced the session's own
    callback and could leave the store calling no watcher again: a page that stopped following
    the other server's labels)."""
    from dashboard.labels import WATCH_S, ReviewLabels

    store, views, release = served_session
    labels = review_page.review_labels()
    changes = []
    store.param.watch(lambda event: changes.append((event.new, threading.current_thread().name)), "labels_version")
    told = threading.Event()
    token = labels.subscribe(lambda version: told.set())    # after the session's: told after it
    try:
        beat = int(store.selection.outliers["beat_id"].iloc[0])
        other_server = ReviewLabels(labels.path, review_page.fs)
        other_server.set([int(review_page.beats["fiducial"].iloc[beat])], "V")
        assert told.wait(10 * WATCH_S), "the watcher never told of the other server's label"
        assert changes == [], "the session's store changed off the server's thread, during its callback"
        release.set()
        deadline = time.monotonic() + 30
        while not changes and time.monotonic() < deadline:
            time.sleep(0.02)
        assert changes == [(labels.version, SERVER_THREAD)]
        assert views["outliers"].source.data["review"][0] == "V"
    finally:
        labels.unsubscribe(token)


def test_strip_is_at_paper_speed_with_labels_and_intervals(review_page, page):
    from dashboard.review import PAPER_MM_PER_MV, PAPER_MM_PER_S, STRIP_SECONDS

    store, board, views = page
    strip = views["strip"]
    beat_id = int(store.selection.outliers["beat_id"].iloc[0])
    review_page.review_labels().set([int(review_page.beats["fiducial"].iloc[beat_id])], "V")
    store.update(focus=beat_id)
    t = strip.trace.data["t"][0]
    assert t[0] == pytest.approx(-STRIP_SECONDS, abs=2 / review_page.fs) and t[-1] == pytest.approx(STRIP_SECONDS, abs=2 / review_page.fs)
    x = np.asarray(strip.labels.data["x"])
    assert "V" == strip.labels.data["text"][int(np.argmin(np.abs(x)))]
    assert len(strip.intervals.data["text"]) == len(x) - 1
    band = strip.figure.y_range.end - strip.figure.y_range.start
    assert strip.figure.aspect_ratio == pytest.approx(2 * STRIP_SECONDS * PAPER_MM_PER_S / (band * PAPER_MM_PER_MV))
    assert strip.figure.xgrid.ticker.interval == 0.2 and strip.figure.ygrid.ticker.interval == 0.5
    assert strip.figure.xgrid.ticker.num_minor_ticks == 5      # 0.04 s and 0.1 mV minor lines


def test_planes_colour_by_family_and_labels(review_page, page):
    from dashboard.beat_colours import label_classes

    store, board, views = page
    latent = board.charts["latent"]
    by_score = latent.foreground.data["image"][0].copy()
    store.update(colour_by="family")
    by_family = latent.foreground.data["image"][0]
    assert np.array_equal(by_family >> 24 > 0, by_score >> 24 > 0) and not np.array_equal(by_family, by_score)
    assert label_classes(np.array(["V", "N", "", "artefact", "own text", "A"], dtype=object)).tolist() == \
        [0, 6, 7, 4, 5, 2]


def test_strip_draws_every_lead_of_a_multi_lead_recording(tmp_path):
    """A two-lead CSV (with a time column): the strip draws both leads, the analysed one on top,
    each offset by whole 0.5 mV squares; its samples are the file's."""
    from dashboard.recording_view import DEFAULT_WIDTH
    from dashboard.review import StripView
    from dashboard.spec import VIEWS
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=60_000, seed=4))
    path = tmp_path / "two.csv"
    pd.DataFrame({"time": np.arange(60_000) / ecg.fs, "V1": -0.5 * ecg.signal, "II": ecg.signal}).to_csv(path, index=False)
    run = run_pipeline(RunRequest(input=str(path), out=str(tmp_path / "runs"), device="cpu",
                                  vae=dataclasses.replace(VAEConfig(), epochs=2)))
    assert run.report["input"]["channel"] == "II"                      # lead II by name
    shared = SharedRun.from_run(run)
    names, leads, analysed = shared.leads()
    assert names == ["V1", "II"] and analysed == 1 and leads.shape == (60_000, 2)
    store = DataStore(shared)
    strip = StripView(store, VIEWS["strip"])
    store.update(focus=10)
    ys = strip.trace.data["y"]
    assert len(ys) == 2 and strip.lead_names.data["text"] == ["II", "V1"]
    centre = int(shared.beats["fiducial"].iloc[10])
    start = centre - int(round(5.0 * shared.fs))
    np.testing.assert_allclose(ys[0], leads[start:start + len(ys[0]), 1], rtol=1e-6)
    np.testing.assert_allclose(ys[1], leads[start:start + len(ys[1]), 0] - strip.lead_height, rtol=1e-6)
    assert (strip.lead_height / 0.5).is_integer()

    from dashboard.recording_view import SignalChart, other_leads, signal_raster

    signal_raster(shared).compile()
    chart = SignalChart(store, VIEWS["signal"], signal_raster(shared), other_leads(shared))
    assert [name for name, _ in chart.leads] == ["II", "V1"]
    assert chart.image.data["image"][0].shape == (2 * chart.band_pixels, DEFAULT_WIDTH)
    chart.zoom(10.0, 11.0)                                             # single samples: one line per lead
    first = int(np.ceil(10.0 * shared.fs))
    np.testing.assert_allclose(chart.samples.data["y"][1][1:-1] - chart.offsets[1], leads[first:first + len(
        chart.samples.data["y"][1]) - 2, 0], atol=1e-5)               # float32 sums with the band's offset


# --------------------------------------------------------------------------- what a clinician reads
def test_formats_follow_holter_conventions():
    from dashboard.spec import brush_text, hms, no_label, one_in, plural

    assert hms(919.94) == "00:15:19.9" and hms(3725, 0) == "01:02:05" and hms(-5, 0) == "-00:00:05"
    assert plural(1, "beat") == "1 beat" and plural(0, "beat") == "0 beats" and plural(1371, "beat") == "1,371 beats"
    assert plural(1, "family", "families") == "1 family" and plural(3, "family", "families") == "3 families"
    assert one_in(0.01) == "1 in 100" and one_in(3.3e-6) == "1 in 300,000" and one_in(float("nan")) == "–"
    assert brush_text("length_s", 0.454, 0.787) == "Beat length 454–787 ms"
    assert brush_text("rr_prev_s", 0.6, 0.9) == "RR before 600–900 ms"
    assert brush_text("z1", -0.2, 0.35) == "Shape z1 -0.20 to 0.35"
    assert brush_text("time_s", 60, 125.3) == "Time 00:01:00–00:02:05" and brush_text("family", 2, 2) == "Family #2"
    assert no_label("") == "–" and no_label(None) == "–" and no_label("N") == "N"


def test_outlier_table_names_its_columns_with_units_and_blank_labels_as_a_dash(shared, page):
    store, board, views = page
    table = views["outliers"]
    titles = [html.unescape(re.sub(r"<[^>]+>", "", c.title)) for c in table.table.columns]
    assert titles[:4] == ["Beat", "Time", "Score", "RR before (ms)"]
    assert {"RR before (× local RR)", "RR after (× local RR)", "Beat length (ms)", "Shape rarity",
            "Your label"} <= set(titles)
    assert all(" title='" in c.title for c in table.table.columns), "every title explains itself on hover"
    assert not {"yours", "length (s)", "shape rarity", "split"} & set(titles)
    data, out = table.source.data, store.selection.outliers
    np.testing.assert_allclose(data["rr_before_ms"], out["rr_prev_s"].to_numpy() * 1000, rtol=1e-6)
    np.testing.assert_allclose(data["length_ms"], out["length_s"].to_numpy() * 1000, rtol=1e-6)
    if shared.has_labels:
        assert "Reference label" in titles
        assert [v for v in data["label"]] == [v or "–" for v in out["label"]]
    store.update(threshold=float(shared.beats["score"].min()))        # most beats: some unlabelled ones
    if shared.has_labels:
        assert "" not in list(table.source.data["label"])


def test_header_shows_the_recording_and_hides_the_pipelines_timings(shared, page):
    from dashboard.views import RecordingHeader

    store, board, views = page
    header = RecordingHeader(store)
    text = header.text.object
    assert Path(shared.report["input"]["path"]).name in text
    assert "Duration <b>00:20:00</b>" in text                          # 300,000 samples at 250 Hz
    lo, hi = re.search(r"Heart rate .*?<b>(\d+)–(\d+)</b> bpm", text).groups()
    rate = 60 / shared.beats["rr_prev_s"].dropna()
    assert rate.quantile(0.01) <= int(lo) <= int(hi) <= rate.quantile(0.99)
    assert f"<b>{shared.n_beats:,}</b> beats" in text
    outliers = int(((shared.beats["score"] >= store.threshold) & clean(shared.beats)).sum())
    assert f"<b>{outliers:,}</b> outlier" in text and "pause" in text and "episode" in text
    assert "hash" not in text and "warmup" not in text and "ms ·" not in text    # timings behind "details"
    assert header.details.collapsed and "Pipeline</b>" in header.details.objects[0].object
    reason = shared.report["input"]["lead_reason"]
    assert f"<b>Lead</b> {html.escape(shared.report['input']['channel'])}: {html.escape(reason)}" in \
        header.details.objects[0].object
    top = float(shared.beats["score"].max())                            # the slider's end: the top beats only
    store.update(threshold=top)
    outliers = int(((shared.beats["score"] >= top) & clean(shared.beats)).sum())
    assert outliers <= 1 and f"<b>{outliers:,}</b> outlier" in header.text.object


def test_header_counts_doubtful_pauses(shared, store, monkeypatch):
    """A pause the detector is unsure of (across noise, or where the other lead shows beats) is
    counted as doubtful beside the pauses; none is said when every pause is sure."""
    import pandas as pd

    from dashboard.views import RecordingHeader

    episodes = pd.DataFrame({"kind": ["pause", "pause", "noise"], "start_s": [10.0, 40.0, 40.5],
                             "end_s": [12.5, 44.0, 43.5], "confidence": np.float32([1.0, 0.5, 0.5])})
    monkeypatch.setattr(shared.run, "episodes", episodes)
    text = RecordingHeader(store).text.object
    assert re.search(r"<b>2</b> pauses ≥ 2 s <span class='ecg-muted'>\(1 doubtful\)</span>", text), text
    monkeypatch.setattr(shared.run, "episodes", episodes.assign(confidence=np.float32(1.0)))
    assert "doubtful" not in RecordingHeader(store).text.object


def test_the_page_has_one_threshold_slider_and_buttons_that_look_like_buttons(review_page):
    from dashboard import app

    class Job:
        result = review_page

        def snapshot(self):
            return startup.Progress(state="ready", overall=1.0)

    with set_curdoc(Document()):
        page = app.App(job=Job())
        whole = page.page()
        sliders = [w for w in whole.select(pn.widgets.FloatSlider) if w.name.startswith("Outlier threshold")]
        assert len(sliders) == 1
        review = page.review
        assert review.clear_button.button_type != "light" and review.undo_button.button_type != "light"
        assert all(d.button_type == "primary" for d in review.downloads)
        review.scope.value = "focus"
        page.store.update(focus=int(page.store.selection.outliers["beat_id"].iloc[0]))
        before = len(review.labels)
        review.apply("check")
        assert "given to 1 beat ·" in review.status.object
        review.undo()
        assert len(review.labels) == before


def test_the_error_page_quotes_the_command_and_names_a_folder_plainly(tmp_path):
    from dashboard import app, waiting

    argv = ["/venv/bin/python3", "-m", "dashboard.serve", "dashboard/app.py", "--port", "5006", "--args",
            "--input", str(tmp_path), "--device", "cpu"]
    texts = "\n".join(p.object for p in waiting.error_view("boom <b>", argv=argv, environ={"ECG_EPOCHS": "3"})
                      if isinstance(p.object, str))
    assert f"<code>--input {tmp_path} --device cpu</code>" in texts
    assert f"<code>python -m dashboard.serve dashboard/app.py --port 5006 --args --input {tmp_path}" in texts
    assert "ECG_EPOCHS=3" in texts and "boom &lt;b&gt;" in texts
    panel_argv = ["python3", "/venv/bin/panel", "serve", "dashboard/app.py", "--args", "--input", "x y.csv"]
    assert waiting.launch_command(panel_argv) == ("panel serve dashboard/app.py --args --input 'x y.csv'",
                                                  "--input 'x y.csv'")

    settings = startup.settings_from(["--input", str(tmp_path), "--device", "cpu", "--out", str(tmp_path / "runs")], {})
    job = startup.PipelineJob(settings, prepare=app.prepare(settings), log=lambda message: None).start()
    assert job.wait(60).state == "error"
    shown = _text(app.App(job=job).main)
    assert "is a folder; give a recording file" in shown and "Errno" not in shown


def test_archive_points_carry_names_and_the_sidebar_sums_up_the_archive(tmp_path):
    from dashboard.archive import NAMED_POINTS, ArchiveView
    from pipeline.batch import archive_frame

    rows = [{"input": f"/in/r{k}.csv", "name": f"r{k}.csv", "status": "ok", "error": "", "beats": 1000,
             "outliers": k * 7, "heart_rate_bpm": 60.0 + k, "duration_s": 3600.0, "run_dir": str(tmp_path / f"r{k}")}
            for k in range(NAMED_POINTS + 3)]
    rows.append({"input": "/in/bad.csv", "name": "bad.csv", "status": "failed", "error": "unreadable"})
    view = ArchiveView(archive_frame(rows), lambda run_dir, name: None)
    labels = [name for name in view.points.data["label"] if name]
    assert len(labels) == NAMED_POINTS and labels[0] == f"r{NAMED_POINTS + 2}.csv"     # most outliers named
    assert sorted(view.points.data["name"]) == sorted(r["name"] for r in rows[:-1])
    assert {r.glyph.__class__.__name__ for r in view.overview.renderers} == {"Scatter", "Text"}
    ticks = view.overview.yaxis[0].ticker.ticks
    assert ticks[:4] == [1.0, 2.0, 11.0, 101.0]                         # outliers 0, 1, 10, 100 (outliers + 1)
    totals = view.sidebar.objects[0].object
    assert "16 recordings" in totals and "15.0 h" in totals and "1 failed" in totals
    view.search.value_input = "r1"
    assert set(view.points.data["name"]) == {"r1.csv", "r10.csv", "r11.csv", "r12.csv", "r13.csv", "r14.csv"}
    view.points.selected.indices = [0]
    assert "Open:" in view.opened.object


# --------------------------------------------------------------------------- a closed session
def test_a_closed_sessions_threshold_widget_lets_its_datastore_go(cpu_run):
    """What the soak test found: once the server has destroyed a session (Panel's session-destroyed
    hooks, as ``panel serve`` runs them), nothing may keep the session's DataStore alive. An
    EditableFloatSlider as the threshold did, through ``panel.links.Callback.registry`` (a
    class-level map keyed by its inner FloatInput, whose browser link reached the store)."""
    import gc
    import weakref
    from types import SimpleNamespace

    from bokeh.document import Document
    from panel.io.application import _on_session_destroyed
    from panel.io.state import set_curdoc

    from dashboard.data_store import DataStore
    from dashboard.shared_run import SharedRun

    shared = SharedRun.from_run(cpu_run.run)
    doc = Document()
    with set_curdoc(doc):
        store = DataStore(shared)
        widget = store.widget("threshold")
        widget.server_doc(doc)                       # served as `panel serve` serves a page
    _on_session_destroyed(SimpleNamespace(_document=doc, id="closed-session"))   # the server closes it
    doc.clear()
    gone = weakref.ref(store)
    del store, widget, doc
    gc.collect()
    assert gone() is None, "a closed session's DataStore is still referenced"
