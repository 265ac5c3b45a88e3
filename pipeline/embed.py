"""Prune implausible beats and embed each remaining one into a fixed-length, zero-padded row.

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
    """Kept beats: ``rows`` (n, width) float32, and for each its candidate index and fiducial."""

    rows: object
    candidate: object   # index into the fiducials array
    fiducial: object    # sample index of the fiducial point
    length: object      # samples to the next fiducial
    scale: float        # the recording's typical beat amplitude (rows are divided by it)


def embed_beats(signal, positions, fs: float, *, width: int, pre_fiducial: float = 0.25,
                min_beat_s: float = 0.25, max_beat_s: float = 2.0) -> Beats:
    """Cut beat i from ``positions[i] - pre`` to ``positions[i+1] - pre`` (``pre = pre_fiducial ×
    width``), so that every row has its fiducial point at the same column; subtract the beat's
    mean, zero-pad to ``width`` (or truncate), and divide all rows by the median peak-to-peak
    amplitude so that recordings in different units give comparable rows.

    Beats shorter than ``min_beat_s`` or longer than ``max_beat_s`` (missed or spurious
    fiducials), and beats whose window leaves the recording, are dropped. The last fiducial has
    no successor and starts no beat.
    """
    xp = backend.xp_of(signal)
    if signal.ndim != 1 or signal.dtype != xp.float32:
        raise ValueError(f"signal must be a 1-D float32 array; got {signal.dtype} with shape {signal.shape}")
    if positions.ndim != 1 or positions.dtype.kind != "i":
        raise ValueError(f"positions must be a 1-D array of sample indices (integers); "
                         f"got {positions.dtype} with shape {positions.shape}")
    if width < 1:
        raise ValueError(f"width must be at least 1 sample; got {width}")
    n_candidates = max(int(positions.shape[0]) - 1, 0)
    pre = int(round(pre_fiducial * width))
    rows = xp.empty((n_candidates, width), dtype=xp.float32)
    keep = xp.empty(n_candidates, dtype=xp.uint8)
    _kernels.launch("prune_embed", n_candidates, signal, positions,
                    int(round(min_beat_s * fs)), int(round(max_beat_s * fs)), pre, rows, keep)
    kept = xp.flatnonzero(keep)
    rows = rows[kept]
    scale = float(xp.median(rows.max(axis=1) - rows.min(axis=1))) if rows.shape[0] else 1.0  # sync point
    rows /= scale if scale > 0 else 1.0
    lengths = positions[kept + 1] - positions[kept]
    return Beats(rows, kept, positions[kept], lengths, scale)
