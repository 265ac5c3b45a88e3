"""The run's episodes as a list beside the dashboard: pauses, ventricular flutter/fibrillation and
noise, each with its onset (hh:mm:ss) and duration, longest pauses first; a click shows that
stretch in the recording view (with a few seconds around it).

See Also
--------
pipeline.results.episodes_table : the episodes of a run.
dashboard.charts.add_episode_track : the same episodes as bands on the recording and tachogram.
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, DataTable, NumberFormatter, StringFormatter, TableColumn

from dashboard.data_store import DataStore
from dashboard.spec import EPISODE_NAMES, hms
from dashboard.views import html

ORDER = ("pause", "flutter", "noise")     # what a Holter report lists first
CONTEXT_S = 3.0                           # seconds shown on either side of an episode
MAX_HEIGHT = 150                          # px of the list; fewer episodes, a shorter list


def event_rows(episodes) -> dict:
    """The list's columns: kind, start (h:mm:ss), duration (s), start and end (s, for the zoom);
    pauses first, then flutter, then noise, each longest first."""
    if episodes is None or not len(episodes):
        return {"kind": [], "start": [], "duration_s": np.zeros(0), "start_s": np.zeros(0), "end_s": np.zeros(0)}
    frame = episodes.assign(duration_s=episodes["end_s"] - episodes["start_s"],
                            rank=episodes["kind"].map({k: i for i, k in enumerate(ORDER)}))
    frame = frame.sort_values(["rank", "duration_s"], ascending=[True, False], kind="stable")
    return {"kind": [EPISODE_NAMES[k] for k in frame["kind"]], "start": [hms(t, 0) for t in frame["start_s"]],
            "duration_s": frame["duration_s"].to_numpy(np.float64), "start_s": frame["start_s"].to_numpy(np.float64),
            "end_s": frame["end_s"].to_numpy(np.float64)}


class EventList(pn.viewable.Viewer):
    """Episodes of the open recording; a click zooms the recording view to one (``store.zoom_to``)."""

    def __init__(self, store: DataStore):
        super().__init__()
        self.store = store
        episodes = store.shared.run.episodes
        self.source = ColumnDataSource(event_rows(episodes))
        rows = len(self.source.data["kind"])
        self.table = DataTable(source=self.source, height=min(MAX_HEIGHT, 30 + 25 * max(rows, 1)),
                               sizing_mode="stretch_width", index_position=None, reorderable=False, name="ecg-events",
                               columns=[
                                   TableColumn(field="kind", title="Episode", formatter=StringFormatter(), width=120),
                                   TableColumn(field="start", title="Onset", width=70),
                                   TableColumn(field="duration_s", title="Duration (s)", width=70,
                                               formatter=NumberFormatter(format="0.0"))])
        self.caption = html(self._caption(episodes), css_classes=["ecg-muted"], margin=(0, 10))
        self.source.selected.on_change("indices", lambda attr, old, new: self._clicked(new))

    @staticmethod
    def _caption(episodes) -> str:
        if episodes is None or not len(episodes):
            return "No pause of 2 s or more, no flutter and no noise episode."
        counts = episodes["kind"].value_counts()
        noun = {"pause": ("pause", "pauses"), "flutter": ("flutter/fibrillation episode", "flutter/fibrillation episodes"),
                "noise": ("noise episode", "noise episodes")}
        parts = [f"{int(counts[k]):,} {noun[k][int(counts[k]) != 1]}" for k in ORDER if k in counts]
        return " · ".join(parts) + " · click a row to see it in the recording"

    def _clicked(self, indices: list) -> None:
        if not indices:
            return
        start, end = float(self.source.data["start_s"][indices[0]]), float(self.source.data["end_s"][indices[0]])
        self.source.selected.indices = []       # so that the same row can be clicked again
        self.store.zoom_to = None               # (likewise: the same window asked for twice)
        self.store.update(zoom_to=(max(start - CONTEXT_S, 0.0), min(end + CONTEXT_S, self.store.shared.duration_s)))

    def __panel__(self):
        listed = [pn.pane.Bokeh(self.table, sizing_mode="stretch_width")] if len(self.source.data["kind"]) else []
        return pn.Column(self.caption, *listed, sizing_mode="stretch_width")
