"""The linked charts, drawn straight into Bokeh from the run's bin indexes (the default board).

A brush travels as one small model property: the chart's box-select tool reports its geometry to
a :class:`Brush` in the browser, Bokeh syncs that one property to the server, and the session's
:class:`~dashboard.data_store.DataStore` turns it into a new selection. Each chart then draws what
the *other* charts' brushes select (crossfilter semantics; the unselected beats faint behind it)
from a mask and a ``bincount`` over its precomputed bin index, and replaces one column of its data
source with a small float32 array. The latent plane is an image (density of the beats coloured by
score), so it costs the same for 10k or 1M beats. Every change of one interaction happens inside
one held document: the browser receives it as one message. A plane zoomed or panned is re-binned
for the new view, one picture at a time (:class:`~dashboard.range_watch.RangeWatch`).

The board (:class:`BokehBoard`) adds the recording view and the tachogram
(:mod:`dashboard.recording_view`); the figure helpers it shares with the cuxfilter board live in
:mod:`dashboard.figures`.

See Also
--------
dashboard.spec : what each chart shows.
dashboard.data_store : selections.
dashboard.recording_view : the recording and its tachogram, on both boards.
dashboard.cuxfilter_board : the same linked charts drawn by cuxfilter (GPU, on request).
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.core.properties import Float, List, Nullable
from bokeh.model import DataModel
from bokeh.models import (BoxSelectTool, ColorBar, ColumnDataSource, CustomJS, HoverTool, Image, ImageRGBA,
                          LinearColorMapper, PanTool, Quad, Range1d, ResetTool, SaveTool, Span, WheelZoomTool)

from dashboard.beat_colours import SCORE_PALETTE, beat_categories, density_image, percentile_rank, rgba
from dashboard.bins import BinIndex, grid_index, histogram_index
from dashboard.data_store import DataStore, Selection
from dashboard.figures import (CHANGES_WITH_BRUSH, IMAGE, LOG_FLOOR, add, figure, hidden_box, image_geometry,
                               robust_extent, version_marker)
from dashboard.range_watch import RangeWatch
from dashboard.recording_view import SignalChart, TachogramChart, other_leads, signal_raster
from dashboard.shading import opacity, opacity_mapper
from dashboard.spec import OUTLIER_COLOR, SCORE_CMAP, SELECTED_COLOR, SIGNAL_COLOR, UNSELECTED_COLOR, ViewSpec

# Names this module held before the split, still importable from here.
from dashboard.beat_colours import label_classes  # noqa: F401
from dashboard.figures import drop_grid  # noqa: F401
from dashboard.recording_view import DEFAULT_WIDTH, MARKER_COLUMNS, MAX_OUTLIER_MARKERS, RASTER_HEIGHT  # noqa: F401
from dashboard.recording_view import add_episode_track, beat_span_s  # noqa: F401

PLANE_GRID = (120, 160)     # latent plane and Poincaré plot images: rows (y) × columns (x)


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


def _same_objects(a: tuple, b: tuple) -> bool:
    """Whether two tuples hold the very same objects (arrays compare by identity, not value)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


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
        self.home = shared.derived(f"home/{spec.name}", lambda: (robust_extent(shared.columns[spec.x]),
                                                                 robust_extent(shared.columns[spec.y])))
        self.bins: BinIndex = shared.derived(f"bins/{spec.name}", lambda: grid_index(
            shared.columns[spec.x], shared.columns[spec.y], *self.home, PLANE_GRID))
        self.percentile = shared.derived("score-percentile", lambda: percentile_rank(shared.columns["score"]))
        geometry = image_geometry(*self.home)
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
        geometry = image_geometry(*view)
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
        self.foreground.data["image"] = [density_image(counts, rgb, alpha=(150, 255))]

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
        return np.array([rgba(c) for c in colours], dtype=np.uint32)[chosen]


# --------------------------------------------------------------------------- the board
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
