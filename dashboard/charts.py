"""The linked charts, drawn straight into Bokeh from the run's bin indexes (the default board).

A brush travels as one small model property: the chart's box-select tool reports its geometry to
a :class:`Brush` in the browser, Bokeh syncs that one property to the server, and the session's
:class:`~dashboard.data_store.DataStore` turns it into a new selection. Each chart then draws what
the *other* charts' brushes select (crossfilter semantics; the unselected beats faint behind it)
from a mask and a ``bincount`` over its precomputed bin index, and replaces one column of its data
source with a small float32 array. The latent plane is an image (density of the beats coloured by
score), so it costs the same for 10k or 1M beats. Every change of one interaction happens inside
one held document: the browser receives it as one message.

The recording view (:class:`SignalChart`) shows a Datashader raster of the visible window
(:mod:`dashboard.signal_raster`), redrawn when the window changes, and the raw samples as a line
once zoomed in to single samples.

See Also
--------
dashboard.spec : what each chart shows.
dashboard.data_store : selections and the shared run.
dashboard.cuxfilter_board : the same linked charts drawn by cuxfilter (GPU, on request).
"""
from __future__ import annotations

import time
import weakref

import numpy as np
import panel as pn
from bokeh.core.properties import Float, Int, List, Nullable
from bokeh.model import DataModel
from bokeh.models import (BoxAnnotation, BoxSelectTool, BoxZoomTool, ColorBar, ColumnDataSource, CustomJS, Div,
                          FixedTicker, Grid, HoverTool, Image, ImageRGBA, LinearColorMapper, MultiLine, PanTool, Quad,
                          Range1d, ResetTool, SaveTool, Scatter, Span, VStrip, WheelZoomTool)
from bokeh.plotting import figure as bokeh_figure

from dashboard.bins import BinIndex, grid_index, histogram_index
from dashboard.data_store import DataStore, Selection, in_session, one_patch
from dashboard.shading import opacity, opacity_mapper
from dashboard.signal_raster import SignalRaster
from dashboard.spec import (CLASS_COLORS, EPISODE_COLORS, FAMILY_COLORS, OUTLIER_COLOR, SCORE_CMAP, SELECTED_COLOR, SIGNAL_COLOR,
                            UNSELECTED_COLOR, ViewSpec, hms_tick_formatter)
from pipeline import backend

LOG_FLOOR = 0.5             # where bars of a log-count histogram start
PLANE_GRID = (120, 160)     # latent plane and Poincaré plot images: rows (y) × columns (x)
TACHOGRAM_GRID = (80, 480)  # RR tachogram image: rows (RR) × columns (time)
MARKER_COLUMNS = 600        # markers of the recording view and tachogram: one per 1/600 of the window at most
MAX_OUTLIER_MARKERS = 1000  # outlier markers drawn at most (highest scores first)
FOCUS_SECONDS = 4.0
ARRIVAL_TIMEOUT_MS = 1000  # a zoom or pan's next picture waits at most this long for the browser to take the last
WINDOW_SETTLE_MS = 250      # the beat views follow the recording's window once it stood still this long
RASTER_HEIGHT = 240         # pixels of the recording's raster (the plot's inner height, roughly)
DEFAULT_WIDTH = 1400        # raster width until the browser reports the plot's real width

# What a brush changes is drawn at Bokeh's "overlay" level. BokehJS paints a plot on two canvases,
# one for the overlay level and one for everything else (background, grid, axes, the other
# glyphs), and repaints only the canvas whose renderers changed: a brush then leaves the axes and
# the layers behind untouched. On two cores, in Chromium, a brush's repaints took 18 ms of the
# page's main thread instead of 45 (medians of 24 brushes). Overlay glyphs are clipped to the
# frame like the others (assets/bokeh_speedups.js).
CHANGES_WITH_BRUSH = "overlay"


class Brush(DataModel):
    """A chart's brush as the browser reports it: ``[x0, x1]`` or ``[x0, x1, y0, y1]`` in data
    units, or None once cleared. One property, so one change reaches the server per gesture."""

    bounds = Nullable(List(Float))


# The browser side of a brush: the final geometry of a box selection, or None on a double-click or
# a reset. Nothing else runs in the browser.
_BRUSH_JS = """
if (cb_obj.event_name === 'selectiongeometry') {
    if (!cb_obj.final) { return; }
    const g = cb_obj.geometry;
    brush.bounds = two_d ? [g.x0, g.x1, g.y0, g.y1] : [g.x0, g.x1];
} else {
    brush.bounds = null;
}
"""


def figure(spec: ViewSpec, tools: list, **kwargs):
    """A plain Bokeh figure with the dashboard's look: no logo, light grid, the given tools only."""
    kwargs.setdefault("height", spec.height)
    kwargs.setdefault("title", None)
    kwargs.setdefault("toolbar_location", "above")
    kwargs.setdefault("x_axis_label", spec.xlabel or None)
    kwargs.setdefault("y_axis_label", spec.ylabel or None)
    kwargs.setdefault("sizing_mode", "stretch_width")
    kwargs.setdefault("name", f"ecg-{spec.name}")   # how tests and benchmarks find a view's figure
    p = bokeh_figure(tools=tools, **kwargs)
    p.toolbar.logo = None
    p.outline_line_color = None
    p.grid.grid_line_alpha = 0.35
    p.axis.axis_label_text_font_style = "normal"
    p.axis.axis_label_text_font_size = "12px"
    p.min_border_left = 50
    return p


def drop_grid(p) -> None:
    """No grid lines on ``p``: its grids removed rather than hidden, and with them the axes they
    refer to, which a figure without axes builds only for its grids (models sent for nothing)."""
    p.center = [r for r in p.center if not isinstance(r, Grid)]


def hidden_box(vertical: bool = False, **style) -> BoxAnnotation:
    """A hidden box to be moved to data coordinates later. Its sides start as numbers, not Bokeh's
    default frame ``Node`` models: moving a side off a model makes Bokeh re-walk every model of
    the session's document (40–90 ms on the 2-core CPU, a session's first brush of each chart).
    ``vertical``: its top and bottom are data too (a plane's box); else it spans the frame's height."""
    sides = dict(left=0.0, right=0.0, **(dict(bottom=0.0, top=0.0) if vertical else {}))
    return BoxAnnotation(visible=False, **sides, **style)


def add(p, source: ColumnDataSource, glyph, level: str = "glyph"):
    """Draw ``glyph`` from ``source`` on ``p``: one renderer without the selection and muted copies
    of the glyph that Bokeh's plotting API adds (models every session would build and send). (A
    view of the data cannot be shared between renderers: the browser keeps its indices in it.)"""
    return p.add_glyph(source, glyph, level=level)


IMAGE = dict(image="image", x="x", y="y", dw="dw", dh="dh")


def _same_objects(a: tuple, b: tuple) -> bool:
    """Whether two tuples hold the very same objects (arrays compare by identity, not value)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _rgba(rgb_hex: str) -> np.uint32:
    """'#rrggbb' → the RGB part of a little-endian RGBA uint32 pixel (alpha 0)."""
    r, g, b = (int(rgb_hex[i:i + 2], 16) for i in (1, 3, 5))
    return np.uint32(r | g << 8 | b << 16)


def _palette_rgba(colors: list[str], n: int = 256) -> np.ndarray:
    """``n`` RGB pixels interpolated along ``colors`` (alpha 0), for colouring images."""
    stops = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in colors], dtype=float)
    at = np.linspace(0, len(colors) - 1, n)
    rgb = np.stack([np.interp(at, np.arange(len(colors)), stops[:, k]) for k in range(3)], axis=1).round()
    rgb = rgb.astype(np.uint32)
    return rgb[:, 0] | rgb[:, 1] << 8 | rgb[:, 2] << 16


SCORE_PALETTE = _palette_rgba(SCORE_CMAP)


# --------------------------------------------------------------------------- linked charts
class LinkedChart(pn.viewable.Viewer):
    """What the brushable charts share: a :class:`Brush`, its box on the chart, and a redraw of the
    chart's counts on every new selection."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__()
        self.store, self.spec = store, spec
        self.rendered = 0
        self.brush = Brush()
        self.box = hidden_box(len(spec.brush) == 2, fill_color=SELECTED_COLOR, fill_alpha=0.10,
                              line_color=SELECTED_COLOR, line_alpha=0.8, line_dash="dashed", level=CHANGES_WITH_BRUSH)
        self._base = None
        self._drawn_inputs: tuple = ()
        self.figure = self._figure()
        self.figure.add_layout(self.box)
        self._listen()
        self.draw(store.selection)
        store.param.watch(lambda event: self.draw(event.new), "selection")

    def _listen(self) -> None:
        two_d = len(self.spec.brush) == 2
        code = CustomJS(args={"brush": self.brush, "two_d": two_d}, code=_BRUSH_JS)
        for event in ("selectiongeometry", "doubletap", "reset"):
            self.figure.js_on_event(event, code)
        self.brush.on_change("bounds", self._brushed)

    def _brushed(self, attr, old, new) -> None:
        """The browser's brush → the session's brush ranges (unless it already says so)."""
        brush = {c: r for c, r in self.store.brush.items() if c not in self.spec.brush}
        if new is not None:
            for k, column in enumerate(self.spec.brush):
                lo, hi = new[2 * k], new[2 * k + 1]
                brush[column] = (min(lo, hi), max(lo, hi))
        if brush != self.store.brush:
            self.store.update(brush=brush)

    def _show_box(self) -> None:
        brush = self.store.brush
        mine = [brush.get(c) for c in self.spec.brush]
        if not any(mine):
            self.box.visible = False
            return
        x = mine[0]
        self.box.update(left=x[0] if x else None, right=x[1] if x else None, visible=True)
        if len(mine) == 2:
            y = mine[1]
            self.box.update(bottom=y[0] if y else None, top=y[1] if y else None)

    def draw(self, sel: Selection) -> None:
        if sel.base is not self._base:      # the window or split moved (or the bins): both layers
            self._base = sel.base           # (the selected layer too: the base is one of its inputs)
            self.draw_background(sel)
        inputs = self._selected_inputs(sel)
        # When only this chart's own brush moved, what it shows (the beats the *other* brushes
        # select) is as drawn: its counts are not recomputed or sent again (its box still moves).
        if not _same_objects(inputs, self._drawn_inputs):
            self.draw_selected(sel, sel.others(self.spec.brush))
            self._drawn_inputs = inputs
        self._show_box()
        self.rendered = sel.version

    def _selected_inputs(self, sel: Selection) -> tuple:
        """The masks this chart's selected counts come from: the base and the other charts' brushes
        (a brush's mask is the same object while its bounds stay, ``DataStore._column_mask``)."""
        others = sorted(c for c in sel.brush_masks if c not in self.spec.brush)
        return (sel.base, *(sel.brush_masks[c] for c in others))

    def __panel__(self):
        return pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")


class HistogramChart(LinkedChart):
    """Beats per bin of one column: the beats in the window faint, those the other brushes select on top."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        shared = store.shared
        lo, hi = shared.extent(spec.x)
        self.bins: BinIndex = shared.derived(
            f"bins/{spec.name}", lambda: histogram_index(shared.columns[spec.x], lo, hi, spec.bins))
        edges = self.bins.edges[0].astype(np.float32)
        zeros = np.zeros(spec.bins, dtype=np.float32)
        self.source = ColumnDataSource({"left": edges[:-1], "right": edges[1:], "all": zeros, "selected": zeros})
        self.threshold = None
        super().__init__(store, spec)
        if spec.threshold:
            store.param.watch(lambda event: setattr(self.threshold, "location", event.new), "threshold")

    def _figure(self):
        spec, pad = self.spec, 0.01 * (self.source.data["right"][-1] - self.source.data["left"][0])
        select = BoxSelectTool(dimensions="width", renderers=[])   # reports geometry; selects no glyphs
        hover = HoverTool(tooltips=[("range", "@left{0.000} – @right{0.000}"), ("selected", "@selected{0,0}"),
                                    ("in window", "@all{0,0}")], mode="vline")
        p = figure(spec, [select, hover, ResetTool(), SaveTool()],
                   x_range=Range1d(self.source.data["left"][0] - pad, self.source.data["right"][-1] + pad),
                   y_axis_type="log" if spec.logy else "linear")
        p.toolbar.active_drag = select
        bottom = LOG_FLOOR if spec.logy else 0
        # Both bars on the overlay: they share a source, and a change of it repaints both.
        add(p, self.source, Quad(left="left", right="right", top="all", bottom=bottom, fill_color=UNSELECTED_COLOR,
                                 fill_alpha=0.6, line_color=None), level=CHANGES_WITH_BRUSH)
        bars = add(p, self.source, Quad(left="left", right="right", top="selected", bottom=bottom, line_color=None,
                                        fill_color="#6d597a" if spec.threshold else SIGNAL_COLOR),
                   level=CHANGES_WITH_BRUSH)
        hover.renderers = [bars]
        if spec.threshold:   # over the bars, as before they moved to the overlay
            self.threshold = Span(location=self.store.threshold, dimension="height", line_color=OUTLIER_COLOR,
                                  line_width=2, line_dash="dashed", level=CHANGES_WITH_BRUSH)
            p.add_layout(self.threshold)
        return p

    def draw_background(self, sel: Selection) -> None:
        self.source.data["all"] = self._heights(self.bins.counts(sel.base))

    def draw_selected(self, sel: Selection, mask) -> None:
        self.source.data["selected"] = self._heights(self.bins.counts(mask))

    def _heights(self, counts: np.ndarray) -> np.ndarray:
        heights = counts.astype(np.float32)
        if self.spec.logy:   # empty bars must not fall below the log axis' floor
            heights[heights < LOG_FLOOR] = np.nan
        return heights


class PlaneChart(LinkedChart):
    """Beats on a plane (the VAE's latent space, the Poincaré plot) as two images: the beats in the
    window in grey, and those the other brushes select coloured by their mean outlier-score
    percentile (or by reference class), both with opacity rising with density. Zooming or panning
    re-bins the beats for the new view."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        shared = store.shared
        self.home = shared.derived(f"home/{spec.name}", lambda: (_robust_extent(shared.columns[spec.x]),
                                                                 _robust_extent(shared.columns[spec.y])))
        self.bins: BinIndex = shared.derived(f"bins/{spec.name}", lambda: grid_index(
            shared.columns[spec.x], shared.columns[spec.y], *self.home, PLANE_GRID))
        self.percentile = shared.derived("score-percentile", lambda: _percentile_rank(shared.columns["score"]))
        geometry = _image_geometry(*self.home)
        self.background = ColumnDataSource(dict(image=[np.zeros(PLANE_GRID, dtype=np.uint8)], **geometry))
        self.foreground = ColumnDataSource(dict(image=[np.zeros(PLANE_GRID, dtype=np.uint32)], **geometry))
        super().__init__(store, spec)
        self.view_watch = RangeWatch([self.figure.x_range, self.figure.y_range], self.foreground)
        self.view_watch.add(self._rebin)
        store.param.watch(self._recolour, ["colour_by", "labels_version"])

    def _figure(self):
        spec = self.spec
        select = BoxSelectTool(renderers=[])
        p = figure(spec, [select, WheelZoomTool(), PanTool(), ResetTool(), SaveTool()],
                   x_range=Range1d(*self.home[0]), y_range=Range1d(*self.home[1]))
        p.toolbar.active_drag = select
        add(p, self.background, Image(**IMAGE, color_mapper=opacity_mapper(UNSELECTED_COLOR)))
        add(p, self.foreground, ImageRGBA(**IMAGE), level=CHANGES_WITH_BRUSH)
        mapper = LinearColorMapper(palette=SCORE_CMAP, low=50, high=100)
        p.add_layout(ColorBar(color_mapper=mapper, width=8, title="score percentile", title_text_font_size="10px",
                              major_label_text_font_size="10px", padding=2), "right")
        return p

    def _rebin(self) -> None:
        """The view moved: bin the beats over what is visible now (the run's index for the home view)."""
        view = ((self.figure.x_range.start, self.figure.x_range.end), (self.figure.y_range.start, self.figure.y_range.end))
        if view == self.bins_view:
            return
        shared = self.store.shared
        if view == self.home:
            self.bins = shared.derived(f"bins/{self.spec.name}", lambda: None)
        else:
            self.bins = grid_index(shared.columns[self.spec.x], shared.columns[self.spec.y], *view, PLANE_GRID)
        geometry = _image_geometry(*view)
        self.background.data.update(geometry)
        self.foreground.data.update(geometry, picture=self.view_watch.next_picture())
        self._base = None
        self.draw(self.store.selection)

    @property
    def bins_view(self) -> tuple:
        edges = self.bins.edges
        return (float(edges[0][0]), float(edges[0][-1])), (float(edges[1][0]), float(edges[1][-1]))

    def _recolour(self, event) -> None:
        if event.name == "labels_version" and self.store.colour_by != "review":
            return
        sel = self.store.selection
        self.draw_selected(sel, sel.others(self.spec.brush))

    def draw_background(self, sel: Selection) -> None:
        counts = self.bins.counts(sel.base)
        self.background.data["image"] = [opacity(counts, 60, 200)]

    def draw_selected(self, sel: Selection, mask) -> None:
        counts = self.bins.counts(mask)
        mode = self.store.colour_by
        if mode == "score":
            mean = self.bins.counts(mask, weights=self.percentile) / np.maximum(counts, 1)
            # The palette spans percentiles 50–100: the upper half is where outliers stand out.
            at = np.clip((mean - 0.5) * 2, 0, 1)
            rgb = SCORE_PALETTE[(at * (len(SCORE_PALETTE) - 1)).astype(int)]
        else:
            rgb = self._category_colours(mask, mode)
        self.foreground.data["image"] = [_density_image(counts, rgb, alpha=(150, 255))]

    def _category_colours(self, mask, mode: str) -> np.ndarray:
        """Per pixel, the colour of a category of its beats: for labels the first present in
        CLASS_COLORS' order of precedence (a few V beats among many N show), for families the most
        common one."""
        codes, colours = beat_categories(self.store.shared, mode)
        per = np.stack([self.bins.counts(mask & (codes == k)) for k in range(len(colours))])
        if mode == "family":
            chosen = per.argmax(axis=0)
        else:
            chosen = (per > 0).argmax(axis=0)
        return np.array([_rgba(c) for c in colours], dtype=np.uint32)[chosen]


def beat_categories(shared, mode: str) -> tuple:
    """(code per beat as a device array, colour per code) for colouring by ``mode``: 'reference'
    or 'review' (classes of CLASS_COLORS) or 'family' (the ten largest, then the rest)."""
    if mode == "family":
        codes = np.minimum(shared.beats["family"].to_numpy(), len(FAMILY_COLORS) - 1).astype(np.int8)
        return shared.xp.asarray(codes), FAMILY_COLORS
    if mode == "reference":
        labels = shared.beats["label"].to_numpy() if shared.has_labels else np.full(shared.n_beats, "", object)
        codes = shared.derived("classes/reference", lambda: shared.xp.asarray(label_classes(labels)))
    elif mode == "review":
        codes = shared.xp.asarray(label_classes(shared.review_of_beats()))
    else:
        raise ValueError(f"colour mode must be one of score, reference, review, family; got {mode!r}")
    return codes, list(CLASS_COLORS.values())


def label_classes(labels: np.ndarray) -> np.ndarray:
    """Code into CLASS_COLORS of each label: its AAMI class for a MIT-BIH symbol, 'artefact', any
    other text as 'other', '' as no label."""
    from pipeline.metrics import aami_class

    names = list(CLASS_COLORS)
    classes = aami_class(labels)
    labels = np.asarray(labels, dtype=object)
    classes = np.where(classes != "", classes, np.where(labels == "artefact", "artefact",
                                                         np.where(labels == "", "", "other")))
    return np.array([names.index(c) for c in classes], dtype=np.int8)


def _robust_extent(values, share: float = 0.995, margin: float = 0.25) -> tuple[float, float]:
    """The range holding the central ``share`` of the finite ``values``, widened by ``margin`` of its
    width on each side: a few far-off beats do not squeeze everybody else into a corner (zoom out to
    see them)."""
    xp = backend.xp_of(values)
    values = values[xp.isfinite(values)]
    lo, hi = (float(v) for v in xp.quantile(values, xp.asarray([(1 - share) / 2, (1 + share) / 2])))
    pad = margin * ((hi - lo) or 1.0)
    return max(lo - pad, float(values.min())), min(hi + pad, float(values.max()))


def _image_geometry(x_range, y_range) -> dict:
    return dict(x=[x_range[0]], y=[y_range[0]], dw=[x_range[1] - x_range[0]], dh=[y_range[1] - y_range[0]])


class Arrival(DataModel):
    """The number of the last picture of a view that the browser has applied: the browser sets it
    (``_ARRIVAL_JS``) from the ``picture`` column that the server numbers its pictures by."""

    picture = Int(0)


_ARRIVAL_JS = "arrival.picture = source.data.picture[0];"


class RangeWatch:
    """Runs callbacks once the ranges of a view moved: for a zoom or pan in the browser (which
    reports start and end as separate changes, ~60 times a second while a hand drags) in one patch,
    on the next tick; for a zoom made on the server (:meth:`fire`) at once, inside the caller's patch.

    One picture at a time is on its way to the browser. A window that moves while the browser has
    not yet applied the picture drawn for the last one waits until it has (``picture_source``'s
    data, numbered by :meth:`next_picture`; at most ``ARRIVAL_TIMEOUT_MS``) and is then drawn as it
    stands by then. A picture of the recording is ~330 KB for the browser to take in and paint: drawn
    at the pace of the hand, they queued up and a pan's last one came up to a second after the
    mouse-up on a 2-core CPU; drawn at a fixed interval, a quick browser waited for the clock.

    What follows a window only once it stays (:meth:`when_settled`) waits until the ranges have not
    moved for ``WINDOW_SETTLE_MS`` and no window waits to be drawn."""

    def __init__(self, ranges: list, picture_source: ColumnDataSource):
        self.callbacks: list = []
        self._pending = False
        self._doc = None
        self._sent = 0          # the number of the last picture drawn
        self._awaited = 0       # the last picture drawn for the browser's zooms and pans (0: none awaited)
        self._timeout = None
        self._last_moved = -np.inf      # time.monotonic() of the last change of the ranges
        self._settled = None            # (callback, its timer) waiting for the ranges to stay
        picture_source.data["picture"] = [0]
        self.arrival = Arrival()
        picture_source.js_on_change("data", CustomJS(args=dict(arrival=self.arrival, source=picture_source),
                                                     code=_ARRIVAL_JS))
        self.arrival.on_change("picture", self._arrived)
        for r in ranges:
            r.on_change("start", self._moved)
            r.on_change("end", self._moved)

    def add(self, callback) -> None:
        self.callbacks.append(callback)

    def next_picture(self) -> list[int]:
        """The ``picture`` column of the next picture of the view (every new picture carries one)."""
        self._sent += 1
        return [self._sent]

    @property
    def in_flight(self) -> bool:
        return self._awaited > self.arrival.picture     # (pictures arrive in order)

    def fire(self) -> None:
        self._pending = False
        for callback in self.callbacks:
            callback()

    def when_settled(self, callback) -> None:
        """``callback()``, in one patch, once the ranges have not moved for ``WINDOW_SETTLE_MS`` and
        no window waits to be drawn (at once without a live session); it replaces the callback of
        an earlier call that has not run yet. (Filtering every beat view to a new window sends them
        all anew and repaints every chart: done during a pan, on a 2-core CPU, it held up the
        pictures of the recording that the hand was waiting for.)"""
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:
            callback()
            return
        if self._settled is not None:
            doc.remove_timeout_callback(self._settled[1])
        self._doc = doc
        self._settled = (callback, doc.add_timeout_callback(self._check_settled, WINDOW_SETTLE_MS))

    def _check_settled(self) -> None:
        callback, _ = self._settled
        still_ms = (time.monotonic() - self._last_moved) * 1000
        if self._pending or still_ms < WINDOW_SETTLE_MS:
            wait_ms = max(int(WINDOW_SETTLE_MS - still_ms), 0) + 20
            self._settled = (callback, self._doc.add_timeout_callback(self._check_settled, wait_ms))
            return
        self._settled = None
        with one_patch():
            callback()

    def _moved(self, attr, old, new) -> None:
        self._last_moved = time.monotonic()
        if self._pending:
            return
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:   # no event loop (tests): at once
            self.fire()
            return
        self._pending, self._doc = True, doc
        if self.in_flight:     # (should its report be lost, the window is drawn after the timeout)
            self._timeout = doc.add_timeout_callback(self._gave_up, ARRIVAL_TIMEOUT_MS)
        else:
            doc.add_next_tick_callback(self._tick)

    def _arrived(self, attr, old, new) -> None:
        if self._pending and not self.in_flight and self._timeout is not None:
            self._doc.remove_timeout_callback(self._timeout)
            self._timeout = None
            self._doc.add_next_tick_callback(self._tick)

    def _gave_up(self) -> None:
        self._awaited = 0
        self._tick()

    def _tick(self) -> None:
        self._timeout = None
        drawn = self._sent
        with one_patch():
            self.fire()
        if self._sent > drawn:
            self._awaited = self._sent


def _percentile_rank(scores):
    """Each beat's score as its rank in the recording, 0..1 (device array of the scores' type)."""
    xp = backend.xp_of(scores)
    order = xp.argsort(scores)
    rank = xp.empty(scores.shape[0], dtype=xp.float64)
    rank[order] = xp.arange(scores.shape[0]) / max(scores.shape[0] - 1, 1)
    return rank


def _density_image(counts: np.ndarray, rgb: np.ndarray, alpha: tuple[int, int]) -> np.ndarray:
    """RGBA pixels (uint32): ``rgb`` where there are beats, at the :func:`opacity` of their count
    from ``alpha[0]`` to ``alpha[1]``; transparent elsewhere. (For images of many colours: one
    colour's density goes to the page as opacity bytes.)"""
    a = opacity(counts, *alpha).astype(np.uint32)
    return np.where(a > 0, (a << 24) | rgb, np.uint32(0))


# --------------------------------------------------------------------------- the recording
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
        add_episode_track(p, self.store.shared)     # last in the list, drawn first (its level)
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
            if (live := chart()) is not None and live._standin:
                live.render(*live._shown)

        schedule = in_session(doc)
        self.raster.when_compiled(lambda: schedule(redraw))

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
        self.y_range = shared.derived("home/rhythm", lambda: _robust_extent(shared.columns[spec.y], margin=0.1))
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
        add_episode_track(p, shared)                # last in the list, drawn first (its level)
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
        self.image.data = dict(image=[opacity(counts, 70, 230)], **_image_geometry(window, self.y_range))
        self.draw_markers(self.store.selection)

    def draw_markers(self, sel: Selection) -> None:
        self.selected.data, self.outliers.data = markers(self.store.shared, sel, self._window, self.spec.y)
        self.rendered = sel.version

    def __panel__(self):
        return pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")


def add_episode_track(p, shared) -> None:
    """The run's episodes (flutter, noise, pauses) as bands of colour behind everything the plot
    draws, over its whole height; hovering one names it."""
    episodes = shared.run.episodes
    if episodes is None or not len(episodes):
        return
    source = ColumnDataSource(dict(x0=episodes["start_s"].to_numpy(), x1=episodes["end_s"].to_numpy(),
                                   kind=episodes["kind"].astype(str).to_numpy(),
                                   color=[EPISODE_COLORS[k] for k in episodes["kind"]]), name="ecg-episodes")
    track = add(p, source, VStrip(x0="x0", x1="x1", fill_color="color", fill_alpha=0.18, line_color=None),
                level="underlay")
    p.add_tools(HoverTool(renderers=[track], tooltips=[("episode", "@kind"), ("from", "@x0{0.0} s"),
                                                       ("to", "@x1{0.0} s")]))


def beat_span_s(beat, shared) -> float:
    """Seconds a beat's row covers on the recording: its interval to the next beat, or for the
    last beat (which has none) its embedding window."""
    length = float(beat["length_s"])
    return length if np.isfinite(length) else shared.embeddings.shape[1] / shared.fs


# --------------------------------------------------------------------------- the board
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


def version_marker(store: DataStore) -> Div:
    """A hidden model holding the version of the selection the page shows: it changes in the same
    patch as every view, so tests and benchmarks in the browser know when a change has landed."""
    marker = Div(text=str(store.selection.version), name="ecg-version", visible=False)
    store.param.watch(lambda event: setattr(marker, "text", str(event.new.version)), "selection")
    return marker


class BokehBoard:
    """One session's linked charts, drawn straight into Bokeh (see the module's docstring)."""

    name = "bokeh"

    def __init__(self, store: DataStore):
        self.store = store
        self.charts: dict = {}
        self.version = version_marker(store)

    def chart(self, spec: ViewSpec):
        if spec.kind == "signal":
            view = SignalChart(self.store, spec, signal_raster(self.store.shared), other_leads(self.store.shared))
        elif spec.kind == "histogram":
            view = HistogramChart(self.store, spec)
        elif spec.kind == "plane":
            view = PlaneChart(self.store, spec)
        elif spec.kind == "tachogram":
            signal = self.charts["signal"]
            view = TachogramChart(self.store, spec, signal.window_watch, signal.figure.x_range)
        else:
            raise ValueError(f"the bokeh board draws kinds signal, tachogram, histogram, plane; got {spec.kind!r}")
        self.charts[spec.name] = view
        return view

    def extras(self) -> list:
        """Models the page must carry besides the charts (the hidden version marker)."""
        return [pn.pane.Bokeh(self.version, visible=False)]
