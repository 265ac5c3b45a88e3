"""Numba kernels of the mains hum's measure (:func:`pipeline.mains.hum_power`): the DFT's power of
each window's tapered second difference at the frequencies around the mains lines (one thread a
window and frequency), then each window's hum above the spectrum around its lines (one thread a
window). Twinned as in :mod:`pipeline._kernels`: a per-index body compiled with ``numba.njit``
inside a parallel loop on the CPU and with ``numba.cuda.jit`` (one thread per index) on the GPU.

On the GPU they replace a gather, a taper and two matrix products a line: cuBLAS and CuPy's
reductions choose their kernels by the arrays' shapes, and a recording's number of windows is its
own, so the first measure of a run loaded kernels inside it, whatever the warm-up had run. A Numba
kernel is compiled once for its argument types.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np

from pipeline import _launch


def _hum_bin_one(i, signal, stride, step, m, lines, reach, near, far, line0, top0, line1, top1, powers):
    """powers[w, k], ``i = w × columns + k``: |DFT|² of window w's second difference (``signal``
    from ``w stride``, ``x[j] - 2 x[j+step] + x[j+2 step]``, ``m`` values), less its mean and
    tapered by Hann's window, at line ``k // per_line``'s frequency ``k % per_line`` (cycles per
    sample ``line0`` or ``line1`` plus the bin offset over ``m``); NaN for a floor bin above that
    line's ``top`` (past the Nyquist frequency). Sums in float64 as the whole-array formula; the
    DFT's phasor and the taper's angle advance by rotation, one complex product a sample."""
    lobe, span = 2 * reach + 1, far - near + 1
    per_line = lobe + 2 * span
    w, k = i // (lines * per_line), i % (lines * per_line)
    line, b = k // per_line, k % per_line
    # the line's bins, then the floor below it (-far … -near), then the floor above it (near … far)
    offset = b - reach if b < lobe else (b - lobe - far if b < lobe + span else near + b - lobe - span)
    if b >= lobe + span and offset > (top0 if line == 0 else top1):
        powers[w, k] = np.nan
        return
    start = np.int64(w) * stride
    # The second difference's sum telescopes: (x's first step values less those m later) less the
    # same a step on, 4 step reads instead of 3 m.
    total = np.float64(0.0)
    for j in range(start, start + step):
        total += (np.float64(signal[j]) - np.float64(signal[j + m])
                  - np.float64(signal[j + step]) + np.float64(signal[j + step + m]))
    mean = total / m
    cycles = (line0 if line == 0 else line1) + np.float64(offset) / m
    turn_cos, turn_sin = math.cos(2.0 * math.pi * cycles), math.sin(2.0 * math.pi * cycles)
    taper_cos, taper_sin = math.cos(2.0 * math.pi / (m - 1)), math.sin(2.0 * math.pi / (m - 1))
    p_cos, p_sin, a_cos, a_sin = np.float64(1.0), np.float64(0.0), np.float64(1.0), np.float64(0.0)
    re = im = np.float64(0.0)
    for j in range(m):
        value = (np.float64(signal[start + j]) - np.float64(2.0) * np.float64(signal[start + j + step])
                 + np.float64(signal[start + j + 2 * step]) - mean) * (0.5 - 0.5 * a_cos)
        re += value * p_cos
        im += value * p_sin
        p_cos, p_sin = p_cos * turn_cos - p_sin * turn_sin, p_sin * turn_cos + p_cos * turn_sin
        a_cos, a_sin = a_cos * taper_cos - a_sin * taper_sin, a_sin * taper_cos + a_cos * taper_sin
    powers[w, k] = re * re + im * im


def _hum_lines_one(w, powers, lines, reach, near, far, m, out):
    """out[w]: window w's hum, the mean square its lines add above the spectrum around them: per
    line, the power over its bins less as many times the mean of its floor's bins (those not NaN),
    nothing where below. A sine's mean square is ``16 / 3 / m²`` × its |DFT|² summed over Hann's
    main lobe (Parseval, one side: the taper keeps 3/8 of the power)."""
    lobe, span = 2 * reach + 1, far - near + 1
    per_line = lobe + 2 * span
    total = np.float64(0.0)
    for line in range(lines):
        base = line * per_line
        peak = np.float64(0.0)
        for b in range(lobe):
            peak += powers[w, base + b]
        floor = np.float64(0.0)
        count = 0
        for b in range(lobe, per_line):
            p = powers[w, base + b]
            if p == p:
                floor += p
                count += 1
        above = peak - lobe * (floor / count)
        total += max(above, np.float64(0.0)) * (np.float64(16.0) / np.float64(3.0) / np.float64(m * m))
    out[w] = np.float32(total)


_hum_bin_cpu_body = numba.njit(_hum_bin_one, cache=True)
_hum_lines_cpu_body = numba.njit(_hum_lines_one, cache=True)


@numba.njit(parallel=True, cache=True)
def _hum_bins_cpu(n, signal, stride, step, m, lines, reach, near, far, line0, top0, line1, top1, powers):
    for i in numba.prange(n):
        _hum_bin_cpu_body(i, signal, stride, step, m, lines, reach, near, far, line0, top0, line1, top1, powers)


@numba.njit(parallel=True, cache=True)
def _hum_lines_cpu(n, powers, lines, reach, near, far, m, out):
    for w in numba.prange(n):
        _hum_lines_cpu_body(w, powers, lines, reach, near, far, m, out)


# Set by _hum_cuda_kernels() on the GPU path only, as in pipeline._kernels (module globals, so that
# the CUDA wrappers' on-disk cache key is the same in every process).
cuda = _hum_bin_cuda_body = _hum_lines_cuda_body = None


@functools.cache
def _hum_cuda_kernels() -> dict:
    """CUDA twins of this module's kernels, compiled on first use and cached on disk like
    :func:`pipeline._kernels._cuda_kernels`."""
    global cuda, _hum_bin_cuda_body, _hum_lines_cuda_body
    from numba import cuda

    _hum_bin_cuda_body = cuda.jit(device=True)(_hum_bin_one)
    _hum_lines_cuda_body = cuda.jit(device=True)(_hum_lines_one)

    def hum_bins(n, signal, stride, step, m, lines, reach, near, far, line0, top0, line1, top1, powers):
        i = cuda.grid(1)
        if i < n:
            _hum_bin_cuda_body(i, signal, stride, step, m, lines, reach, near, far, line0, top0, line1, top1,
                               powers)

    def hum_lines(n, powers, lines, reach, near, far, m, out):
        w = cuda.grid(1)
        if w < n:
            _hum_lines_cuda_body(w, powers, lines, reach, near, far, m, out)

    return {"hum_bins": _launch.cuda_jit_cached(hum_bins), "hum_lines": _launch.cuda_jit_cached(hum_lines)}


_CPU = {"hum_bins": _hum_bins_cpu, "hum_lines": _hum_lines_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _hum_cuda_kernels, name, n, *arrays_and_scalars)
