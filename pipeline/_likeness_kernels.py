"""Numba kernels of the likeness test: whether a peak's ECG, within a few tens of milliseconds of
it, correlates with that of one of the recording's beats (:func:`pipeline.peaks.rescue_suppressed`,
:func:`pipeline.noise_beats.keep_plausible`). One thread measures a stretch's mean and norm, one
a (peak, example) pair's correlation. Twinned as in :mod:`pipeline._kernels`; the rescue kernel
of :mod:`pipeline._beat_kernels` measures its peaks' stretches with :func:`_stretch` and marks
them with the state bits here.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np

from pipeline import _launch

# The bits of a peak's state in the rescue (see pipeline._beat_kernels._rescue_body and _alike_body):
# it passed the checks before the likeness (SHAPED), it is alike to one of the beats (ALIKE), a
# likeness was NaN (UNDEFINED). It passes when its state is RESCUED.
SHAPED, ALIKE, UNDEFINED = 1, 2, 4
RESCUED = SHAPED | ALIKE


# --------------------------------------------------------------------------- device functions
def _stretch(signal, p, reach):
    """Mean and norm (less the mean, at least 1e-12) of the ECG within ±``reach`` of p, indices
    clipped, in float64: the terms of a correlation with it (:func:`_correlation`)."""
    n = signal.shape[0]
    total = np.float64(0.0)         # float64 sums of the float32 ECG (a bare 0.0 would stay float32 in
    for t in range(p - reach, p + reach + 1):                  # the CUDA simulator's NumPy scalars)
        total += signal[min(max(t, 0), n - 1)]
    mean = total / (2 * reach + 1)
    energy = np.float64(0.0)
    for t in range(p - reach, p + reach + 1):
        d = signal[min(max(t, 0), n - 1)] - mean
        energy += d * d
    return mean, max(math.sqrt(energy), 1e-12)


def _correlation(signal, p, own, q, other, reach):
    """The Pearson correlation of the ECG within ±``reach`` of p with that within ±``reach`` of q,
    given the two stretches' :func:`_stretch` (``own`` and ``other``: mean, norm): 1 for the same
    shape at any size or baseline, 0 against a flat one, NaN where one is NaN. In float64 (the
    whole-array formula it replaced rounded float32 rows and a matrix product its own way on each
    device): the CPU's and the GPU's rounding (fused multiply-add) part ~1e-16 away, far inside the
    float32 the rescue compares it in."""
    n = signal.shape[0]
    total = np.float64(0.0)
    for t in range(-reach, reach + 1):
        total += ((signal[min(max(p + t, 0), n - 1)] - own[0]) * (signal[min(max(q + t, 0), n - 1)] - other[0]))
    return total / (own[1] * other[1])


# --------------------------------------------------------------------------- per-index bodies
def _stretches_body(stretch):
    """The per-position body of the stretch kernel, closed over ``stretch``: the CPU or the CUDA
    twin of :func:`_stretch`."""

    def stretches_one(e, signal, examples, reach, stretches):
        """stretches[e]: the mean and the norm of the ECG within ±``reach`` of ``examples[e]``."""
        stretches[e, 0], stretches[e, 1] = stretch(signal, examples[e], reach)

    return stretches_one


def _alike_body(correlation, or_into):
    """The per-pair body of the likeness kernel, closed over the CPU or the CUDA twins of
    :func:`_correlation` and of a bitwise or into an array (atomic on the GPU, where the threads
    of one peak's pairs write its state together)."""

    def alike_one(i, e, signal, moved, own, examples, stretches, reach, likeness, state):
        """Where peak i passed the rescue's checks before the likeness (state[i] has SHAPED): +ALIKE
        when its ECG correlates at least ``likeness`` (float32, as the correlation is rounded to)
        with that around ``examples[e]`` (whose stretch is ``stretches[e]``), +UNDEFINED where the
        correlation is NaN. A peak passes with some example alike and none undefined: as its best
        correlation with them passes, the float32 rounding keeping their order."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        if not state[j] & SHAPED:
            return
        value = correlation(signal, moved[j], own[j], examples[e], stretches[e], reach)
        if value != value:
            or_into(state, j, UNDEFINED)
        elif np.float32(value) >= likeness:
            or_into(state, j, ALIKE)

    return alike_one


def _or_into(state, j, bits):
    """state[j] |= bits, on the CPU, where one thread walks one peak's pairs."""
    state[j] |= bits


# --------------------------------------------------------------------------- twins
_stretch_cpu = numba.njit(_stretch, cache=True)
_stretches_cpu_body = numba.njit(_stretches_body(_stretch_cpu), cache=True)
_correlation_cpu = numba.njit(_correlation, cache=True)
_alike_cpu_body = numba.njit(_alike_body(_correlation_cpu, numba.njit(_or_into, cache=True)), cache=True)


@numba.njit(parallel=True, cache=True)
def _stretches_cpu(n, signal, examples, reach, stretches):
    for e in numba.prange(n):
        _stretches_cpu_body(e, signal, examples, reach, stretches)


@numba.njit(parallel=True, cache=True)
def _alike_cpu(n, signal, moved, own, examples, stretches, reach, likeness, state):
    # n counts the (peak, example) pairs, as the CUDA twin's threads; a CPU thread walks a peak's.
    count = examples.shape[0]
    for i in numba.prange(n // count):
        for e in range(count):
            _alike_cpu_body(i, e, signal, moved, own, examples, stretches, reach, likeness, state)


# Set by _likeness_cuda_kernels() on the GPU path only, as in pipeline._kernels: the CUDA wrappers
# reach numba.cuda and the device bodies as module globals rather than closure cells, so that their
# on-disk cache key is the same in every process.
cuda = _stretches_cuda_body = _alike_cuda_body = None


def _atomic_or_into(state, j, bits):
    """state[j] |= bits on the GPU, where the threads of one peak's pairs write it together."""
    cuda.atomic.or_(state, j, bits)


@functools.cache
def _likeness_cuda_kernels() -> dict:
    """CUDA twins of this module's kernels, compiled on first use and cached on disk like
    :func:`pipeline._kernels._cuda_kernels`."""
    global cuda, _stretches_cuda_body, _alike_cuda_body
    from numba import cuda

    device = cuda.jit(device=True)
    _stretches_cuda_body = device(_stretches_body(device(_stretch)))
    _alike_cuda_body = device(_alike_body(device(_correlation), device(_atomic_or_into)))

    def stretches(n, signal, examples, reach, stretches):
        e = cuda.grid(1)
        if e < n:
            _stretches_cuda_body(e, signal, examples, reach, stretches)

    def alike(n, signal, moved, own, examples, stretches, reach, likeness, state):
        m = cuda.grid(1)      # one thread a (peak, example) pair: a peak's ~1000 correlations side by side
        if m < n:
            count = examples.shape[0]
            _alike_cuda_body(m // count, m % count, signal, moved, own, examples, stretches, reach, likeness, state)

    return {"stretches": _launch.cuda_jit_cached(stretches), "alike": _launch.cuda_jit_cached(alike)}


_CPU = {"stretches": _stretches_cpu, "alike": _alike_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _likeness_cuda_kernels, name, n, *arrays_and_scalars)
