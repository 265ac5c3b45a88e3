"""The views that only read a :class:`~dashboard.data_store.DataStore` (the ranked outlier table,
the focused beat, the decoded grid, the selection centre, the summary). They are the same
whichever board draws the linked charts, and they are plain Bokeh models whose data sources get
small binary arrays on each change.

See Also
--------
dashboard.spec : what each view shows.
dashboard.charts, dashboard.cuxfilter_board : the boards that draw the linked charts.
dashboard.page : lays them out.
"""
from __future__ import annotations

import html as html_text

import numpy as np
import panel as pn
from bokeh.models import (ColumnDataSource, DataTable, HTMLTemplateFormatter, Legend, LegendItem, Line, MultiLine,
                          NumberFormatter, Range1d, TableColumn, Text)

from dashboard.charts import add, drop_grid, figure
from dashboard.data_store import TABLE_LIMIT, DataStore, Selection
from dashboard.spec import CENTRE_COLOR, MEAN_COLOR, MUTED, SIGNAL_COLOR, STYLESHEET, ViewSpec, duration, hms
from pipeline.quality import low_quality

# Why a beat ranks high, as table columns (when the run has them): its shape's rarity and its timing.
COMPONENT_COLUMNS = {"p_shape": ("shape rarity", "0.0000"), "rr_pre": ("RR before", "0.00"),
                     "rr_post": ("RR after", "0.00")}

# A table cell's seconds as H:MM:SS.s, formatted in the browser (the column travels as float64).
_HMS_CELL = ("<%= (function (s) { const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);"
             " return h + ':' + String(m).padStart(2, '0') + ':' + (s % 60).toFixed(1).padStart(4, '0'); })(value) %>")


def beat_axis(store: DataStore) -> np.ndarray:
    """Time (ms) of each column of an embedded beat, 0 at the fiducial."""
    width = store.shared.embeddings.shape[1]
    pre = int(round(store.shared.report["config"]["signal"]["pre_fiducial"] * width))
    return ((np.arange(width) - pre) / store.shared.fs * 1000.0).astype(np.float32)


def html(text: str = "", **params) -> pn.pane.HTML:
    """An HTML pane that knows the dashboard's component styles. ``text`` is markup: whatever in it
    did not come from the code goes through :func:`escape`."""
    params.setdefault("sizing_mode", "stretch_width")
    return pn.pane.HTML(text, stylesheets=[STYLESHEET], **params)


def escape(value) -> str:
    """``value`` as HTML that shows it literally. Every text from outside the code that a pane,
    caption or message shows goes through here: labels (a reviewer's free text is stored and shown
    to every session), file, record and lead names, header fields, reference labels, error texts,
    what a page sent. Markup around it is the code's own."""
    return html_text.escape(str(value), quote=True)


class View(pn.viewable.Viewer):
    """Base: a view reads ``store`` and only presents; ``rendered`` is the last selection drawn."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__()
        self.store, self.spec = store, spec
        self.rendered = 0


def _curves(store: DataStore, spec: ViewSpec, curves: dict) -> tuple[ColumnDataSource, object]:
    """A source of empty beat-shaped curves over the beat axis ``t`` and a figure of them:
    ``{column: (label, colour, dash, width)}``; the y axis is fitted by :func:`_fit_y` whenever
    the curves change."""
    t = beat_axis(store)
    nan = np.full(t.shape, np.nan, dtype=np.float32)
    source = ColumnDataSource({"t": t, **{column: nan for column in curves}})
    p = figure(spec, ["pan", "wheel_zoom", "reset", "save"], x_axis_label="ms from the fiducial",
               y_axis_label="amplitude (scaled)", x_range=Range1d(float(t[0]), float(t[-1])), y_range=Range1d(-1, 1))
    items = [LegendItem(label=label, renderers=[add(p, source, Line(x="t", y=column, line_color=colour,
                                                                    line_dash=dash, line_width=width))])
             for column, (label, colour, dash, width) in curves.items()]
    p.add_layout(Legend(items=items, location="top_right", label_text_font_size="11px", background_fill_alpha=0.7))
    return source, p


def _fit_y(p, *curves) -> None:
    """Fit ``p``'s y axis to the finite values of ``curves``, with a margin."""
    values = np.concatenate([np.asarray(c, dtype=float).ravel() for c in curves])
    values = values[np.isfinite(values)]
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        pad = 0.08 * ((hi - lo) or 1.0)
        p.y_range.update(start=lo - pad, end=hi + pad)


# --------------------------------------------------------------------------- the ranked outliers
class OutlierTable(View):
    """Ranked outliers of the selection (a Bokeh DataTable); a click on a row focuses the beat."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec)
        columns = [("beat_id", "beat", None, 55), ("time_s", "time", HTMLTemplateFormatter(template=_HMS_CELL), 75),
                   ("length_s", "length (s)", NumberFormatter(format="0.000"), 65),
                   ("score", "score", NumberFormatter(format="0.00"), 50)]
        columns += [(c, title, NumberFormatter(format=fmt), 70) for c, (title, fmt) in COMPONENT_COLUMNS.items()
                    if c in store.shared.beats]
        columns.append(("split", "split", None, 50))
        if store.shared.has_labels:
            columns.append(("label", "reference", None, 70))
        columns.append(("review", "yours", None, 70))
        self.source = ColumnDataSource(self._data(store.selection))
        # Fixed column widths (autosize_mode="none"): fitting the columns to the table's width on
        # every new selection measured each header through the page's layout, ~30 ms of a brush
        # that selects beats (Chromium's profiler, two cores).
        self.table = DataTable(
            source=self.source, height=spec.height - 40, sizing_mode="stretch_width", index_position=None,
            reorderable=False, autosize_mode="none", name="ecg-outliers",
            columns=[TableColumn(field=f, title=t, width=w, **({"formatter": fmt} if fmt else {}))
                     for f, t, fmt, w in columns])
        self.source.selected.on_change("indices", self._clicked)
        self.caption = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._draw(store.selection)
        store.param.watch(lambda event: self._draw(event.new), "selection")
        store.param.watch(lambda event: self._draw(store.selection), "labels_version")

    def _data(self, sel: Selection) -> dict:
        out, shared = sel.outliers, self.store.shared
        data = {"beat_id": out["beat_id"].to_numpy(dtype=np.int32), "time_s": out["time_s"].to_numpy(dtype=np.float64),
                "length_s": out["length_s"].to_numpy(dtype=np.float32), "score": out["score"].to_numpy(dtype=np.float32),
                "split": out["split"].astype(str).to_numpy()}
        data.update({c: out[c].to_numpy(dtype=np.float32) for c in COMPONENT_COLUMNS if c in out})
        if shared.has_labels:
            data["label"] = out["label"].to_numpy()
        data["review"] = shared.review_of_beats()[out["beat_id"].to_numpy()]
        return data

    def _draw(self, sel: Selection) -> None:
        if self.source.selected.indices:
            self.source.selected.indices = []
        self.source.data = self._data(sel)
        shown = f" (top {TABLE_LIMIT:,} listed)" if sel.n_outliers > TABLE_LIMIT else ""
        self.caption.object = (f"<b>{sel.n_outliers:,}</b> outliers above <b>{sel.threshold:.2f}</b> "
                               f"among <b>{sel.count:,}</b> selected beats{shown}")
        self.rendered = sel.version

    def _clicked(self, attr, old, new) -> None:
        if new:
            self.store.update(focus=int(self.source.data["beat_id"][new[0]]))

    def __panel__(self):
        return pn.Column(self.caption, pn.pane.Bokeh(self.table, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


# --------------------------------------------------------------------------- one beat
class BeatDetail(View):
    """The focused beat (as the VAE saw it) and its reconstruction decode(mu)."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec)
        self.source, self.figure = _curves(store, spec, {
            "beat": ("beat", SIGNAL_COLOR, "solid", 2),
            "recon": ("reconstruction decode(μ)", CENTRE_COLOR, "dashed", 2)})
        self.info = html(self._info(), css_classes=["ecg-caption"], margin=(0, 10))
        store.param.watch(self._draw, "focus")
        store.param.watch(lambda event: setattr(self.info, "object", self._info()), "labels_version")

    def _info(self) -> str:
        focused = self.store.focused()
        if focused is None:
            return "Click a row of the outlier table to see that beat here and zoom the recording to it."
        beat = focused[0]
        label = f" · reference <b>{escape(beat['label'] or '–')}</b>" if "label" in beat else ""
        from pipeline.score import explain   # here, not at the top: it brings PyTorch, which the first page does without

        review = self.store.shared.review_of_beats()[int(beat["beat_id"])]
        why = f"<br>Why: {escape(explain(beat))}" if all(c in beat for c in ("p_shape", "rr_pre", "rr_post")) else ""
        length = f"{beat['length_s'] * 1000:.0f} ms" if np.isfinite(beat["length_s"]) else "– (the last beat)"
        quality = (f" · <b>low quality</b> ({beat['quality']:.2f}: noise or artefact)"
                   if "quality" in beat and low_quality(beat["quality"]) else "")
        return (f"Beat <b>{int(beat['beat_id'])}</b> at <b>{hms(beat['time_s'])}</b> · length "
                f"{length}{quality} · score <b>{beat['score']:.2f}</b> · "
                f"{escape(beat['split'])}{label} · yours <b>{escape(review or '–')}</b>{why}")

    def _draw(self, event=None) -> None:
        focused = self.store.focused()
        if focused is not None:
            _, beat, recon = focused
            self.source.data.update(beat=beat.astype(np.float32), recon=recon.astype(np.float32))
            _fit_y(self.figure, beat, recon)
        self.info.object = self._info()

    def __panel__(self):
        return pn.Column(self.info, pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


# --------------------------------------------------------------------------- the decoder
def decoded_tiles(store: DataStore) -> dict:
    """The 3 × 3 decoder outputs of the run laid out as tiles at their places in the latent plane:
    ``xs``/``ys`` (one curve each) and ``labels`` (x, y, text); once per run."""
    def build():
        run = store.shared.run
        rows, zs = np.asarray(run.decoded), np.asarray(run.decoded_z)
        n = int(round(np.sqrt(len(rows))))
        t = beat_axis(store)
        span = float(t[-1] - t[0])
        lo, hi = float(np.nanmin(rows)), float(np.nanmax(rows))
        height = (hi - lo) or 1.0
        xs, ys, lx, ly, text = [], [], [], [], []
        for k, (row, z) in enumerate(zip(rows, zs)):
            r, c = divmod(k, n)
            x = (t - t[0] + c * span * 1.12).astype(np.float32)
            y = (row - lo - r * height * 1.35).astype(np.float32)
            xs.append(x)
            ys.append(y)
            lx.append(float(x[0] + span * 0.02))
            ly.append(float(np.nanmax(y)) if np.isfinite(y).any() else 0.0)
            text.append(f"z=({z[0]:.2f}, {z[1]:.2f})")
        return {"xs": xs, "ys": ys, "labels": {"x": lx, "y": ly, "text": text}}
    return store.shared.derived("decoded-tiles", build)


class DecodedGrid(View):
    """The 3 × 3 decoder outputs of the run (static): each tile at its place in the latent plane."""

    def __panel__(self):
        tiles = decoded_tiles(self.store)
        p = figure(self.spec, [], title="z1 increases →, z2 increases ↑", toolbar_location=None,
                   x_axis_location=None, y_axis_location=None)
        drop_grid(p)
        add(p, ColumnDataSource({"xs": tiles["xs"], "ys": tiles["ys"]}),
            MultiLine(xs="xs", ys="ys", line_color=SIGNAL_COLOR, line_width=1.8))
        add(p, ColumnDataSource(tiles["labels"]), Text(x="x", y="y", text="text", text_font_size="8pt",
                                                       text_color=MUTED, text_baseline="bottom"))
        return pn.pane.Bokeh(p, sizing_mode="stretch_width")


class SelectionCentre(View):
    """decode(mean z of the selection) beside the mean of the selected embedded beats."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec)
        self.source, self.figure = _curves(store, spec, {
            "mean": ("mean of selected beats", MEAN_COLOR, "solid", 3),
            "decoded": ("decode(mean z)", CENTRE_COLOR, "dashed", 2)})
        self.info = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._drawn = None
        self._draw(store.selection)
        store.param.watch(lambda event: self._draw(event.new), "selection")

    def _draw(self, sel: Selection) -> None:
        # A change that keeps the selected beats (e.g. the threshold) keeps the arrays: nothing to send.
        centre = sel.centre
        if centre is not self._drawn:
            nan = np.full(self.source.data["t"].shape, np.nan, dtype=np.float32)
            mean = nan if centre.mean_beat is None else centre.mean_beat.astype(np.float32)
            decoded = nan if centre.decoded is None else centre.decoded.astype(np.float32)
            self.source.data.update(mean=mean, decoded=decoded)
            _fit_y(self.figure, mean, decoded)
            self._drawn = centre
        if centre.z is None:
            self.info.object = "No beats selected."
        else:
            self.info.object = (f"<b>{sel.count:,}</b> selected beats · mean z = "
                                f"({centre.z[0]:.3f}, {centre.z[1]:.3f})")
        self.rendered = sel.version

    def __panel__(self):
        return pn.Column(self.info, pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


# --------------------------------------------------------------------------- text
def status_line(shared) -> str:
    """Recording length, beats kept, device, pipeline time per stage (HTML)."""
    r = shared.report
    inp, counts, device = r["input"], r["counts"], r["device"]
    gpu = f" ({escape(device['gpu'])})" if device.get("gpu") else ""
    stages = r.get("stages_s", {})
    total = sum(stages.values())
    parts = " · ".join(f"{escape(k)} {v:.1f} s" if v >= 0.1 else f"{escape(k)} {v * 1000:.0f} ms"
                       for k, v in stages.items())
    cached = " (cached run)" if getattr(shared.run, "cached", False) else ""
    return (f"<b>Recording</b> {inp['n_samples']:,} samples · {duration(inp['duration_s'])} at {inp['fs']:g} Hz"
            f" &nbsp;|&nbsp; <b>Beats</b> {counts['beats']:,} ("
            f"{counts['train']:,} training / {counts['test']:,} held out)"
            f" &nbsp;|&nbsp; <b>Device</b> {escape(device['name'])}{gpu}"
            f" &nbsp;|&nbsp; <b>Pipeline</b> {total:.1f} s{cached}: {parts}")


class SelectionSummary(View):
    """One line: how many beats this session selects, in which window."""

    def __init__(self, store: DataStore, spec: ViewSpec | None = None):
        super().__init__(store, spec or ViewSpec("summary", "Selection", "summary"))
        self.text = html(self._text(store.selection), css_classes=["ecg-summary"], margin=(5, 10))
        store.param.watch(self._update, "selection")

    def _text(self, sel: Selection) -> str:
        store = self.store
        window = ""
        if store.time_range is not None and store.follow_window:
            window = f"<br>window {hms(store.time_range[0], 0)} – {hms(store.time_range[1], 0)}"
        brush = "".join(f"<br>{escape(c)}: {lo:.3g} – {hi:.3g}" for c, (lo, hi) in store.brush.items())
        return (f"<div class='ecg-count'><b>{sel.count:,}</b> of {sel.total:,} beats selected</div>"
                f"<div><b>{sel.n_outliers:,}</b> outliers above {sel.threshold:.2f}</div>"
                f"<div class='ecg-muted'>{brush}{window}</div>")

    def _update(self, event) -> None:
        self.text.object = self._text(event.new)
        self.rendered = event.new.version

    def __panel__(self):
        return self.text
