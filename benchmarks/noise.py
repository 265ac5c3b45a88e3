"""Noise added to annotated recordings in the noise stress test's layout, for the detection
benchmark's ``--noise`` sections (:mod:`benchmarks.detection`).

The layout and the signal-to-noise ratio follow WFDB's ``nst``, which made the MIT-BIH Noise
Stress Test Database: a five-minute noise-free learning period, then two-minute stretches with and
without noise in turn; the SNR is S/N in dB, S the square of the median QRS peak-to-peak amplitude
/ 8 (a sine's power), N the noise's mean square. The noise itself is synthetic, seeded, shaped
after that database's three kinds; it is not theirs, so the figures show how the detector degrades,
not what it would score there:

- ``ma``, muscle artefact: broadband (10–150 Hz, below Nyquist), in bursts that wax and wane;
- ``em``, electrode motion: 0.5–10 Hz swings whose size wanders, with baseline steps;
- ``bw``, baseline wander: below 0.5 Hz (breathing, drift).
"""
from __future__ import annotations

import numpy as np
from scipy.signal import butter, sosfiltfilt

KINDS = ("ma", "em", "bw")
LEARNING_S = 300.0      # nst's noise-free start
STRETCH_S = 120.0       # then noisy and clean stretches of this length in turn
QRS_REACH_S = 0.05      # a QRS complex's peak-to-peak is read within ± this of its annotation


def _filtered(rng, n: int, fs: float, band, order: int = 2):
    low, high = band
    high = min(high, 0.45 * fs) if high else None
    if low and high:
        sos = butter(order, [low, high], "bandpass", fs=fs, output="sos")
    elif high:
        sos = butter(order, high, "lowpass", fs=fs, output="sos")
    else:
        sos = butter(order, low, "highpass", fs=fs, output="sos")
    return sosfiltfilt(sos, rng.standard_normal(n))


def noise(kind: str, n: int, fs: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of noise of ``kind`` (:data:`KINDS`) at ``fs`` Hz, zero mean, unit RMS."""
    if kind not in KINDS:
        raise ValueError(f"noise kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if kind == "bw":
        x = _filtered(rng, n, fs, (None, 0.5))
    else:
        band, swell_hz = ((10.0, 150.0), 1.0) if kind == "ma" else ((0.5, 10.0), 0.2)
        swell = np.abs(_filtered(rng, n, fs, (None, swell_hz)))
        x = _filtered(rng, n, fs, band, order=4 if kind == "ma" else 2) * (0.5 + 0.5 * swell / swell.mean())
        if kind == "em":   # a step every ~20 s, each relaxing back over ~20 s as electrodes settle
            steps = np.zeros(n)
            count = max(1, int(n / (20 * fs)))
            steps[rng.integers(0, n, count)] = 0.5 * x.std() * rng.standard_normal(count)
            level = np.cumsum(steps)
            x = x + level - sosfiltfilt(butter(1, 0.05, "lowpass", fs=fs, output="sos"), level)
    x = x - x.mean()
    return x / x.std()


def noisy_stretches(n: int, fs: float) -> np.ndarray:
    """Boolean mask of the samples that get noise: after :data:`LEARNING_S`, every other
    :data:`STRETCH_S`."""
    seconds = np.arange(n) / fs - LEARNING_S
    return (seconds >= 0) & (np.floor(seconds / STRETCH_S) % 2 == 0)


def qrs_power(signal: np.ndarray, beats: np.ndarray, fs: float) -> float:
    """nst's signal power: (median QRS peak-to-peak amplitude)² / 8, the amplitude read within
    ±:data:`QRS_REACH_S` of each annotated beat."""
    reach = max(1, int(round(QRS_REACH_S * fs)))
    beats = np.asarray(beats)
    beats = beats[(beats >= reach) & (beats < len(signal) - reach)]
    windows = np.asarray(signal, dtype=np.float64)[beats[:, None] + np.arange(-reach, reach + 1)]
    return float(np.median(np.ptp(windows, axis=1)) ** 2 / 8)


def add_noise(signal: np.ndarray, beats: np.ndarray, fs: float, kind: str, snr_db: float,
              rng: np.random.Generator) -> np.ndarray:
    """``signal`` (float32) with noise of ``kind`` at ``snr_db`` in the stretches of
    :func:`noisy_stretches`, calibrated on its QRS complexes at the annotated ``beats``."""
    mask = noisy_stretches(len(signal), fs)
    if not mask.any():                          # shorter than the learning period: nothing to add
        return np.asarray(signal, dtype=np.float32).copy()
    added = noise(kind, len(signal), fs, rng) * mask
    # The power that counts is the noise's where it is added: a slow swell or a step can make
    # the stretches' share louder or quieter than the whole.
    added *= np.sqrt(qrs_power(signal, beats, fs) / 10 ** (snr_db / 10) / np.mean(added[mask] ** 2))
    return (np.asarray(signal, dtype=np.float64) + added).astype(np.float32)


def parse(spec: str) -> list[tuple[str, float]]:
    """``"ma:6,em:0"`` → [("ma", 6.0), ("em", 0.0)]; ValueError naming what is wrong."""
    pairs = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, snr = item.partition(":")
        try:
            value = float(snr)
        except ValueError:
            raise ValueError(f"noise {item!r}: expected KIND:SNR_DB, e.g. em:6") from None
        if kind not in KINDS:
            raise ValueError(f"noise {item!r}: kind must be one of {', '.join(KINDS)}")
        pairs.append((kind, value))
    if not pairs:
        raise ValueError("noise: expected KIND:SNR_DB[,KIND:SNR_DB...], e.g. ma:6,em:6")
    return pairs
