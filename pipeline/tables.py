"""The run's tables: one row a beat (fiducial, RR intervals, latent point, outlier score and what
explains it, the reference label it matched) and one row an episode (flutter, noise, pause).

See Also
--------
pipeline.score.score_beats : the scores that go into the beats table (the previous step).
pipeline.results.write_run : writes both tables into the run directory (the next step).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipeline import calibrate
from pipeline.metrics import NORMAL_SYMBOLS

if TYPE_CHECKING:
    import pandas as pd   # imported where a table is made: finding a cached run needs none (0.5-0.7 s)


# Columns that explain the outlier score (``components`` of :func:`beats_table`), in table order: the
# reference's calibrated components, then the recording's own ranking (its VAE and rhythm) and the
# rhythm's measures.
SCORE_COMPONENTS = {
    **calibrate.COLUMNS,
    "score_recording": "within-recording outlier score: -log10 of the Fisher-combined p_shape and p_rhythm "
                       "(as unusual as 1 beat in 10^score of this recording; no scale shared across recordings)",
    "score_shape": "the VAE's shape score: negative ELBO of the beat (higher = less like the recording's beats)",
    "score_rhythm": "rhythm score: sqrt(z_early² + z_pause²), robust z-scores of rr_pre / rr_post in this recording",
    "p_shape": "fraction of the recording's beats whose shape score is at least this high",
    "p_rhythm": "fraction of the recording's beats whose rhythm score is at least this high",
    "rr_pre": "RR interval before the beat / local median RR (NaN for the first beat)",
    "rr_post": "RR interval after the beat / local median RR",
    "prematurity": "1 - rr_pre: 0.28 = the beat came 28 % early",
    "local_rr_s": "median RR of the ~17 intervals around the beat, seconds",
}


# The episodes of a run, one row each, in time order: ventricular flutter/fibrillation, noise and
# lost-signal stretches (pipeline.episodes) and pauses (RR intervals of at least SignalConfig.pause_s).
EPISODE_COLUMNS = {
    "kind": "flutter | noise | lost | pause",
    "start_s": "start, seconds from the recording's first sample (a pause: the beat before it)",
    "end_s": "end, seconds (a pause: the beat after it)",
    "confidence": "how sure the detector is, 0-1 (a pause: 1, or 0.5 across noise or lost signal)",
}


def episodes_table(found, pauses: np.ndarray, fs: float) -> pd.DataFrame:
    """One frame of the detector's episodes (:class:`pipeline.episodes.Episodes`) and the pauses
    ((n, 2) host fiducial samples). A pause across a flutter episode is left out: the beats there
    were taken out, not missing. A pause across noise or lost signal is in doubt (confidence 0.5):
    the beats there may be hidden, not missing."""
    import pandas as pd

    frame = found.to_frame()
    start, end = pauses[:, 0] / fs, pauses[:, 1] / fs

    def across(*kinds: str) -> np.ndarray:
        met = np.zeros(len(start), dtype=bool)
        for lo, hi in frame.loc[frame["kind"].isin(kinds), ["start_s", "end_s"]].itertuples(index=False):
            met |= (start < hi) & (end > lo)
        return met

    kept, noisy = ~across("flutter"), across("noise", "lost")   # pipeline.episodes.UNREADABLE (not imported here)
    rows = pd.DataFrame({"kind": "pause", "start_s": start[kept], "end_s": end[kept],
                         "confidence": np.where(noisy[kept], 0.5, 1.0).astype(np.float32)})
    table = pd.concat([frame, rows], ignore_index=True) if len(rows) else frame
    table = table.astype({"kind": object, "start_s": np.float64, "end_s": np.float64, "confidence": np.float32})
    return table.sort_values("start_s", kind="stable").reset_index(drop=True)[list(EPISODE_COLUMNS)]


def doubtful_pauses(episodes: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows of an episodes frame (:data:`EPISODE_COLUMNS`) that are pauses the
    detector is unsure of: confidence under 1, across noise (:func:`episodes_table`)."""
    return ((episodes["kind"] == "pause") & (episodes["confidence"] < 1)).to_numpy()


def beats_table(*, fiducial, length, start, fs, is_train, z, score, annotations=None, components=None,
                tolerance_s: float = 0.15) -> pd.DataFrame:
    """One row per beat (host arrays in); ``length`` is the samples to the next beat (-1 for the last
    one, whose ``length_s`` is NaN), so ``length_s`` is the RR interval after the beat and
    ``rr_before_s`` the one before it. ``score`` is the outlier score the views rank by (a run's
    calibrated score, :data:`pipeline.calibrate.SCORE_DESCRIPTION`);
    ``components`` (a dict of arrays named as in :data:`SCORE_COMPONENTS`) are added as float32
    columns after it. With reference annotations, each beat gets the symbol of the nearest
    reference beat within ``tolerance_s`` ('' when none) and ``abnormal``."""
    import pandas as pd

    table = pd.DataFrame({
        "beat_id": np.arange(len(fiducial), dtype=np.int32),
        "start": start.astype(np.int64),
        "fiducial": fiducial.astype(np.int64),
        "time_s": fiducial / fs,
        "length": length.astype(np.int32),
        "length_s": np.where(length >= 0, length / fs, np.nan).astype(np.float32),
        "rr_before_s": np.concatenate([[np.nan], np.diff(fiducial) / fs]).astype(np.float32)[:len(fiducial)],
        "split": pd.Categorical(np.where(is_train, "train", "test"), categories=["train", "test"]),
        "z1": z[:, 0].astype(np.float32),
        "z2": z[:, 1].astype(np.float32),
        "score": score.astype(np.float32),
    })
    for name, values in (components or {}).items():
        if name not in SCORE_COMPONENTS:
            raise ValueError(f"unknown score component {name!r}; known: {', '.join(SCORE_COMPONENTS)}")
        table[name] = np.asarray(values, dtype=np.float32)
    if annotations is not None:
        table["label"] = match_labels(fiducial, *annotations, int(round(tolerance_s * fs)))
        table["abnormal"] = ~table["label"].isin(NORMAL_SYMBOLS) & (table["label"] != "")
    return table


def match_labels(fiducial: np.ndarray, ref_samples: np.ndarray, ref_symbols: np.ndarray, tolerance: int) -> np.ndarray:
    """Symbol of the nearest reference beat within ``tolerance`` samples of each fiducial, else ''."""
    labels = np.full(len(fiducial), "", dtype=object)
    if len(ref_samples) == 0 or len(fiducial) == 0:
        return labels
    order = np.argsort(ref_samples)
    ref_samples, ref_symbols = ref_samples[order], np.asarray(ref_symbols)[order]
    right = np.clip(np.searchsorted(ref_samples, fiducial), 1, len(ref_samples) - 1)
    left = right - 1
    nearest = np.where(np.abs(ref_samples[left] - fiducial) <= np.abs(ref_samples[right] - fiducial), left, right)
    if len(ref_samples) == 1:
        nearest = np.zeros(len(fiducial), dtype=np.int64)
    close = np.abs(ref_samples[nearest] - fiducial) <= tolerance
    labels[close] = ref_symbols[nearest[close]]
    return labels

