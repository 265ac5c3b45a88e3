"""The recordings of an archive (``python -m pipeline batch … --out DIR``) on the page: a table to
sort (most outliers first), an overview of heart rate against outliers with the names of the
recordings that have most, and for the sidebar the archive's totals, a search by name and the
open recording's summary; a click on a row or a point opens that recording's dashboard, without
restarting the server.

The page gets names and figures, never paths: a click comes back as a row number, which the view
looks up in the rows it sent (kept here), so a page that rewrites its data cannot name a folder;
:func:`run_inside` then refuses any run directory outside the served archive.

See Also
--------
pipeline.archive.read_archive : the archive table.
dashboard.app.App : swaps the dashboard below for the recording opened here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import panel as pn
from bokeh.models import (ColumnDataSource, CustomJSTickFormatter, DataTable, FixedTicker, HoverTool, PanTool,
                          ResetTool, Scatter, TapTool, Text, WheelZoomTool)

from dashboard.figures import add, figure
from dashboard.spec import OUTLIER_COLOR, SIGNAL_COLOR, ViewSpec, hms, noun, plural
from dashboard.views import TABLE_CSS, escape, html, table_column

SPEC = ViewSpec("archive", "Recordings of the archive", "archive", height=300, xlabel="median heart rate (bpm)",
                ylabel="outliers (log scale)",
                help="Each recording's median heart rate against its outliers; the names of those with most "
                     "outliers are written beside their points (hover any point for its name). Click a row or a "
                     "point to open the recording.")
NAMED_POINTS = 12       # the recordings with most outliers get their name written beside their point
DECADES = 7             # the outlier axis' ticks: 0, 1, 10, … 10^(DECADES - 1) (it shows outliers + 1 on a log scale)


def run_inside(archive: str | Path, run_dir: str | Path) -> str:
    """``run_dir`` resolved (links followed), if it lies inside the folder ``archive``; raises
    ValueError otherwise: the server opens no other folder, whatever the archive table says."""
    root, path = Path(archive).resolve(), Path(run_dir).resolve()
    if path == root or not path.is_relative_to(root):
        raise ValueError(f"run directory {str(run_dir)!r} is not inside the archive {str(root)!r}; not opened")
    return str(path)


def archive_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The rows the page shows: every recording, most outliers first, failed ones last."""
    frame = table.copy()
    frame["openable"] = frame["status"].isin(["ok", "cached"]) & frame["run_dir"].notna()
    frame["duration_h"] = frame["duration_s"] / 3600.0
    return frame.sort_values(["openable", "outliers"], ascending=[False, False], kind="stable").reset_index(drop=True)


class ArchiveView(pn.viewable.Viewer):
    """Search, sort and open the recordings of an archive; ``open_run(run_dir, name)`` opens one.

    ``shown`` holds, for each data source on the page, the rows of :attr:`frame` it lists, in its
    order: a selected index means that row, whatever the page did to the source's data."""

    COLUMNS = {"name": ("Recording", "the recording's file or record name", "text", 160),
               "status": ("Status", "ok: analysed; cached: an earlier analysis reused; failed: see Error", "text", 60),
               "beats": ("Beats", "beats kept and scored", "0,0", 70),
               "outliers": ("Outliers", "beats of good quality above the outlier threshold", "0,0", 70),
               "heart_rate_bpm": ("Median HR (bpm)", "median heart rate, beats per minute", "0", 80),
               "duration": ("Duration", "length of the recording, hh:mm:ss", "text", 80),
               "error": ("Error", "why a recording could not be analysed", "text", 200)}

    def __init__(self, table: pd.DataFrame, open_run: Callable[[str, str], None]):
        super().__init__()
        self.frame, self.open_run = archive_frame(table), open_run
        self.shown: dict[str, np.ndarray] = {}
        self.source = ColumnDataSource(self._data(self.frame))
        self.shown[self.source.id] = self.frame.index.to_numpy()
        self.table = DataTable(source=self.source, height=SPEC.height - 30, sizing_mode="stretch_width",
                               index_position=None, reorderable=False, name="ecg-archive-table",
                               stylesheets=[TABLE_CSS], columns=[table_column(f, *c) for f, c in self.COLUMNS.items()])
        self.search = pn.widgets.TextInput(name="Find a recording", placeholder="name contains…",
                                           sizing_mode="stretch_width")
        self.search.param.watch(lambda event: self._filter(event.new), "value_input")
        self.points = ColumnDataSource(self._points(self.frame))
        self.shown[self.points.id] = self.frame.index[self.frame["openable"]].to_numpy()
        self.overview = self._overview()
        self.caption = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._caption(len(self.frame))
        self.opened = html("<div class='ecg-muted'>No recording open yet.</div>", margin=(4, 10))
        self.sidebar = pn.Column(html(self._totals(), margin=(4, 10)), self.search, self.opened,
                                 sizing_mode="stretch_width")
        for source in (self.source, self.points):
            source.selected.on_change("indices", lambda attr, old, new, source=source: self._clicked(source, new))

    @staticmethod
    def _data(frame: pd.DataFrame) -> dict:
        return {"name": frame["name"].astype(str).to_numpy(), "status": frame["status"].astype(str).to_numpy(),
                "beats": frame["beats"].fillna(0).to_numpy(np.int64), "outliers": frame["outliers"].fillna(0).to_numpy(np.int64),
                "heart_rate_bpm": frame["heart_rate_bpm"].to_numpy(np.float32),
                "duration": np.array([hms(s, 0) if s == s else "–" for s in frame["duration_s"]], dtype=object),
                "error": frame["error"].fillna("").astype(str).to_numpy()}

    @staticmethod
    def _points(frame: pd.DataFrame) -> dict:
        """The openable recordings' points (outliers + 1: a log axis has no 0), and ``label``: the
        names written beside the NAMED_POINTS with most outliers ('' for the others)."""
        ok = frame[frame["openable"]]
        names = ok["name"].astype(str).to_numpy()
        outliers = ok["outliers"].fillna(0).to_numpy(np.int64)
        label = np.where(np.arange(len(ok)) < NAMED_POINTS, names, "")     # the frame: most outliers first
        return {"x": ok["heart_rate_bpm"].to_numpy(np.float32), "y": (outliers + 1).astype(np.float32),
                "outliers": outliers, "name": names, "label": label.astype(object)}

    def _overview(self):
        hover = HoverTool(tooltips=[("recording", "@name"), ("outliers", "@outliers{0,0}"), ("median HR", "@x{0} bpm")])
        p = figure(SPEC, [TapTool(), hover, WheelZoomTool(), PanTool(), ResetTool()], y_axis_type="log")
        p.toolbar.active_tap = p.select_one(TapTool)
        points = add(p, self.points, Scatter(x="x", y="y", size=9, fill_color=SIGNAL_COLOR, fill_alpha=0.7,
                                             line_color="white"))
        points.selection_glyph = Scatter(size=12, fill_color=OUTLIER_COLOR, line_color="white")
        # Names drawn on the canvas (text, never markup), beside the points with most outliers.
        names = add(p, self.points, Text(x="x", y="y", text="label", text_font_size="9pt", text_color="#3d4b5c",
                                         x_offset=7, y_offset=-2, text_baseline="middle"))
        hover.renderers, p.select_one(TapTool).renderers = [points], [points]
        names.nonselection_glyph = None
        # Outliers + 1 on a log scale, ticked at whole decades and labelled with the outliers
        # themselves: 0, 1, 10, 100, … (a log axis left to itself bunched its ticks over a short range).
        p.yaxis.ticker = FixedTicker(ticks=[1.0] + [10.0 ** k + 1 for k in range(DECADES)],
                                     minor_ticks=[m * 10.0 ** k + 1 for k in range(DECADES) for m in range(2, 10)])
        p.yaxis.formatter = CustomJSTickFormatter(code="return Math.round(tick - 1).toLocaleString('en-US');")
        x, y = self.points.data["x"], self.points.data["y"]
        top = float(np.max(y)) if len(y) else 10.0
        decade = 10.0 ** np.ceil(np.log10(max(top - 1, 10.0)))      # the decade above the most outliers, ticked
        p.y_range.start, p.y_range.end = 0.8, 1.3 * (decade + 1)
        if len(x) and np.isfinite(x).any():      # room on the right for the names
            lo, hi = float(np.nanmin(x)), float(np.nanmax(x))
            span = max(hi - lo, 5.0)
            p.x_range.start, p.x_range.end = lo - 0.06 * span, hi + 0.3 * span
        return p

    def _filter(self, text: str) -> None:
        """List, and draw, only the recordings whose name contains ``text``."""
        shown = self.frame[self.frame["name"].astype(str).str.contains(text or "", case=False, regex=False)]
        self.source.selected.indices = []
        self.source.data = self._data(shown)
        self.shown[self.source.id] = shown.index.to_numpy()
        self.points.selected.indices = []
        self.points.data = self._points(shown)
        self.shown[self.points.id] = shown.index[shown["openable"]].to_numpy()
        self._caption(len(shown))

    def _caption(self, shown: int) -> None:
        failed = int((~self.frame["openable"]).sum())
        self.caption.object = (f"<b>{shown:,}</b> of {plural(len(self.frame), 'recording')} listed"
                               + (f" ({failed:,} failed)" if failed else "")
                               + " · most outliers first · click a row or a point to open it")

    def _totals(self) -> str:
        """The archive in figures (HTML)."""
        frame = self.frame
        ok = frame[frame["openable"]]
        failed = len(frame) - len(ok)
        hours = float(ok["duration_s"].fillna(0).sum()) / 3600.0
        beats, outliers = int(ok["beats"].fillna(0).sum()), int(ok["outliers"].fillna(0).sum())
        with_outliers = int((ok["outliers"].fillna(0) > 0).sum())
        # (Not .ecg-count: that is the selection's count, which tests and benchmarks read.)
        return (f"<div class='ecg-label'>{plural(len(frame), 'recording')}</div>"
                f"<div>{hours:,.1f} h · {plural(beats, 'beat')} · {plural(outliers, 'outlier')}</div>"
                f"<div class='ecg-muted'>{with_outliers:,} of {len(ok):,} with outliers"
                + (f" · {failed:,} failed" if failed else "") + "</div>")

    def _summary(self, row: pd.Series) -> str:
        """The recording opened from the archive, in figures (HTML; its name is outside text)."""
        outliers, beats = int(row["outliers"] or 0), int(row["beats"] or 0)
        rate = f"{row['heart_rate_bpm']:.0f} bpm median" if row["heart_rate_bpm"] == row["heart_rate_bpm"] else ""
        return (f"<div class='ecg-label'>Open: {escape(row['name'])}</div>"
                f"<div class='ecg-muted'>{hms(float(row['duration_s']), 0)} · {plural(beats, 'beat')} · "
                f"{outliers:,} {noun(outliers, 'outlier')}{' · ' + rate if rate else ''}</div>")

    def _clicked(self, source: ColumnDataSource, indices: list) -> None:
        if not indices:
            return
        source.selected.indices = []
        rows, index = self.shown.get(source.id, ()), indices[0]
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(rows):
            return                       # not a row this view sent
        row = self.frame.loc[rows[index]]
        if row["openable"]:
            self.opened.object = self._summary(row)
            self.open_run(str(row["run_dir"]), str(row["name"]))

    def __panel__(self):
        return pn.Row(pn.Column(self.caption, pn.pane.Bokeh(self.table, sizing_mode="stretch_width"),
                                sizing_mode="stretch_width"),
                      pn.pane.Bokeh(self.overview, sizing_mode="stretch_width"), sizing_mode="stretch_width")
