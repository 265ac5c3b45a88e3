"""The SQLite file that keeps one recording's reviewer labels: its schema, creating it, one
transaction, the lock that lets one process at a time open or repair it, and what to do with a
damaged one (rename it aside, salvage the rows that can still be read).

See Also
--------
dashboard.labels.ReviewLabels : the labels kept in it (reading, writing, undo, listeners).
pipeline.reviewed : where the file lives beside the runs.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

SOURCES = ("beat", "selection", "family", "undo", "migrated", "recovered")   # where a row's label came from
SCHEMA_VERSION = 1

# Errors that mean the file is not a database we can read: moved aside, not retried.
_DAMAGED = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CANTOPEN"}
COLUMNS = ("sample", "label", "who", "labelled_at", "source", "change")
SCHEMA = """
CREATE TABLE IF NOT EXISTS labels (
    sample INTEGER PRIMARY KEY,     -- the beat's fiducial sample
    label TEXT NOT NULL,
    who TEXT NOT NULL,
    labelled_at TEXT NOT NULL,      -- ISO 8601, UTC
    source TEXT NOT NULL,           -- one of SOURCES
    change TEXT NOT NULL            -- the call that wrote the row: an undo restores only its own rows
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class Damaged(Exception):
    """The labels file is not a database this code can read."""


def reason(err: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none), for one-line messages."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def as_damaged(err: sqlite3.Error) -> Exception:
    """:class:`Damaged` for an error that means the file cannot be read as a database; else ``err``."""
    return Damaged(reason(err)) if getattr(err, "sqlite_errorname", "") in _DAMAGED else err


def create_file(path: Path) -> None:
    """Create an empty database file as the other outputs are created (0666 less the umask);
    SQLite would create it 0644, and its log files copy the database's mode."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


@contextlib.contextmanager
def transaction(con: sqlite3.Connection):
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def folder_lock(folder: Path):
    """An exclusive lock on the labels folder while a process opens, repairs or imports, so that
    two servers starting together never both move the same file aside (the second then finds the
    first one's fresh database)."""
    try:
        import fcntl
    except ImportError:       # not POSIX: no lock, the rest still works
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)          # closing releases the lock


def rename_aside(path: Path) -> Path:
    """Rename ``path`` to ``<name>.unreadable-<time>`` (never over an earlier one); the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, k = path.with_name(f"{path.name}.unreadable-{stamp}"), 1
    while aside.exists():
        aside, k = path.with_name(f"{path.name}.unreadable-{stamp}-{k}"), k + 1
    os.rename(path, aside)
    return aside


def salvage(path: Path) -> list[tuple]:
    """The rows of a damaged database that can still be read, in table order until the first error."""
    rows: list[tuple] = []
    try:
        con = sqlite3.connect(path, timeout=1.0, isolation_level=None)
    except sqlite3.Error:
        return rows
    try:
        for row in con.execute(f"SELECT {', '.join(COLUMNS)} FROM labels"):
            sample, label, who, at, source, change = row
            if isinstance(sample, int) and isinstance(label, str) and label.strip():
                rows.append((sample, label, str(who), str(at), "recovered" if source not in SOURCES else source,
                             str(change)))
    except sqlite3.Error:
        pass
    finally:
        con.close()
    return rows
