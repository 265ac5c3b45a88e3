"""The reviewer's labels of a run, read-only, for what the pipeline learns from them.

The dashboard (:mod:`dashboard.labels`) writes them, one SQLite database per recording beside the
run directories (``<runs>/labels/<input sha256[:24]>.sqlite``: rows of fiducial sample and label);
:func:`labels_database` is where both look. Here they are only read, through a read-only
connection, so that training a reference never changes or locks a reviewer's work.

See Also
--------
dashboard.labels.ReviewLabels : writes the labels (and exports them).
pipeline.reference_training.train_reference : what ``python -m pipeline reference --labels`` feeds them to.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

DATABASE_SUFFIX = ".sqlite"
MATCH_TOLERANCE_S = 0.05     # a label names the beat whose fiducial is within this of its sample
REVIEW_NORMAL = "N"          # the reviewer's "normal" button; every other label marks a beat not normal


def labels_database(run) -> Path:
    """The database of reviewer labels of the recording ``run`` analysed, in its runs folder."""
    return Path(run.path).parent / "labels" / f"{run.report['input']['sha256'][:24]}{DATABASE_SUFFIX}"


def reviewer_labels(run) -> np.ndarray:
    """Each beat's reviewer label ('' where none): the rows of :func:`labels_database` matched to
    the run's fiducials within :data:`MATCH_TOLERANCE_S`. A run nobody reviewed gives all ''."""
    from pipeline.tables import match_labels

    fiducial = run.beats["fiducial"].to_numpy()
    path = labels_database(run)
    if not path.is_file():
        return np.full(len(fiducial), "", dtype=object)
    try:
        with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as con:
            rows = con.execute("SELECT sample, label FROM labels ORDER BY sample").fetchall()
    except sqlite3.Error as err:
        raise ValueError(f"{path.name}: the reviewer's labels cannot be read ({err})") from None
    samples = np.array([r[0] for r in rows], dtype=np.int64)
    labels = np.array([r[1] for r in rows], dtype=object)
    return match_labels(fiducial, samples, labels, int(round(MATCH_TOLERANCE_S * run.fs)))


def normal_beats(run, reviewed: bool) -> np.ndarray | None:
    """Which beats of ``run`` a reference may learn as normal: the reviewer's label where there is
    one (``reviewed``; "N" is normal, anything else is not), else the run's reference annotation
    (AAMI class N); None where neither says anything (the caller decides)."""
    from pipeline.metrics import NORMAL_SYMBOLS

    annotated = "label" in run.beats
    if not reviewed and not annotated:
        return None
    normal = (np.isin(run.beats["label"].to_numpy().astype(str), list(NORMAL_SYMBOLS)) if annotated
              else np.ones(len(run.beats), dtype=bool))
    if reviewed:
        given = reviewer_labels(run)
        has = given != ""
        if not has.any() and not annotated:
            return None
        normal[has] = given[has] == REVIEW_NORMAL
    return normal
