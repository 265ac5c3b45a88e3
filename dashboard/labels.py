"""The reviewer's beat labels: kept on disk for each recording, shared by every session and every
server process of a runs folder, exported as a WFDB annotation file, CSV or Parquet
(:mod:`dashboard.label_exports` writes those).

Labels are kept by the fiducial sample of the beat they name, in an SQLite database
``<runs>/labels/<input>.sqlite`` beside the run directories (which are rebuilt when damaged and must
never hold the only copy of someone's work); a run of the same recording with other parameters
finds them again by matching its beats to those samples within 50 ms. One row per labelled beat
says who gave the label, when, and from where (the focused beat, a selection, a family, an undo).

Every change is one transaction (write-ahead log, synchronous commits), so a crash or a restart
loses nothing that was acknowledged, and several servers on one runs folder each change only the
rows they name: no process writes its picture of the whole set over another's. A change made by
another process is seen by the next read here (``PRAGMA data_version`` tells when to read the rows
again); listeners (:meth:`ReviewLabels.subscribe`) are told of this process's changes at once and
of other processes' changes by a watcher thread within ``WATCH_S``. An undo puts back only the
beats that still hold what its own change wrote. A database that cannot be read is moved aside
(``<name>.unreadable-<time>``, with whatever rows could still be read copied into a fresh one) and
logged, so that the dashboard still opens. A ``<input>.parquet`` of earlier versions is imported
on first open and renamed ``.parquet.migrated``. Reference labels of an annotated input are never
touched: they live in the run.

See Also
--------
dashboard.review : the review panel that sets labels, undoes, exports.
dashboard.label_exports : the WFDB, CSV and Parquet files the labels are exported as.
dashboard.labels_file : the SQLite file (schema, transactions, the folder lock, damaged files).
pipeline.tables.match_labels : beats ↔ labelled samples within a tolerance.
"""
from __future__ import annotations

import contextlib
import getpass
import itertools
import logging
import os
import sqlite3
import threading
import unicodedata
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from dashboard import label_exports
# (names this module held before the exports moved: still importable from here)
from dashboard.label_exports import FREE_TEXT_SYMBOL, WFDB_SYMBOLS, csv_cell, wfdb_record_name  # noqa: F401
from dashboard.labels_file import (COLUMNS, SCHEMA, SCHEMA_VERSION, SOURCES, Damaged, as_damaged, create_file,
                                   folder_lock, reason, rename_aside, salvage, transaction)
from pipeline.tables import match_labels
from pipeline.reviewed import DATABASE_SUFFIX, MATCH_TOLERANCE_S, labels_database

REVIEW_LABELS = ("N", "S", "V", "F", "Q", "artefact")    # the buttons; any short text is allowed too
MAX_LABEL_LENGTH = 40
BUSY_TIMEOUT_S = 30.0         # how long a write waits for another process's transaction
WATCH_S = 1.0                 # how often listeners are told of other processes' changes

# Unicode categories a label may not hold: control characters (NUL, tabs, line ends, escapes),
# lone surrogates (no UTF-8 for them) and line/paragraph separators (a label is one line).
_REFUSED_CATEGORIES = {"Cc", "Cs", "Zl", "Zp"}

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- checks
def check_label(label: str) -> str:
    """A label as it will be stored (trimmed, NFC); raises ValueError with one line for anything else."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError("a label must be a non-empty text (N, S, V, F, Q, artefact or your own)")
    bad = [c for c in label if unicodedata.category(c) in _REFUSED_CATEGORIES]
    if bad:
        raise ValueError(f"a label must be one line of printable characters; got {label[:60]!r} "
                         f"(holds {bad[0]!r})")
    label = unicodedata.normalize("NFC", label.strip())
    if len(label) > MAX_LABEL_LENGTH:
        raise ValueError(f"a label must be one line of at most {MAX_LABEL_LENGTH} characters; got {label[:60]!r}")
    return label


def default_reviewer() -> str:
    """Who labels when the session does not say: the user the server runs as, else 'reviewer'."""
    try:
        return _one_line(getpass.getuser()) or "reviewer"
    except (KeyError, OSError):       # no name for this uid (containers)
        return "reviewer"


def _one_line(text, limit: int = 100) -> str:
    """Free text from outside (a login name) as one short printable line."""
    text = "".join(c for c in str(text) if unicodedata.category(c) not in _REFUSED_CATEGORIES)
    return text.strip()[:limit]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Undo(dict):
    """What :meth:`ReviewLabels.set` changed: ``{sample: label before}`` (a dict, as before), and
    which change wrote the new labels, so that :meth:`ReviewLabels.restore` puts back only the beats
    that still hold them."""

    def __init__(self, previous: dict, change: str, label: str | None):
        super().__init__(previous)
        self.change, self.label = change, label


# --------------------------------------------------------------------------- the labels
class ReviewLabels:
    """The labels of one recording: ``{fiducial sample: label}``, in the database at ``path``.

    ``path`` may name the database or, as in earlier versions, ``<name>.parquet``: the database is
    then ``<name>.sqlite`` beside it, and that Parquet file is imported once."""

    def __init__(self, path: Path, fs: float):
        path = Path(path)
        self.path = path.with_suffix(DATABASE_SUFFIX) if path.suffix == ".parquet" else path
        self.legacy = self.path.with_suffix(".parquet")
        self.fs = float(fs)
        self.problem = ""                 # why labels cannot be saved, when they cannot
        self._lock = threading.RLock()
        self._rows: dict[int, tuple[str, str]] = {}     # sample → (label, change), as last read
        self._seen = None                 # PRAGMA data_version when the rows were read
        self._version = 0
        self._announced = 0
        self._frame: tuple[int, pd.DataFrame] | None = None
        self._listeners: dict[int, Callable[[int], None]] = {}
        self._tokens = itertools.count(1)
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()
        self._last_warning = ""
        self._con: sqlite3.Connection | None = None
        self._open()

    @classmethod
    def for_run(cls, run) -> "ReviewLabels":
        """The labels of the recording a run analysed, in its runs folder."""
        return cls(labels_database(run), run.fs)

    # ------------------------------------------------------------------ opening
    def _open(self) -> None:
        """Open (or create) the database; move a damaged one aside; import an earlier Parquet file.
        Never raises for what is on disk: the dashboard must open, and says why labels cannot be
        saved when they cannot (:attr:`problem`)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with folder_lock(self.path.parent):      # one process at a time opens, repairs, imports
                try:
                    self._start()
                except Damaged as err:
                    salvaged = self._move_aside(self.path, str(err))
                    self._start()
                    if salvaged:
                        self._insert(salvaged)
                self._migrate()
                with self._lock:          # what was imported through this connection: read it
                    self._seen = None
                    self._refresh()
        except (OSError, sqlite3.Error, Damaged) as err:
            if self._con is not None:
                self._con.close()
                self._con = None
            self.problem = f"the labels database {self.path} cannot be used: {reason(err)}"
            log.error("ECG dashboard: %s; labels will not be saved until it is fixed", self.problem)

    def _start(self) -> None:
        """Connect and read every row: a damaged page anywhere in the table shows up here."""
        self._con = self._connect()
        try:
            with self._lock:
                self._refresh()
        except sqlite3.Error as err:
            self._con.close()
            self._con = None
            raise as_damaged(err)

    def _connect(self) -> sqlite3.Connection:
        create_file(self.path)
        try:
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as err:
            raise as_damaged(err)
        try:
            con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal":
                log.warning("ECG dashboard: %s is not in write-ahead-log mode (%s): concurrent servers wait longer",
                            self.path, mode)
            # FULL: a commit is on disk when set() returns (NORMAL may lose the last ones at a power cut).
            con.execute("PRAGMA synchronous = FULL")
            found = con.execute("PRAGMA user_version").fetchone()[0]
            if found > SCHEMA_VERSION:
                raise sqlite3.OperationalError(f"written by a newer version (schema {found} > {SCHEMA_VERSION})")
            with transaction(con):
                for statement in filter(str.strip, SCHEMA.split(";")):
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            columns = tuple(row[1] for row in con.execute("PRAGMA table_info(labels)"))
            if columns != COLUMNS:
                raise Damaged(f"its labels table has columns {columns}, not {COLUMNS}")
        except sqlite3.Error as err:
            con.close()
            raise as_damaged(err)
        except BaseException:
            con.close()
            raise
        return con

    def _move_aside(self, path: Path, why: str) -> list[tuple]:
        """Rename a damaged database (and its log) ``<name>.unreadable-<time>``, log it, and return
        the rows that can still be read from it, to be copied into the fresh one."""
        aside = rename_aside(path)
        for companion in ("-wal", "-shm"):      # a write-ahead log belongs to its database
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{path}{companion}", f"{aside}{companion}")
        rows = salvage(aside)
        log.warning("ECG dashboard: the labels database %s could not be read (%s); moved aside to %s, "
                    "%d labels recovered from it, a fresh one started", path, why, aside.name, len(rows))
        return rows

    def _migrate(self) -> None:
        """Import the Parquet file of earlier versions once, then rename it ``.parquet.migrated``
        (a mark in the database keeps a second process, or a crash before the rename, from
        importing it twice)."""
        if not self.legacy.exists():
            return
        key = f"migrated:{self.legacy.name}"
        done = self._con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if done is None:
            try:
                saved = pd.read_parquet(self.legacy, columns=["sample", "label"])
                samples = saved["sample"].astype(np.int64).tolist()
                labels = saved["label"].astype(str).tolist()
            except Exception as err:  # noqa: BLE001 - any unreadable file: keep it, say so, go on
                aside = rename_aside(self.legacy)
                log.warning("ECG dashboard: the labels file %s could not be read (%s); moved aside to %s",
                            self.legacy, reason(err), aside.name)
                return
            at = datetime.fromtimestamp(self.legacy.stat().st_mtime, timezone.utc).isoformat(timespec="milliseconds")
            change = uuid.uuid4().hex
            rows = []
            for sample, label in zip(samples, labels):
                # Earlier versions allowed control characters (a NUL breaks a CSV): replace, never drop.
                clean = "".join("\ufffd" if unicodedata.category(c) in _REFUSED_CATEGORIES else c for c in label)
                if clean.strip():
                    rows.append((sample, clean.strip(), "unknown", at, "migrated", change))
            with transaction(self._con):
                self._con.executemany("INSERT OR IGNORE INTO labels VALUES (?, ?, ?, ?, ?, ?)", rows)
                self._con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, _now()))
            log.warning("ECG dashboard: %d labels imported from %s into %s", len(rows), self.legacy, self.path.name)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.legacy, self.legacy.with_name(self.legacy.name + ".migrated"))

    def _insert(self, rows: list[tuple]) -> None:
        with transaction(self._con):
            self._con.executemany("INSERT OR IGNORE INTO labels VALUES (?, ?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        """Stop the watcher and close the database (a process that ends need not call this)."""
        self._closed.set()
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    # ------------------------------------------------------------------ reading
    def _refresh(self) -> None:
        """Read the rows again if any other connection committed since they were read (lock held)."""
        if self._con is None:
            return
        seen = self._con.execute("PRAGMA data_version").fetchone()[0]
        if seen != self._seen:
            self._rows = {s: (label, change) for s, label, change in
                          self._con.execute("SELECT sample, label, change FROM labels")}
            self._seen = seen
            self._version += 1

    def _current(self) -> None:
        """:meth:`_refresh`, for readers: a database error here leaves the last rows read."""
        try:
            self._refresh()
        except sqlite3.Error as err:
            if reason(err) != self._last_warning:      # once, not at every watcher tick
                log.warning("ECG dashboard: the labels database %s could not be read now: %s", self.path, reason(err))
            self._last_warning = reason(err)
        else:
            self._last_warning = ""

    @property
    def version(self) -> int:
        """Advances with every change, this process's and (once read) any other's."""
        with self._lock:
            self._current()
            return self._version

    def __len__(self) -> int:
        with self._lock:
            self._current()
            return len(self._rows)

    def frame(self) -> pd.DataFrame:
        """Sample, time (s) and label of every labelled beat, in time order."""
        with self._lock:
            self._current()
            if self._frame is None or self._frame[0] != self._version:
                samples = np.array(sorted(self._rows), dtype=np.int64)
                labels = [self._rows[s][0] for s in samples.tolist()]
                self._frame = (self._version, pd.DataFrame({"sample": samples, "time_s": samples / self.fs,
                                                            "label": pd.Series(labels, dtype=object)}))
            return self._frame[1].copy()

    def labels_of(self, fiducials: np.ndarray) -> np.ndarray:
        """The label of each beat (by its fiducial sample, within 50 ms), '' where there is none."""
        frame = self.frame()
        return match_labels(np.asarray(fiducials), frame["sample"].to_numpy(), frame["label"].to_numpy(dtype=object),
                            int(round(MATCH_TOLERANCE_S * self.fs)))

    # ------------------------------------------------------------------ writing
    def set(self, samples, label: str | None, *, who: str | None = None, source: str | None = None) -> Undo:
        """Label the beats at ``samples`` (None removes their labels), save, tell every listener.

        ``who`` names the reviewer (default: :func:`default_reviewer`); ``source`` is where the
        change came from, one of ``SOURCES`` (default 'beat' for one beat, else 'selection').
        Returns the labels that changed as they were before, for :meth:`restore` (undo); beats
        that already had ``label`` are left as they were and are not in it."""
        label = None if label is None else check_label(label)
        samples = sorted({int(s) for s in np.atleast_1d(np.asarray(samples, dtype=np.int64)).tolist()})
        source = _check_source(source or ("beat" if len(samples) == 1 else "selection"))
        who = _one_line(who) if who else default_reviewer()
        change = uuid.uuid4().hex
        with self._lock:
            with self._writing() as con:
                previous = {s: (self._rows[s][0] if s in self._rows else None) for s in samples}
                previous = {s: old for s, old in previous.items() if old != label}
                if previous:
                    self._write(con, {s: label for s in previous}, who, source, change)
            self._changed(bool(previous))
        return Undo(previous, change, label)

    def restore(self, previous: dict[int, str | None], *, who: str | None = None) -> list[int]:
        """Put labels back as :meth:`set` found them (undo), on the beats that still hold what that
        call wrote; returns the beats left alone because someone changed them since. (A plain
        dict, with no change to compare with, is put back as it is.)"""
        change = getattr(previous, "change", None)
        wrote = getattr(previous, "label", None)
        who = _one_line(who) if who else default_reviewer()
        with self._lock:
            with self._writing() as con:
                if change is None:
                    mine = dict(previous)
                elif wrote is None:     # removed: still absent
                    mine = {s: old for s, old in previous.items() if int(s) not in self._rows}
                else:                   # labelled: the row is still the one that call wrote
                    mine = {s: old for s, old in previous.items() if self._rows.get(int(s), ("", ""))[1] == change}
                if mine:
                    self._write(con, {int(s): old for s, old in mine.items()}, who, "undo", uuid.uuid4().hex)
            self._changed(bool(mine))
        return sorted(int(s) for s in previous if s not in mine)

    @contextlib.contextmanager
    def _writing(self):
        """One write transaction (lock held), with the rows read again under the database's write
        lock so that what is compared (undo) and returned (previous labels) is current; database
        errors become one-line ValueErrors that the review panel shows."""
        if self._con is None:
            raise ValueError(f"labels cannot be saved: {self.problem}")
        try:
            self._con.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise ValueError(f"the labels could not be saved ({reason(err)}); try again") from err
        try:
            self._refresh()
            yield self._con
            self._con.execute("COMMIT")
        except BaseException as err:
            with contextlib.suppress(sqlite3.Error):
                self._con.execute("ROLLBACK")
            self._seen = None            # the rows read may include this rolled-back change: read again
            if isinstance(err, sqlite3.Error):
                raise ValueError(f"the labels could not be saved ({reason(err)}); try again") from err
            raise

    def _write(self, con, changes: dict[int, str | None], who: str, source: str, change: str) -> None:
        removed = [(s,) for s, label in changes.items() if label is None]
        at = _now()
        written = [(s, label, who, at, source, change) for s, label in changes.items() if label is not None]
        con.executemany("DELETE FROM labels WHERE sample = ?", removed)
        con.executemany("INSERT OR REPLACE INTO labels VALUES (?, ?, ?, ?, ?, ?)", written)
        # The rows read are this process's picture of the database; our own commit does not move
        # PRAGMA data_version, so they are brought up to date here, after the statements ran.
        for (s,) in removed:
            self._rows.pop(s, None)
        for s, label, *_ in written:
            self._rows[s] = (label, change)

    def _changed(self, changed: bool) -> None:
        """After a commit (lock held): a new version for this process's sessions, told at once."""
        if changed or self._version != self._announced:
            if changed:
                self._version += 1
            self._announced = version = self._version
            for listener in list(self._listeners.values()):
                listener(version)

    # ------------------------------------------------------------------ sessions
    def subscribe(self, listener: Callable[[int], None]) -> int:
        """Call ``listener(version)`` after every change: this process's from the thread that made
        it, another process's from a watcher thread within ``WATCH_S`` (listeners are in-process:
        another server's sessions are told by that server). Returns a token for :meth:`unsubscribe`,
        never given again (not the listener's ``id``, which a later listener may reuse once this one
        is gone: a store closed twice would then take another session's listener away)."""
        token = next(self._tokens)
        with self._lock:
            self._listeners[token] = listener
            if (self._watcher is None or not self._watcher.is_alive()) and self._con is not None:
                self._watcher = threading.Thread(target=self._watch, name="ecg-labels-watch", daemon=True)
                self._watcher.start()
        return token

    def unsubscribe(self, token: int) -> None:
        self._listeners.pop(token, None)

    def _watch(self) -> None:
        """Tell listeners of changes that other processes committed; ends with the last listener."""
        while not self._closed.wait(WATCH_S):
            with self._lock:
                if not self._listeners or self._con is None:
                    self._watcher = None
                    return
                self._current()
                version = self._version
                news = version != self._announced
                self._announced = version
                listeners = list(self._listeners.values())
            if news:     # outside the lock: a listener may hand over to a session's thread
                for listener in listeners:
                    try:
                        listener(version)
                    except Exception:  # noqa: BLE001 - one session's failure must not stop the others'
                        log.exception("ECG dashboard: a labels listener failed")

    # ------------------------------------------------------------------ exports
    def _export_frame(self) -> pd.DataFrame:
        """Every labelled beat with who labelled it, when, from where, in time order."""
        with self._lock:
            try:
                rows = [] if self._con is None else self._con.execute(
                    "SELECT sample, label, who, labelled_at, source FROM labels ORDER BY sample").fetchall()
            except sqlite3.Error as err:
                raise ValueError(f"the labels could not be read ({reason(err)}); try again") from err
        frame = pd.DataFrame(rows, columns=["sample", "label", "who", "labelled_at", "source"])
        frame["sample"] = frame["sample"].astype(np.int64)
        frame.insert(1, "time_s", frame["sample"] / self.fs)
        return frame.astype({c: object for c in ("label", "who", "labelled_at", "source")})

    def parquet_bytes(self) -> bytes:
        """The export table as Parquet (:func:`dashboard.label_exports.parquet_bytes`)."""
        return label_exports.parquet_bytes(self._export_frame())

    def csv_bytes(self) -> bytes:
        """The export table as UTF-8 CSV (:func:`dashboard.label_exports.csv_bytes`)."""
        return label_exports.csv_bytes(self._export_frame())

    def wfdb_bytes(self, record: str, extension: str = "rev") -> bytes:
        """The labels as a WFDB annotation file for ``record`` (:func:`dashboard.label_exports.wfdb_bytes`)."""
        return label_exports.wfdb_bytes(self.frame(), self.fs, record, extension)


# --------------------------------------------------------------------------- helpers
def _check_source(source: str) -> str:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}; got {source!r}")
    return source
