"""The recordings of an archive (``python -m pipeline batch … --out DIR``) on the page: a table to
search and sort (most outliers first) and an overview of heart rate against outliers; a click on
either opens that recording's dashboard, without restarting the server.

The page gets names and figures, never paths: a click comes back as a row number, which the view
looks up in the rows it sent (kept here), so a page that rewrites its data cannot name a folder;
:func:`run_inside` then refuses any run directory outside the served archive.

See Also
--------
pipeline.batch.read_archive : the archive table.
dashboard.app.App : swaps the dashboard below for the recording opened here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import panel as pn
from bokeh.models import (ColumnDataSource, DataTable, HoverTool, NumberFormatter, PanTool, ResetTool, Scatter,
                          TableColumn, TapTool, WheelZoomTool)

from dashboard.charts import add, figure
from dashboard.spec import OUTLIER_COLOR, SIGNAL_COLOR, ViewSpec
from dashboard.views import html

SPEC = ViewSpec("archive", "Recordings of the archive", "archive", height=260, xlabel="median heart rate (bpm)",
                ylabel="outliers + 1")


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

    COLUMNS = {"name": ("recording", None), "status": ("status", None), "beats": ("beats", "0,0"),
               "outliers": ("outliers", "0,0"), "heart_rate_bpm": ("HR (bpm)", "0"),
               "duration_h": ("hours", "0.0"), "error": ("error", None)}

    def __init__(self, table: pd.DataFrame, open_run: Callable[[str, str], None]):
        super().__init__()
        self.frame, self.open_run = archive_frame(table), open_run
        self.shown: dict[str, np.ndarray] = {}
        self.source = ColumnDataSource(self._data(self.frame))
        self.shown[self.source.id] = self.frame.index.to_numpy()
        self.table = DataTable(source=self.source, height=SPEC.height - 30, sizing_mode="stretch_width",
                               index_position=None, reorderable=False, name="ecg-archive-table",
                               columns=[TableColumn(field=f, title=t, **({"formatter": NumberFormatter(format=fmt)}
                                                                          if fmt else {}))
                                        for f, (t, fmt) in self.COLUMNS.items()])
        self.search = pn.widgets.TextInput(placeholder="search recordings by name", sizing_mode="stretch_width")
        self.search.param.watch(lambda event: self._filter(event.new), "value_input")
        self.points = ColumnDataSource(self._points(self.frame))
        self.shown[self.points.id] = self.frame.index[self.frame["openable"]].to_numpy()
        self.overview = self._overview()
        self.caption = html("", css_classes=["ecg-caption"], margin=(0, 10))
        self._caption(len(self.frame))
        for source in (self.source, self.points):
            source.selected.on_change("indices", lambda attr, old, new, source=source: self._clicked(source, new))

    @staticmethod
    def _data(frame: pd.DataFrame) -> dict:
        return {"name": frame["name"].astype(str).to_numpy(), "status": frame["status"].astype(str).to_numpy(),
                "beats": frame["beats"].fillna(0).to_numpy(np.int64), "outliers": frame["outliers"].fillna(0).to_numpy(np.int64),
                "heart_rate_bpm": frame["heart_rate_bpm"].to_numpy(np.float32),
                "duration_h": frame["duration_h"].to_numpy(np.float32),
                "error": frame["error"].fillna("").astype(str).to_numpy()}

    @staticmethod
    def _points(frame: pd.DataFrame) -> dict:
        ok = frame[frame["openable"]]
        return {"x": ok["heart_rate_bpm"].to_numpy(np.float32), "y": (ok["outliers"] + 1).to_numpy(np.float32),
                "name": ok["name"].astype(str).to_numpy()}

    def _overview(self):
        hover = HoverTool(tooltips=[("recording", "@name"), ("outliers", "@y{0,0} − 1"), ("HR", "@x{0} bpm")])
        p = figure(SPEC, [TapTool(), hover, WheelZoomTool(), PanTool(), ResetTool()], y_axis_type="log")
        p.toolbar.active_tap = p.select_one(TapTool)
        add(p, self.points, Scatter(x="x", y="y", size=9, fill_color=SIGNAL_COLOR, fill_alpha=0.7,
                                    line_color="white"))
        p.renderers[0].selection_glyph = Scatter(size=12, fill_color=OUTLIER_COLOR, line_color="white")
        return p

    def _filter(self, text: str) -> None:
        shown = self.frame[self.frame["name"].astype(str).str.contains(text or "", case=False, regex=False)]
        self.source.selected.indices = []
        self.source.data = self._data(shown)
        self.shown[self.source.id] = shown.index.to_numpy()
        self._caption(len(shown))

    def _caption(self, shown: int) -> None:
        failed = int((~self.frame["openable"]).sum())
        self.caption.object = (f"<b>{shown:,}</b> of {len(self.frame):,} recordings shown"
                               + (f" ({failed:,} failed)" if failed else "")
                               + " · most outliers first · click a row or a point to open it")

    def _clicked(self, source: ColumnDataSource, indices: list) -> None:
        if not indices:
            return
        source.selected.indices = []
        rows, index = self.shown.get(source.id, ()), indices[0]
        if not isinstance(index, (int, np.integer)) or not 0 <= index < len(rows):
            return                       # not a row this view sent
        row = self.frame.loc[rows[index]]
        if row["openable"]:
            self.open_run(str(row["run_dir"]), str(row["name"]))

    def __panel__(self):
        return pn.Row(pn.Column(self.caption, self.search, pn.pane.Bokeh(self.table, sizing_mode="stretch_width"),
                                sizing_mode="stretch_width"),
                      pn.pane.Bokeh(self.overview, sizing_mode="stretch_width"), sizing_mode="stretch_width")
