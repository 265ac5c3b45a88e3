"""Training a reference from annotated runs: the normal beats of many recordings, their k-means
centroids, and the tail tables that calibrate each statistic (the combined one cross-fitted).

See Also
--------
pipeline.reference_score.reference_statistics : the statistics whose tails are fitted here.
pipeline.reference_store.save_reference : writes the trained reference.
"""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline import PipelineWarning, calibrate
from pipeline.metrics import NORMAL_SYMBOLS  # AAMI class N: the only beats a reference learns from
from pipeline.reference_score import reference_statistics, resample_rows
from pipeline.reference_store import COMPONENTS, Reference, ReferenceConfig


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


def train_reference(inputs: Sequence, labels: Sequence | None = None, cfg: ReferenceConfig = ReferenceConfig(),
                    progress=None) -> Reference:
    """Train a reference from run directories or arrays.

    Parameters
    ----------
    inputs : sequence
        Each a run directory written by ``python -m pipeline run``/``batch`` (its
        ``embeddings.npy``, ``beats.parquet`` and ``report.json``, read by
        :func:`pipeline.results.load_run`), a :class:`~pipeline.results.RunResult`, or a
        ``(rows, positions, fs, pre)`` tuple of the product's native-rate rows.
    labels : sequence, optional
        Per input, the beats that are normal: a boolean array, or beat symbols (MIT-BIH; AAMI
        class N = ``N L R e j`` counts as normal). Default: a run's ``label`` column (the reference
        annotations matched to its beats) where it has one; an input with neither counts every
        beat as normal (with a warning: its abnormal beats will count as normal variation).
        Labels only choose the normal beats; nothing else here reads them.
    progress : callable, optional
        ``progress(fraction, message)``.

    Returns
    -------
    Reference
        Centroids: k-means of up to ``beats_per_record`` normal beats of each input. Tail tables
        of each statistic over every input's normal beats; the combined statistic's table is
        cross-fitted (each input's normal beats scored against component tables fitted without
        it), so that scoring a new recording and fitting the table see the same uncertainty.
    """
    inputs = list(inputs)
    if len(inputs) < 2:
        raise ValueError(f"a reference needs at least 2 recordings (their normal beats are compared across "
                         f"recordings); got {len(inputs)}")
    if labels is not None and len(labels) != len(inputs):
        raise ValueError(f"labels must give one entry per input; got {len(labels)} for {len(inputs)} inputs")
    beats = [reference_beats(item, None if labels is None else labels[i], cfg) for i, item in enumerate(inputs)]
    return fit_reference(beats, cfg, progress=progress)


def fit_reference(recordings: Sequence[ReferenceBeats], cfg: ReferenceConfig = ReferenceConfig(),
                  progress=None) -> Reference:
    """:func:`train_reference` on prepared :class:`ReferenceBeats` (host arrays)."""
    from sklearn.cluster import KMeans

    say = progress or (lambda fraction, message: None)
    rng = np.random.default_rng(cfg.seed)
    sample = []
    for rec in recordings:
        normal = np.flatnonzero(rec.normal)
        if len(normal):
            sample.append(rec.rows[rng.choice(normal, min(cfg.beats_per_record, len(normal)), replace=False)])
    sample = np.concatenate(sample) if sample else np.zeros((0, cfg.width), np.float32)
    if len(sample) < 2 * cfg.centroids:
        raise ValueError(f"need at least {2 * cfg.centroids} normal beats to place {cfg.centroids} centroids; "
                         f"got {len(sample)}")
    say(0.1, f"k-means of {len(sample):,} normal beats")
    centroids = KMeans(cfg.centroids, n_init=1, max_iter=100, random_state=cfg.seed).fit(sample).cluster_centers_
    centroids = centroids.astype(np.float32)
    say(0.6, "statistics of every recording")
    stats = []
    for rec in recordings:
        values, _ = reference_statistics(rec.rows, rec.positions, rec.fs, centroids, cfg)
        stats.append({name: values[name][rec.normal] for name in COMPONENTS})
    tables = {name: calibrate.fit_tail(np.concatenate([s[name] for s in stats])) for name in COMPONENTS}
    say(0.8, "cross-fitted calibration of the combined score")
    combined = []
    for i, own in enumerate(stats):
        if not len(own["shape"]):
            continue
        others = {name: calibrate.fit_tail(np.concatenate([s[name] for j, s in enumerate(stats) if j != i]))
                  for name in COMPONENTS}
        combined.append(calibrate.fisher_statistic(
            {name: calibrate.log_tail_p(own[name], others[name]) for name in COMPONENTS}, cfg.weights))
    tables["combined"] = calibrate.fit_tail(np.concatenate(combined), "identity")
    digest = hashlib.sha256()
    for rec in recordings:
        for array in (rec.rows, rec.positions, rec.normal):
            digest.update(np.ascontiguousarray(array).tobytes())
    meta = {"training_data_sha256": digest.hexdigest(),
            "records": [dict(rec.source, beats=int(len(rec.rows)), normal_beats=int(rec.normal.sum()))
                        for rec in recordings],
            "normal_beats": int(sum(int(rec.normal.sum()) for rec in recordings)),
            "what_it_saw": "reference-rate beat rows and fiducials of every beat; labels only to choose the "
                           "normal (AAMI N) beats whose statistics and rows define the population"}
    say(1.0, "done")
    return Reference(cfg, centroids, tables, meta)


def reference_beats(item, labels, cfg: ReferenceConfig) -> ReferenceBeats:
    """A training input as :class:`ReferenceBeats` (see :func:`train_reference`). A run's
    low-quality beats (its ``quality`` column) are never normal examples: noise is no normal
    variation of a heartbeat."""
    if isinstance(item, (str, Path)):
        from pipeline.results import load_run   # a finished run's directory: read as the product reads it

        item = load_run(Path(item))
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

