"""Ricker-wavelet response of the ECG: one FFT convolution, CuPy or NumPy/SciPy through ``xp``.

The Ricker ("Mexican hat") wavelet is the negative normalised second derivative of a Gaussian.
At a scale matched to the QRS complex it answers strongly to the sharp R/S deflections and weakly
to slow P/T waves and baseline wander (it has zero mean).

See Also
--------
pipeline.load.load_ecg : the previous step.
pipeline.peaks.fiducials : the next step.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from pipeline import backend


def ricker(points: int, a: float, xp=None):
    """Ricker wavelet of ``points`` samples and width ``a`` samples, centred, float32.

    ``psi(t) = 2 / (sqrt(3 a) pi^(1/4)) * (1 - (t/a)^2) * exp(-t^2 / (2 a^2))``
    """
    xp = xp or np
    if points < 1 or a <= 0:
        raise ValueError(f"ricker needs points >= 1 and a > 0; got points={points}, a={a}")
    t = xp.arange(points, dtype=xp.float64) - (points - 1) / 2.0
    amplitude = 2.0 / (math.sqrt(3.0 * a) * math.pi ** 0.25)
    x2 = (t / a) ** 2
    return (amplitude * (1.0 - x2) * xp.exp(-x2 / 2.0)).astype(xp.float32)


def ricker_response(signal, fs: float, width_s: float):
    """Convolve ``signal`` with a Ricker wavelet of width ``width_s`` seconds (mode 'same').

    One real FFT of the padded signal and the wavelet, multiplied and inverted; the wavelet is
    symmetric, so convolution and correlation agree and the output is aligned with the input.
    Returns a float32 array of the input's type and length.
    """
    xp = backend.xp_of(signal)
    fft = backend.fft_module(xp)
    a = width_s * fs
    points = int(2 * math.ceil(5 * a) + 1)  # ±5a: the tails are below 1e-5 of the peak
    wavelet = ricker(points, a) if xp is np else _ricker_on_gpu(points, a, xp.cuda.runtime.getDevice())
    n = signal.shape[0]
    nfft = fft.next_fast_len(n + points - 1, real=True)
    # One zero-padded, mean-free copy of the signal; spectra are multiplied in place, so that at
    # most three signal-sized buffers are alive at once (memory, not time, limits 200M samples).
    padded = xp.zeros(nfft, dtype=xp.float32)
    padded[:n] = signal
    padded[:n] -= signal.mean(dtype=xp.float64).astype(xp.float32)
    spectrum = fft.rfft(padded)
    del padded
    spectrum *= fft.rfft(wavelet, nfft)
    response = fft.irfft(spectrum, nfft)
    del spectrum
    start = (points - 1) // 2
    return xp.ascontiguousarray(response[start:start + n], dtype=xp.float32)


@functools.lru_cache(maxsize=8)
def _ricker_on_gpu(points: int, a: float, device: int):
    """:func:`ricker` made on the host and copied to GPU ``device`` once. Made there, it is eleven
    tiny kernels a call, in a segmentation whose time goes to issuing kernels, not to running
    them. Shared between calls: never written to."""
    import cupy

    return cupy.asarray(ricker(points, a))
