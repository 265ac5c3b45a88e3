"""Renders the linked charts with HoloViews ``link_selections`` and Datashader (pandas; the CPU default).

The three beat charts (length histogram, latent space, score distribution) are drawn from one
window dataset (the beats in the visible time window and chosen split) and linked by one
``link_selections`` instance per session; its selection expression is mirrored into the
session's :class:`~dashboard.data_store.DataStore` as brush ranges, and back. The recording view
(:class:`SignalView`) rasterizes the whole signal with Datashader on every zoom or pan; the
GPU renderer reuses it on a cuDF frame.

See Also
--------
dashboard.views : what is drawn (``VIEWS``), and the views both renderers share.
dashboard.cuxfilter_board : the same charts with cuxfilter on the GPU.
"""
from __future__ import annotations

import functools
import math
import operator

import datashader as ds
import holoviews as hv
import numpy as np
import panel as pn
import param
from holoviews.operation import histogram
from holoviews.operation.datashader import dynspread, rasterize

from dashboard.data_store import BRUSH_COLUMNS, DataStore, frozen
from dashboard.views import (OUTLIER_COLOR, SCORE_CMAP, SELECTED_COLOR, SIGNAL_COLOR,
                             ViewSpec, hms_formatter, tidy_toolbar)

WINDOW_COLUMNS = ["time_s", "length_s", "z1", "z2", "score", "beat_id"]
MAX_MARKERS = 3000          # selected-beat markers drawn in view 1 at most (evenly thinned beyond)
MAX_OUTLIER_MARKERS = 1000  # outlier markers drawn at most (highest scores first)
FOCUS_SECONDS = 4.0
LOG_FLOOR = 0.5             # where bars of a log-count histogram start


# --------------------------------------------------------------------------- one freeze per interaction
def _batch_stream_triggers() -> None:
    """Run each HoloViews stream trigger (a brush, a zoom, a reset: every interaction enters there)
    inside one freeze of its document, so the plots it updates share one model-graph walk
    (see :func:`dashboard.data_store.frozen`). Idempotent; changes nothing else."""
    trigger = hv.streams.Stream.trigger.__func__
    if getattr(trigger, "_ecg_batched", False):
        return

    def batched(cls, streams):
        with frozen():
            return trigger(cls, streams)

    batched._ecg_batched = True
    hv.streams.Stream.trigger = classmethod(batched)


_batch_stream_triggers()


def _cache_dask_lookup() -> None:
    """Look Dask up once per process instead of on every HoloViews data access.

    HoloViews calls ``holoviews.core.data.util.dask_array_module`` (``import dask.array``)
    dozens of times per chart refresh; without Dask installed each failed import walks every
    sys.path entry (~1 ms), some 60 ms per selection change. The answer cannot change while
    the server runs, so it is cached in that function and in the modules that imported it by
    name. Idempotent; returns the same module (or None) as before."""
    from holoviews.core.data import grid, util, xarray
    from holoviews.operation import element

    lookup = util.dask_array_module
    if getattr(lookup, "_ecg_cached", False):
        return
    cached = functools.cache(lookup)
    cached._ecg_cached = True
    for module in (util, grid, xarray, element):
        if getattr(module, "dask_array_module", None) is lookup:
            module.dask_array_module = cached


_cache_dask_lookup()


# --------------------------------------------------------------------------- brush <-> expression
_COMPARISONS = {operator.ge: "lo", operator.gt: "lo", operator.le: "hi", operator.lt: "hi"}


def ranges_from_expr(expr) -> dict | None:
    """``{column: (lo, hi)}`` of a conjunction of range comparisons (what box and x-range brushes
    produce); ``{}`` for no selection; None for anything else (e.g. a lasso polygon)."""
    if expr is None:
        return {}
    terms: list = []
    if not _collect(expr, terms):
        return None
    ranges: dict = {}
    for column, side, value in terms:
        lo, hi = ranges.get(column, (-math.inf, math.inf))
        ranges[column] = (max(lo, value), hi) if side == "lo" else (lo, min(hi, value))
    return ranges


def _collect(expr, out: list) -> bool:
    ops = list(getattr(expr, "ops", []))
    if not ops or not isinstance(expr, hv.dim):
        return False
    first = ops[0]
    side = _COMPARISONS.get(first["fn"])
    value = first["args"][0] if first["args"] else None
    if side is None or first.get("reverse") or isinstance(value, hv.dim) or not np.isscalar(value):
        return False
    dimension = expr.dimension
    name = getattr(dimension, "name", dimension)
    if not isinstance(name, str):
        return False
    out.append((name, side, float(value)))
    for op in ops[1:]:
        if op["fn"] is not operator.and_ or not op["args"] or not isinstance(op["args"][0], hv.dim):
            return False
        if not _collect(op["args"][0], out):
            return False
    return True


def expr_from_ranges(ranges: dict):
    """The selection expression of brush ranges (None when empty)."""
    terms = [(hv.dim(c) >= lo) & (hv.dim(c) <= hi) for c, (lo, hi) in ranges.items()]
    return functools.reduce(operator.and_, terms) if terms else None


def _log_floor(plot, element) -> None:
    """Bars of a log-count histogram start at LOG_FLOOR, not at 0 (which a log axis cannot draw)."""
    glyph = plot.handles.get("glyph")
    if glyph is not None and hasattr(glyph, "bottom"):
        glyph.bottom = LOG_FLOOR


# --------------------------------------------------------------------------- view 1
class SignalView(pn.viewable.Viewer):
    """The whole recording, rasterized by Datashader on every zoom or pan (pandas or cuDF frame),
    with markers for the selected beats and the outliers, and the focused beat shaded.

    The visible window goes to ``data_store.time_range``; a click in the outlier table
    (``data_store.focus``) zooms here without moving that filter.
    """

    data_store = param.ClassSelector(class_=DataStore)
    spec = param.ClassSelector(class_=ViewSpec)
    frame = param.Parameter(doc="one row per sample: t (s), amplitude; pandas or cuDF")
    line_width = param.Number(default=1.0, doc="antialiased line width (0 on the GPU)")
    rendered = param.Integer(default=0)

    def __init__(self, **params):
        super().__init__(**params)
        store, spec = self.data_store, self.spec
        self._figure = None
        self._focus_range = None
        self._extent = (0.0, (len(store.shared.signal_frame) - 1) / store.shared.fs)
        peaks = store.shared.beats["peak"].to_numpy()
        self._marker_offset = 0.15 * float(np.subtract(*np.quantile(peaks, [0.99, 0.01]))) if len(peaks) else 0.0
        curve = hv.Curve(self.frame, spec.x, spec.y)
        kwargs = dict(aggregator=ds.count(), precompute=True)
        if self.line_width:
            kwargs["line_width"] = self.line_width
        line = rasterize(curve, **kwargs).opts(
            cmap=["#8fa8c8", SIGNAL_COLOR], cnorm="eq_hist", colorbar=False, alpha=1.0)
        self._raster_streams = [s for s in line.streams if isinstance(s, (hv.streams.RangeXY, hv.streams.RangeX))]
        self.range_stream = hv.streams.RangeX(source=line)
        self.range_stream.add_subscriber(self._window_changed)
        markers = hv.DynamicMap(self._marker_layers, streams=[self.range_stream, store.param.selection])
        focus = hv.DynamicMap(self._focus_span, streams=[store.param.focus])
        self.plot = (line * focus * markers).opts(
            hv.opts.Overlay(responsive=True, height=spec.height, xlabel=spec.xlabel, ylabel=spec.ylabel,
                            xformatter=hms_formatter(), active_tools=["xwheel_zoom", "xpan"],
                            tools=["xwheel_zoom", "xpan", "xbox_zoom"], default_tools=["reset", "save"],
                            show_legend=False, hooks=[self._hook, tidy_toolbar], toolbar="above"),
            hv.opts.Points(tools=["hover"]))
        store.param.watch(self._focus_changed, "focus")
        self.whole = pn.widgets.Button(name="Show the whole recording", button_type="light", width=200,
                                       margin=(0, 10))
        self.whole.on_click(lambda _: self.zoom(*self._extent))

    # ------------------------------------------------------------------ layers
    def _visible(self, x_range):
        cols = self.data_store.shared.columns
        if x_range is None or None in x_range:
            return np.ones(len(cols["time_s"]), dtype=bool)
        t = cols["time_s"]
        return (t >= x_range[0]) & (t <= x_range[1])

    def _marker_layers(self, x_range=None, selection=None):
        """Selected beats and outliers in one update (one plot refresh per selection)."""
        return self._markers(x_range, selection) * self._outliers(x_range, selection)

    def _markers(self, x_range=None, selection=None):
        sel = selection or self.data_store.selection
        beats = self.data_store.shared.beats
        mask = sel.mask if sel.count < sel.total else np.zeros_like(sel.mask)  # nothing chosen: no markers
        index = np.flatnonzero(mask & self._visible(x_range))
        if len(index) > MAX_MARKERS:
            index = index[np.linspace(0, len(index) - 1, MAX_MARKERS).astype(int)]
        self.rendered = sel.version
        return hv.Points(beats.iloc[index], ["time_s", "peak"], ["beat_id", "score"], label="selected").opts(
            color=SELECTED_COLOR, size=5, alpha=0.55, line_color=None)

    def _outliers(self, x_range=None, selection=None):
        sel = selection or self.data_store.selection
        shared = self.data_store.shared
        scores = shared.columns["score"]
        index = np.flatnonzero(sel.mask & (scores > sel.threshold) & self._visible(x_range))
        if len(index) > MAX_OUTLIER_MARKERS:
            index = index[np.argsort(-scores[index])[:MAX_OUTLIER_MARKERS]]
        frame = shared.beats.iloc[index]
        frame = frame.assign(marker=frame["peak"] + self._marker_offset)
        return hv.Points(frame, ["time_s", "marker"], ["beat_id", "score"], label="outliers").opts(
            color=OUTLIER_COLOR, marker="inverted_triangle", size=11, line_color="white", alpha=0.95)

    def _focus_span(self, focus=None):
        if focus is None:
            return hv.VSpan(None, None)
        beat = self.data_store.shared.beats.iloc[focus]
        start = float(beat["start"]) / self.data_store.shared.fs
        return hv.VSpan(start, start + float(beat["length_s"])).opts(color=OUTLIER_COLOR, alpha=0.12)

    # ------------------------------------------------------------------ window and zoom
    def _window_changed(self, x_range=None):
        if x_range is None or None in x_range:
            return
        lo, hi = float(x_range[0]), float(x_range[1])
        if self._focus_range is not None and np.allclose((lo, hi), self._focus_range, atol=1e-3):
            return  # our own zoom to the focused beat: keep the beat views' window as it was
        self._focus_range = None
        sample = 1.0 / self.data_store.shared.fs
        whole = lo <= self._extent[0] + sample and hi >= self._extent[1] - sample
        self.data_store.update(time_range=None if whole else (lo, hi))

    def _focus_changed(self, event) -> None:
        if event.new is None:
            return
        lo, hi = self.data_store.focus_window(event.new, FOCUS_SECONDS)
        self._focus_range = (lo, hi)
        self.zoom(lo, hi, focus=True)

    def _hook(self, plot, element) -> None:
        self._figure = plot.state
        plot.state.name = "ecg-signal"

    def zoom(self, lo: float, hi: float, focus: bool = False) -> None:
        """Show [lo, hi] seconds: the browser's axis follows, Datashader re-renders, markers follow.

        A range set from the server reaches the browser but does not come back through the
        plot's range streams, so they are told here."""
        if not focus:
            self._focus_range = None
        if self._figure is not None:
            self._figure.x_range.update(start=lo, end=hi)
        with frozen():
            for stream in self._raster_streams:
                stream.event(x_range=(lo, hi))
            self.range_stream.event(x_range=(lo, hi))

    def __panel__(self):
        return pn.Column(pn.pane.HoloViews(self.plot, sizing_mode="stretch_width", linked_axes=False), self.whole,
                         sizing_mode="stretch_width")


# --------------------------------------------------------------------------- the board
class HoloViewsBoard:
    """One session's linked charts: HoloViews ``link_selections`` over pandas, Datashader rasters."""

    name = "holoviews"

    def __init__(self, store: DataStore, signal_frame=None, line_width: float = 1.0):
        self.store = store
        self.signal_frame = store.shared.signal_frame if signal_frame is None else signal_frame
        self.line_width = line_width
        self.links = hv.link_selections.instance(unselected_alpha=0.25, unselected_color="#c9d2dc",
                                                 cross_filter_mode="intersect")
        self._window = hv.DynamicMap(self._window_dataset,
                                     streams=[hv.streams.Params(store, ["time_range", "follow_window", "split"])])
        self._syncing = False
        self.links.param.watch(self._from_links, "selection_expr")
        store.param.watch(self._to_links, "brush")
        self.charts: dict = {}

    # ------------------------------------------------------------------ data
    def _window_dataset(self, **_):
        frame = self.store.window_frame()[WINDOW_COLUMNS]
        return hv.Dataset(frame, kdims=["time_s"], vdims=WINDOW_COLUMNS[1:])

    # ------------------------------------------------------------------ charts
    def chart(self, spec: ViewSpec):
        if spec.kind == "signal":
            view = SignalView(data_store=self.store, spec=spec, frame=self.signal_frame, line_width=self.line_width)
        elif spec.kind == "histogram":
            view = pn.pane.HoloViews(self._histogram(spec), sizing_mode="stretch_width", linked_axes=False)
        elif spec.kind == "scatter":
            view = pn.pane.HoloViews(self._scatter(spec), sizing_mode="stretch_width", linked_axes=False)
        else:
            raise ValueError(f"the holoviews board draws kinds signal, histogram, scatter; got {spec.kind!r}")
        self.charts[spec.name] = view
        return view

    def _histogram(self, spec: ViewSpec):
        lo, hi = self.store.shared.extent(spec.x)
        hist = histogram(self._window, dimension=spec.x, num_bins=spec.bins, bin_range=(lo, hi))
        linked = self.links(hist).opts(hv.opts.Histogram(
            color=SIGNAL_COLOR if not spec.threshold else "#6d597a", line_color=None,
            tools=["xbox_select", "hover"], active_tools=["xbox_select"], default_tools=["reset", "save"],
            responsive=True, xlabel=spec.xlabel, ylabel=spec.ylabel, logy=spec.logy, show_grid=True,
            toolbar="above", height=spec.height,
            **({"ylim": (LOG_FLOOR, None), "hooks": [_log_floor]} if spec.logy else {})),
            hv.opts.Overlay(responsive=True, height=spec.height, hooks=[tidy_toolbar]))
        if spec.threshold:
            line = hv.DynamicMap(lambda threshold: hv.VLine(threshold),
                                 streams=[hv.streams.Params(self.store, ["threshold"])]).opts(
                color=OUTLIER_COLOR, line_width=2, line_dash="dashed")
            return (linked * line).opts(hv.opts.Overlay(responsive=True, height=spec.height, hooks=[tidy_toolbar]))
        return linked

    def _scatter(self, spec: ViewSpec):
        points = self._window.apply(lambda d: hv.Points(d, [spec.x, spec.y], [spec.color]))
        lo, hi = self.store.shared.extent(spec.color)
        clim = (lo, float(np.quantile(self.store.shared.columns[spec.color], 0.995)))
        raster = dynspread(rasterize(points, aggregator=ds.mean(spec.color)), threshold=0.7, max_px=4)
        return self.links(raster).opts(hv.opts.Image(
            cmap=SCORE_CMAP, clim=clim, colorbar=True, clabel="mean score", tools=["box_select", "hover"],
            active_tools=["box_select"], default_tools=["reset", "save", "wheel_zoom", "pan"], responsive=True,
            xlabel=spec.xlabel, ylabel=spec.ylabel, show_grid=True, toolbar="above", bgcolor="#fbfcfd",
            height=spec.height), hv.opts.Overlay(responsive=True, height=spec.height, hooks=[tidy_toolbar]))

    # ------------------------------------------------------------------ brush sync
    def _from_links(self, event) -> None:
        ranges = ranges_from_expr(event.new)
        if ranges is None:
            return
        ranges = {c: r for c, r in ranges.items() if c in BRUSH_COLUMNS}
        if ranges != self.store.brush:
            self._syncing = True
            try:
                self.store.update(brush=ranges)
            finally:
                self._syncing = False

    def _to_links(self, event) -> None:
        if self._syncing:
            return
        expr = expr_from_ranges(self.store.brush)
        if repr(expr) == repr(self.links.selection_expr):
            return
        if expr is None:  # forget each chart's own brush too, or the cross filter would bring it back
            self.links._cross_filter_stream.reset()
        self.links.selection_expr = expr



def warm_up(shared, board_class=HoloViewsBoard, **board_kwargs) -> float:
    """Draw a throwaway dashboard once and brush it, so that Datashader's and Numba's compilation
    happens at server start (in the pipeline's thread), not during the first user's first brush.
    Returns the seconds it took."""
    import time

    from bokeh.document import Document
    from panel.io.state import set_curdoc

    from dashboard.views import layout

    started = time.perf_counter()
    doc = Document()
    with set_curdoc(doc):
        pn.extension("tabulator")
        store = DataStore(shared)
        board = board_class(store, **board_kwargs)
        body, _ = layout(store, board)
        root = body.get_root(doc)
        doc.add_root(root)
        lo, hi = shared.extent("length_s")
        store.update(brush={"length_s": (lo, lo + (hi - lo) / 2)})
        store.update(brush={"z1": shared.extent("z1"), "z2": shared.extent("z2")}, threshold=store.threshold * 1.01)
        store.update(time_range=(0.0, shared.duration_s / 2), split="test", focus=0)
        store.update(brush={}, time_range=None, split="all")
        body._cleanup(root)
    return time.perf_counter() - started
