"""A recording in which a ventricular beat's tall T wave hides the normal QRS complex after it
from the beat detector's non-maximum suppression (as in MIT-BIH record 203)."""
from __future__ import annotations

import numpy as np


def _waves(n, centres, heights, sigma):
    t = np.arange(n)
    return sum(h * np.exp(-0.5 * ((t - c) / sigma) ** 2) for c, h in zip(centres, heights))


def hidden_by_t_waves(fs: float, seconds: float = 60.0, seed: int = 0):
    """Narrow QRS complexes (sigma 8 ms) every 0.8 s with small T waves; every fourth beat is
    early and wide (sigma 30 ms, 1.5 × as tall), with a tall inverted T wave 200 ms after it, and
    the next normal QRS comes 320–440 ms after the wide beat. The T wave's Ricker response
    outgrows that QRS's, and it lies within the refractory period of both.

    Returns (float32 signal, the fiducials of every beat, those of the normal beats after a wide one).
    """
    n = int(seconds * fs)
    normal, wide, hidden = [], [], []
    t, k = 1.0, 0
    while t < seconds - 1.5:
        if k % 4 == 3:
            delay = (0.32, 0.38, 0.44)[len(wide) % 3]
            wide.append(t - 0.25)
            hidden.append(t - 0.25 + delay)
            normal.append(hidden[-1])
            t = hidden[-1] + 0.8
        else:
            normal.append(t)
            t += 0.8
        k += 1
    normal, wide, hidden = (np.round(np.array(x) * fs).astype(np.int64) for x in (normal, wide, hidden))
    signal = _waves(n, normal, np.ones(normal.size), 0.008 * fs)
    signal += _waves(n, normal + int(0.3 * fs), np.full(normal.size, 0.2), 0.04 * fs)
    signal += _waves(n, wide, np.full(wide.size, 1.5), 0.03 * fs)
    signal -= _waves(n, wide + int(0.2 * fs), np.full(wide.size, 1.5), 0.035 * fs)
    signal += 0.01 * np.random.default_rng(seed).standard_normal(n)
    return signal.astype(np.float32), np.sort(np.concatenate([normal, wide])), hidden
