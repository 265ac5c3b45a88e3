"""How :mod:`pipeline.stress` assembles its cases: the :class:`StressCase` a case is, beats drawn by
:mod:`pipeline.synth`'s wave model at given times, the background (wander, hum, noise), the
second lead, and the random streams each case draws from.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline import synth


@dataclass
class StressCase:
    """One synthetic recording and its ground truth.

    Attributes
    ----------
    name : str
    fs : float
    signal : numpy.ndarray
        Lead II (float32, mV), written as ``ECG1``.
    second : numpy.ndarray
        Another lead (float32, mV): smaller inverted QRS complexes, more noise; ``ECG2``.
    beats : numpy.ndarray
        int64 sample of every true heartbeat's fiducial (main QRS deflection), increasing.
    symbols : numpy.ndarray
        One MIT-BIH symbol per beat (synth's: ``N``, ``V``, ``A``, ``S``), ``Q`` for a beat hidden
        in noise.
    episodes : tuple
        ``(kind, start_s, end_s)`` of every true episode, kind ``'flutter'`` or ``'noise'``.
    """

    name: str
    fs: float
    signal: np.ndarray
    second: np.ndarray
    beats: np.ndarray
    symbols: np.ndarray
    episodes: tuple = ()

    @property
    def duration_s(self) -> float:
        return self.signal.shape[0] / self.fs

    def inside(self, kind: str | None = None) -> np.ndarray:
        """Boolean per beat: inside a true episode (of ``kind``, or of any kind)."""
        mask = np.zeros(self.beats.shape[0], dtype=bool)
        for k, start, end in self.episodes:
            if kind in (None, k):
                mask |= (self.beats >= start * self.fs) & (self.beats <= end * self.fs)
        return mask


def streams(seed: int, count: int):
    return [np.random.default_rng(s) for s in np.random.SeedSequence([seed, 0x57E55]).spawn(count)]


def render_beats(fs: float, n: int, times: np.ndarray, kinds: np.ndarray, seed: int, *, heart_rate: float = 70.0,
                  qrs_scale: float = 1.0, t_wave_scale: float = 1.0, p_waves: bool = True, blocked=(),
                  p_scale: float = 1.0):
    """Beats at ``times`` (s) of ``kinds`` (0 N, 1 V) drawn by synth's wave model: (signal, fiducials,
    R amplitude). Premature beats take the T wave of the sinus cycle before them, as in synth.
    ``p_waves=False``: no atrial wave before any beat (atrial fibrillation). ``blocked``: times (s)
    where a sinus beat would be, had the AV node conducted it: its P wave alone (AV block).
    ``p_scale`` scales every P wave."""
    rng_rhythm, rng_morph, rng_beat, rng_extra = streams(seed, 4)
    rhythm = synth._Rhythm(rng_rhythm, heart_rate)
    morph = synth._Morphology(rng_morph)
    morph.scale_sinus(qrs_scale, t_wave_scale)
    morph.P *= p_scale if p_waves else 0.0
    peaks = np.rint(np.asarray(times) * fs).astype(np.int64)
    keep = (peaks >= 0) & (peaks < n)
    peaks, kinds = peaks[keep], np.asarray(kinds, dtype=np.int8)[keep]
    t_r = peaks / fs
    rr = np.diff(t_r, prepend=t_r[0] - rhythm.rr_mean) if t_r.size else t_r
    ectopic = np.flatnonzero(kinds != 0)
    rr[ectopic] = np.where(ectopic >= 1, rr[np.maximum(ectopic - 1, 0)], rhythm.rr_mean)
    signal = np.zeros(n, dtype=np.float32)
    if t_r.size:
        mu, amp, sig = synth._beat_components(morph, rhythm, rng_beat, t_r, rr, kinds, fs, rng_extra)
        synth._render_gaussians(signal, mu * fs, amp, sig * fs)
    lone = np.asarray(blocked, dtype=np.float64) - morph.n_shift - morph.p_off    # a P wave at RR = 1 s
    synth._render_gaussians(signal, lone * fs, np.full(lone.size, morph.P), np.full(lone.size, morph.p_sig * fs))
    return signal, peaks, morph.R


def background(n: int, fs: float, rng: np.random.Generator, noise_mv: float = 0.02) -> np.ndarray:
    """Baseline wander (respiration and slower), a little mains hum and white noise."""
    t = np.arange(n) / fs
    wander = (rng.uniform(0.05, 0.15) * np.sin(2 * np.pi * rng.uniform(0.2, 0.3) * t + rng.uniform(0, 6.3))
              + rng.uniform(0.05, 0.2) * np.sin(2 * np.pi * rng.uniform(0.03, 0.1) * t + rng.uniform(0, 6.3)))
    hum = 0.01 * np.sin(2 * np.pi * 50.0 * t + rng.uniform(0, 6.3))
    return (wander + hum + noise_mv * rng.standard_normal(n)).astype(np.float32)


def second_lead(signal: np.ndarray, fs: float, rng: np.random.Generator) -> np.ndarray:
    """A lead whose QRS complexes are small and inverted against lead II's (like V1), with its own
    wander and twice the white noise."""
    return (-0.35 * signal + background(signal.shape[0], fs, rng, noise_mv=0.04)).astype(np.float32)


def sinus(duration: float, rng: np.random.Generator, heart_rate: float = 70.0) -> np.ndarray:
    """Sinus beat times (s) from synth's rhythm model (HRV, respiration)."""
    rhythm = synth._Rhythm(rng, heart_rate)
    return synth._sinus_times(rhythm, rng, duration)


def assemble(name, fs, signal, beats, symbols, episodes, rng) -> StressCase:
    return StressCase(name=name, fs=float(fs), signal=signal.astype(np.float32),
                      second=second_lead(signal, fs, rng), beats=np.asarray(beats, dtype=np.int64),
                      symbols=np.asarray(symbols, dtype="<U1"), episodes=tuple(episodes))


def qrs_amplitude(signal: np.ndarray, beats: np.ndarray, fs: float) -> float:
    """The median peak-to-peak within ±50 ms of the beats: how large the QRS complexes are."""
    near = np.clip(beats[:, None] + np.arange(-int(0.05 * fs), int(0.05 * fs) + 1), 0, signal.shape[0] - 1)
    return float(np.median(np.ptp(signal[near], axis=1)))


def from_synth(name: str, ecg: "synth.SyntheticECG", episodes, rng) -> StressCase:
    return assemble(name, ecg.fs, ecg.signal, ecg.r_peaks, ecg.symbols, episodes, rng)
