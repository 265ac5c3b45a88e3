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
from pathlib import Path

import numpy as np
import panel as pn
from bokeh.models import (ColumnDataSource, DataTable, HTMLTemplateFormatter, Legend, LegendItem, Line, MultiLine,
                          NumberFormatter, Range1d, StringFormatter, TableColumn, Text)

from dashboard.figures import add, drop_grid, figure
from dashboard.data_store import TABLE_LIMIT, DataStore, Selection
from dashboard.spec import (CENTRE_COLOR, EPISODE_NAMES, HMS_CELL, MEAN_COLOR, MUTED, ONE_IN_CELL, SIGNAL_COLOR,
                            STYLESHEET, TABLE_COLUMNS, ViewSpec, brush_text, hms, no_label, noun, one_in, plural)
from pipeline.quality import low_quality
from pipeline.tables import doubtful_pauses

# Columns of the outlier table that only some runs have (the score's components).
OPTIONAL_COLUMNS = ("rr_pre", "rr_post", "p_shape")
# Two-line column titles (units on the second), inside the table's own shadow root.
TABLE_CSS = (".slick-header-column.ui-state-default { height: 30px; line-height: 15px; white-space: normal; }"
             " .slick-column-name { cursor: help; }")


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
    """Ranked outliers of the selection (a Bokeh DataTable); a click on a row focuses the beat.
    Titles, units and formats: :data:`dashboard.spec.TABLE_COLUMNS`."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec)
        shared = store.shared
        shown = [f for f in TABLE_COLUMNS if (f not in OPTIONAL_COLUMNS or f in shared.beats)
                 and (f != "label" or shared.has_labels)]
        self.source = ColumnDataSource(self._data(store.selection))
        # Fixed column widths (autosize_mode="none"): fitting the columns to the table's width on
        # every new selection measured each header through the page's layout, ~30 ms of a brush
        # that selects beats (Chromium's profiler, two cores).
        self.table = DataTable(
            source=self.source, height=spec.height - 40, sizing_mode="stretch_width", index_position=None,
            reorderable=False, autosize_mode="none", name="ecg-outliers", stylesheets=[TABLE_CSS],
            columns=[table_column(f, *TABLE_COLUMNS[f]) for f in shown])
        self.source.selected.on_change("indices", self._clicked)
        self.caption = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._draw(store.selection)
        store.param.watch(lambda event: self._draw(event.new), "selection")
        store.param.watch(lambda event: self._draw(store.selection), "labels_version")

    def _data(self, sel: Selection) -> dict:
        out, shared = sel.outliers, self.store.shared
        data = {"beat_id": out["beat_id"].to_numpy(dtype=np.int32), "time_s": out["time_s"].to_numpy(dtype=np.float64),
                "score": out["score"].to_numpy(dtype=np.float32),
                "rr_before_ms": (out["rr_prev_s"].to_numpy(dtype=np.float32) * 1000).astype(np.float32),
                "length_ms": (out["length_s"].to_numpy(dtype=np.float32) * 1000).astype(np.float32)}
        data.update({c: out[c].to_numpy(dtype=np.float32) for c in OPTIONAL_COLUMNS if c in out})
        if shared.has_labels:
            data["label"] = np.array([no_label(v) for v in out["label"].to_numpy()], dtype=object)
        data["review"] = shared.review_of_beats()[out["beat_id"].to_numpy()]
        return data

    def _draw(self, sel: Selection) -> None:
        if self.source.selected.indices:
            self.source.selected.indices = []
        self.source.data = self._data(sel)
        shown = f" (top {TABLE_LIMIT:,} listed)" if sel.n_outliers > TABLE_LIMIT else ""
        self.caption.object = (f"<b>{plural(sel.n_outliers, 'outlier')}</b> (score ≥ <b>{sel.threshold:.2f}</b>) "
                               f"among <b>{sel.count:,}</b> selected {noun(sel.count, 'beat')}{shown}")
        self.rendered = sel.version

    def _clicked(self, attr, old, new) -> None:
        if new:
            self.store.update(focus=int(self.source.data["beat_id"][new[0]]))

    def __panel__(self):
        return pn.Column(self.caption, pn.pane.Bokeh(self.table, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


def table_column(field: str, title: str, meaning: str, fmt: str, width: int) -> TableColumn:
    """A table column from its description in :data:`dashboard.spec.TABLE_COLUMNS`: the title
    (markup of the code's own) carries its meaning as a tooltip."""
    formatter = {"hms": lambda: HTMLTemplateFormatter(template=HMS_CELL),
                 "one_in": lambda: HTMLTemplateFormatter(template=ONE_IN_CELL),
                 "text": StringFormatter}.get(fmt, lambda: NumberFormatter(format=fmt, nan_format="–"))()
    return TableColumn(field=field, title=f"<span title='{escape(meaning)}'>{escape(title)}</span>", width=width,
                       formatter=formatter)


# --------------------------------------------------------------------------- one beat
class _Curves(View):
    """A caption over a figure of beat-shaped curves (:func:`_curves`)."""

    def __init__(self, store: DataStore, spec: ViewSpec, curves: dict, caption: str = ""):
        super().__init__(store, spec)
        self.source, self.figure = _curves(store, spec, curves)
        self.info = html(caption, css_classes=["ecg-caption"], margin=(0, 10))

    def __panel__(self):
        return pn.Column(self.info, pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")


class BeatDetail(_Curves):
    """The focused beat (as the VAE saw it) and its reconstruction decode(mu)."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec, {"beat": ("beat", SIGNAL_COLOR, "solid", 2),
                                       "recon": ("VAE reconstruction, decode(μ)", CENTRE_COLOR, "dashed", 2)})
        self.info.object = self._info()
        store.param.watch(self._draw, "focus")
        store.param.watch(lambda event: setattr(self.info, "object", self._info()), "labels_version")

    def _info(self) -> str:
        focused = self.store.focused()
        if focused is None:
            return "Click a row of the outlier table to see that beat here and zoom the recording to it."
        beat = focused[0]
        label = f" · reference label <b>{escape(no_label(beat['label']))}</b>" if "label" in beat else ""
        review = self.store.shared.review_of_beats()[int(beat["beat_id"])]
        why = f"<br>Why: {escape(why_it_scores(beat))}" if why_it_scores(beat) else ""
        length = f"{beat['length_s'] * 1000:.0f} ms" if np.isfinite(beat["length_s"]) else "– (the last beat)"
        rr = beat.get("rr_prev_s", np.nan)
        before = f" · RR before {rr * 1000:.0f} ms ({60 / rr:.0f} bpm)" if np.isfinite(rr) and rr > 0 else ""
        rarity = f" · shape rarity {one_in(float(beat['p_shape']))}" if "p_shape" in beat else ""
        quality = (f" · <b>low quality</b> ({beat['quality']:.2f}: noise or artefact)"
                   if "quality" in beat and low_quality(beat["quality"]) else "")
        split = {"train": "the VAE trained on it", "test": "held out from training"}.get(str(beat["split"]),
                                                                                          escape(beat["split"]))
        return (f"Beat <b>{int(beat['beat_id'])}</b> at <b>{hms(beat['time_s'])}</b>{before} · beat length "
                f"{length}{quality} · score <b>{beat['score']:.2f}</b>{rarity} · "
                f"{split}{label} · your label <b>{escape(no_label(review))}</b>{why}")

    def _draw(self, event=None) -> None:
        focused = self.store.focused()
        if focused is not None:
            _, beat, recon = focused
            self.source.data.update(beat=beat.astype(np.float32), recon=recon.astype(np.float32))
            _fit_y(self.figure, beat, recon)
        self.info.object = self._info()


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
        p = figure(self.spec, [], title="shape coordinate z1 increases →, z2 increases ↑", toolbar_location=None,
                   x_axis_location=None, y_axis_location=None)
        drop_grid(p)
        add(p, ColumnDataSource({"xs": tiles["xs"], "ys": tiles["ys"]}),
            MultiLine(xs="xs", ys="ys", line_color=SIGNAL_COLOR, line_width=1.8))
        add(p, ColumnDataSource(tiles["labels"]), Text(x="x", y="y", text="text", text_font_size="8pt",
                                                       text_color=MUTED, text_baseline="bottom"))
        return pn.pane.Bokeh(p, sizing_mode="stretch_width")


class SelectionCentre(_Curves):
    """decode(mean z of the selection) beside the mean of the selected embedded beats."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec, {"mean": ("mean of selected beats", MEAN_COLOR, "solid", 3),
                                       "decoded": ("decode(mean z)", CENTRE_COLOR, "dashed", 2)})
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
            self.info.object = (f"<b>{sel.count:,}</b> selected {noun(sel.count, 'beat')} · their mean "
                                f"latent position z = ({centre.z[0]:.3f}, {centre.z[1]:.3f})")
        self.rendered = sel.version


# --------------------------------------------------------------------------- text
def recording_name(shared) -> str:
    """The recording's file name (outside text: escape it where it is shown)."""
    return Path(shared.report["input"]["path"]).name or "recording"


def heart_rate(shared) -> tuple[float, float, float] | None:
    """5th, 50th and 95th percentile of the instantaneous heart rate (bpm: 60 / the RR interval
    before each beat) over the beats of good quality; None without intervals. Once per run."""
    def build():
        beats = shared.beats
        rr = beats["rr_prev_s"].to_numpy(dtype=np.float64)
        keep = np.isfinite(rr) & (rr > 0)
        if "quality" in beats:
            keep &= ~low_quality(beats["quality"].to_numpy())
        if not keep.any():
            return None
        return tuple(float(v) for v in np.percentile(60.0 / rr[keep], [5, 50, 95]))
    return shared.derived("heart-rate", build)


def start_time(report: dict) -> str | None:
    """When the recording started, if its file said (as text; outside text)."""
    inp = report["input"]
    value = inp.get("start_time") or inp.get("start")
    return str(value) if value else None


def why_it_scores(beat) -> str:
    """A beat's score in words: which of the reference's parts made it (shape against the
    recording's normal beats, timing, unlike anyone's normal beat); '' for a run without them."""
    if all(c in beat for c in ("p_ref_shape", "p_ref_rhythm")):
        from pipeline.calibrate import explain_calibrated

        return explain_calibrated(beat)
    if all(c in beat for c in ("p_shape", "rr_pre", "rr_post")):   # a run scored before the reference
        from pipeline.score import explain   # here, not at the top: it brings PyTorch, which the first page does without

        return explain(beat)
    return ""


def reference_details(report: dict) -> str:
    """The reference that scored a run, named (file and what it was trained on; outside text), and
    for a run the dashboard rescored, the reference it was scored against before (HTML)."""
    ref = report.get("reference")
    if not ref:
        return ""
    name = (ref.get("file") or {}).get("name") or "an unnamed reference"
    rescored = report.get("rescored")
    if rescored:
        earlier = ((rescored.get("from_reference") or {}).get("file") or {}).get("name") or "another reference"
        kept = ("; kept in the server's memory only (the runs folder could not be written)"
                if rescored.get("saved") is False else "")
        rescored = f" · rescored from the run scored against <b>{escape(earlier)}</b>{kept}"
    return (f"<div><b>Scores</b> calibrated against <b>{escape(name)}</b>, the "
            f"{escape(ref.get('description', ''))}{rescored or ''}</div>")


def run_details(shared) -> str:
    """Samples, rate, the lead and why it was analysed, training split, device and the pipeline's
    time per stage (HTML): what the header's "details" hold."""
    r = shared.report
    inp, counts, device = r["input"], r["counts"], r["device"]
    gpu = f" ({escape(device['gpu'])})" if device.get("gpu") else ""
    stages = r.get("stages_s", {})
    total = sum(stages.values())
    parts = " · ".join(f"{escape(k)} {v:.1f} s" if v >= 0.1 else f"{escape(k)} {v * 1000:.0f} ms"
                       for k, v in stages.items())
    cached = " (cached run)" if getattr(shared.run, "cached", False) else ""
    return (f"<div><b>Signal</b> {inp['n_samples']:,} samples at {inp['fs']:g} Hz · "
            f"{escape(inp.get('channel', ''))}</div>"
            + (f"<div><b>Lead</b> {escape(inp['channel'])}: {escape(inp['lead_reason'])}</div>"
               if inp.get("lead_reason") else "") +
            f"<div><b>Beats</b> {counts['beats']:,} kept ({counts['train']:,} the VAE trained on, "
            f"{counts['test']:,} held out)</div>"
            f"<div><b>Device</b> {escape(device['name'])}{gpu}</div>"
            + reference_details(r) +
            f"<div><b>Pipeline</b> {total:.1f} s{cached}: {parts}</div>")


class RecordingHeader(View):
    """What a Holter report starts with: the recording's name, duration (hh:mm:ss), start time if
    known, heart-rate range, and its beats, outliers (at this session's threshold), pauses and
    episodes; the pipeline's details behind a toggle."""

    def __init__(self, store: DataStore, spec: ViewSpec | None = None, tools: tuple = ()):
        """``tools``: what goes under the details (the choice of reference that rescores the run)."""
        super().__init__(store, spec or ViewSpec("header", "Recording", "header"))
        self.text = html(self._text(), css_classes=["ecg-recording"], margin=(6, 12, 0, 12))
        self.details = pn.Card(html(run_details(store.shared), css_classes=["ecg-muted"], margin=(0, 6)), *tools,
                               title="details", collapsed=True, sizing_mode="stretch_width", margin=(2, 12, 4, 12),
                               css_classes=["ecg-details"], header_background="transparent",
                               styles={"border": "none", "box-shadow": "none"})
        store.param.watch(lambda event: setattr(self.text, "object", self._text()), ["threshold", "rank_low_quality"])

    def outliers(self) -> int:
        """The outliers of the whole recording at this session's threshold (low-quality beats as it ranks them)."""
        shared, store = self.store.shared, self.store
        score, clean = shared.derived("host-score-clean", lambda: (shared.host("score"), shared.host("clean")))
        above = score >= store.threshold
        return int((above if store.rank_low_quality else above & clean).sum())

    def _text(self) -> str:
        shared = self.store.shared
        report, episodes = shared.report, shared.run.episodes
        kinds = episodes["kind"].value_counts() if episodes is not None and len(episodes) else {}
        pauses = int(kinds.get("pause", 0))
        doubtful = int(doubtful_pauses(episodes).sum()) if pauses else 0
        others = {k: int(kinds.get(k, 0)) for k in ("flutter", "noise", "lost") if kinds.get(k, 0)}
        n_episodes = sum(others.values())
        which = (" (" + ", ".join(f"{n} {EPISODE_NAMES[k]}" for k, n in others.items()) + ")") if others else ""
        pause_s = report.get("config", {}).get("signal", {}).get("pause_s")
        pause_rule = f" ≥ {pause_s:g} s" if pause_s else ""
        rate = heart_rate(shared)
        rate = (f"<span title='5th to 95th percentile of the instantaneous heart rate (60 / RR) over the "
                f"beats of good quality; median {rate[1]:.0f} bpm'><b>{rate[0]:.0f}–{rate[2]:.0f}</b> bpm</span>"
                if rate else "–")
        start, outliers = start_time(report), self.outliers()
        facts = [("Duration", f"<b>{hms(shared.duration_s, 0)}</b>"),
                 *([("Start", f"<b>{escape(start)}</b>")] if start else []),
                 ("Heart rate", rate),
                 ("", f"<b>{shared.n_beats:,}</b> {noun(shared.n_beats, 'beat')}"),
                 ("", f"<b>{outliers:,}</b> {noun(outliers, 'outlier')} "
                      f"<span class='ecg-muted'>(score ≥ {self.store.threshold:.2f})</span>"),
                 ("", f"<b>{pauses:,}</b> {noun(pauses, 'pause')}{pause_rule}"
                      + (f" <span class='ecg-muted'>({doubtful:,} doubtful)</span>" if doubtful else "")),
                 ("", f"<b>{n_episodes:,}</b> {noun(n_episodes, 'episode')}{escape(which)}")]
        items = "".join(f"<span class='ecg-fact'>{f'{name} ' if name else ''}{value}</span>" for name, value in facts)
        return (f"<div class='ecg-recording-name'>{escape(recording_name(shared))}</div>"
                f"<div class='ecg-facts'>{items}</div>")

    def __panel__(self):
        return pn.Column(self.text, self.details, sizing_mode="stretch_width", css_classes=["ecg-header-card"])


class SelectionSummary(View):
    """One line: how many beats this session selects, in which window, by which brushes."""

    def __init__(self, store: DataStore, spec: ViewSpec | None = None):
        super().__init__(store, spec or ViewSpec("summary", "Selection", "summary"))
        self.text = html(self._text(store.selection), css_classes=["ecg-summary"], margin=(5, 10))
        store.param.watch(self._update, "selection")

    def _text(self, sel: Selection) -> str:
        store = self.store
        window = ""
        if store.time_range is not None and store.follow_window:
            window = f"<br>Window {hms(store.time_range[0], 0)}–{hms(store.time_range[1], 0)}"
        brush = "".join(f"<br>{escape(brush_text(c, lo, hi))}" for c, (lo, hi) in store.brush.items())
        return (f"<div class='ecg-count'><b>{sel.count:,}</b> of {plural(sel.total, 'beat')} selected</div>"
                f"<div><b>{plural(sel.n_outliers, 'outlier')}</b> (score ≥ {sel.threshold:.2f})</div>"
                f"<div class='ecg-muted'>{brush}{window}</div>")

    def _update(self, event) -> None:
        self.text.object = self._text(event.new)
        self.rendered = event.new.version

    def __panel__(self):
        return self.text
