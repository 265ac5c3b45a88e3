"""The recording view: a Datashader raster of the visible window (:mod:`dashboard.signal_raster`),
redrawn when the window changes, and the raw samples as a line once zoomed in to single samples;
the RR tachogram on the same time axis; the markers of selected beats and outliers on both; the
run's episodes as bands behind them (less those the reviewer rejected). Both boards draw these.

See Also
--------
dashboard.range_watch : one picture at a time while the window moves.
dashboard.charts : the linked charts of the default board.
dashboard.cuxfilter_board : the cuxfilter board, which draws these too.
"""
from __future__ import annotations

import weakref

import numpy as np
import panel as pn
from bokeh.models import (BoxZoomTool, ColumnDataSource, FixedTicker, HoverTool, Image, MultiLine, PanTool, Range1d,
                          ResetTool, SaveTool, Scatter, VStrip, WheelZoomTool)

from dashboard.bins import grid_index
from dashboard.data_store import DataStore, Selection, in_session, one_patch
from dashboard.figures import CHANGES_WITH_BRUSH, IMAGE, add, figure, hidden_box, image_geometry, robust_extent
from dashboard.range_watch import RangeWatch
from dashboard.shading import opacity, opacity_mapper
from dashboard.signal_raster import SignalRaster
from dashboard.spec import (EPISODE_COLORS, EPISODE_NAMES, OUTLIER_COLOR, SELECTED_COLOR, SIGNAL_COLOR,
                            ViewSpec, hms_tick_formatter)
from pipeline import backend

TACHOGRAM_GRID = (80, 480)  # RR tachogram image: rows (RR) × columns (time)
MARKER_COLUMNS = 600        # markers of the recording view and tachogram: one per 1/600 of the window at most
MAX_OUTLIER_MARKERS = 1000  # outlier markers drawn at most (highest scores first)
FOCUS_SECONDS = 4.0
RASTER_HEIGHT = 240         # pixels of the recording's raster (the plot's inner height, roughly)
DEFAULT_WIDTH = 1400        # raster width until the browser reports the plot's real width
BAND_VERDICTS = {"confirmed": "confirmed", "added": "added by the reviewer", "": "not reviewed"}   # (hover)


class SignalChart(pn.viewable.Viewer):
    """The whole recording: a Datashader raster of the visible window (raw samples once zoomed in
    to them), markers for the selected beats and the outliers, the focused beat shaded. The other
    leads of a multi-lead recording are drawn below the analysed one, each in a band of its own.

    The visible window goes to ``store.time_range``; a click in the outlier table
    (``store.focus``) zooms here without moving that filter.
    """

    def __init__(self, store: DataStore, spec: ViewSpec, raster: SignalRaster, others: list | None = None):
        super().__init__()
        self.store, self.spec, self.raster = store, spec, raster
        self.leads = [(store.shared.report["input"]["channel"], raster), *(others or [])]
        self.rendered = 0
        self.renders = 0
        self._focus_range = None
        self._shown = None
        self._standin = False       # the levels drawn as a line while Datashader compiles
        shared = store.shared
        self._extent = (0.0, raster.duration_s)
        peaks = shared.beats["peak"].to_numpy()
        self._marker_offset = 0.12 * float(np.subtract(*np.quantile(peaks, [0.99, 0.01]))) if len(peaks) else 0.0
        # Bands of one height, the analysed lead's on top at its own values, the others shifted below.
        self.band = max(r.y_range[1] - r.y_range[0] for _, r in self.leads)
        top = raster.y_range[1] + (self.band - (raster.y_range[1] - raster.y_range[0])) / 2
        self.offsets = [top - (k + 0.5) * self.band - sum(r.y_range) / 2 for k, (_, r) in enumerate(self.leads)]
        self.y_range = (top - len(self.leads) * self.band, top)
        self.band_pixels = RASTER_HEIGHT if len(self.leads) == 1 else max(80, 2 * RASTER_HEIGHT // len(self.leads))
        self.image = ColumnDataSource(dict(image=[np.zeros((1, 1), np.uint8)], x=[0.0], y=[self.y_range[0]],
                                           dw=[1.0], dh=[self.y_range[1] - self.y_range[0]]), name="ecg-raster")
        self.samples = ColumnDataSource(dict(t=[], y=[]))
        self.selected = ColumnDataSource(dict(t=np.zeros(0), y=np.zeros(0, np.float32)))
        self.outliers = ColumnDataSource(dict(t=np.zeros(0), y=np.zeros(0, np.float32),
                                              beat_id=np.zeros(0, np.int32), score=np.zeros(0, np.float32)))
        self.focus_box = hidden_box(fill_color=OUTLIER_COLOR, fill_alpha=0.12, line_color=None)
        self.figure = self._figure()
        self.render(*self._extent)
        self._raster_when_compiled()
        self.draw_markers(store.selection)
        store.param.watch(lambda event: self.draw_markers(event.new), "selection")
        store.param.watch(self._focus_changed, "focus")
        store.param.watch(lambda event: event.new is not None and self.zoom(*event.new), "zoom_to")
        self.whole = pn.widgets.Button(name="Show the whole recording", button_type="default", width=200,
                                       margin=(0, 10))
        self.whole.on_click(lambda _: self.zoom(*self._extent))

    def _figure(self):
        spec, raster = self.spec, self.raster
        wheel, pan = WheelZoomTool(dimensions="width"), PanTool(dimensions="width")
        hover = HoverTool(tooltips=[("beat", "@beat_id"), ("score", "@score{0.00}")])
        height = spec.height if len(self.leads) == 1 else spec.height - RASTER_HEIGHT + self.band_pixels * len(self.leads)
        p = figure(spec, [wheel, pan, BoxZoomTool(dimensions="width"), hover, ResetTool(), SaveTool()], height=height,
                   x_range=Range1d(*self._extent, bounds=self._extent, min_interval=4 / raster.fs),
                   y_range=Range1d(*self.y_range))
        p.toolbar.active_scroll, p.toolbar.active_drag = wheel, pan
        p.xaxis.formatter = hms_tick_formatter()
        if len(self.leads) > 1:     # the y axis names the leads at their bands' middles
            middles = [self.y_range[1] - (k + 0.5) * self.band for k in range(len(self.leads))]
            p.yaxis.ticker = FixedTicker(ticks=middles)
            p.yaxis.major_label_overrides = {m: name for m, (name, _) in zip(middles, self.leads)}
            p.yaxis.axis_label = "leads"
        add(p, self.image, Image(**IMAGE, color_mapper=opacity_mapper(SIGNAL_COLOR)))
        add(p, self.samples, MultiLine(xs="t", ys="y", line_color=SIGNAL_COLOR, line_width=1.2))
        add(p, self.selected, Scatter(x="t", y="y", size=5, fill_color=SELECTED_COLOR, fill_alpha=0.55, line_color=None),
            level=CHANGES_WITH_BRUSH)
        flagged = add(p, self.outliers, Scatter(x="t", y="y", marker="inverted_triangle", size=11,
                                                fill_color=OUTLIER_COLOR, line_color="white"), level=CHANGES_WITH_BRUSH)
        hover.renderers = [flagged]
        add_episode_track(p, self.store)            # last in the list, drawn first (its level)
        p.add_layout(self.focus_box)
        self.window_watch = RangeWatch([p.x_range], self.image)     # the tachogram joins in: it shares the x range
        self.window_watch.add(self._redraw)
        return p

    # ------------------------------------------------------------------ raster
    def _width(self) -> int:
        from bokeh.core.property.descriptors import UnsetValueError

        try:   # known once the browser has laid the plot out
            width = self.figure.inner_width
        except UnsetValueError:
            return DEFAULT_WIDTH
        return int(width) if width and width > 50 else DEFAULT_WIDTH

    def render(self, x0: float, x1: float) -> None:
        """Draw the window [x0, x1]: raw samples when zoomed in to them, else a raster (or, while
        Datashader is still being compiled after a start, the raster's level as a line)."""
        width = self._width()
        lines = [r.raw_samples(x0, x1, width) for _, r in self.leads]
        self._standin = lines[0] is None and not self.raster.compiled.is_set()
        if self._standin:
            lines = [r.trace(x0, x1, width) for _, r in self.leads]
        if lines[0] is not None:
            self.samples.data = {"t": [t for t, _ in lines],
                                 "y": [y + offset for (_, y), offset in zip(lines, self.offsets)]}
            self.image.data.update(image=[np.zeros((1, 1), np.uint8)], picture=self.window_watch.next_picture())
        else:
            bands = [r.render(x0, x1, width, self.band_pixels, _centred(r.y_range, self.band)) for _, r in self.leads]
            if len(self.samples.data["t"]):
                self.samples.data = {"t": [], "y": []}
            self.image.data.update(image=[np.vstack(bands[::-1])], x=[x0], dw=[x1 - x0],   # row 0 at the bottom
                                   picture=self.window_watch.next_picture())
        self._shown = (x0, x1)
        self.renders += 1

    def _raster_when_compiled(self) -> None:
        """A session opened while Datashader was still compiling shows the levels as a line: swap in
        the raster as soon as it can be drawn. (Software rendering strokes that line of ~15,000
        points again at every repaint of the plot: ~150 ms, in Chromium on the 2-core CPU.) Asked
        whether the line was drawn, not whether Datashader is compiled: it may have finished since."""
        doc = pn.state.curdoc
        if not self._standin or doc is None or doc.session_context is None:
            return
        chart = weakref.ref(self)     # a session closed in the meantime is not kept alive

        def redraw() -> None:
            if (live := chart()) is not None:
                live.swap_in_raster()

        schedule = in_session(doc)
        self.raster.when_compiled(lambda: schedule(redraw))

    def swap_in_raster(self) -> None:
        """The raster in place of the line, in one patch (run on the session's tick once Datashader
        is compiled). Outside Panel's hold, Bokeh sent each change as a message of its own, written
        as soon as the websocket was free; a dashboard built at that moment on a busy websocket has
        its message held back by Panel until then, so the browser got new data for a source it did
        not know yet ("reference pNNNN isn't known"). Panel queues what it sends in order."""
        if self._standin:
            with one_patch():
                self.render(*self._shown)

    def _redraw(self) -> None:
        """The window moved (zoom, pan, or :meth:`zoom`): a new raster and its markers at once, the
        beat views once the window has settled (:meth:`RangeWatch.when_settled`)."""
        x0, x1 = float(self.figure.x_range.start), float(self.figure.x_range.end)
        if self._shown == (x0, x1):
            return
        self.render(x0, x1)
        self.draw_markers(self.store.selection)
        self.window_watch.when_settled(lambda: self._window_changed(x0, x1))

    def _window_changed(self, lo: float, hi: float) -> None:
        """The visible window filters the beat views, unless this is our own zoom to a focused beat.
        (The window's markers are drawn already, by :meth:`_redraw`.)"""
        if self._focus_range is not None and np.allclose((lo, hi), self._focus_range, atol=1e-3):
            return
        self._focus_range = None
        sample = 1.0 / self.raster.fs
        whole = lo <= self._extent[0] + sample and hi >= self._extent[1] - sample
        window = None if whole else (lo, hi)
        if window != self.store.time_range:
            self.store.update(time_range=window)

    # ------------------------------------------------------------------ markers
    def draw_markers(self, sel: Selection) -> None:
        selected, outliers = markers(self.store.shared, sel, self._shown or self._extent, "peak", self._marker_offset)
        self.selected.data, self.outliers.data = selected, outliers
        self.rendered = sel.version

    # ------------------------------------------------------------------ focus and zoom
    def _focus_changed(self, event) -> None:
        if event.new is None:
            self.focus_box.visible = False
            return
        beat = self.store.shared.beats.iloc[event.new]
        start = float(beat["start"]) / self.store.shared.fs
        self.focus_box.update(left=start, right=start + beat_span_s(beat, self.store.shared), visible=True)
        lo, hi = self.store.focus_window(event.new, FOCUS_SECONDS)
        self._focus_range = (lo, hi)
        self.zoom(lo, hi, focus=True)

    def zoom(self, lo: float, hi: float, focus: bool = False) -> None:
        """Show [lo, hi] seconds: the browser's axis follows, the raster and markers are redrawn."""
        if not focus:
            self._focus_range = None
        with one_patch():
            self.figure.x_range.update(start=lo, end=hi)
            self.window_watch.fire()

    def __panel__(self):
        return pn.Column(pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"), self.whole,
                         sizing_mode="stretch_width")


def markers(shared, sel: Selection, window: tuple[float, float], y: str, offset: float = 0.0) -> tuple[dict, dict]:
    """Data of the selected beats' markers (when something is chosen) and of the outliers' in a time
    ``window``, at column ``y`` (outliers ``offset`` above it): at most one of each per
    1/MARKER_COLUMNS of the window (the first selected beat there; the highest-scoring outlier),
    and at most MAX_OUTLIER_MARKERS outliers, highest scores first."""
    xp, beats = shared.xp, shared.beats
    t = shared.columns["time_s"]
    times = beats["time_s"].to_numpy()
    visible = (t >= window[0]) & (t <= window[1])
    if sel.count < sel.total:
        index = backend.to_host(xp.flatnonzero(sel.mask & visible))
        index = index[one_per_column(times[index], window)]
    else:
        index = np.zeros(0, dtype=np.int64)
    scores = shared.columns["score"]
    flagged = xp.flatnonzero(sel.mask & (scores >= sel.threshold) & visible)
    flagged = backend.to_host(flagged[xp.argsort(-scores[flagged])])
    flagged = flagged[np.sort(one_per_column(times[flagged], window))][:MAX_OUTLIER_MARKERS]
    return ({"t": times[index], "y": beats[y].to_numpy()[index].astype(np.float32)},
            {"t": times[flagged],
             "y": (beats[y].to_numpy()[flagged] + offset).astype(np.float32),
             "beat_id": beats["beat_id"].to_numpy()[flagged].astype(np.int32),
             "score": beats["score"].to_numpy()[flagged].astype(np.float32)})


def one_per_column(times: np.ndarray, window: tuple[float, float], columns: int = MARKER_COLUMNS) -> np.ndarray:
    """Positions in ``times`` of the first time in each of ``columns`` equal slices of ``window``
    that holds any. Markers closer than a pixel or two only cover each other, yet the browser sends,
    keeps and draws every one (an anti-aliased path each), however many beats a window holds."""
    span = max(window[1] - window[0], 1e-9)
    column = np.clip(((times - window[0]) / span * columns).astype(np.int64), 0, columns - 1)
    return np.unique(column, return_index=True)[1]


class TachogramChart(pn.viewable.Viewer):
    """RR intervals over time, on the recording view's own x range (they zoom and pan together):
    the beats' density as an image, re-binned when the window moves, and the selected beats and the
    outliers as markers."""

    def __init__(self, store: DataStore, spec: ViewSpec, window_watch: RangeWatch, x_range: Range1d):
        super().__init__()
        self.store, self.spec = store, spec
        self.rendered = 0
        shared = store.shared
        self.y_range = shared.derived("home/rhythm", lambda: robust_extent(shared.columns[spec.y], margin=0.1))
        self.image = ColumnDataSource(dict(image=[np.zeros((1, 1), np.uint8)], x=[0.0], y=[self.y_range[0]],
                                           dw=[1.0], dh=[self.y_range[1] - self.y_range[0]]))
        self.selected = ColumnDataSource(dict(t=np.zeros(0), y=np.zeros(0, np.float32)))
        self.outliers = ColumnDataSource(dict(t=np.zeros(0), y=np.zeros(0, np.float32),
                                              beat_id=np.zeros(0, np.int32), score=np.zeros(0, np.float32)))
        wheel, pan = WheelZoomTool(dimensions="width"), PanTool(dimensions="width")
        hover = HoverTool(tooltips=[("beat", "@beat_id"), ("score", "@score{0.00}")])
        p = figure(spec, [wheel, pan, hover, ResetTool(), SaveTool()], x_range=x_range,
                   y_range=Range1d(*self.y_range))
        p.toolbar.active_scroll, p.toolbar.active_drag = wheel, pan
        p.xaxis.formatter = hms_tick_formatter()
        add(p, self.image, Image(**IMAGE, color_mapper=opacity_mapper(SIGNAL_COLOR)))
        add(p, self.selected, Scatter(x="t", y="y", size=5, fill_color=SELECTED_COLOR, fill_alpha=0.6, line_color=None),
            level=CHANGES_WITH_BRUSH)
        hover.renderers = [add(p, self.outliers, Scatter(x="t", y="y", marker="inverted_triangle", size=9,
                                                         fill_color=OUTLIER_COLOR, line_color="white"),
                               level=CHANGES_WITH_BRUSH)]
        add_episode_track(p, store)                 # last in the list, drawn first (its level)
        self.figure = p
        self._window = None
        self._rebin()
        window_watch.add(self._rebin)
        store.param.watch(lambda event: self.draw_markers(event.new), "selection")

    def _rebin(self) -> None:
        x_range = self.figure.x_range
        window = (float(x_range.start), float(x_range.end))
        if window == self._window:
            return
        self._window = window
        shared = self.store.shared
        bins = grid_index(shared.columns[self.spec.x], shared.columns[self.spec.y], window, self.y_range,
                          TACHOGRAM_GRID)
        counts = bins.counts()
        self.image.data = dict(image=[opacity(counts, 70, 230)], **image_geometry(window, self.y_range))
        self.draw_markers(self.store.selection)

    def draw_markers(self, sel: Selection) -> None:
        self.selected.data, self.outliers.data = markers(self.store.shared, sel, self._window, self.spec.y)
        self.rendered = sel.version

    def __panel__(self):
        return pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")


def episode_bands(episodes) -> dict:
    """The bands' columns (x0, x1, kind, its name, verdict, colour, alphas) for ``episodes``
    (with a ``verdict`` column where reviewed): an episode the reviewer rejected is left out, one
    confirmed or added is drawn stronger and edged."""
    if episodes is None or not len(episodes):
        return {name: [] for name in ("x0", "x1", "kind", "name", "verdict", "color", "fill_alpha", "line_alpha")}
    verdicts = (episodes["verdict"].astype(str).to_numpy() if "verdict" in episodes
                else np.full(len(episodes), "", dtype=object))
    kept = verdicts != "rejected"
    frame, verdicts = episodes[kept], verdicts[kept]
    judged = np.isin(verdicts, ("confirmed", "added"))
    return {"x0": frame["start_s"].to_numpy(np.float64), "x1": frame["end_s"].to_numpy(np.float64),
            "kind": frame["kind"].astype(str).tolist(), "name": [EPISODE_NAMES[k] for k in frame["kind"]],
            "verdict": [BAND_VERDICTS.get(v, v) for v in verdicts],
            "color": [EPISODE_COLORS[k] for k in frame["kind"]],
            "fill_alpha": np.where(judged, 0.32, 0.18), "line_alpha": np.where(judged, 0.9, 0.0)}


def add_episode_track(p, store: DataStore) -> None:
    """The run's episodes (flutter, noise, lost signal, pauses) as bands of colour behind
    everything the plot draws, over its whole height; hovering one names it. The bands follow
    ``store.episodes`` (the reviewer's verdicts) by new data in the same source; the track is there
    even for a run without episodes, so that one the reviewer adds is drawn."""
    def shown():
        return store.shared.run.episodes if store.episodes is None else store.episodes

    source = ColumnDataSource(episode_bands(shown()), name="ecg-episodes")
    track = add(p, source, VStrip(x0="x0", x1="x1", fill_color="color", fill_alpha="fill_alpha", line_color="color",
                                  line_alpha="line_alpha", line_width=1.5), level="underlay")
    p.add_tools(HoverTool(renderers=[track], tooltips=[("episode", "@name"), ("from", "@x0{0.0} s"),
                                                       ("to", "@x1{0.0} s"), ("verdict", "@verdict")]))
    store.param.watch(lambda event: setattr(source, "data", episode_bands(shown())), "episodes")


def beat_span_s(beat, shared) -> float:
    """Seconds a beat's row covers on the recording: its interval to the next beat, or for the
    last beat (which has none) its embedding window."""
    length = float(beat["length_s"])
    return length if np.isfinite(length) else shared.embeddings.shape[1] / shared.fs


def signal_raster(shared) -> SignalRaster:
    """The run's raster (once per run), its levels built and drawn on the run's device."""
    return shared.derived("signal-raster", lambda: SignalRaster(shared.signal, shared.fs, device=shared.device))


def _centred(extent: tuple[float, float], height: float) -> tuple[float, float]:
    """A range ``height`` high around the middle of ``extent``."""
    middle = (extent[0] + extent[1]) / 2
    return (middle - height / 2, middle + height / 2)


def other_leads(shared) -> list:
    """(name, raster) of the recording's leads besides the analysed one (once per run; drawn from
    host frames: they are for the eye, and their levels keep every render small)."""
    def build():
        names, values, analysed = shared.leads()
        return [(name, SignalRaster(np.ascontiguousarray(values[:, k]), shared.fs))
                for k, name in enumerate(names) if k != analysed]
    return shared.derived("other-leads", build)
