"""Figure helpers every board and view shares: a plain Bokeh figure with the dashboard's look, a
renderer without Bokeh's extra copies, hidden boxes, image geometry, robust ranges, and the hidden
version marker that tests and benchmarks in the browser wait on.

See Also
--------
dashboard.charts : the linked charts of the default board.
dashboard.recording_view : the recording and its tachogram.
dashboard.cuxfilter_board : the same linked charts drawn by cuxfilter (GPU, on request).
"""
from __future__ import annotations

from bokeh.models import BoxAnnotation, ColumnDataSource, Div, Grid
from bokeh.plotting import figure as bokeh_figure

from dashboard.data_store import DataStore
from dashboard.spec import ViewSpec
from pipeline import backend

LOG_FLOOR = 0.5             # where bars of a log-count histogram start

# What a brush changes is drawn at Bokeh's "overlay" level. BokehJS paints a plot on two canvases,
# one for the overlay level and one for everything else (background, grid, axes, the other
# glyphs), and repaints only the canvas whose renderers changed: a brush then leaves the axes and
# the layers behind untouched, which is most of a brush's painting on a slow machine. Overlay
# glyphs are clipped to the frame like the others (dashboard/assets/bokeh_speedups.js).
CHANGES_WITH_BRUSH = "overlay"


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


def robust_extent(values, share: float = 0.995, margin: float = 0.25) -> tuple[float, float]:
    """The range holding the central ``share`` of the finite ``values``, widened by ``margin`` of its
    width on each side: a few far-off beats do not squeeze everybody else into a corner (zoom out to
    see them)."""
    xp = backend.xp_of(values)
    values = values[xp.isfinite(values)]
    lo, hi = (float(v) for v in xp.quantile(values, xp.asarray([(1 - share) / 2, (1 + share) / 2])))
    pad = margin * ((hi - lo) or 1.0)
    return max(lo - pad, float(values.min())), min(hi + pad, float(values.max()))


def image_geometry(x_range, y_range) -> dict:
    return dict(x=[x_range[0]], y=[y_range[0]], dw=[x_range[1] - x_range[0]], dh=[y_range[1] - y_range[0]])


def version_marker(store: DataStore) -> Div:
    """A hidden model holding the version of the selection the page shows: it changes in the same
    patch as every view, so tests and benchmarks in the browser know when a change has landed."""
    marker = Div(text=str(store.selection.version), name="ecg-version", visible=False)
    store.param.watch(lambda event: setattr(marker, "text", str(event.new.version)), "selection")
    return marker
