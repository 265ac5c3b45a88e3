"""Which files of a batch's inputs are recordings: files, folders and glob patterns expanded, each
recording once (a WFDB record by its ``.hea``), and how a recording is named in summaries.

See Also
--------
pipeline.batch.run_batch : runs the recordings found here.
pipeline.load.load_ecg : reads each of them.
"""
from __future__ import annotations

import glob
from pathlib import Path
from typing import Iterable

from pipeline.sidecar import ANNOTATION_SUFFIX

# A folder (or a glob) contributes the files with these endings; a WFDB record counts once, by its .hea.
RECORDING_SUFFIXES = (".csv", ".txt", ".tsv", ".csv.gz", ".txt.gz", ".npy", ".parquet", ".pq", ".hea", ".edf", ".bdf")


def find_recordings(inputs: Iterable[str], exclude: str | Path | None = None) -> list[Path]:
    """The recordings named by ``inputs``: files, folders (their recordings, not recursively) or
    glob patterns (``**`` recurses), in order, each once.

    A folder or a glob contributes files ending in one of :data:`RECORDING_SUFFIXES`, except
    annotation sidecars (``*.annotations.csv``) and hidden files; a WFDB record counts once, by
    its ``.hea``. A file named explicitly is taken as it is (a ``.dat`` stands for its ``.hea``),
    so that a bad one fails in the batch with its own error. Anything under ``exclude`` (the
    batch's output folder, whose ``.npy`` files are not recordings) is left out.

    Raises
    ------
    ValueError
        When an input does not exist, a pattern matches nothing, or nothing is left.
    """
    excluded = Path(exclude).absolute() if exclude is not None else None
    found: dict[Path, None] = {}
    for text in inputs:
        for path in _expand(str(text)):
            path = path.absolute()
            if excluded is not None and (path == excluded or excluded in path.parents):
                continue
            found.setdefault(path, None)
    if not found:
        raise ValueError(f"no recordings in {' '.join(map(str, inputs)) or '(no inputs)'}; expected files ending in "
                         f"{', '.join(RECORDING_SUFFIXES)}")
    return list(found)


def _expand(text: str) -> list[Path]:
    if any(ch in text for ch in "*?["):
        matches = sorted(Path(m) for m in glob.glob(text, recursive=True))
        picked = [r for m in matches
                  for r in (_folder_recordings(m) if m.is_dir() else [m] if _is_recording(m) else [])]
        if not picked:
            raise ValueError(f"no recordings match {text!r}")
        return picked
    path = Path(text)
    if path.is_dir():
        picked = _folder_recordings(path)
        if not picked:
            raise ValueError(f"{path} holds no recordings (files ending in {', '.join(RECORDING_SUFFIXES)})")
        return picked
    if path.suffix.lower() == ".dat" and path.with_suffix(".hea").exists():
        return [path.with_suffix(".hea")]
    if not path.exists():
        raise ValueError(f"no such file or folder: {path}")
    return [path]


def _folder_recordings(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and _is_recording(p))


def _is_recording(path: Path) -> bool:
    name = path.name.lower()
    return (not name.startswith(".") and name.endswith(RECORDING_SUFFIXES)
            and not name.endswith(ANNOTATION_SUFFIX))


def display_name(path: str | Path) -> str:
    """How a recording is named in summaries: the WFDB record name, else the file name."""
    path = Path(path)
    return path.stem if path.suffix.lower() == ".hea" else path.name

