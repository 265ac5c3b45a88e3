"""The run's episodes as a list beside the dashboard: pauses, ventricular flutter/fibrillation,
noise and lost signal, each with its onset (hh:mm:ss), duration and the reviewer's verdict,
longest pauses first; a click shows that stretch in the recording view (with a few seconds around
it) and chooses it for a verdict: confirmed, not an episode, or none again (the recording's bands follow at once: a
rejected episode is no longer drawn there, a confirmed one more strongly). The stretch the
recording view shows can be added as an episode the detector missed.

See Also
--------
pipeline.tables.episodes_table : the episodes of a run.
dashboard.episode_review.EpisodeReview : where the verdicts are kept.
dashboard.recording_view.add_episode_track : the same episodes as bands on the recording and tachogram
    (it follows ``DataStore.episodes``, which this list sets).
"""
from __future__ import annotations

import logging
import sqlite3

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, DataTable, NumberFormatter, StringFormatter, TableColumn

from dashboard.data_store import DataStore, one_patch
from dashboard.episode_review import EpisodeReview
from dashboard.spec import EPISODE_NAMES, hms
from dashboard.views import escape, html
from pipeline.tables import doubtful_pauses

ORDER = ("pause", "flutter", "noise", "lost")   # what a Holter report lists first
ADDED = ORDER[:3]                         # what a reviewer may add (lost signal is the file's, no judgement)
CONTEXT_S = 3.0                           # seconds shown on either side of an episode
MAX_HEIGHT = 150                          # px of the list; fewer episodes, a shorter list
VERDICT_NAMES = {"confirmed": "✓ confirmed", "rejected": "✗ not an episode", "added": "+ added", "": ""}

log = logging.getLogger(__name__)


def event_rows(episodes) -> dict:
    """The list's columns: kind (as shown, and its code), start (h:mm:ss), duration (s), start and
    end (s, for the zoom), the verdict (where ``episodes`` has one); pauses first, then flutter,
    then noise, then lost signal, each longest first."""
    if episodes is None or not len(episodes):
        return {"kind": [], "code": [], "start": [], "duration_s": np.zeros(0), "start_s": np.zeros(0),
                "end_s": np.zeros(0), "verdict": []}
    frame = episodes.assign(duration_s=episodes["end_s"] - episodes["start_s"],
                            rank=episodes["kind"].map({k: i for i, k in enumerate(ORDER)}))
    frame = frame.sort_values(["rank", "duration_s"], ascending=[True, False], kind="stable")
    verdicts = frame["verdict"] if "verdict" in frame else [""] * len(frame)
    return {"kind": [EPISODE_NAMES[k] + (" (doubtful)" if doubtful else "")
                     for k, doubtful in zip(frame["kind"], doubtful_pauses(frame))], "code": frame["kind"].tolist(),
            "start": [hms(t, 0) for t in frame["start_s"]],
            "duration_s": frame["duration_s"].to_numpy(np.float64), "start_s": frame["start_s"].to_numpy(np.float64),
            "end_s": frame["end_s"].to_numpy(np.float64), "verdict": [VERDICT_NAMES[v] for v in verdicts]}


class EventList(pn.viewable.Viewer):
    """Episodes of the open recording; a click zooms the recording view to one (``store.zoom_to``)
    and chooses it for the verdict buttons."""

    def __init__(self, store: DataStore, who: str | None = None):
        super().__init__()
        self.store, self.who = store, who
        self.review, problem = self._open_review(store)
        self.chosen: int | None = None
        episodes = self._episodes()
        self.source = ColumnDataSource(event_rows(episodes))
        store.episodes = episodes                 # the bands drawn already leave out what was rejected
        rows = len(self.source.data["kind"])
        self.table = DataTable(source=self.source, height=min(MAX_HEIGHT, 30 + 25 * max(rows, 1)),
                               sizing_mode="stretch_width", index_position=None, reorderable=False, name="ecg-events",
                               columns=[
                                   TableColumn(field="kind", title="Episode", formatter=StringFormatter(), width=110),
                                   TableColumn(field="start", title="Onset", width=62),
                                   TableColumn(field="duration_s", title="Duration (s)", width=62,
                                               formatter=NumberFormatter(format="0.0")),
                                   TableColumn(field="verdict", title="Verdict", width=90)])
        self.caption = html(self._caption(store.shared.run.episodes), css_classes=["ecg-muted"], margin=(0, 10))
        self.status = html(problem, css_classes=["ecg-muted"], margin=(0, 10))
        self.confirm = pn.widgets.Button(name="Confirm", button_type="success", button_style="outline",
                                         disabled=True, css_classes=["ecg-episode-confirm"])
        self.reject = pn.widgets.Button(name="Not an episode", button_type="danger", button_style="outline",
                                        disabled=True, css_classes=["ecg-episode-reject"])
        self.clear = pn.widgets.Button(name="No verdict", button_type="default", disabled=True,
                                       css_classes=["ecg-episode-clear"])
        self.kind = pn.widgets.Select(options={EPISODE_NAMES[k]: k for k in ADDED}, value="noise", width=150,
                                      disabled=self.review is None)
        self.add = pn.widgets.Button(name="Add the shown window", button_type="primary", button_style="outline",
                                     disabled=self.review is None, css_classes=["ecg-episode-add"])
        self.confirm.on_click(lambda event: self._judge("confirmed"))
        self.reject.on_click(lambda event: self._judge("rejected"))
        self.clear.on_click(lambda event: self._judge(None))
        self.add.on_click(lambda event: self._add())
        self.source.selected.on_change("indices", lambda attr, old, new: self._clicked(new))
        self.listed = pn.pane.Bokeh(self.table, sizing_mode="stretch_width", visible=rows > 0)

    @staticmethod
    def _open_review(store: DataStore) -> tuple[EpisodeReview | None, str]:
        """The recording's verdicts, or None and why (a read-only runs folder: the list still shows)."""
        try:
            return EpisodeReview.for_run(store.shared.run), ""
        except (OSError, sqlite3.Error) as err:
            log.warning("episode verdicts cannot be saved: %s", err)
            return None, "Verdicts on episodes cannot be saved here (the runs folder cannot be written)."

    def _episodes(self):
        episodes = self.store.shared.run.episodes
        return self.review.reviewed(episodes) if self.review is not None else episodes

    @staticmethod
    def _caption(episodes) -> str:
        if episodes is None or not len(episodes):
            return "No pause of 2 s or more, no flutter, no noise episode and no lost signal."
        counts = episodes["kind"].value_counts()
        noun = {"pause": ("pause", "pauses"), "flutter": ("flutter/fibrillation episode", "flutter/fibrillation episodes"),
                "noise": ("noise episode", "noise episodes"),
                "lost": ("stretch of lost signal", "stretches of lost signal")}
        parts = [f"{int(counts[k]):,} {noun[k][int(counts[k]) != 1]}" for k in ORDER if k in counts]
        doubtful = int(doubtful_pauses(episodes).sum())
        if doubtful:
            parts[0] += (f" ({doubtful:,} doubtful: across noise or lost signal, or where the other lead shows "
                         "beats that the analysed one does not)")
        return " · ".join(parts) + " · click a row to see it in the recording and judge it"

    def _clicked(self, indices: list) -> None:
        if not indices:
            return
        self.chosen = indices[0]
        start, end = float(self.source.data["start_s"][self.chosen]), float(self.source.data["end_s"][self.chosen])
        self.source.selected.indices = []       # so that the same row can be clicked again
        self.store.zoom_to = None               # (likewise: the same window asked for twice)
        self.store.update(zoom_to=(max(start - CONTEXT_S, 0.0), min(end + CONTEXT_S, self.store.shared.duration_s)))
        for button in (self.confirm, self.reject, self.clear):
            button.disabled = self.review is None
        self.status.object = (f"Chosen: {escape(self.source.data['kind'][self.chosen])} at "
                              f"{escape(self.source.data['start'][self.chosen])}")

    def _judge(self, verdict: str | None) -> None:
        """Set (or, with None, take back) the verdict on the chosen episode."""
        if self.review is None or self.chosen is None:
            return
        data, row = self.source.data, self.chosen
        kind, start, end = data["code"][row], float(data["start_s"][row]), float(data["end_s"][row])
        if data["verdict"][row] == VERDICT_NAMES["added"] and verdict == "rejected":
            verdict = None                      # rejecting one's own addition takes it back
        if verdict is None:
            self.review.forget(kind, start, end)
        else:
            self.review.judge(kind, start, end, verdict, who=self._who())
        self._refresh(f"{EPISODE_NAMES[kind]} at {data['start'][row]}: "
                      f"{VERDICT_NAMES[verdict] if verdict else 'no verdict'}")

    def _add(self) -> None:
        """Add the stretch the recording view shows as an episode of the chosen kind."""
        if self.review is None:
            return
        start, end = self.store.time_range or (0.0, self.store.shared.duration_s)
        try:
            self.review.judge(self.kind.value, start, end, "added", who=self._who())
        except ValueError as err:
            self.status.object = escape(str(err))
            return
        self._refresh(f"{EPISODE_NAMES[self.kind.value]} added at {hms(start, 0)} ({end - start:.1f} s)")

    def _who(self) -> str:
        """The login when the server has one (OAuth), else the user the server runs as."""
        from dashboard.labels import default_reviewer

        return self.who or pn.state.user or default_reviewer()

    def _refresh(self, message: str) -> None:
        episodes = self._episodes()
        with one_patch():                         # the list, the buttons and the bands in one message
            self.source.data = event_rows(episodes)
            self.store.episodes = episodes        # the bands on the recording and tachogram follow
            rows = len(self.source.data["kind"])
            self.table.height = min(MAX_HEIGHT, 30 + 25 * max(rows, 1))
            self.listed.visible = rows > 0
            self.chosen = None
            for button in (self.confirm, self.reject, self.clear):
                button.disabled = True
            self.status.object = escape(message)

    def __panel__(self):
        judging = pn.Row(self.confirm, self.reject, self.clear, sizing_mode="stretch_width")
        adding = pn.Row(self.kind, self.add, sizing_mode="stretch_width")
        return pn.Column(self.caption, self.listed, judging, adding, self.status, sizing_mode="stretch_width")
