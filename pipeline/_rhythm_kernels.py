"""Numba kernels of the beat detector's rhythm step (:func:`pipeline.peaks.keep_the_rhythm`): one
thread a beat searches its rival deflection, judges whether it keeps the rhythm, and, where it
does, moves it to its QRS extremum and compares their shapes.
Twinned as in :mod:`pipeline._kernels` and :mod:`pipeline._beat_kernels`: a per-index body,
compiled with ``numba.njit`` inside a parallel loop on the CPU and with ``numba.cuda.jit`` (one
thread per index) on the GPU, the twin chosen from the array type. On the GPU the step was the
rival kernel, then a host synchronisation, a refinement, a shape launch over three gathered
groups, a host median and a dozen small operations over the qualifying beats.

The bodies call the device functions of :mod:`pipeline._kernels` (the rival body, the QRS-shape
body) and :mod:`pipeline._beat_kernels` (refine and measure). Numba's disk cache is keyed on this
file alone: after a change to those, clear ``__pycache__``.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

from pipeline import _beat_kernels, _kernels


# --------------------------------------------------------------------------- per-index bodies
def _rhythm_body(rival_one, refine, measure):
    """The per-beat body of the rhythm kernel, closed over the CPU or the CUDA twins of
    :func:`pipeline._kernels._rival_body`'s body and :func:`pipeline._beat_kernels._shape_steps`'
    refine and measure."""

    def rhythm_one(i, env, thresholds, block, positions, local, near, far, gain, signal, settings, polarity,
                   rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width, slope, moved_width,
                   moved_slope, spare, out, any_better):
        """out[i]: where beat i belongs, as :func:`pipeline.peaks.keep_the_rhythm` rules: the beat
        itself, or its rival (rival_at[i], better[i]: :func:`pipeline._kernels._rival_body`) moved
        to its QRS extremum (moved[i]: ``settings``' search, ``polarity``, ``rival_ratio``) where the rival
        keeps the rhythm, still lies ``near`` or more from the beat, is at least ``slope_ratio``
        (float32) × as steep as the beat (moved_slope[i] against slope[i]) and at most
        ``width_ratio`` × as wide as the beats' median (moved_width[i] against medians[0]).
        any_better[0] is set to 1 where a beat's rival keeps the rhythm (several threads write the
        same 1). Shapes are measured only where the rhythm check passes."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        rival_one(j, env, thresholds, block, positions, local, near, far, gain, rival_at, better)
        out[j] = positions[j]
        if not better[j]:
            return
        any_better[0] = 1
        refine(j, signal, rival_at, settings, polarity, rival_ratio, moved, moved_width, moved_slope)
        measure(j, signal, positions, settings, spare, width, slope)
        measure(j, signal, moved, settings, spare, moved_width, moved_slope)
        if (abs(moved[j] - positions[j]) >= near and moved_slope[j] >= slope_ratio * slope[j]
                and moved_width[j] <= width_ratio * medians[0]):
            out[j] = moved[j]

    return rhythm_one


# --------------------------------------------------------------------------- twins
_rhythm_cpu_body = numba.njit(_rhythm_body(_kernels._rival_cpu_body, _beat_kernels._refine_cpu,
                                           _beat_kernels._measure_cpu), cache=True)


@numba.njit(parallel=True, cache=True)
def _rhythm_cpu(n, env, thresholds, block, positions, local, near, far, gain, signal, search, base, despike, cap, step,
                shape_reach, polarity, rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width,
                slope, moved_width, moved_slope, spare, out, any_better):
    settings = (search, base, despike, cap, step, shape_reach)
    for i in numba.prange(n):
        _rhythm_cpu_body(i, env, thresholds, block, positions, local, near, far, gain, signal, settings, polarity,
                         rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width, slope,
                         moved_width, moved_slope, spare, out, any_better)


# Set by _rhythm_cuda_kernels() on the GPU path only, as in pipeline._kernels: the CUDA wrappers reach
# numba.cuda and the device bodies as module globals rather than closure cells, so that their
# on-disk cache key is the same in every process.
cuda = _rhythm_cuda_body = None


@functools.cache
def _rhythm_cuda_kernels() -> dict:
    """CUDA twins of this module's kernels, compiled on first use and cached on disk like
    :func:`pipeline._kernels._cuda_kernels`."""
    global cuda, _rhythm_cuda_body
    from numba import cuda

    device = cuda.jit(device=True)
    qrs_shape_one = device(_kernels._qrs_shape_body(_kernels._median_of_cuda()))
    refine, measure = (device(step) for step in _beat_kernels._shape_steps(qrs_shape_one))
    rival_one = device(_kernels._rival_body(device(_kernels._strongest_around)))
    _rhythm_cuda_body = device(_rhythm_body(rival_one, refine, measure))

    def rhythm(n, env, thresholds, block, positions, local, near, far, gain, signal, search, base, despike, cap, step,
               shape_reach, polarity, rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width,
               slope, moved_width, moved_slope, spare, out, any_better):
        i = cuda.grid(1)
        if i < n:
            settings = (search, base, despike, cap, step, shape_reach)
            _rhythm_cuda_body(i, env, thresholds, block, positions, local, near, far, gain, signal, settings, polarity,
                              rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width, slope,
                              moved_width, moved_slope, spare, out, any_better)

    return {"rhythm": _kernels._cuda_jit_cached(rhythm)}


_CPU = {"rhythm": _rhythm_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _kernels.launch_from(_CPU, _rhythm_cuda_kernels, name, n, *arrays_and_scalars)
