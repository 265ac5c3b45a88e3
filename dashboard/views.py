"""The views, described once: what each shows, from which columns, as which kind of chart, and
which of them are linked. Renderers (``holoviews_board``, ``cuxfilter_board``) draw the linked
charts (kinds ``signal``, ``histogram``, ``scatter``); the views below, which only read a
:class:`~dashboard.data_store.DataStore`, are the same for both.

See Also
--------
dashboard.data_store.DataStore : what the views read.
dashboard.holoviews_board, dashboard.cuxfilter_board : the two renderers of the linked charts.
dashboard.app.App : puts :func:`layout` on the page.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.models import CustomJSTickFormatter

from dashboard.data_store import TABLE_LIMIT, DataStore, Selection

if "bokeh" not in hv.Store.renderers:  # the views are drawn with Bokeh, also outside `panel serve`
    hv.extension("bokeh", logo=False)

ASSETS = Path(__file__).resolve().parent.parent / "assets"
STYLESHEET = (ASSETS / "components.css").read_text()

# --------------------------------------------------------------------------- colours
SIGNAL_COLOR = "#1d3557"
SELECTED_COLOR = "#2a9d8f"
OUTLIER_COLOR = "#e63946"
CENTRE_COLOR = "#e76f51"
MEAN_COLOR = "#457b9d"
MUTED = "#9aa5b1"
SCORE_CMAP = ["#fde0c5", "#facba6", "#f8b58b", "#f59e72", "#f2855d", "#ef6a4c", "#eb4a40", "#c52a3f", "#8f1d3f"]

# Seconds → H:MM:SS on time axes (a plain JS function, nothing to compile).
HMS_CODE = """
    const s = Math.abs(tick), sign = tick < 0 ? '-' : '';
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    const span = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 60;
    const secs = span < 1 ? sec.toFixed(2).padStart(5, '0') : Math.floor(sec).toString().padStart(2, '0');
    return sign + h + ':' + m.toString().padStart(2, '0') + ':' + secs;
"""


def hms_formatter() -> CustomJSTickFormatter:
    """A new formatter for each plot (a Bokeh model belongs to one document, i.e. one session)."""
    return CustomJSTickFormatter(code=HMS_CODE)


def tidy_toolbar(plot, element) -> None:
    """HoloViews hook: no Bokeh logo, no lasso (brushes are ranges and boxes)."""
    from bokeh.models import LassoSelectTool

    toolbar = plot.state.toolbar
    toolbar.logo = None
    tools = [t for t in toolbar.tools if not isinstance(t, LassoSelectTool)]
    if len(tools) != len(toolbar.tools):
        toolbar.tools = tools


# --------------------------------------------------------------------------- the description
@dataclass(frozen=True)
class ViewSpec:
    """One view: its kind, the beat columns it reads, and what a brush on it selects."""

    name: str
    title: str
    kind: str                      # signal | histogram | scatter | table | beat | decoded | centre
    x: str | None = None
    y: str | None = None
    color: str | None = None       # column that colours a scatter
    bins: int = 60
    brush: tuple[str, ...] = ()    # columns a brush on this view selects (linked views)
    xlabel: str = ""
    ylabel: str = ""
    logy: bool = False
    threshold: bool = False        # draws the outlier threshold
    controls: tuple[str, ...] = ()  # DataStore parameters with a widget on this view's card
    height: int = 280
    help: str = ""


VIEWS = {v.name: v for v in (
    ViewSpec("signal", "The whole recording", "signal", x="t", y="amplitude", xlabel="time (h:mm:ss)",
             ylabel="amplitude", height=300,
             help="Scroll to zoom (down to single samples), drag to pan. Green dots: selected beats; "
                  "red triangles: outliers above the threshold. Zooming filters the beat views to the window."),
    ViewSpec("lengths", "Heartbeat length", "histogram", x="length_s", bins=60, brush=("length_s",),
             xlabel="beat length (s)", ylabel="beats", help="Drag across bars to select a length range."),
    ViewSpec("latent", "VAE latent space", "scatter", x="z1", y="z2", color="score", brush=("z1", "z2"),
             xlabel="z1", ylabel="z2", controls=("split",),
             help="Colour: mean outlier score. Drag a box to select beats. Show all beats, the 75% the VAE "
                  "trained on, or the 25% it never saw."),
    ViewSpec("scores", "Outlier score", "histogram", x="score", bins=80, brush=("score",),
             xlabel="outlier score (negative ELBO)", ylabel="beats", logy=True, threshold=True,
             controls=("threshold",),
             help="Drag across bars to select a score range; the red line is the outlier threshold."),
    ViewSpec("outliers", "Ranked outliers in the selection", "table", height=390,
             help="Selected beats above the threshold, highest score first. Click a row to inspect it."),
    ViewSpec("beat", "Beat and its reconstruction", "beat", height=330),
    ViewSpec("decoded", "Decoder outputs over the latent plane", "decoded", height=300,
             help="decode(z) on a 3 × 3 grid spanning the central 90% of the beats' latent positions."),
    ViewSpec("centre", "Selection centre", "centre", height=300,
             help="decode(mean z of the selected beats) beside the mean of the selected beats themselves."),
)}
LINKED = tuple(name for name, v in VIEWS.items() if v.brush)   # brushes here filter every beat view
LAYOUT = (("signal",), ("lengths", "latent", "scores"), ("outliers", "beat"), ("decoded", "centre"))
RENDERED_BY_BOARD = ("signal", "histogram", "scatter")


# --------------------------------------------------------------------------- helpers
def hms(seconds: float, decimals: int = 1) -> str:
    sign = "-" if seconds < 0 else ""
    s = round(abs(float(seconds)), decimals)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    width = 3 + decimals if decimals else 2
    return f"{sign}{int(h)}:{int(m):02d}:{sec:0{width}.{decimals}f}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    h, m = divmod(int(round(seconds / 60)), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def beat_axis(store: DataStore) -> np.ndarray:
    """Time (ms) of each column of an embedded beat, 0 at the fiducial."""
    width = store.shared.embeddings.shape[1]
    pre = int(round(store.shared.report["config"]["signal"]["pre_fiducial"] * width))
    return (np.arange(width) - pre) / store.shared.fs * 1000.0


def html(text: str = "", **params) -> pn.pane.HTML:
    """An HTML pane that knows the dashboard's component styles."""
    params.setdefault("sizing_mode", "stretch_width")
    return pn.pane.HTML(text, stylesheets=[STYLESHEET], **params)


BEAT_T = hv.Dimension("beat_ms", label="ms from the fiducial")
BEAT_Y = hv.Dimension("beat_amplitude", label="amplitude (scaled)")


def _fit(*rows) -> tuple[float, float]:
    """y-limits that fit the finite values of ``rows``, with a margin."""
    values = np.concatenate([np.asarray(r, dtype=float).ravel() for r in rows])
    values = values[np.isfinite(values)]
    if not values.size:
        return (-1.0, 1.0)
    lo, hi = float(values.min()), float(values.max())
    pad = 0.08 * ((hi - lo) or 1.0)
    return (lo - pad, hi + pad)


def _curve_opts(**extra):
    return dict(responsive=True, show_grid=True, toolbar="above", default_tools=["pan", "wheel_zoom", "reset", "save"],
                hooks=[tidy_toolbar], **extra)


# --------------------------------------------------------------------------- views every renderer shares
class View(pn.viewable.Viewer):
    """Base: a view reads ``data_store`` and only presents."""

    data_store = param.ClassSelector(class_=DataStore)
    spec = param.ClassSelector(class_=ViewSpec)
    rendered = param.Integer(default=0, doc="Selection.version last drawn (for tests and benchmarks)")


class OutlierTable(View):
    """Ranked outliers of the selection (Tabulator); a click focuses the beat."""

    def __init__(self, **params):
        super().__init__(**params)
        shared = self.data_store.shared
        self._labels = shared.has_labels
        titles = {"beat_id": "beat", "time": "time", "length_s": "length (s)", "score": "score",
                  "split": "split", "label": "reference"}
        from bokeh.models.widgets.tables import NumberFormatter

        self.table = pn.widgets.Tabulator(
            self._frame(self.data_store.selection), pagination="remote", page_size=10, selectable=1,
            show_index=False, disabled=True, sizing_mode="stretch_width", height=self.spec.height,
            titles=titles, layout="fit_data_stretch", text_align={"time": "right"},
            formatters={"score": NumberFormatter(format="0.00"), "length_s": NumberFormatter(format="0.000")},
            css_classes=["ecg-table"])
        self.table.on_click(self._clicked)
        self.caption = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._caption(self.data_store.selection)
        self.data_store.param.watch(self._update, "selection")

    def _frame(self, sel: Selection) -> pd.DataFrame:
        out = sel.outliers
        frame = pd.DataFrame({"beat_id": out["beat_id"].to_numpy(),
                              "time": [hms(t) for t in out["time_s"].to_numpy()],
                              "length_s": out["length_s"].to_numpy(),
                              "score": out["score"].to_numpy(),
                              "split": out["split"].astype(str).to_numpy()})
        if self._labels:
            frame["label"] = out["label"].to_numpy()
        return frame

    def _caption(self, sel: Selection) -> None:
        shown = f" (top {TABLE_LIMIT:,} listed)" if sel.n_outliers > TABLE_LIMIT else ""
        self.caption.object = (f"<b>{sel.n_outliers:,}</b> outliers above <b>{sel.threshold:.2f}</b> "
                               f"among <b>{sel.count:,}</b> selected beats{shown}")

    def _update(self, event) -> None:
        sel = event.new
        self.table.value = self._frame(sel)
        self._caption(sel)
        self.rendered = sel.version

    def _clicked(self, event) -> None:
        if event.row is None or event.row >= len(self.table.value):
            return
        self.data_store.update(focus=int(self.table.value["beat_id"].iloc[event.row]))

    def __panel__(self):
        return pn.Column(self.caption, self.table, sizing_mode="stretch_width")


class BeatDetail(View):
    """The focused beat (as the VAE saw it) and its reconstruction decode(mu)."""

    def __init__(self, **params):
        super().__init__(**params)
        self._t = beat_axis(self.data_store)
        self.plot = hv.DynamicMap(self._plot, streams=[self.data_store.param.focus])
        self.info = html(self._info(), css_classes=["ecg-caption"], margin=(0, 10))
        self.data_store.param.watch(lambda e: setattr(self.info, "object", self._info()), "focus")

    def _info(self) -> str:
        focused = self.data_store.focused()
        if focused is None:
            return "Click a row of the outlier table to see that beat here and zoom the recording to it."
        beat = focused[0]
        label = f" · reference <b>{beat['label'] or '–'}</b>" if "label" in beat else ""
        return (f"Beat <b>{int(beat['beat_id'])}</b> at <b>{hms(beat['time_s'])}</b> · length "
                f"{beat['length_s'] * 1000:.0f} ms · score <b>{beat['score']:.2f}</b> · {beat['split']}{label}")

    def _plot(self, focus=None):
        focused = self.data_store.focused()
        t = self._t
        if focused is None:
            beat = recon = np.full(t.shape, np.nan)
        else:
            _, beat, recon = focused
        return (hv.Curve((t, beat), BEAT_T, BEAT_Y, label="beat").opts(color=SIGNAL_COLOR, line_width=2,
                                                                        framewise=True)
                * hv.Curve((t, recon), BEAT_T, BEAT_Y, label="reconstruction decode(μ)").opts(
                    color=CENTRE_COLOR, line_width=2, line_dash="dashed", framewise=True)
                ).opts(**_curve_opts(legend_position="top_right", ylim=_fit(beat, recon), height=self.spec.height))

    def __panel__(self):
        return pn.Column(self.info, pn.pane.HoloViews(self.plot, sizing_mode="stretch_width", linked_axes=False),
                         sizing_mode="stretch_width")


class DecodedGrid(View):
    """The 3 × 3 decoder outputs of the run (static): each tile at its place in the latent plane."""

    def __panel__(self):
        shared = self.data_store.shared
        rows, zs = np.asarray(shared.run.decoded), np.asarray(shared.run.decoded_z)
        n = int(round(np.sqrt(len(rows))))
        t = beat_axis(self.data_store)
        span = t[-1] - t[0]
        lo, hi = float(np.nanmin(rows)), float(np.nanmax(rows))
        height = (hi - lo) or 1.0
        curves, labels = [], []
        for k, (row, z) in enumerate(zip(rows, zs)):
            r, c = divmod(k, n)
            x = t - t[0] + c * span * 1.12
            y = row - lo - r * height * 1.35
            curves.append(hv.Curve((x, y), "x", "y").opts(color=SIGNAL_COLOR, line_width=1.8))
            labels.append((x[0] + span * 0.02, y.max() if np.isfinite(y).any() else 0, f"z=({z[0]:.2f}, {z[1]:.2f})"))
        text = hv.Labels(labels, ["x", "y"], "text").opts(text_font_size="8pt", text_color=MUTED,
                                                           text_align="left", text_baseline="bottom")
        plot = hv.Overlay(curves + [text]).opts(
            responsive=True, height=self.spec.height, xaxis=None, yaxis=None, show_grid=False, toolbar=None,
            default_tools=[], title="z1 increases →, z2 increases ↑")
        return pn.pane.HoloViews(plot, sizing_mode="stretch_width", linked_axes=False)


class SelectionCentre(View):
    """decode(mean z of the selection) beside the mean of the selected embedded beats."""

    def __init__(self, **params):
        super().__init__(**params)
        self._t = beat_axis(self.data_store)
        # The plot follows its own stream, not `selection`: a change that keeps the selected beats
        # (e.g. the threshold) keeps the centre and mean arrays, and redrawing them would cost a
        # full HoloViews plot update for nothing.
        self._drawn = self.data_store.selection
        self._stream = hv.streams.Stream.define("Centre", selection=self._drawn)()
        self.plot = hv.DynamicMap(self._plot, streams=[self._stream])
        self.info = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._info(self.data_store.selection)
        self.data_store.param.watch(self._update, "selection")

    def _update(self, event) -> None:
        sel, drawn = event.new, self._drawn
        if sel.mean_beat is not drawn.mean_beat or sel.centre_decoded is not drawn.centre_decoded:
            self._drawn = sel
            self._stream.event(selection=sel)
        self._info(sel)

    def _info(self, sel: Selection) -> None:
        self.rendered = sel.version
        if sel.centre_z is None:
            self.info.object = "No beats selected."
        else:
            self.info.object = (f"<b>{sel.count:,}</b> selected beats · mean z = "
                                f"({sel.centre_z[0]:.3f}, {sel.centre_z[1]:.3f})")

    def _plot(self, selection: Selection | None = None):
        sel = selection or self.data_store.selection
        t = self._t
        nan = np.full(t.shape, np.nan)
        mean = sel.mean_beat if sel.mean_beat is not None else nan
        decoded = sel.centre_decoded if sel.centre_decoded is not None else nan
        self.rendered = sel.version
        return (hv.Curve((t, mean), BEAT_T, BEAT_Y, label="mean of selected beats").opts(
                    color=MEAN_COLOR, line_width=3, alpha=0.8, framewise=True)
                * hv.Curve((t, decoded), BEAT_T, BEAT_Y, label="decode(mean z)").opts(
                    color=CENTRE_COLOR, line_width=2, line_dash="dashed", framewise=True)
                ).opts(**_curve_opts(legend_position="top_right", ylim=_fit(mean, decoded), height=self.spec.height))

    def __panel__(self):
        return pn.Column(self.info, pn.pane.HoloViews(self.plot, sizing_mode="stretch_width", linked_axes=False),
                         sizing_mode="stretch_width")


SHARED_VIEWS = {"table": OutlierTable, "beat": BeatDetail, "decoded": DecodedGrid, "centre": SelectionCentre}


# --------------------------------------------------------------------------- text
def status_line(shared) -> str:
    """Recording length, beats kept, device, pipeline time per stage (HTML)."""
    r = shared.report
    inp, counts, device = r["input"], r["counts"], r["device"]
    gpu = f" ({device['gpu']})" if device.get("gpu") else ""
    stages = r.get("stages_s", {})
    total = sum(stages.values())
    parts = " · ".join(f"{k} {v:.1f} s" if v >= 0.1 else f"{k} {v * 1000:.0f} ms" for k, v in stages.items())
    cached = " (cached run)" if getattr(shared.run, "cached", False) else ""
    return (f"<b>Recording</b> {inp['n_samples']:,} samples · {duration(inp['duration_s'])} at {inp['fs']:g} Hz"
            f" &nbsp;|&nbsp; <b>Beats kept</b> {counts['beats']:,} ({counts['pruned']:,} pruned; "
            f"{counts['train']:,} training / {counts['test']:,} held out)"
            f" &nbsp;|&nbsp; <b>Device</b> {device['name']}{gpu}"
            f" &nbsp;|&nbsp; <b>Pipeline</b> {total:.1f} s{cached}: {parts}")


class SelectionSummary(View):
    """One line: how many beats this session selects, in which window."""

    def __init__(self, **params):
        super().__init__(**params)
        self.text = html(self._text(self.data_store.selection), css_classes=["ecg-summary"], margin=(5, 10))
        self.data_store.param.watch(self._update, ["selection"])

    def _text(self, sel: Selection) -> str:
        store = self.data_store
        window = ""
        if store.time_range is not None and store.follow_window:
            window = f"<br>window {hms(store.time_range[0], 0)} – {hms(store.time_range[1], 0)}"
        brush = "".join(f"<br>{c}: {lo:.3g} – {hi:.3g}" for c, (lo, hi) in store.brush.items())
        return (f"<div class='ecg-count'><b>{sel.count:,}</b> of {sel.total:,} beats selected</div>"
                f"<div><b>{sel.n_outliers:,}</b> outliers above {sel.threshold:.2f}</div>"
                f"<div class='ecg-muted'>{brush}{window}</div>")

    def _update(self, event) -> None:
        self.text.object = self._text(event.new)
        self.rendered = event.new.version

    def __panel__(self):
        return self.text


# --------------------------------------------------------------------------- the page
def card(spec: ViewSpec, body, controls: tuple = ()) -> pn.Column:
    """A titled box around one view; the CSS class ``ecg-view-<name>`` lets tests find it."""
    header = html(f"<div class='ecg-card-title'>{spec.title}</div>"
                  + (f"<div class='ecg-card-help'>{spec.help}</div>" if spec.help else ""), margin=(4, 10, 0, 10))
    return pn.Column(header, *controls, body, sizing_mode="stretch_width",
                     css_classes=["ecg-card", f"ecg-view-{spec.name}"], margin=(6, 6), stylesheets=[STYLESHEET])


def layout(store: DataStore, board) -> tuple[pn.Column, dict]:
    """The dashboard body: LAYOUT's rows of cards. ``board`` draws the linked kinds.

    Returns the body and ``{view name: view object}``.
    """
    views, rows = {}, []
    for names in LAYOUT:
        cells = []
        for name in names:
            spec = VIEWS[name]
            if spec.kind in RENDERED_BY_BOARD:
                view = board.chart(spec)
            else:
                view = SHARED_VIEWS[spec.kind](data_store=store, spec=spec)
            views[name] = view
            controls = [store.widget(c, sizing_mode="stretch_width", margin=(2, 10)) for c in spec.controls]
            cells.append(card(spec, view, controls))
        rows.append(pn.Row(*cells, sizing_mode="stretch_width") if len(cells) > 1 else cells[0])
    return pn.Column(*rows, sizing_mode="stretch_width", css_classes=["ecg-dashboard"]), views
