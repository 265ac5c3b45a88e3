"""Leftovers of killed processes in a runs folder: the temporary folders and files a run (or a
synthetic input, or a labels file) is written to before it is renamed into place. They are removed
at a later start once their writer is gone and nothing in them has changed for a while; a run
itself is never touched.

See Also
--------
pipeline.results.write_run : writes a run in a temporary folder, then renames it.
pipeline.run.run_pipeline : cleans the runs folder when it starts.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import time
from pathlib import Path

# Temporary names in a runs folder: ``.<name>.tmp-<pid>`` or ``.<name>.trash-<pid>`` (a run being
# written or replaced; ``-<thread>`` may follow), and ``.<name>.<random>.tmp`` (files written
# beside their final name, such as a synthetic input or a labels file).
_OWNED_TEMPORARY = re.compile(r"\..+\.(?:tmp|trash)-(?P<pid>\d+)(?:-\d+)?")
_ANONYMOUS_TEMPORARY = re.compile(r"\..+\.tmp")
_RUN_KEY = re.compile(r"[0-9a-f]{16}")
# A leftover untouched for this long is no write in progress: writing a run's files, or a
# synthetic input, keeps changing their modification times. It guards the writers whose process
# cannot be asked, on another machine or in another container sharing the folder.
LEFTOVER_IDLE_S = 300.0


def clean_leftovers(root: Path, *, idle_s: float = LEFTOVER_IDLE_S) -> list[Path]:
    """Remove what killed processes left in the runs folder ``root`` (and in its folders that are
    not runs, such as ``inputs``): temporary folders and files whose writer is gone. A name that
    carries a process id is removed when no process of that id lives on this machine, a name
    without one on its age alone; either way only once nothing in it has changed for ``idle_s``
    seconds. Only hidden names of those shapes are touched, never a run. Returns what was removed."""
    root = Path(root)
    removed = []
    for folder in [root, *_side_folders(root)]:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if not name.startswith("."):
                continue
            owned = _OWNED_TEMPORARY.fullmatch(name)
            if not owned and not _ANONYMOUS_TEMPORARY.fullmatch(name):
                continue
            path = folder / name
            if owned and _alive(int(owned["pid"])):
                continue
            if _idle_for(path) < idle_s:
                continue
            if _remove(path):
                removed.append(path)
    return removed


def _side_folders(root: Path) -> list[Path]:
    """Folders of ``root`` that are not runs (nor hidden): a run's own files are never temporary."""
    try:
        with os.scandir(root) as entries:
            return [Path(e.path) for e in entries if not e.name.startswith(".") and not _RUN_KEY.fullmatch(e.name)
                    and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (taken as alive when that cannot be told)."""
    if pid <= 0:
        return False  # no process has such an id (and os.kill(0, …) would signal this process group)
    if pid == os.getpid() or os.name != "posix":  # on Windows os.kill(pid, 0) would end the process
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except OSError:
        return True  # PermissionError: it lives, under another user
    return True


def _idle_for(path: Path) -> float:
    """Seconds since ``path`` or, for a folder, anything directly in it last changed."""
    try:
        st = os.lstat(path)
        newest = st.st_mtime
        if stat.S_ISDIR(st.st_mode):
            with os.scandir(path) as entries:
                for entry in entries:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    except OSError:
        return 0.0  # gone or unreadable: leave it
    return time.time() - newest


def _remove(path: Path) -> bool:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)  # a file or a link (never followed)
    except OSError:  # another process cleaned it first, or it is not ours to remove
        return False
    return True

