"""The reviewer's verdicts on the detector's episodes (pauses, ventricular flutter/fibrillation,
noise, lost signal): confirmed, rejected, or added by hand, kept on disk as the beat labels are.

One SQLite database per recording, ``<runs>/episodes/<input>.sqlite`` (named as the beat labels'
database, :func:`pipeline.reviewed.labels_database`, in a folder of its own), one row per judged
episode: its kind,
start and end (seconds), the verdict, who gave it and when. Every change is one transaction in
write-ahead-log mode, so several servers on one runs folder each change only the rows they name.
A verdict names an episode by kind and by start and end to the millisecond; a run with other
parameters finds it again on the detected episode of that kind that overlaps it most (at least
half of the shorter of the two).

See Also
--------
dashboard.events.EventList : lists the episodes with their verdicts and sets them.
dashboard.labels.ReviewLabels : the beat labels, kept the same way.
"""
from __future__ import annotations

import math
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.reviewed import labels_database

KINDS = ("pause", "flutter", "noise", "lost")
VERDICTS = ("confirmed", "rejected", "added")
FOLDER = "episodes"           # beside the runs folder's "labels"
MIN_OVERLAP = 0.5            # of the shorter interval, for a verdict to name a detected episode
BUSY_TIMEOUT_S = 30.0
_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    kind TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    verdict TEXT NOT NULL,
    who TEXT NOT NULL,
    judged_at TEXT NOT NULL,
    PRIMARY KEY (kind, start_ms, end_ms)
);
"""


def check_episode(kind: str, start_s: float, end_s: float, verdict: str | None = None) -> tuple[str, int, int]:
    """An episode as stored (kind, start and end in ms); one-line ValueError for anything else."""
    if kind not in KINDS:
        raise ValueError(f"an episode's kind must be one of {', '.join(KINDS)}; got {str(kind)[:40]!r}")
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f"a verdict must be one of {', '.join(VERDICTS)}; got {str(verdict)[:40]!r}")
    try:
        start, end = float(start_s), float(end_s)
    except (TypeError, ValueError):
        raise ValueError(f"an episode's start and end must be numbers of seconds; got {start_s!r}, {end_s!r}") from None
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise ValueError(f"an episode must start at 0 s or later and end after it starts; got {start} – {end} s")
    return kind, int(round(start * 1000)), int(round(end * 1000))


class EpisodeReview:
    """The verdicts of one recording, in the database at ``path``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.executescript(_SCHEMA)

    @classmethod
    def for_run(cls, run) -> "EpisodeReview":
        """The verdicts on the recording a run analysed, in its runs folder."""
        labels = labels_database(run)
        return cls(labels.parent.with_name(FOLDER) / labels.name)

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
        return con

    def judge(self, kind: str, start_s: float, end_s: float, verdict: str, who: str = "reviewer") -> None:
        """Confirm, reject or add an episode (a later verdict on the same episode replaces it)."""
        kind, start, end = check_episode(kind, start_s, end_s, verdict)
        with self._connect() as con:
            con.execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?)",
                        (kind, start, end, verdict, str(who)[:100],
                         datetime.now(timezone.utc).isoformat(timespec="milliseconds")))

    def forget(self, kind: str, start_s: float, end_s: float) -> None:
        """Take a verdict back (an added episode disappears, a judged one is unjudged)."""
        kind, start, end = check_episode(kind, start_s, end_s)
        with self._connect() as con:
            con.execute("DELETE FROM verdicts WHERE kind = ? AND start_ms = ? AND end_ms = ?", (kind, start, end))

    def verdicts(self) -> pd.DataFrame:
        """Every verdict: kind, start_s, end_s, verdict, who, judged_at (in time order)."""
        with self._connect() as con:
            rows = con.execute("SELECT kind, start_ms, end_ms, verdict, who, judged_at FROM verdicts "
                               "ORDER BY start_ms, kind").fetchall()
        frame = pd.DataFrame(rows, columns=["kind", "start_ms", "end_ms", "verdict", "who", "judged_at"])
        frame.insert(1, "start_s", frame.pop("start_ms").astype(np.float64) / 1000)
        frame.insert(2, "end_s", frame.pop("end_ms").astype(np.float64) / 1000)
        return frame

    def reviewed(self, detected: pd.DataFrame | None) -> pd.DataFrame:
        """The detected episodes with a ``verdict`` column ('' where none; a verdict applies to the
        detected episode of its kind it overlaps most), then the episodes the reviewer added."""
        columns = ["kind", "start_s", "end_s", "confidence"]
        detected = (pd.DataFrame(columns=columns) if detected is None else detected[columns]).reset_index(drop=True)
        verdict = np.full(len(detected), "", dtype=object)
        added = []
        for row in self.verdicts().itertuples():
            at = _best_match(detected, row.kind, row.start_s, row.end_s) if row.verdict != "added" else None
            if at is not None:
                verdict[at] = row.verdict
            elif row.verdict == "added":
                added.append({"kind": row.kind, "start_s": row.start_s, "end_s": row.end_s, "confidence": 1.0,
                              "verdict": "added"})
        frame = detected.assign(verdict=verdict)
        if added:
            frame = pd.concat([frame, pd.DataFrame(added)], ignore_index=True)
        return frame.astype({"kind": object, "start_s": np.float64, "end_s": np.float64, "confidence": np.float32,
                             "verdict": object})


def _best_match(detected: pd.DataFrame, kind: str, start_s: float, end_s: float) -> int | None:
    """Index of the detected episode of ``kind`` overlapping [start_s, end_s] most, if by at least
    :data:`MIN_OVERLAP` of the shorter of the two."""
    if not len(detected):
        return None
    starts, ends = detected["start_s"].to_numpy(np.float64), detected["end_s"].to_numpy(np.float64)
    overlap = np.clip(np.minimum(ends, end_s) - np.maximum(starts, start_s), 0, None)
    shorter = np.minimum(ends - starts, end_s - start_s)
    share = np.where((detected["kind"].to_numpy() == kind) & (shorter > 0), overlap / np.maximum(shorter, 1e-9), 0.0)
    best = int(np.argmax(share))
    return best if share[best] >= MIN_OVERLAP else None
