"""Beats marked on the wrong wave, as :func:`pipeline.peaks.keep_the_rhythm` meets them: a
recording in which tall, sharp P waves outgrow their QRS complex in the Ricker response (the
non-maximum suppression then marks those beats on the P wave), and an envelope full of ties for
the rival search."""
from __future__ import annotations

import numpy as np

from pipeline.config import SignalConfig
from pipeline.peaks import adaptive_threshold, envelope
from pipeline.wavelet import ricker_response

TALL = (10, 30, 31)    # the beats with a tall P wave: one alone, two in a row


def _waves(n, centres, heights, sigma):
    t = np.arange(n)
    signal = np.zeros(n)
    for c, h in zip(centres, heights):
        signal += h * np.exp(-0.5 * ((t - c) / sigma) ** 2)
    return signal


def tall_p_waves(fs: float = 360.0, seconds: float = 60.0, seed: int = 5):
    """Narrow QRS complexes (sigma 6 ms) every 0.9 s, each with a P wave (sigma 20 ms) 0.2 s
    before it, 0.25 × the QRS's height, or 0.9 × for the beats :data:`TALL`.

    Returns (float32 signal, the fiducials of the QRS complexes, those of the P waves)."""
    n = int(seconds * fs)
    beats = np.arange(int(1.0 * fs), int((seconds - 2) * fs), int(0.9 * fs))
    tall = np.isin(np.arange(beats.size), TALL)
    p_waves = beats - int(0.2 * fs)
    signal = _waves(n, beats, np.ones(beats.size), 0.006 * fs)
    signal += _waves(n, p_waves, np.where(tall, 0.9, 0.25), 0.02 * fs)
    signal += 0.01 * np.random.default_rng(seed).standard_normal(n)
    return signal.astype(np.float32), beats, p_waves


def on_the_wrong_wave(fs: float = 360.0):
    """:func:`tall_p_waves` as keep_the_rhythm meets it: (signal, envelope, its thresholds and
    block, the beats with those of :data:`TALL` marked on their P wave, the QRS fiducials)."""
    cfg = SignalConfig()
    signal, beats, p_waves = tall_p_waves(fs)
    env = envelope(ricker_response(signal, fs, cfg.ricker_width_s))
    thresholds, block = adaptive_threshold(env, fs, cfg.threshold, cfg.level_block_s, cfg.level_blocks)
    positions = beats.astype(np.int64)
    positions[list(TALL)] = p_waves[list(TALL)]
    return signal, env, thresholds, block, positions, beats


def tied_envelope(seed: int = 3):
    """An envelope of small whole numbers (many equal maxima: the tie rule decides), thresholds
    that some rivals pass and some not, and beats at a jittered rhythm from the first sample to the
    last (the search is clipped at both ends): (envelope, thresholds, block, beats)."""
    rng = np.random.default_rng(seed)
    n, block = 40_000, 500
    env = rng.integers(0, 5, n).astype(np.float32)
    thresholds = rng.choice(np.array([1.5, 2.5, 3.5], dtype=np.float32), -(-n // block))
    positions = np.cumsum(rng.integers(200, 420, 200))
    positions = np.concatenate([[0, 3], positions[positions < n - 4], [n - 2]]).astype(np.int64)
    return env, thresholds, block, positions
