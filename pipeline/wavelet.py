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


# On the GPU a long recording is convolved in blocks of BLOCK samples, BATCH blocks a transform:
# cuFFT makes a plan for each transform length and batch, and a plan made inside the run costs
# milliseconds. With one layout for every long recording, the warm-up's recording makes the run's
# plan; the blocks also keep the transforms' buffers small (a 200M-sample recording's spectrum
# would be 1.6 GB). A shorter signal (the stretches of a second lead read around the analysed
# lead's pauses, whose length is each recording's own) is one block, padded: one plan for all of
# them, made by the warm-up's short file. NumPy's transforms need no plan, and the padding would
# be work.
BLOCK = 1 << 20
BATCH = 8


def ricker_response(signal, fs: float, width_s: float):
    """Convolve ``signal`` with a Ricker wavelet of width ``width_s`` seconds (mode 'same').

    One real FFT of the padded, mean-free signal and the wavelet, multiplied and inverted; on the
    GPU, padded to a block (:data:`BLOCK` samples), or overlap-save in blocks when longer. The
    wavelet is symmetric, so convolution and correlation agree and the output is aligned with the
    input. Returns a float32 array of the input's type and length.
    """
    xp = backend.xp_of(signal)
    fft = backend.fft_module(xp)
    a = width_s * fs
    points = int(2 * math.ceil(5 * a) + 1)  # ±5a: the tails are below 1e-5 of the peak
    n = signal.shape[0]
    mean = signal.mean(dtype=xp.float64).astype(xp.float32)
    if xp is np:
        nfft = fft.next_fast_len(n + points - 1, real=True)
        kernel = fft.rfft(ricker(points, a), nfft)
    else:
        kernel = _block_spectrum_on_gpu(points, a, xp.cuda.runtime.getDevice())
        if n + points - 1 > BLOCK:
            return _in_blocks(signal, mean, points, kernel, xp, fft)
        nfft = BLOCK
    padded = xp.zeros(nfft, dtype=xp.float32)
    padded[:n] = signal
    padded[:n] -= mean
    spectrum = fft.rfft(padded)
    del padded
    spectrum *= kernel
    response = fft.irfft(spectrum, nfft)
    del spectrum
    start = (points - 1) // 2
    return xp.ascontiguousarray(response[start:start + n], dtype=xp.float32)


def _in_blocks(signal, mean, points: int, kernel, xp, fft):
    """:func:`ricker_response` by overlap-save: the mean-free signal, led by half the wavelet's
    length of zeros, cut into blocks of :data:`BLOCK` samples that overlap by the wavelet's length
    less one; each block's circular convolution is the linear one past that overlap, and those
    parts, one after another, are the response. :data:`BATCH` blocks a transform, the last batch
    filled with zeros; ``kernel`` is the wavelet's spectrum at a block's length."""
    n = signal.shape[0]
    hop = BLOCK - (points - 1)
    batches = math.ceil(n / (hop * BATCH))
    lead = (points - 1) - (points - 1) // 2
    padded = xp.zeros(batches * BATCH * hop + points - 1, dtype=xp.float32)
    xp.subtract(signal, mean, out=padded[lead:lead + n])
    response = xp.empty((batches * BATCH, hop), dtype=xp.float32)
    for b in range(batches):
        blocks = xp.lib.stride_tricks.as_strided(padded[b * BATCH * hop:], shape=(BATCH, BLOCK),
                                                 strides=(hop * padded.itemsize, padded.itemsize))
        spectrum = fft.rfft(blocks, axis=-1)
        spectrum *= kernel
        response[b * BATCH:(b + 1) * BATCH] = fft.irfft(spectrum, BLOCK, axis=-1)[:, points - 1:]
    return response.reshape(-1)[:n]


@functools.lru_cache(maxsize=8)
def _ricker_on_gpu(points: int, a: float, device: int):
    """:func:`ricker` made on the host and copied to GPU ``device`` once. Made there, it is eleven
    tiny kernels a call, in a segmentation whose time goes to issuing kernels, not to running
    them. Shared between calls: never written to."""
    import cupy

    return cupy.asarray(ricker(points, a))


@functools.lru_cache(maxsize=8)
def _block_spectrum_on_gpu(points: int, a: float, device: int):
    """The spectrum of :func:`_ricker_on_gpu` at a block's length (:data:`BLOCK`), made once: the
    same for every call, never written to."""
    import cupyx.scipy.fft

    return cupyx.scipy.fft.rfft(_ricker_on_gpu(points, a, device), BLOCK)
