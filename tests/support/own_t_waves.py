"""A recording in which small, wide ventricular beats' tall T waves outgrow them in the Ricker
response, so that the non-maximum suppression keeps the T wave and drops the beat, as
:func:`pipeline.peaks.off_own_t_waves` meets them."""
from __future__ import annotations

import numpy as np


def spikes(fs, n, centres, heights, sigma_s):
    """``n`` samples at ``fs`` of Gaussians of width ``sigma_s`` (s) and ``heights`` at ``centres``."""
    t = np.arange(n)
    signal = np.zeros(n)
    for c, h in zip(centres, heights):
        signal += h * np.exp(-0.5 * ((t - c) / (sigma_s * fs)) ** 2)
    return signal


def t_waves_outgrowing(fs: float, seconds: float = 60.0, seed: int = 7):
    """Narrow QRS complexes (sigma 8 ms) 0.8 s apart with small T waves; every fourth beat is early
    (0.5 s after the third, 1.4 s before the next), small and wider (sigma 12 ms), with a tall,
    broad T wave (sigma 45 ms) 190 ms after it whose Ricker response outgrows the beat's own.

    Returns (float32 signal, the normal beats, the wide beats, their T waves)."""
    n = int(seconds * fs)
    cycle = 1.0 + 3.5 * np.arange(16)
    normal = np.round(np.concatenate([cycle, cycle + 0.8, cycle + 1.6]) * fs).astype(np.int64)
    normal = np.sort(normal[normal < (seconds - 2) * fs])
    wide = np.round((cycle + 2.1) * fs).astype(np.int64)
    wide = wide[wide < (seconds - 2) * fs]
    signal = spikes(fs, n, normal, np.full(normal.size, 1.5), sigma_s=0.008)
    signal += spikes(fs, n, normal + int(0.3 * fs), np.full(normal.size, 0.2), sigma_s=0.04)
    signal += spikes(fs, n, wide, np.full(wide.size, 0.6), sigma_s=0.012)
    t_waves = wide + int(0.19 * fs)
    signal += spikes(fs, n, t_waves, np.full(wide.size, 1.5), sigma_s=0.045)
    signal = (signal + 0.01 * np.random.default_rng(seed).standard_normal(n)).astype(np.float32)
    return signal, normal, wide, t_waves
