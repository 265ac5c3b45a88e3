"""What a Holter analyst reviews with: beat families with their templates, the focused beat's strip
at paper speed, and the panel that labels beats (the focused one, the selection or a family),
undoes, and exports the labels.

See Also
--------
dashboard.labels : where the labels are kept.
pipeline.families : how the families are found.
"""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import panel as pn
from panel.io.state import set_curdoc
from bokeh.models import (ColumnDataSource, DataTable, Line, MultiLine, NumberFormatter, Range1d,
                          SingleIntervalTicker, TableColumn, Text, VArea)

from dashboard.figures import add, drop_grid, figure, hidden_box
from dashboard.data_store import DataStore, one_patch
from dashboard.labels import REVIEW_LABELS
from dashboard.recording_view import beat_span_s
from dashboard.spec import FAMILY_COLORS, OUTLIER_COLOR, SIGNAL_COLOR, ViewSpec, hms, plural
from dashboard.views import View, beat_axis, escape, html

STRIP_SECONDS = 5.0          # the strip shows the focused beat ± this
PAPER_MM_PER_S = 25.0        # paper speed
PAPER_MM_PER_MV = 10.0       # gain
TEMPLATE_COLUMNS = 4         # family templates per row


# --------------------------------------------------------------------------- families
def family_summary(store: DataStore) -> dict:
    """Per family: count, share of all beats, share of outliers (at or above the session's threshold),
    and the mix of reference and review labels (text)."""
    shared = store.shared
    beats = shared.beats
    family = beats["family"].to_numpy()
    n = int(family.max()) + 1
    count = np.bincount(family, minlength=n)
    outliers = np.bincount(family[beats["score"].to_numpy() >= store.threshold], minlength=n)
    out = {"family": np.arange(n, dtype=np.int32), "count": count.astype(np.int32),
           "share": (count / max(len(family), 1)).astype(np.float32),
           "outliers": (outliers / np.maximum(count, 1)).astype(np.float32)}
    out["reference"] = _mix(family, beats["label"].to_numpy(), n) if shared.has_labels else np.full(n, "", object)
    out["review"] = _mix(family, shared.review_of_beats(), n)
    return out


def _mix(family: np.ndarray, labels: np.ndarray, n: int, top: int = 3) -> np.ndarray:
    """'N 97% · V 3%' per family: its most common labels (unlabelled beats left out)."""
    out = np.full(n, "", dtype=object)
    frame = {"family": family, "label": np.asarray(labels, dtype=object)}
    counts = pd.DataFrame(frame).query("label != ''").groupby(["family", "label"]).size()
    for f, per_label in counts.groupby(level=0):
        per_label = per_label.droplevel(0).sort_values(ascending=False)
        total = per_label.sum()
        out[f] = " · ".join(f"{label} {100 * k / total:.0f}%" for label, k in per_label.head(top).items())
    return out


class FamiliesView(View):
    """The beat families: a table (count, share, outliers, label mix) and their templates (median
    beat with the quartile band). A click on a row selects that family's beats everywhere."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec)
        self.source = ColumnDataSource(family_summary(store))
        columns = [TableColumn(field="family", title="Family", width=50),
                   TableColumn(field="count", title="Beats", formatter=NumberFormatter(format="0,0")),
                   TableColumn(field="share", title="Share of beats", formatter=NumberFormatter(format="0.0%")),
                   TableColumn(field="outliers", title="Outliers among them",
                               formatter=NumberFormatter(format="0.0%"))]
        if store.shared.has_labels:
            columns.append(TableColumn(field="reference", title="Reference labels"))
        columns.append(TableColumn(field="review", title="Your labels"))
        self.table = DataTable(source=self.source, columns=columns, height=170, sizing_mode="stretch_width",
                               index_position=None, reorderable=False, name="ecg-families")
        self.source.selected.on_change("indices", self._clicked)
        self.templates = self._templates()
        self.caption = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._caption()
        store.param.watch(self._refresh, ["threshold", "labels_version", "brush"])

    def _templates(self):
        """All families' templates in one figure, tile by tile (one figure: few models per session)."""
        run, store = self.store.shared.run, self.store
        t = beat_axis(store)
        span = float(t[-1] - t[0])
        median, lower, upper = (np.asarray(run.families.get(k, np.zeros((1, len(t))))) for k in ("median", "lower", "upper"))
        height = float(np.nanmax(upper) - np.nanmin(lower)) or 1.0
        xs, ys, lows, highs, tx, ty, text = [], [], [], [], [], [], []
        counts = self.source.data["count"]
        for f in range(len(median)):
            r, c = divmod(f, TEMPLATE_COLUMNS)
            x = (t - t[0] + c * span * 1.1).astype(np.float32)
            shift = -r * height * 1.3
            xs.append(x), ys.append(median[f] + shift), lows.append(lower[f] + shift), highs.append(upper[f] + shift)
            tx.append(float(x[0])), ty.append(float(np.nanmax(upper[f]) + shift)), text.append(
                f"#{f} · {plural(int(counts[f]) if f < len(counts) else 0, 'beat')}")
        p = figure(self.spec, [], height=max(160, 110 * (len(median) // TEMPLATE_COLUMNS + 1)),
                   toolbar_location=None, x_axis_location=None, y_axis_location=None)
        drop_grid(p)
        for f in range(len(median)):
            colour = FAMILY_COLORS[min(f, len(FAMILY_COLORS) - 1)]
            band = ColumnDataSource({"x": xs[f], "lo": lows[f], "hi": highs[f], "y": ys[f]})
            add(p, band, VArea(x="x", y1="lo", y2="hi", fill_color=colour, fill_alpha=0.2))
            add(p, band, Line(x="x", y="y", line_color=colour, line_width=1.6))
        add(p, ColumnDataSource({"x": tx, "y": ty, "text": text}),
            Text(x="x", y="y", text="text", text_font_size="8pt", text_color="#3d4b5c", text_baseline="bottom"))
        return p

    def _caption(self) -> None:
        chosen = self.store.brush.get("family")
        which = f"family <b>#{int(chosen[0])}</b> selected · click another row, or Clear selection" if chosen else \
            "Click a family to select its beats everywhere."
        self.caption.object = f"{plural(len(self.source.data['family']), 'family', 'families')} · {which}"

    def _refresh(self, event) -> None:
        if event.name in ("threshold", "labels_version"):
            self.source.data = family_summary(self.store)
        self._caption()

    def _clicked(self, attr, old, new) -> None:
        if new:
            family = float(self.source.data["family"][new[0]])
            self.store.select_range("family", family, family)

    def __panel__(self):
        return pn.Column(self.caption, pn.pane.Bokeh(self.table, sizing_mode="stretch_width"),
                         pn.pane.Bokeh(self.templates, sizing_mode="stretch_width"), sizing_mode="stretch_width")


# --------------------------------------------------------------------------- the strip
class StripView(View):
    """The focused beat's ± 5 s on ECG paper, every lead one above the other (the analysed one
    first): 25 mm/s and 10 mm/mV (the figure keeps those proportions), minor grid 0.04 s × 0.1 mV,
    major 0.2 s × 0.5 mV; each beat's label (yours, else the reference's) above it and the RR
    intervals between beats written below."""

    def __init__(self, store: DataStore, spec: ViewSpec):
        super().__init__(store, spec)
        shared = store.shared
        lo, hi = np.nanpercentile(shared.beats["peak"].to_numpy(), [1, 99]) if shared.n_beats else (-1.0, 1.0)
        amplitude = max(float(hi) - min(float(lo), 0.0), 0.5)
        # Each lead gets a band of whole 0.5 mV squares, so that every trace sits on the same grid.
        self.lead_height = float(np.ceil(1.6 * amplitude / 0.5) * 0.5)
        names, _, analysed = shared.leads()
        self.lead_order = [analysed] + [i for i in range(len(names)) if i != analysed]
        bottom = min(float(lo), 0.0) - 0.5 * amplitude - self.lead_height * (len(names) - 1)
        self.band = (bottom, float(hi) + 0.5 * amplitude)
        self.trace = ColumnDataSource({"t": [], "y": []})
        self.lead_names = ColumnDataSource({"x": [-STRIP_SECONDS + 0.05] * len(names),
                                            "y": [-k * self.lead_height + 0.6 * float(hi) for k in range(len(names))],
                                            "text": [names[i] for i in self.lead_order]})
        self.labels = ColumnDataSource({"x": [], "y": [], "text": [], "colour": []})
        self.intervals = ColumnDataSource({"x": [], "y": [], "text": []})
        self.focus_box = hidden_box(fill_color=OUTLIER_COLOR, fill_alpha=0.10, line_color=None)
        self.figure = self._figure()
        self.info = html("Click a row of the outlier table (or a beat marker) to see its strip here.",
                         css_classes=["ecg-caption"], margin=(0, 10))
        store.param.watch(self._draw, ["focus", "labels_version"])
        self._draw()      # a beat focused before this view was first shown

    def _figure(self):
        width_mm = 2 * STRIP_SECONDS * PAPER_MM_PER_S
        height_mm = (self.band[1] - self.band[0]) * PAPER_MM_PER_MV
        p = figure(self.spec, [], x_range=Range1d(-STRIP_SECONDS, STRIP_SECONDS), y_range=Range1d(*self.band),
                   height=None, sizing_mode="scale_width", aspect_ratio=width_mm / height_mm, width=1000,
                   x_axis_label="s from the beat", y_axis_label="mV (input units)", toolbar_location=None)
        major_x, major_y = SingleIntervalTicker(interval=0.2, num_minor_ticks=5), SingleIntervalTicker(interval=0.5,
                                                                                                      num_minor_ticks=5)
        p.xgrid.ticker, p.ygrid.ticker = major_x, major_y
        p.grid.grid_line_color, p.grid.grid_line_alpha = "#f08080", 0.55
        p.grid.minor_grid_line_color, p.grid.minor_grid_line_alpha = "#f6b8b8", 0.45
        p.xaxis.ticker = SingleIntervalTicker(interval=1.0)
        p.background_fill_color = "#fffafa"
        add(p, self.trace, MultiLine(xs="t", ys="y", line_color="#111111", line_width=1.2))
        add(p, self.lead_names, Text(x="x", y="y", text="text", text_color="#6b7785", text_font_size="9pt"))
        add(p, self.labels, Text(x="x", y="y", text="text", text_color="colour", text_align="center",
                                 text_font_size="11pt", text_font_style="bold"))
        add(p, self.intervals, Text(x="x", y="y", text="text", text_color="#3d4b5c", text_align="center",
                                    text_font_size="8pt"))
        p.add_layout(self.focus_box)
        return p

    def _draw(self, event=None) -> None:
        focus = self.store.focus
        if focus is None:
            return
        shared = self.store.shared
        beats = shared.beats
        centre = int(beats["fiducial"].iloc[focus])
        half = int(round(STRIP_SECONDS * shared.fs))
        lo, hi = max(centre - half, 0), min(centre + half + 1, len(shared.signal))
        _, leads, _ = shared.leads()
        t = ((np.arange(lo, hi) - centre) / shared.fs).astype(np.float32)
        with one_patch():
            self.trace.data = {"t": [t] * len(self.lead_order),
                               "y": [leads[lo:hi, i] - k * self.lead_height for k, i in enumerate(self.lead_order)]}
            fiducial = beats["fiducial"].to_numpy()
            near = np.flatnonzero((fiducial >= lo) & (fiducial < hi))
            x = (fiducial[near] - centre) / shared.fs
            review = shared.review_of_beats()[near]
            reference = beats["label"].to_numpy()[near] if shared.has_labels else np.full(len(near), "", object)
            text = [r or (f"({ref})" if ref else "·") for r, ref in zip(review, reference)]
            colour = [OUTLIER_COLOR if i == focus else (SIGNAL_COLOR if r else "#8d99ae") for i, r in zip(near, review)]
            self.labels.data = {"x": x.tolist(), "y": [self.band[1] - 0.12 * (self.band[1] - self.band[0])] * len(near),
                                "text": text, "colour": colour}
            rr = np.diff(fiducial[near]) / shared.fs
            self.intervals.data = {"x": ((x[:-1] + x[1:]) / 2).tolist(),
                                   "y": [self.band[0] + 0.06 * (self.band[1] - self.band[0])] * len(rr),
                                   "text": [f"{1000 * v:.0f}" for v in rr]}
            start = float(beats["start"].iloc[focus] - centre) / shared.fs
            self.focus_box.update(left=start, right=start + beat_span_s(beats.iloc[focus], shared), visible=True)
            self.info.object = (f"Beat <b>{focus}</b> at <b>{hms(centre / shared.fs)}</b> on paper: 25 mm/s, "
                                "10 mm/mV. Labels: yours (in parentheses: the reference's); RR intervals in ms below.")
        self.rendered += 1

    def __panel__(self):
        return pn.Column(self.info, pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"), sizing_mode="stretch_width")


# --------------------------------------------------------------------------- labelling
class ReviewPanel(pn.viewable.Viewer):
    """Label the focused beat, the selection or the focused beat's family; undo; export."""

    SCOPES = {"Focused beat": "focus", "Selection": "selection", "Its family": "family"}

    def __init__(self, store: DataStore):
        super().__init__()
        self.store = store
        self.labels = store.shared.review_labels()
        self.undo_stack: list[dict] = []
        self.scope = pn.widgets.RadioButtonGroup(options=self.SCOPES, value="focus", button_type="primary",
                                                 button_style="outline", sizing_mode="stretch_width")
        self.buttons = [pn.widgets.Button(name=label, button_type="default", width=62, margin=(3, 3),
                                          css_classes=[f"ecg-label-{label}"]) for label in REVIEW_LABELS]
        for button in self.buttons:
            button.on_click(self._after_widget_changes(lambda label=button.name: self.apply(label)))
        self.free = pn.widgets.TextInput(placeholder="your own label", sizing_mode="stretch_width", max_length=40)
        self.free_button = pn.widgets.Button(name="Apply", button_type="primary", width=70)
        self.free_button.on_click(self._after_widget_changes(lambda: self.apply(self.free.value)))
        self.clear_button = pn.widgets.Button(name="Remove label", button_type="danger", button_style="outline",
                                              width=120)
        self.clear_button.on_click(self._after_widget_changes(lambda: self.apply(None)))
        self.undo_button = pn.widgets.Button(name="Undo", button_type="default", width=80, disabled=True)
        self.undo_button.on_click(lambda event: self.undo())
        self.status = html("", css_classes=["ecg-muted"], margin=(4, 10))
        record = store.shared.report["input"]["path"].rsplit("/", 1)[-1].split(".")[0] or "record"
        exports = {"WFDB (.rev)": (f"{record}.rev", lambda: self.labels.wfdb_bytes(record)),
                   "CSV": (f"{record}-labels.csv", self.labels.csv_bytes),
                   "Parquet": (f"{record}-labels.parquet", self.labels.parquet_bytes)}
        self.downloads = [pn.widgets.FileDownload(callback=self._export(make), filename=filename, label=label,
                                                  button_type="primary", button_style="outline", margin=(3, 3))
                          for label, (filename, make) in exports.items()]
        self._show_status()
        store.param.watch(lambda event: self._show_status(), "labels_version")

    def _after_widget_changes(self, action):
        """A click handler that runs ``action`` once the browser's earlier widget changes are in.

        Panel applies a widget's new value from the browser after a debounce (``_debounce`` ms)
        but a button click on the next tick, so a click right after choosing the scope (or on a
        busy server, whose messages arrive together) would label the old scope's beats. Waiting
        as long as the debounce, from the click, puts the action after every earlier change.
        """
        def handler(event) -> None:
            doc = pn.state.curdoc
            if doc is None or doc.session_context is None:   # no browser: values are current
                action()
                return

            def later() -> None:
                with set_curdoc(doc):
                    action()
            doc.add_timeout_callback(later, max(self.scope._debounce, self.free._debounce))
        return handler

    def targets(self) -> np.ndarray:
        """Fiducial samples of the beats the scope names (none when there is nothing to label)."""
        store, beats = self.store, self.store.shared.beats
        scope = self.scope.value
        if scope == "selection":
            index = store.selection.ids
        elif store.focus is None:
            index = np.zeros(0, dtype=int)
        elif scope == "family":
            index = np.flatnonzero(beats["family"].to_numpy() == beats["family"].iloc[store.focus])
        else:
            index = np.array([store.focus])
        return beats["fiducial"].to_numpy()[index]

    def apply(self, label: str | None) -> None:
        samples = self.targets()
        if not len(samples):
            self.status.object = "<span style='color:#9b1c1c'>Click a beat in the outlier table first.</span>"
            return
        try:
            with one_patch():
                source = {"focus": "beat"}.get(self.scope.value, self.scope.value)    # labels_file.SOURCES' names
                # who: the login when the server has one (OAuth), else labels.default_reviewer()
                self.undo_stack.append(self.labels.set(samples, label, who=pn.state.user, source=source))
        except ValueError as err:
            self.status.object = f"<span style='color:#9b1c1c'>{escape(err)}</span>"
            return
        self.undo_button.disabled = False
        what = "Label removed from" if label is None else f"<b>{escape(label)}</b> given to"
        self.status.object = f"{what} {plural(len(samples), 'beat')} · saved. " + self._count()

    def undo(self) -> None:
        if self.undo_stack:
            try:
                with one_patch():
                    kept = self.labels.restore(self.undo_stack[-1], who=pn.state.user)
            except ValueError as err:           # not saved: the change stays undoable
                self.status.object = f"<span style='color:#9b1c1c'>{escape(err)}</span>"
                return
            self.undo_stack.pop()
            changed = (f" {plural(len(kept), 'beat')} kept the label another reviewer gave since." if kept else "")
            self.status.object = "Undone · saved." + changed + " " + self._count()
        self.undo_button.disabled = not self.undo_stack

    def _export(self, make):
        """A download callback: the file's bytes, or the reason there are none on the panel."""
        def callback():
            try:
                return io.BytesIO(make())
            except ValueError as err:
                self.status.object = f"<span style='color:#9b1c1c'>{escape(err)}</span>"
                return None
        return callback

    def _count(self) -> str:
        return f"{plural(len(self.labels), 'beat')} labelled in all."

    def _show_status(self) -> None:
        if not self.status.object:
            self.status.object = self._count()

    def __panel__(self):
        return pn.Column(
            html("<span class='ecg-label'>Label</span>", margin=(4, 10, 0, 10)), self.scope,
            # A grid, not a FlexBox: that one is a ReactiveHTML component, whose first use imports
            # bleach and html5lib to sanitize its template (~0.1 s of a server's first page).
            pn.GridBox(*self.buttons, ncols=3, margin=(4, 7)), pn.Row(self.free, self.free_button),
            pn.Row(self.clear_button, self.undo_button), self.status,
            html("<span class='ecg-label'>Export your labels</span>", margin=(8, 10, 0, 10)),
            pn.Row(*self.downloads), sizing_mode="stretch_width")
