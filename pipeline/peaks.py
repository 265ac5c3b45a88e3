"""Heartbeat fiducials from the Ricker response: adaptive threshold + 1-D non-maximum suppression,
then beat lengths as differences of the gate positions.

See Also
--------
pipeline.wavelet.ricker_response : the previous step.
pipeline.embed.embed_beats : the next step.
"""
from __future__ import annotations

from pipeline import _kernels, backend


def envelope(response):
    """Polarity-free strength of the response: a downward QRS (some leads, many PVCs) counts too."""
    return backend.xp_of(response).abs(response)


def adaptive_threshold(env, fs: float, relative: float, block_s: float, n_blocks: int):
    """Per-block threshold: ``relative`` × the median of the block maxima around each block.

    The median over several seconds follows slow amplitude changes (electrode contact, posture)
    but ignores a single huge beat or a short noise burst. Returns (thresholds, block length).
    """
    xp = backend.xp_of(env)
    block = max(1, int(round(block_s * fs)))
    n = env.shape[0]
    count = -(-n // block)
    padded = xp.zeros(count * block, dtype=env.dtype)
    padded[:n] = env
    maxima = padded.reshape(count, block).max(axis=1)
    half = n_blocks // 2
    neighbours = xp.clip(xp.arange(count)[:, None] + xp.arange(-half, half + 1)[None, :], 0, count - 1)
    level = xp.median(maxima[neighbours], axis=1)
    return (relative * level).astype(env.dtype), block


def nms_gate(env, thresholds, block: int, half_window: int):
    """Binary gate (uint8): 1 at samples above their block's threshold that are the maximum of
    ``env`` within ±``half_window`` samples. Numba kernel, CUDA or CPU by the input's type."""
    xp = backend.xp_of(env)
    gate = xp.empty(env.shape[0], dtype=xp.uint8)
    _kernels.launch("nms", env.shape[0], env, thresholds, block, half_window, gate)
    return gate


def fiducials(response, fs: float, *, refractory_s: float = 0.25, threshold: float = 0.25,
              level_block_s: float = 2.0, level_blocks: int = 9):
    """Sample indices (int64, increasing) of the heartbeats' fiducial points.

    Parameters
    ----------
    response : CuPy or NumPy array
        Ricker response of the ECG (:func:`pipeline.wavelet.ricker_response`).
    refractory_s : float
        Two beats are never closer than this; the NMS half-window.
    threshold, level_block_s, level_blocks
        See :func:`adaptive_threshold`.
    """
    xp = backend.xp_of(response)
    env = envelope(response)
    thresholds, block = adaptive_threshold(env, fs, threshold, level_block_s, level_blocks)
    gate = nms_gate(env, thresholds, block, max(1, int(round(refractory_s * fs))))
    return xp.flatnonzero(gate).astype(xp.int64)


def refine_to_extremum(signal, positions, fs: float, *, search_s: float = 0.05, baseline_s: float = 0.15):
    """Move each fiducial to the largest deflection of the ECG itself within ±``search_s``.

    The envelope peak marks the QRS complex; the R (or, for a downward beat, S/QS) extremum is
    where annotators put the beat. The deflection is measured from the mean over ±``baseline_s``,
    so baseline wander does not pull the point. Vectorised gather: (beats, window) elements.
    """
    xp = backend.xp_of(signal)
    if positions.shape[0] == 0:
        return positions
    n = signal.shape[0]
    search, base = int(round(search_s * fs)), int(round(baseline_s * fs))
    around = xp.clip(positions[:, None] + xp.arange(-search, search + 1)[None, :], 0, n - 1)
    wide = xp.clip(positions[:, None] + xp.arange(-base, base + 1)[None, :], 0, n - 1)
    baseline = signal[wide].mean(axis=1, keepdims=True)
    best = xp.abs(signal[around] - baseline).argmax(axis=1)
    return around[xp.arange(positions.shape[0]), best]


def beat_lengths(positions):
    """Samples between consecutive fiducials (``xp.diff``)."""
    return backend.xp_of(positions).diff(positions)


def length_histogram(lengths, fs: float, bin_s: float = 0.02, max_s: float = 2.5):
    """Histogram of beat lengths in seconds: (counts, bin edges), on the input's device."""
    xp = backend.xp_of(lengths)
    edges = xp.arange(0.0, max_s + bin_s, bin_s)
    counts, edges = xp.histogram(lengths / fs, bins=edges)
    return counts, edges
