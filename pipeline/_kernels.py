"""Numba kernels, each written once as a per-index body and compiled twice:
``numba.njit`` inside a parallel loop on the CPU, ``numba.cuda.jit`` with one thread per index on
the GPU. The wrapper is chosen from the array type, so steps never branch on the device.

CuPy arrays reach the CUDA kernels through ``__cuda_array_interface__`` (no copy), NumPy arrays
reach the CPU loops as they are.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

from pipeline import _launch


# --------------------------------------------------------------------------- per-index bodies
def _chunk_maxima_one(c, envelope, size, maxima):
    """maxima[c]: the largest of ``envelope[c size : (c+1) size]``, NaN left out (-inf where all
    are NaN): what no sample of the chunk can beat, for :func:`_nms_one`."""
    k = np.int64(c)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
    top = -np.inf
    for j in range(k * size, min((k + 1) * size, envelope.shape[0])):
        if envelope[j] > top:
            top = envelope[j]
    maxima[k] = top


def _noise_floor_one(b, envelope, threshold, block, times, raised):
    """raised[b]: block ``b``'s threshold, or ``times`` × the mean of its envelope below that
    threshold where this is higher: the noise floor a deflection must stand out of."""
    k = np.int64(b)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
    total = 0.0
    count = 0
    for j in range(k * block, min((k + 1) * block, envelope.shape[0])):
        if envelope[j] < threshold[k]:
            total += envelope[j]
            count += 1
    raised[k] = max(threshold[k], times * total / max(count, 1))


def _nms_one(i, envelope, threshold, block, half, maxima, size, gate):
    """gate[i] = 1 where envelope[i] exceeds its block's threshold and is the maximum of
    envelope[i-half : i+half+1] (ties go to the leftmost sample, so a plateau gives one beat).
    Most samples lie on a wave's slope and stop at a larger neighbour; a wave's peak reads the
    window's whole chunks of ``size`` samples by their ``maxima`` (:func:`_chunk_maxima_one`) and
    only the part chunks at its ends sample by sample, so that the threads of a warp, which wait
    for the one peak among them, wait for fewer reads. The chunks' bounds are worked out once: a
    64-bit division, which a GPU runs as a long routine, in every step of the loops would cost
    the warp more than its reads."""
    k = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
    value = envelope[k]
    gate[k] = 0
    if not value > threshold[k // block]:
        return
    n = envelope.shape[0]
    if (k > 0 and envelope[k - 1] >= value) or (k + 1 < n and envelope[k + 1] > value):
        return
    # Left of k: samples first..k-2, whole chunks low..high-1 among them, nearest first.
    first = max(k - half, 0)
    low, high = (first + size - 1) // size, (k - 1) // size
    for j in range(k - 2, high * size - 1 if low < high else first - 1, -1):
        if envelope[j] >= value:
            return
    for c in range(high - 1, low - 1, -1):
        if maxima[c] >= value:
            return
    if low < high:
        for j in range(low * size - 1, first - 1, -1):
            if envelope[j] >= value:
                return
    # Right of k: samples k+2..last, whole chunks low..high-1 among them, nearest first.
    last = min(k + half, n - 1)
    low, high = (k + 1 + size) // size, (last + 1) // size
    for j in range(k + 2, low * size if low < high else last + 1):
        if envelope[j] > value:
            return
    for c in range(low, high):
        if maxima[c] > value:
            return
    if low < high:
        for j in range(high * size, last + 1):
            if envelope[j] > value:
                return
    gate[k] = 1


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


def _gap_peaks_one(g, env, first, stop, offsets, block, reach, level, maxima, where, peak):
    """The candidates of :func:`pipeline.peaks.search_back` inside gap g: its blocks ``first[g]``
    to ``stop[g] - 1`` of ``block`` samples. For the blocks from ``reach`` before the gap to
    ``reach`` after it, written from ``offsets[g]`` on: maxima, each block's largest ``env`` (its
    samples clipped to the envelope; -inf for a block before the recording), where, its first
    sample of that value, and peak, 1 for a block of the gap whose maximum exceeds ``level`` × the
    median of the gap's block maxima and every one within ``reach`` blocks before it, and is not
    exceeded by one within ``reach`` after it. The median is NumPy's (the mean of the two middle
    values of an even count), in float32 as the maxima are; O(count²) over at most a few hundred
    blocks a gap."""
    n = env.shape[0]
    gap = np.int64(g)    # a CPU prange index is unsigned: Numba mixes it with ints as a float
    start, end = first[gap], stop[gap]
    lo, base = start - reach, offsets[gap]
    for c in range(lo, end + reach):
        j = base + c - lo
        peak[j] = 0
        if c < 0:
            maxima[j] = -np.inf
            where[j] = 0
            continue
        at = min(c * block, n - 1)
        top = env[at]
        for s in range(c * block + 1, (c + 1) * block):
            k = min(s, n - 1)
            if env[k] > top:
                top = env[k]
                at = k
        maxima[j] = top
        where[j] = at
    count = end - start
    low_rank, high_rank = (count - 1) // 2, count // 2
    lower = upper = maxima[base + reach]
    for a in range(base + reach, base + reach + count):
        value = maxima[a]
        below = 0
        equal = 0
        for b in range(base + reach, base + reach + count):
            if maxima[b] < value:
                below += 1
            elif maxima[b] == value:
                equal += 1
        if below <= low_rank < below + equal:
            lower = value
        if below <= high_rank < below + equal:
            upper = value
    threshold = level * ((lower + upper) * np.float32(0.5))
    for j in range(base + reach, base + reach + count):
        value = maxima[j]
        if not value > threshold:
            continue
        before = maxima[j - 1]
        for t in range(j - reach, j - 1):
            before = max(before, maxima[t])
        after = maxima[j + 1]
        for t in range(j + 2, j + reach + 1):
            after = max(after, maxima[t])
        if value > before and value >= after:
            peak[j] = 1


def _search_left(ordered, value):
    """The first index of the sorted ``ordered`` whose value is at least ``value`` (its length when
    none is): NumPy's ``searchsorted``, side left."""
    low, high = 0, ordered.shape[0]
    while low < high:
        middle = (low + high) // 2
        if ordered[middle] < value:
            low = middle + 1
        else:
            high = middle
    return low


def _unsuppressed_body(search_left):
    """The per-sample body of the unsuppressed-peak kernel, closed over ``search_left``: the CPU or
    the CUDA twin of :func:`_search_left`."""

    def unsuppressed_one(i, env, thresholds, block, own, candidates, half, flag):
        """flag[i] = 1 where sample i is a peak of ``env`` above its block's threshold (larger than
        the sample before, at least the one after: a plateau's leftmost sample, as the suppression
        takes it) that no beat's own peak suppressed (``own``, sorted: none as large within
        ``half`` before it, none larger within ``half`` after it; ties go to the earlier sample)
        and that was no candidate (``candidates``, sorted): the peaks that
        :func:`pipeline.peaks.rescue_suppressed` looks at again. Most samples stop at the first
        comparison; only peaks above the threshold search the beats."""
        n = env.shape[0]
        k = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        flag[k] = 0
        if k < 1 or k > n - 2:
            return
        value = env[k]
        if not (value > env[k - 1] and value >= env[k + 1] and value > thresholds[k // block]):
            return
        count = own.shape[0]
        if count > 0:
            at = search_left(own, k)
            before, after = own[max(at - 1, 0)], own[min(at, count - 1)]
            if k - before <= half and k >= before and env[before] >= value:
                return
            if after - k <= half and after >= k and env[after] > value:
                return
        if candidates[min(search_left(candidates, k), candidates.shape[0] - 1)] == k:
            return
        flag[k] = 1

    return unsuppressed_one


# --------------------------------------------------------------------------- twins
# CUDA kernels take a fixed argument list (no *args), so each body gets two explicit wrappers.
# The per-sample bodies are inlined into their CPU loops: over millions of samples a call each
# costs more than its few comparisons.
_nms_cpu_body = numba.njit(_nms_one, cache=True, inline="always")
_chunk_maxima_cpu_body = numba.njit(_chunk_maxima_one, cache=True)
_noise_floor_cpu_body = numba.njit(_noise_floor_one, cache=True)
_embed_cpu_body = numba.njit(_embed_one, cache=True)
_gap_peaks_cpu_body = numba.njit(_gap_peaks_one, cache=True)
_search_left_cpu = numba.njit(_search_left, cache=True)
_unsuppressed_cpu_body = numba.njit(_unsuppressed_body(_search_left_cpu), cache=True, inline="always")


@numba.njit(parallel=True, cache=True)
def _nms_cpu(n, envelope, threshold, block, half, maxima, size, gate):
    for i in numba.prange(n):
        _nms_cpu_body(i, envelope, threshold, block, half, maxima, size, gate)


@numba.njit(parallel=True, cache=True)
def _noise_floor_cpu(n, envelope, threshold, block, times, raised):
    for b in numba.prange(n):
        _noise_floor_cpu_body(b, envelope, threshold, block, times, raised)


@numba.njit(parallel=True, cache=True)
def _chunk_maxima_cpu(n, envelope, size, maxima):
    for c in numba.prange(n):
        _chunk_maxima_cpu_body(c, envelope, size, maxima)


@numba.njit(parallel=True, cache=True)
def _embed_cpu(n, signal, positions, pre, out):
    for i in numba.prange(n):
        _embed_cpu_body(i, signal, positions, pre, out)


@numba.njit(parallel=True, cache=True)
def _gap_peaks_cpu(n, env, first, stop, offsets, block, reach, level, maxima, where, peak):
    for g in numba.prange(n):
        _gap_peaks_cpu_body(g, env, first, stop, offsets, block, reach, level, maxima, where, peak)


@numba.njit(parallel=True, cache=True)
def _unsuppressed_cpu(n, env, thresholds, block, own, candidates, half, flag):
    for i in numba.prange(n):
        _unsuppressed_cpu_body(i, env, thresholds, block, own, candidates, half, flag)


# Set by _cuda_kernels() on the GPU path only. The CUDA wrappers reach numba.cuda and the device
# bodies as module globals rather than closure cells, so that their on-disk cache key (bytecode,
# closure contents, signature, GPU architecture) is the same in every process.
cuda = _nms_cuda_body = _embed_cuda_body = _gap_peaks_cuda_body = None
_unsuppressed_cuda_body = _chunk_maxima_cuda_body = _noise_floor_cuda_body = None


@functools.cache
def _cuda_kernels() -> dict:
    """Compile-on-first-use CUDA twins (numba.cuda is imported only on the GPU path), cached on disk
    like the CPU ones (``cache=True``: in ``__pycache__``, invalidated when this file changes), so
    that only the first process on a machine pays the compilation."""
    global cuda, _nms_cuda_body, _embed_cuda_body, _gap_peaks_cuda_body
    global _unsuppressed_cuda_body, _chunk_maxima_cuda_body, _noise_floor_cuda_body
    from numba import cuda

    _nms_cuda_body = cuda.jit(device=True)(_nms_one)
    _chunk_maxima_cuda_body = cuda.jit(device=True)(_chunk_maxima_one)
    _noise_floor_cuda_body = cuda.jit(device=True)(_noise_floor_one)
    _embed_cuda_body = cuda.jit(device=True)(_embed_one)
    _gap_peaks_cuda_body = cuda.jit(device=True)(_gap_peaks_one)
    _unsuppressed_cuda_body = cuda.jit(device=True)(_unsuppressed_body(cuda.jit(device=True)(_search_left)))

    def nms(n, envelope, threshold, block, half, maxima, size, gate):
        i = cuda.grid(1)
        if i < n:
            _nms_cuda_body(i, envelope, threshold, block, half, maxima, size, gate)

    def chunk_maxima(n, envelope, size, maxima):
        c = cuda.grid(1)
        if c < n:
            _chunk_maxima_cuda_body(c, envelope, size, maxima)

    def noise_floor(n, envelope, threshold, block, times, raised):
        b = cuda.grid(1)
        if b < n:
            _noise_floor_cuda_body(b, envelope, threshold, block, times, raised)

    def embed(n, signal, positions, pre, out):
        i = cuda.grid(1)
        if i < n:
            _embed_cuda_body(i, signal, positions, pre, out)

    def gap_peaks(n, env, first, stop, offsets, block, reach, level, maxima, where, peak):
        g = cuda.grid(1)
        if g < n:
            _gap_peaks_cuda_body(g, env, first, stop, offsets, block, reach, level, maxima, where, peak)

    def unsuppressed(n, env, thresholds, block, own, candidates, half, flag):
        i = cuda.grid(1)
        if i < n:
            _unsuppressed_cuda_body(i, env, thresholds, block, own, candidates, half, flag)

    return {"nms": _launch.cuda_jit_cached(nms), "chunk_maxima": _launch.cuda_jit_cached(chunk_maxima),
            "noise_floor": _launch.cuda_jit_cached(noise_floor), "embed": _launch.cuda_jit_cached(embed),
            "gap_peaks": _launch.cuda_jit_cached(gap_peaks), "unsuppressed": _launch.cuda_jit_cached(unsuppressed)}


_CPU = {"nms": _nms_cpu, "chunk_maxima": _chunk_maxima_cpu, "noise_floor": _noise_floor_cpu, "embed": _embed_cpu,
        "gap_peaks": _gap_peaks_cpu, "unsuppressed": _unsuppressed_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _cuda_kernels, name, n, *arrays_and_scalars)
