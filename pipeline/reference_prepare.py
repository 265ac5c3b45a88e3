"""One training recording of a reference, prepared where it is read: its normal beats chosen, its
rows at the reference rate, and the small pieces of it that training needs.

Training (:mod:`pipeline.reference_training`) runs these functions one recording at a time, on
Dask workers or in its own process, so that only one recording's rows (about 100 MB for a
22-hour recording) are held per task and only small arrays go back to the driver:

- :func:`prepare_record` reads a training input and returns it as :class:`ReferenceBeats`, with the
  warnings the choice of its normal beats gave (they are the driver's to show);
- :func:`record_facts` and :func:`sample_rows` take the prepared record and return its counts,
  source and digest, and the k-means sample rows the driver drew for it;
- :func:`record_statistics` prepares the record again and returns its normal beats' statistics
  against the centroids: three 1-D float32 arrays.

See Also
--------
pipeline.embed.embed_beats : the rows prepared here (the step before).
pipeline.reference_training.train_reference : conducts the two passes over these functions.
"""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import PipelineWarning
from pipeline.metrics import NORMAL_SYMBOLS  # AAMI class N: the only beats a reference learns from
from pipeline.reference_score import reference_statistics, resample_rows
from pipeline.reference_store import COMPONENTS, ReferenceConfig


@dataclass
class ReferenceBeats:
    """One training recording: reference-rate ``rows`` (n, width), its beats' ``positions`` at
    ``fs``, ``normal`` (bool (n,): the beats whose statistics define "normal"), and ``source``
    (a name and, where known, the SHA-256 of the recording) for the reference's record."""

    rows: np.ndarray
    positions: np.ndarray
    fs: float
    normal: np.ndarray
    source: dict


@dataclass(frozen=True)
class RecordFacts:
    """What the driver learns of a prepared record before it draws the record's k-means sample:
    its counts, its source, its data's digest (:func:`record_digest`) and the warnings its
    preparation gave."""

    beats: int
    normal_beats: int
    source: dict
    sha256: str
    warnings: tuple[str, ...]

    def record(self) -> dict:
        """The record's entry in the reference's ``meta["records"]``."""
        return record_entry(self.source, self.beats, self.normal_beats, self.sha256)


def record_entry(source: dict, beats: int, normal_beats: int, sha256: str) -> dict:
    """A training record as the reference's ``meta["records"]`` lists it."""
    return dict(source, beats=beats, normal_beats=normal_beats, data_sha256=sha256)


def record_digest(beats: ReferenceBeats) -> str:
    """SHA-256 of what a reference learns from one record: its rows, positions and normal flags."""
    digest = hashlib.sha256()
    for array in (beats.rows, beats.positions, beats.normal):
        digest.update(np.ascontiguousarray(array))
    return digest.hexdigest()


def training_digest(record_digests) -> str:
    """The training data's SHA-256: over the records' own digests (:func:`record_digest`), in input
    order. Each record is hashed where it is read, so no process needs another record's bytes."""
    return hashlib.sha256("".join(record_digests).encode()).hexdigest()


@dataclass(frozen=True)
class TaskError:
    """An input's error (a ValueError or OSError) that a task returns instead of raising it: a Dask
    worker logs a task that raises as a failure, traceback and all, on the command's stderr, and
    the error is the driver's to report, in one line."""

    error: Exception


def guarded(function, *args):
    """``function(*args)``, or the input's error as a :class:`TaskError` (what a task runs)."""
    if any(isinstance(arg, TaskError) for arg in args):
        return next(arg for arg in args if isinstance(arg, TaskError))
    try:
        return function(*args)
    except (ValueError, OSError) as err:
        return TaskError(err)


def reference_beats(item, labels, cfg: ReferenceConfig, reviewer_labels: bool = False) -> ReferenceBeats:
    """A training input as :class:`ReferenceBeats` (see :func:`~pipeline.reference_training.train_reference`).
    A run's low-quality beats (its ``quality`` column) are never normal examples: noise is no
    normal variation of a heartbeat. ``reviewer_labels``: a run directory's normal beats are those
    of :func:`pipeline.reviewed.normal_beats` (the reviewer's labels win over its annotations)."""
    if isinstance(item, (str, Path)):
        item = _load_run(Path(item))
    clean = None
    if isinstance(item, tuple):
        if len(item) != 4:
            raise ValueError(f"an array input must be (rows, positions, fs, pre); got a tuple of {len(item)}")
        rows, positions, fs, pre = item
        source, symbols = {"name": f"arrays {len(rows)} beats"}, None
    elif hasattr(item, "embeddings") and hasattr(item, "beats"):
        report = item.report
        rows, positions = np.asarray(item.embeddings), item.beats["fiducial"].to_numpy()
        fs = float(report["input"]["fs"])
        pre = int(round(report["config"]["signal"]["pre_fiducial"] * rows.shape[1]))
        source = {"name": Path(report["input"]["path"]).name, "sha256": report["input"].get("sha256"),
                  "annotations_sha256": report["input"].get("annotations_sha256"), "run": str(item.path.name)}
        symbols = item.beats["label"].to_numpy() if "label" in item.beats else None
        if reviewer_labels and labels is None:
            from pipeline.reviewed import normal_beats

            symbols = normal_beats(item, True)     # None: neither reviewed nor annotated
        if "quality" in item.beats:
            from pipeline.quality import LOW_QUALITY

            clean = item.beats["quality"].to_numpy() >= LOW_QUALITY
    else:
        raise ValueError(f"inputs must be run directories, RunResults or (rows, positions, fs, pre) tuples; "
                         f"got {type(item).__name__}")
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    positions = np.asarray(positions, dtype=np.int64)
    chosen = labels if labels is not None else symbols
    if chosen is None:
        warnings.warn(f"{source['name']}: no labels; every beat counts as normal in the reference",
                      PipelineWarning, stacklevel=3)
        normal = np.ones(len(rows), dtype=bool)
    else:
        chosen = np.asarray(chosen)
        normal = chosen.astype(bool) if chosen.dtype == bool else np.isin(chosen.astype(str), list(NORMAL_SYMBOLS))
    if normal.shape != (len(rows),):
        raise ValueError(f"{source['name']}: labels must give one entry per beat; got {normal.shape[0]} "
                         f"for {len(rows)} beats")
    if clean is not None:
        normal &= clean
    return ReferenceBeats(resample_rows(rows, fs, pre, cfg), positions, fs, normal, source)


def _load_run(path: Path):
    """A finished run's directory, read as the product reads it; one line naming it if it cannot be."""
    from pipeline.results import load_run, printable_path

    try:
        return load_run(path)
    except (OSError, ValueError, KeyError) as err:
        detail = str(err).splitlines()[0] if str(err) else "no detail"
        raise ValueError(f"{printable_path(path)}: not a readable run folder ({type(err).__name__}: {detail})") \
            from None


# --------------------------------------------------------------------------- the tasks
def prepare_record(item, labels, reviewer_labels: bool, cfg: ReferenceConfig) -> tuple[ReferenceBeats, tuple]:
    """:func:`reference_beats`, and the messages of the warnings it gave (caught here: on a Dask
    worker they would reach the worker's log, not the person training)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PipelineWarning)
        beats = reference_beats(item, labels, cfg, reviewer_labels)
    for other in (w for w in caught if not issubclass(w.category, PipelineWarning)):
        warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    return beats, tuple(str(w.message) for w in caught if issubclass(w.category, PipelineWarning))


def record_facts(prepared) -> RecordFacts:
    """The counts, source and warnings of a :func:`prepare_record` result."""
    beats, messages = prepared
    return RecordFacts(len(beats.rows), int(beats.normal.sum()), beats.source, record_digest(beats), messages)


def draw_sample(rng: np.random.Generator, normal_beats: int, cfg: ReferenceConfig) -> np.ndarray | None:
    """Which of a record's normal beats go into the k-means sample (positions among its normal
    beats; None for a record without any). Drawn by the driver, record after record, from one
    generator: ``rng.choice(n, ...)`` consumes the generator as ``rng.choice(normal, ...)`` does
    for any array ``normal`` of n entries and returns the positions that call picks."""
    if not normal_beats:
        return None
    return rng.choice(normal_beats, min(cfg.beats_per_record, normal_beats), replace=False)


def sample_rows(prepared, picks: np.ndarray | None) -> np.ndarray | None:
    """The rows of the normal beats at positions ``picks`` (:func:`draw_sample`), in that order."""
    beats, _ = prepared
    return None if picks is None else beats.rows[np.flatnonzero(beats.normal)[picks]]


def record_statistics(item, labels, reviewer_labels: bool, centroids: np.ndarray, cfg: ReferenceConfig) -> dict:
    """The record's normal beats' statistics ({component: float32 (normal beats,)}) against
    ``centroids``. The record is prepared again (its warnings were shown by the first pass),
    which costs a second read and resampling but keeps nothing between the passes."""
    beats, _ = prepare_record(item, labels, reviewer_labels, cfg)
    values, _ = reference_statistics(beats.rows, beats.positions, beats.fs, centroids, cfg)
    return {name: values[name][beats.normal] for name in COMPONENTS}
