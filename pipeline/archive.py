"""The archive table of a batch: one row per recording, its columns and their meaning, and
``<out>/archive.parquet``, kept up to date as recordings finish.

Every finished recording rewrites the table (by the batch's process only, to a temporary file
that is then renamed over the old one), so that an interrupted batch keeps what it finished.
:func:`read_archive` is the reader for other programs (the dashboard); it needs neither Dask nor
the pipeline's compute stack.

See Also
--------
pipeline.batch_task.run_row : a finished recording's row.
dashboard.archive : the table as a dashboard.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Iterable

import pandas as pd

from pipeline import PipelineWarning
from pipeline import one_line as _one_line
from pipeline.calibrate import OUTLIER_SCORE
from pipeline.metrics import AAMI_CLASSES
from pipeline.stages import ARCHIVED

ARCHIVE = "archive.parquet"
# name -> (dtype, meaning). Rows of failed recordings hold only input, name, status, error and
# the worker columns; the rest is missing (NaN / <NA>).
ARCHIVE_COLUMNS: dict[str, tuple[str, str]] = {
    "input": ("string", "absolute path of the recording (a WFDB record: its .hea)"),
    "name": ("string", "WFDB record name or file name, for display"),
    "status": ("string", "ok (computed now) | cached (an earlier run was reused) | failed"),
    "error": ("string", "one-line error of a failed recording, else ''"),
    "fs": ("float64", "sampling rate, Hz"),
    "samples": ("Int64", "samples in the analysed lead"),
    "duration_s": ("float64", "recording length, s"),
    "beats": ("Int64", "beats kept (scored)"),
    "outliers": ("Int64", f"beats of good quality with a calibrated score of {OUTLIER_SCORE:g} or more"),
    "outlier_fraction": ("float64", "outliers / beats"),
    "score_median": ("float64", "median outlier score of the recording"),
    "score_max": ("float64", "highest outlier score of the recording"),
    "heart_rate_bpm": ("float64", "60 / median beat length"),
    "run_dir": ("string", "the run directory (pipeline.results.load_run reads it)"),
    "key": ("string", "cache key of the run (hash of the input and every parameter)"),
    "device": ("string", "gpu | cpu"),
    "segmentation_s": ("float64", "Ricker + NMS + lengths + embedding time, s"),
    **{f"time_{stage}_s": ("float64", f"stage time of the computation that made the run: {stage}, s")
       for stage in ARCHIVED},
    "wall_s": ("float64", "time of this recording's task on its worker in this batch (a cached run: the cache check)"),
    "worker": ("string", "Dask worker that ran it"),
    "finished": ("string", "UTC time the task ended (ISO 8601)"),
    "warnings": ("string", "warnings of the run (e.g. interpolated gaps), ' | '-separated"),
    "annotated": ("boolean", "the input carries reference beat annotations (.atr or .annotations.csv)"),
    "reference_beats": ("Int64", "reference beats (annotated inputs)"),
    **{f"{what}_{ms}": ("Int64", f"{label} at {ms} ms tolerance")
       for ms in (50, 150) for what, label in (("tp", "true positives"), ("fn", "missed beats"),
                                               ("fp", "false detections"))},
    **{f"{what}_{ms}": ("float64", f"{label} at {ms} ms, %")
       for ms in (50, 150) for what, label in (("se", "sensitivity"), ("ppv", "positive predictivity"))},
    "abnormal_beats": ("Int64", f"beats labelled abnormal (not {', '.join(AAMI_CLASSES['N'])}) among those matched "
                                "to a reference beat"),
    "auroc": ("float64", "outlier-score AUROC of abnormal versus normal beats"),
}



def archive_path(out: str | Path) -> Path:
    return Path(out) / ARCHIVE


def archive_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """Rows → the archive's DataFrame: every column of :data:`ARCHIVE_COLUMNS` with its dtype,
    sorted by input path."""
    frame = pd.DataFrame(list(rows), columns=list(ARCHIVE_COLUMNS))
    frame = frame.astype({name: dtype for name, (dtype, _) in ARCHIVE_COLUMNS.items()})
    return frame.sort_values("input", ignore_index=True)


def read_archive(out: str | Path = "runs") -> pd.DataFrame:
    """The archive table of the batches written to ``out``: one row per recording.

    Columns and their meaning: :data:`ARCHIVE_COLUMNS`. ``run_dir`` of an ``ok``/``cached`` row
    is a finished run directory for :func:`pipeline.results.load_run`. Sorting by ``outliers``
    (descending) puts the recordings with the most outstanding beats first.

    Raises
    ------
    ValueError
        When ``out`` holds no archive, or it cannot be read.
    """
    path = archive_path(out)
    if not path.exists():
        raise ValueError(f"no archive table at {path}; make one with: python -m pipeline batch INPUTS… --out {out}")
    try:
        frame = pd.read_parquet(path)
    except Exception as err:
        raise ValueError(f"{path}: not a readable archive table ({one_line(err)})") from None
    return archive_frame(frame.to_dict("records"))  # columns a newer writer added are kept out


class ArchiveWriter:
    """Keeps ``<out>/archive.parquet`` up to date: earlier rows of other recordings stay; a
    recording's new row replaces its old one; each write goes to a temporary file first."""

    def __init__(self, out: Path):
        self.path = archive_path(out)
        self.rows: dict[str, dict] = {}
        if self.path.exists():
            try:
                self.rows = {row["input"]: row for row in read_archive(out).to_dict("records")}
            except ValueError as err:
                warnings.warn(f"{err}; starting a new archive table", PipelineWarning, stacklevel=2)

    def add(self, row: dict) -> None:
        self.rows[row["input"]] = row
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            archive_frame(self.rows.values()).to_parquet(tmp, index=False)
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def one_line(err: BaseException) -> str:
    """A recording's or a table's error as one line of the archive (a missing file's OSError says
    what it needs to without its type)."""
    return _one_line(err, bare=(ValueError, OSError))

