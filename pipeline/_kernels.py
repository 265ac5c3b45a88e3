"""Numba kernels, each written once as a per-index body and compiled twice:
``numba.njit`` inside a parallel loop on the CPU, ``numba.cuda.jit`` with one thread per index on
the GPU. The wrapper is chosen from the array type, so steps never branch on the device.

CuPy arrays reach the CUDA kernels through ``__cuda_array_interface__`` (no copy), NumPy arrays
reach the CPU loops as they are.
"""
from __future__ import annotations

import functools
import math

import numba

from pipeline import backend

THREADS_PER_BLOCK = 256


# --------------------------------------------------------------------------- per-index bodies
def _nms_one(i, envelope, threshold, block, half, gate):
    """gate[i] = 1 where envelope[i] exceeds its block's threshold and is the maximum of
    envelope[i-half : i+half+1] (ties go to the leftmost sample, so a plateau gives one beat)."""
    value = envelope[i]
    gate[i] = 0
    if not value > threshold[i // block]:
        return
    n = envelope.shape[0]
    for j in range(max(i - half, 0), i):
        if envelope[j] >= value:
            return
    for j in range(i + 1, min(i + half + 1, n)):
        if envelope[j] > value:
            return
    gate[i] = 1


def _embed_one(i, signal, positions, pre, out):
    """Beat i runs from ``positions[i] - pre`` to ``positions[i+1] - pre`` (the last beat: one row's
    width). Write it, minus its mean, into row i of ``out``; the rest of the row, and any part of
    the window outside the recording, is zero. No beat is refused for its interval: a beat before
    a pause is a finding, not an artefact."""
    width = out.shape[1]
    n = signal.shape[0]
    start = positions[i] - pre
    used = width
    if i + 1 < positions.shape[0]:
        used = min(positions[i + 1] - positions[i], width)
    first = max(start, 0)
    last = min(start + used, n)          # one past the last sample of the recording in the window
    total = 0.0
    for k in range(first, last):
        total += signal[k]
    mean = total / max(last - first, 1)
    for j in range(width):
        k = start + j
        out[i, j] = signal[k] - mean if j < used and first <= k < last else 0.0


def _median_at(signal, k, half):
    """Median of signal[k-half : k+half+1] (indices clipped to the recording) without an array:
    the element that has at most ``half`` smaller and at most ``half`` larger neighbours.
    O(window²), fine for the 3–15 samples it is used with."""
    n = signal.shape[0]
    for a in range(k - half, k + half + 1):
        value = signal[min(max(a, 0), n - 1)]
        below = 0
        above = 0
        for b in range(k - half, k + half + 1):
            other = signal[min(max(b, 0), n - 1)]
            if other < value:
                below += 1
            elif other > value:
                above += 1
        if below <= half and above <= half:
            return value
    return signal[min(max(k, 0), n - 1)]


def _qrs_shape_body(median_at):
    """The per-index body of the QRS-shape kernel, closed over ``median_at``: the CPU or the CUDA
    twin of :func:`_median_at` (a body may call only functions compiled for its own target)."""

    def qrs_shape_one(i, signal, positions, search, base, despike, cap, step, reach, refined, width, slope):
        """QRS point and shape of candidate i, measured on the ECG with spikes removed (running median
        of ``2 despike + 1`` samples: a pacing spike is narrower than that, a QRS is not).

        refined[i]: the sample within ±``search`` of ``positions[i]`` whose despiked value lies
        farthest from the mean over ±``base`` (first of equals), moved to the ECG's own extremum
        within ±``despike`` of it. width[i]: samples around it that stay beyond half of that
        deflection (at most ±``cap``): ~20 ms for an R wave, ~100 ms for a T wave. slope[i]: the
        largest |x[k+step] - x[k-step]| within ±``reach`` of the refined point."""
        n = signal.shape[0]
        p = positions[i]
        total = 0.0
        for k in range(p - base, p + base + 1):
            total += signal[min(max(k, 0), n - 1)]
        baseline = total / (2 * base + 1)
        best = min(max(p - search, 0), n - 1)
        best_dev = -1.0
        for k in range(p - search, p + search + 1):
            kk = min(max(k, 0), n - 1)
            dev = abs(median_at(signal, kk, despike) - baseline)
            if dev > best_dev:
                best_dev = dev
                best = kk
        peak = median_at(signal, best, despike) - baseline
        half = 0.5 * abs(peak)
        sign = 1.0 if peak >= 0 else -1.0
        # The median flattens the tip of a narrow R wave: the point itself is the raw extremum
        # (same sign) next to it; a spike lies farther away than that.
        tip = best
        for k in range(max(best - despike, 0), min(best + despike, n - 1) + 1):
            if sign * (signal[k] - signal[tip]) > 0:
                tip = k
        refined[i] = tip
        left = best
        while left > max(best - cap, 0) and sign * (median_at(signal, left - 1, despike) - baseline) > half:
            left -= 1
        right = best
        while right < min(best + cap, n - 1) and sign * (median_at(signal, right + 1, despike) - baseline) > half:
            right += 1
        width[i] = right - left + 1
        steepest = 0.0
        for k in range(best - reach, best + reach + 1):
            rise = abs(median_at(signal, k + step, despike) - median_at(signal, k - step, despike))
            if rise > steepest:
                steepest = rise
        slope[i] = steepest

    return qrs_shape_one


# --------------------------------------------------------------------------- twins
# CUDA kernels take a fixed argument list (no *args), so each body gets two explicit wrappers.
_nms_cpu_body = numba.njit(_nms_one, cache=True)
_embed_cpu_body = numba.njit(_embed_one, cache=True)
_qrs_shape_cpu_body = numba.njit(_qrs_shape_body(numba.njit(_median_at, cache=True)), cache=True)


@numba.njit(parallel=True, cache=True)
def _nms_cpu(n, envelope, threshold, block, half, gate):
    for i in numba.prange(n):
        _nms_cpu_body(i, envelope, threshold, block, half, gate)


@numba.njit(parallel=True, cache=True)
def _embed_cpu(n, signal, positions, pre, out):
    for i in numba.prange(n):
        _embed_cpu_body(i, signal, positions, pre, out)


@numba.njit(parallel=True, cache=True)
def _qrs_shape_cpu(n, signal, positions, search, base, despike, cap, step, reach, refined, width, slope):
    for i in numba.prange(n):
        _qrs_shape_cpu_body(i, signal, positions, search, base, despike, cap, step, reach, refined, width, slope)


# Set by _cuda_kernels() on the GPU path only. The CUDA wrappers reach numba.cuda and the device
# bodies as module globals rather than closure cells, so that their on-disk cache key (bytecode,
# closure contents, signature, GPU architecture) is the same in every process.
cuda = _nms_cuda_body = _embed_cuda_body = _qrs_shape_cuda_body = None


@functools.cache
def _cuda_kernels() -> dict:
    """Compile-on-first-use CUDA twins (numba.cuda is imported only on the GPU path), cached on disk
    like the CPU ones (``cache=True``: in ``__pycache__``, invalidated when this file changes), so
    that only the first process on a machine pays the compilation."""
    global cuda, _nms_cuda_body, _embed_cuda_body, _qrs_shape_cuda_body
    from numba import cuda

    _nms_cuda_body = cuda.jit(device=True)(_nms_one)
    _embed_cuda_body = cuda.jit(device=True)(_embed_one)
    _qrs_shape_cuda_body = cuda.jit(device=True)(_qrs_shape_body(cuda.jit(device=True)(_median_at)))

    def nms(n, envelope, threshold, block, half, gate):
        i = cuda.grid(1)
        if i < n:
            _nms_cuda_body(i, envelope, threshold, block, half, gate)

    def embed(n, signal, positions, pre, out):
        i = cuda.grid(1)
        if i < n:
            _embed_cuda_body(i, signal, positions, pre, out)

    def qrs_shape(n, signal, positions, search, base, despike, cap, step, reach, refined, width, slope):
        i = cuda.grid(1)
        if i < n:
            _qrs_shape_cuda_body(i, signal, positions, search, base, despike, cap, step, reach, refined, width, slope)

    return {"nms": _cuda_jit_cached(nms), "embed": _cuda_jit_cached(embed),
            "qrs_shape": _cuda_jit_cached(qrs_shape)}


def _cuda_jit_cached(kernel):
    """``cuda.jit(cache=True)``, or without the disk cache where no writable cache folder exists."""
    try:
        return cuda.jit(cache=True)(kernel)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return cuda.jit(kernel)


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    if n <= 0:
        return
    args = tuple(backend.as_kernel_array(a) if hasattr(a, "shape") else a for a in arrays_and_scalars)
    if any(backend.is_cupy_array(a) for a in arrays_and_scalars):
        kernel = _cuda_kernels()[name]
        kernel[math.ceil(n / THREADS_PER_BLOCK), THREADS_PER_BLOCK](n, *args)
    else:
        {"nms": _nms_cpu, "embed": _embed_cpu, "qrs_shape": _qrs_shape_cpu}[name](n, *args)
