"""Per-window flutter measures of an ECG: its 2-s windows every 0.5 s, decimated to about 50 Hz,
each described by its dominant frequency, the power's concentration around it, the share of
samples off the baseline, how sine-like it is and the power at half its frequency (the measures
:mod:`pipeline.episodes` tells flutter and fibrillation from by; the literature is named there).
Two kernels of :mod:`pipeline._episode_kernels` (one thread a window) around one matrix product
with constants made once per window layout, on the input's device.

See Also
--------
pipeline.episodes.find_episodes : the step that reads these measures.
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np

from pipeline import _episode_kernels, backend


def flutter_features(signal, fs: float, *, window_s: float = 2.0, hop_s: float = 0.5, decimated_hz: float = 50.0,
                     search_hz: tuple[float, float] = (1.5, 10.0), total_hz: tuple[float, float] = (1.0, 20.0),
                     near_hz: float = 1.0) -> dict:
    """Per-window flutter measures (arrays on the input's device) and the windows' centres.

    The ECG is averaged over blocks of ``round(fs / decimated_hz)`` samples (nothing of flutter
    lies above 20 Hz), cut into windows of ``window_s`` every ``hop_s``, and each window has its
    mean and linear trend removed.

    Returns
    -------
    dict
        ``dominant_hz`` (the spectral peak within ``search_hz``: above baseline wander, below
        muscle noise), ``concentration`` (share of the power in ``total_hz`` within ±``near_hz``
        of it), ``off_baseline`` (share of samples beyond 20 % of the window's largest deflection),
        ``sine_ratio`` (spectral mean frequency over ``total_hz`` / dominant frequency), all
        ``subharmonic`` (power within ±``near_hz`` / 2 of half the dominant frequency over that
        around it: a train of complexes whose second harmonic outgrows its fundamental looks like
        a sine at twice its rate, except for this), all float32; ``centre_s`` (the windows'
        centres, a :class:`WindowCentres`).
    """
    xp = backend.xp_of(signal)
    q = max(1, int(round(fs / decimated_hz)))
    rate = fs / q
    m = signal.shape[0] // q
    length = max(8, int(round(window_s * rate)))
    hop = max(1, int(round(hop_s * rate)))
    count = (m - length) // hop + 1 if m >= length else 0
    if count <= 0:
        empty = xp.zeros(0, dtype=xp.float32)
        return {"dominant_hz": empty, "concentration": empty, "off_baseline": empty, "sine_ratio": empty,
                "subharmonic": empty, "centre_s": WindowCentres(0, 0.0, 1, fs, 0)}
    # The Hann-windowed spectrum on the grid of a transform zero-padded to a power of two (~0.2 Hz
    # for the peak and its ±1 Hz), only at the ~100 frequencies of total_hz: one matrix product
    # with their cosines and sines, cheaper than the whole transform of every window.
    n_fft = 1 << int(math.ceil(math.log2(2 * length)))
    step = rate / n_fft
    low, high = int(math.ceil(total_hz[0] / step)), int(total_hz[1] / step)
    c = (_window_constants(length, n_fft, low, high, step) if xp is np
         else _window_constants_on_gpu(length, n_fft, low, high, step, xp.cuda.runtime.getDevice()))
    # Three launches a call (a GPU segmentation waits on the host's launches, not on the GPU): a
    # kernel cuts, decimates and detrends the windows, the matrix product, a kernel reads the spectra.
    frames = xp.empty((count, length), dtype=xp.float32)
    off_baseline = xp.empty(count, dtype=xp.float32)
    _episode_kernels.launch("flutter_frames", count, signal, q, hop, c.t, c.trend, frames, off_baseline)
    spectrum = frames @ c.basis
    first, last = int(math.ceil(search_hz[0] / step)) - low, int(search_hz[1] / step) - low
    dominant, concentration, sine_ratio, subharmonic = xp.empty((4, count), dtype=xp.float32)
    _episode_kernels.launch("flutter_measures", count, spectrum, c.freqs, first, last, low,
                            int(round(near_hz / step)), int(round(near_hz / 2 / step)),
                            dominant, concentration, sine_ratio, subharmonic)
    return {"dominant_hz": dominant, "concentration": concentration, "off_baseline": off_baseline,
            "sine_ratio": sine_ratio, "subharmonic": subharmonic,
            "centre_s": WindowCentres(hop, length / 2.0, q, fs, count)}


class WindowCentres(NamedTuple):
    """The centres (s) of :func:`flutter_features`' windows, as a formula: the episodes read a few
    of them, and the whole array (a day holds ~170,000 windows) took longer on the host than the
    GPU took to measure the windows."""

    hop: int            # windows' hop, in decimated samples
    half: float         # half a window, in decimated samples
    q: int              # the decimation
    fs: float
    count: int

    def at(self, window):
        """The centres of windows ``window`` (an index or host array of indices), float64."""
        return (np.asarray(window) * self.hop + self.half) * self.q / self.fs

    def all(self) -> np.ndarray:
        """Every window's centre, float64."""
        return self.at(np.arange(self.count))


class _WindowConstants(NamedTuple):
    """The constants of :func:`flutter_features`' windows (the detrending's, the spectrum's), made
    once per window layout."""

    trend: Any  # (length,) t / sum(t²): a window's linear trend's slope
    t: Any      # (length,) the samples' times from the window's centre
    basis: Any  # (length, 2 bins): :func:`_dft_basis`
    freqs: Any  # (bins,) the bins' frequencies (Hz)


@functools.lru_cache(maxsize=8)
def _window_constants(length: int, n_fft: int, low: int, high: int, step: float) -> _WindowConstants:
    """The constants of :func:`flutter_features` for windows of ``length`` samples and bins
    ``low``..``high`` of an ``n_fft``-point transform (``step`` Hz apart), float32, read-only."""
    t = np.arange(length, dtype=np.float32) - (length - 1) / 2.0
    freqs = (np.arange(low, high + 1) * step).astype(np.float32)
    made = _WindowConstants(t / float((length * (length * length - 1)) / 12.0), t,
                            _dft_basis(length, n_fft, low, high), freqs)
    for array in made:
        array.flags.writeable = False  # shared by every call
    return made


@functools.lru_cache(maxsize=8)
def _window_constants_on_gpu(length: int, n_fft: int, low: int, high: int, step: float,
                             device: int) -> _WindowConstants:
    """:func:`_window_constants` copied to GPU ``device`` once: made there they are a dozen tiny kernels
    a call, and a copy from pageable host memory waits for all the work queued before it, a stall
    in the middle of the segmentation."""
    import cupy

    return _WindowConstants(*(cupy.asarray(array) for array in _window_constants(length, n_fft, low, high, step)))


@functools.lru_cache(maxsize=8)
def _dft_basis(length: int, n_fft: int, low: int, high: int) -> np.ndarray:
    """(length, 2 bins) float32: Hann-windowed cosines, then sines, of bins low..high of an
    ``n_fft``-point transform."""
    angle = (2 * np.pi / n_fft) * np.outer(np.arange(length), np.arange(low, high + 1))
    basis = np.hanning(length)[:, None] * np.concatenate([np.cos(angle), np.sin(angle)], axis=1)
    basis = basis.astype(np.float32)
    basis.flags.writeable = False  # shared by every call
    return basis
