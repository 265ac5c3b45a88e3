"""Embed every detected beat into a fixed-length, zero-padded row.

See Also
--------
pipeline.peaks.fiducials : the previous step.
pipeline.train.fit_vae : the next step.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline import _kernels, backend


@dataclass
class Beats:
    """Every detected beat: ``rows`` (n, width) float32, and for each its fiducial and length."""

    rows: object
    fiducial: object    # sample index of the fiducial point
    length: object      # samples to the next fiducial (-1 for the last beat: it has none)
    scale: float        # the recording's typical beat amplitude (rows are divided by it)


def embed_beats(signal, positions, fs: float, *, width: int, pre_fiducial: float = 0.25) -> Beats:
    """Cut beat i from ``positions[i] - pre`` to ``positions[i+1] - pre`` (``pre = pre_fiducial ×
    width``), so that every row has its fiducial point at the same column; subtract the beat's
    mean, zero-pad to ``width`` (or truncate), and divide all rows by the median peak-to-peak
    amplitude so that recordings in different units give comparable rows.

    Every fiducial starts a beat, whatever its interval: a beat before a 3 s pause is what a
    Holter report lists, and one after a premature beat is the premature beat's neighbour. The
    last beat, which has no successor, gets a full row; windows that reach past either end of the
    recording are zero there.
    """
    xp = backend.xp_of(signal)
    if signal.ndim != 1 or signal.dtype != xp.float32:
        raise ValueError(f"signal must be a 1-D float32 array; got {signal.dtype} with shape {signal.shape}")
    if positions.ndim != 1 or positions.dtype.kind != "i":
        raise ValueError(f"positions must be a 1-D array of sample indices (integers); "
                         f"got {positions.dtype} with shape {positions.shape}")
    if width < 1:
        raise ValueError(f"width must be at least 1 sample; got {width}")
    count = int(positions.shape[0])
    pre = int(round(pre_fiducial * width))
    rows = xp.empty((count, width), dtype=xp.float32)
    _kernels.launch("embed", count, signal, positions, pre, rows)
    scale = float(xp.median(rows.max(axis=1) - rows.min(axis=1))) if count else 1.0  # sync point
    rows /= scale if scale > 0 else 1.0
    lengths = xp.concatenate([xp.diff(positions), xp.full(min(count, 1), -1, dtype=positions.dtype)])
    return Beats(rows, positions, lengths, scale)


def beat_coherence(rows, pre_fiducial: float, window_s: float, *, most: int = 4096) -> float:
    """How much the beats look alike around their fiducial: the median correlation of each row's
    ±60 ms QRS window (around column ``pre_fiducial × width``) with that of the median beat, over
    at most ``most`` evenly spaced rows. An ECG's beats share a QRS complex (above 0.9 on MIT-BIH
    and the synthetic recordings); the "beats" found in noise do not (below 0.2). One sync."""
    xp = backend.xp_of(rows)
    count, width = int(rows.shape[0]), int(rows.shape[1])
    if count < 2:
        return 1.0
    centre = int(round(pre_fiducial * width))
    half = max(4, int(round(0.06 * width / window_s)))
    qrs = rows[:: max(1, count // most), max(centre - half, 0):centre + half + 1]
    qrs = qrs - qrs.mean(axis=1, keepdims=True)
    template = xp.median(qrs, axis=0)
    template = template - template.mean()
    norms = xp.sqrt((qrs * qrs).sum(axis=1) * (template * template).sum())
    correlation = (qrs @ template) / xp.maximum(norms, xp.float32(1e-12))
    return float(xp.median(correlation))
