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


def _prune_embed_one(i, signal, positions, min_len, max_len, pre, out, keep):
    """Beat i runs from ``positions[i] - pre`` to ``positions[i+1] - pre``. Keep it when its length
    is plausible and its window lies inside the recording; then write it, minus its mean, into
    row i of ``out`` and zero-pad the rest of the row."""
    width = out.shape[1]
    start = positions[i] - pre
    length = positions[i + 1] - positions[i]
    ok = min_len <= length <= max_len and start >= 0 and start + width <= signal.shape[0]
    keep[i] = 1 if ok else 0
    if not ok:
        for j in range(width):
            out[i, j] = 0.0
        return
    used = min(length, width)
    total = 0.0
    for j in range(used):
        total += signal[start + j]
    mean = total / used
    for j in range(used):
        out[i, j] = signal[start + j] - mean
    for j in range(used, width):
        out[i, j] = 0.0


# --------------------------------------------------------------------------- twins
# CUDA kernels take a fixed argument list (no *args), so each body gets two explicit wrappers.
_nms_cpu_body = numba.njit(_nms_one, cache=True)
_prune_embed_cpu_body = numba.njit(_prune_embed_one, cache=True)


@numba.njit(parallel=True, cache=True)
def _nms_cpu(n, envelope, threshold, block, half, gate):
    for i in numba.prange(n):
        _nms_cpu_body(i, envelope, threshold, block, half, gate)


@numba.njit(parallel=True, cache=True)
def _prune_embed_cpu(n, signal, positions, min_len, max_len, pre, out, keep):
    for i in numba.prange(n):
        _prune_embed_cpu_body(i, signal, positions, min_len, max_len, pre, out, keep)


# Set by _cuda_kernels() on the GPU path only. The CUDA wrappers reach numba.cuda and the device
# bodies as module globals rather than closure cells, so that their on-disk cache key (bytecode,
# closure contents, signature, GPU architecture) is the same in every process.
cuda = _nms_cuda_body = _prune_embed_cuda_body = None


@functools.cache
def _cuda_kernels() -> dict:
    """Compile-on-first-use CUDA twins (numba.cuda is imported only on the GPU path), cached on disk
    like the CPU ones (``cache=True``: in ``__pycache__``, invalidated when this file changes), so
    that only the first process on a machine pays the compilation."""
    global cuda, _nms_cuda_body, _prune_embed_cuda_body
    from numba import cuda

    _nms_cuda_body = cuda.jit(device=True)(_nms_one)
    _prune_embed_cuda_body = cuda.jit(device=True)(_prune_embed_one)

    def nms(n, envelope, threshold, block, half, gate):
        i = cuda.grid(1)
        if i < n:
            _nms_cuda_body(i, envelope, threshold, block, half, gate)

    def prune_embed(n, signal, positions, min_len, max_len, pre, out, keep):
        i = cuda.grid(1)
        if i < n:
            _prune_embed_cuda_body(i, signal, positions, min_len, max_len, pre, out, keep)

    return {"nms": _cuda_jit_cached(nms), "prune_embed": _cuda_jit_cached(prune_embed)}


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
        {"nms": _nms_cpu, "prune_embed": _prune_embed_cpu}[name](n, *args)
