"""Numba kernels of the beat detector's per-peak and per-beat checks (:mod:`pipeline.peaks`): the
rescue of QRS complexes a wave hid from the suppression, the move of a beat off its own T wave
and the second look for small beats.
Twinned as in :mod:`pipeline._kernels`: each written once as a per-index body, compiled with
``numba.njit`` inside a parallel loop on the CPU and with ``numba.cuda.jit`` (one thread per index)
on the GPU, the twin chosen from the array type. On the GPU each check was dozens of small CuPy
operations and a host synchronisation each time it narrowed the peaks down; here a thread runs a
peak's or a beat's checks one after the other, measuring only what the checks before let through.

The bodies call the QRS-shape body of :mod:`pipeline._shape_kernels` and the binary search of
:mod:`pipeline._kernels`.
Numba's disk cache is keyed on this file alone: after a change to those, clear ``__pycache__``.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np

from pipeline import _kernels, _launch, _likeness_kernels, _shape_kernels
from pipeline._likeness_kernels import SHAPED

# --------------------------------------------------------------------------- device functions
def _middle(values, e):
    """(True, NumPy's median of ``values``) when ``values[e]`` is its lower middle value (of an
    odd count, the middle one), else (False, 0). The median is the mean of the two middle values
    in the values' own precision (float32 for float32, float64 for integers), NaN where any value
    is NaN (then only for e = 0). O(count) a value, in a loop without branches that the CPU
    compiler vectorises: one thread a value finds the median of ~1000 without a sort."""
    count = values.shape[0]
    value = values[e]
    below = equal = 0
    nan = False
    for k in range(count):
        other = values[k]
        below += other < value
        equal += other == value
        nan |= other != other
    if nan:
        return e == 0, math.nan
    low, high = (count - 1) // 2, count // 2
    if not below <= low < below + equal:
        return False, 0.0
    upper = value                   # of an even count, the upper middle value: the next larger one
    if high >= below + equal:
        larger = False
        for k in range(count):
            other = values[k]
            if other > value and (not larger or other < upper):
                upper = other
                larger = True
    return True, (value + upper) * np.float32(0.5)   # int64 × float32: float64, as NumPy's mean of ints


def _strongest_before(env, p, near, far):
    """The sample ``near`` to ``far`` samples before p where ``env`` is largest (indices clipped to
    the envelope). Of equals the first in the order p-near, p-near-1 .. p-far, and a NaN counts as
    the largest: the argmax of a gather in that order."""
    n = env.shape[0]
    best = min(max(p - near, 0), n - 1)
    top = env[best]
    for k in range(p - near - 1, p - far - 1, -1):
        at = min(max(k, 0), n - 1)
        value = env[at]
        if value > top or (value != value and top == top):
            best = at
            top = value
    return best


def _shape_steps(qrs_shape_one):
    """The QRS-shape body's two uses inside the checks, closed over its CPU or CUDA twin (which
    measures the point at index j of an array into slot j of its outputs): (refine, measure)."""

    def refine(j, signal, points, settings, polarity, rival, moved, width, slope):
        """moved[j]: points[j] moved to its QRS extremum as :func:`pipeline.qrs.refine_to_extremum`
        moves it (``settings``' search, ``polarity``, ``rival``); width[j] and slope[j] are left
        holding that search's own measures, which the checks do not use."""
        search, base, despike, cap, step, reach = settings
        qrs_shape_one(j, signal, points, search, base, despike, cap, step, reach, polarity, rival, moved, width,
                      slope)

    def measure(j, signal, points, settings, spare, width, slope):
        """width[j], slope[j]: the deflection at points[j], as :func:`pipeline.qrs.qrs_shape` measures
        it with ``settings`` less the search (spare[j] takes its unused refined point)."""
        _, base, despike, cap, step, reach = settings
        qrs_shape_one(j, signal, points, 0, base, despike, cap, step, reach, 0.0, 1.0, spare, width, slope)

    return refine, measure


def _qrs_like(width, slope, medians, width_ratio, slope_ratio):
    """Whether a deflection is as narrow as a QRS complex (at most ``width_ratio`` × the beats'
    median width, medians[0], in float64) and as steep (at least ``slope_ratio`` × their median
    slope, medians[1], in float32 as the float32 median and ratio multiply)."""
    return width <= width_ratio * medians[0] and slope >= slope_ratio * np.float32(medians[1])


# --------------------------------------------------------------------------- per-index bodies
def _own_peaks_body(search_left):
    """The per-candidate body of the own-peak kernel, closed over ``search_left``: the CPU or the
    CUDA twin of :func:`pipeline._kernels._search_left`."""

    def own_peaks_one(j, candidates, refined, positions, half, own):
        """own[j]: candidate j where it became a beat (its refined point is one of the sorted
        ``positions``), else the nearest candidate before it that did (after it where none did
        before; ``-half - 1``, which suppresses no sample, where none did at all). The sorted
        beats' own peaks, each other candidate standing in as a copy of a neighbour: a binary
        search finds the same nearest own peaks in it, and no host synchronisation compacts
        them. A candidate walks as far as the candidates next to it that became no beats."""
        k = np.int64(j)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        last = positions.shape[0] - 1
        for step in (-1, 1):
            at = k
            while 0 <= at < candidates.shape[0]:
                if positions[min(search_left(positions, refined[at]), last)] == refined[at]:
                    own[k] = candidates[at]
                    return
                at += step
        own[k] = -half - 1

    return own_peaks_one


def _shape_medians_body(middle):
    """The per-value body of the shape-median kernel, closed over ``middle``: the CPU or the CUDA
    twin of :func:`_middle`."""

    def shape_medians_one(e, width, slope, medians):
        """medians[0], medians[1]: NumPy's median of ``width`` (float64) and of ``slope`` (float32,
        held exactly in float64), written by the thread of the lower middle value (several
        threads of equal values write the same number). Indices 0..count-1 are the widths',
        count..2 count-1 the slopes': each thread walks one array."""
        k, count = np.int64(e), width.shape[0]   # a CPU prange index is unsigned: Numba mixes it with ints as a float
        if k < count:
            found, value = middle(width, k)
            if found:
                medians[0] = value
        else:
            found, value = middle(slope, k - count)
            if found:
                medians[1] = value

    return shape_medians_one


def _rescue_body(refine, measure, search_left, qrs_like, stretch):
    """The per-peak body of the rescue kernel, closed over the CPU or the CUDA twins of
    :func:`_shape_steps`' refine and measure, :func:`pipeline._kernels._search_left`,
    :func:`_qrs_like` and :func:`pipeline._likeness_kernels._stretch`."""

    def rescue_one(i, signal, positions, peak, settings, polarity, rival, gap, half, medians, width_ratio,
                   slope_ratio, reach, moved, width, slope, spare, own, state):
        """state[i]: SHAPED where the envelope's peak i, moved to its QRS extremum (moved[i]:
        ``settings``' search, ``polarity``, ``rival``), passes :func:`pipeline.peaks.rescue_suppressed`'s
        checks before the likeness (then own[i] holds the stretch of its ECG within ±``reach``,
        which :mod:`pipeline._likeness_kernels`' ``alike`` kernel compares with the beats'), else
        0: it lies between two beats, at least ``gap`` after the one before and ``half`` before the
        next, and its deflection (width[i], slope[i]) is as narrow and steep as a QRS
        (:func:`_qrs_like`). Each check runs only where those before it pass."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        state[j] = 0
        refine(j, signal, peak, settings, polarity, rival, moved, width, slope)
        point, count = moved[j], positions.shape[0]
        k = search_left(positions, point)
        if k == 0 or k == count or not (point - positions[k - 1] >= gap and positions[k] - point >= half):
            return
        measure(j, signal, moved, settings, spare, width, slope)
        if not qrs_like(width[j], slope[j], medians, width_ratio, slope_ratio):
            return
        own[j, 0], own[j, 1] = stretch(signal, point, reach)
        state[j] = SHAPED

    return rescue_one


def _suppress_among_one(i, env, peak, passed, half, won):
    """won[i]: whether peak i passed and no other passed peak within ±``half`` samples beats it, a
    larger one after it or one at least as large before it: the non-maximum suppression among the
    passed peaks alone, ties going to the earlier as :func:`pipeline.peaks.nms_gate` rules. A peak
    walks over the sorted peaks within ``half`` of it."""
    j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
    won[j] = False
    if not passed[j]:
        return
    p = peak[j]
    value = env[p]
    k = j - 1
    while k >= 0 and p - peak[k] <= half:
        if passed[k] and env[peak[k]] >= value:
            return
        k -= 1
    k = j + 1
    while k < peak.shape[0] and peak[k] - p <= half:
        if passed[k] and env[peak[k]] > value:
            return
        k += 1
    won[j] = True


def _own_t_wave_body(refine, measure, strongest_before):
    """The per-beat body of the own-T-wave kernel, closed over the CPU or the CUDA twins of
    :func:`_shape_steps`' refine and measure and :func:`_strongest_before`."""

    def own_t_wave_one(i, env, thresholds, block, signal, positions, near, far, settings, polarity, rival_ratio,
                       medians, width_ratio, slope_ratio, rival, moved, width, slope, moved_width, moved_slope,
                       spare, out):
        """out[i]: where beat i belongs, as :func:`pipeline.peaks.off_own_t_waves` rules: the beat
        itself, or, where it is a T wave, the QRS complex before it. The largest response ``near``
        to ``far`` samples before the beat (rival[i]) must pass its block's threshold; the beat's
        deflection (width[i], slope[i]) must be wider than ``width_ratio`` × the beats' median
        width (medians[0]) and less steep than ``slope_ratio`` (float32) × their median slope
        (medians[1]); the rival, moved to its QRS extremum (moved[i]: ``settings``' search,
        ``polarity``, ``rival_ratio``), must be steeper than the beat and no more than one sample
        wider (moved_width[i], moved_slope[i]), and more than ``far`` after the beat before. The
        first beat stays. Each check runs only where those before it pass."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        out[j] = positions[j]
        if j == 0:
            return
        at = strongest_before(env, positions[j], near, far)
        if not env[at] > thresholds[at // block]:
            return
        measure(j, signal, positions, settings, spare, width, slope)
        if not (width[j] > width_ratio * medians[0] and slope[j] < slope_ratio * np.float32(medians[1])):
            return
        rival[j] = at
        refine(j, signal, rival, settings, polarity, rival_ratio, moved, moved_width, moved_slope)
        measure(j, signal, moved, settings, spare, moved_width, moved_slope)
        # Not wider by more than a sample: widths are whole samples, and at 128 Hz a wide
        # ventricular beat and its T wave can measure alike.
        if moved_width[j] <= width[j] + 1 and moved_slope[j] > slope[j] and moved[j] - positions[j - 1] > far:
            out[j] = moved[j]

    return own_t_wave_one


def _second_look_body(refine, measure, search_left, qrs_like):
    """The per-candidate body of the second-look kernel, closed over the CPU or the CUDA twins of
    :func:`_shape_steps`' refine and measure, :func:`pipeline._kernels._search_left` and
    :func:`_qrs_like`."""

    def second_look_one(i, signal, positions, extra, settings, polarity, rival, gap, medians, width_ratio,
                        slope_ratio, moved, width, slope, spare, keep):
        """keep[i]: whether candidate i of the lower threshold's suppression, moved to its QRS
        extremum (moved[i]: ``settings``' search, ``polarity``, ``rival``), is a small beat that
        :func:`pipeline.peaks.second_look` adds: at least ``gap`` from the beats before and after
        it (the first two or the last two beats where it lies outside them), and its deflection
        (width[i], slope[i], measured only where the gap passes) as narrow and steep as a QRS
        (:func:`_qrs_like`)."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        keep[j] = False
        refine(j, signal, extra, settings, polarity, rival, moved, width, slope)
        point = moved[j]
        after = min(max(search_left(positions, point), 1), positions.shape[0] - 1)
        if not min(abs(point - positions[after - 1]), abs(positions[after] - point)) >= gap:
            return
        measure(j, signal, moved, settings, spare, width, slope)
        keep[j] = qrs_like(width[j], slope[j], medians, width_ratio, slope_ratio)

    return second_look_one


# --------------------------------------------------------------------------- twins
# CUDA kernels take a fixed argument list (no *args), so each body gets two explicit wrappers. The
# wrappers take the QRS-shape settings as six integers (a launch packs scalars and arrays, not
# tuples) and hand the bodies their tuple.
_own_peaks_cpu_body = numba.njit(_own_peaks_body(_kernels._search_left_cpu), cache=True)
_shape_medians_cpu_body = numba.njit(_shape_medians_body(numba.njit(_middle, cache=True)), cache=True)
_refine_cpu, _measure_cpu = (numba.njit(step, cache=True) for step in _shape_steps(_shape_kernels._qrs_shape_cpu_body))
_qrs_like_cpu = numba.njit(_qrs_like, cache=True)
_rescue_cpu_body = numba.njit(_rescue_body(_refine_cpu, _measure_cpu, _kernels._search_left_cpu, _qrs_like_cpu,
                                           _likeness_kernels._stretch_cpu), cache=True)
_suppress_among_cpu_body = numba.njit(_suppress_among_one, cache=True)
_own_t_wave_cpu_body = numba.njit(_own_t_wave_body(_refine_cpu, _measure_cpu,
                                                   numba.njit(_strongest_before, cache=True)), cache=True)
_second_look_cpu_body = numba.njit(_second_look_body(_refine_cpu, _measure_cpu, _kernels._search_left_cpu,
                                                     _qrs_like_cpu), cache=True)


@numba.njit(parallel=True, cache=True)
def _own_peaks_cpu(n, candidates, refined, positions, half, own):
    for j in numba.prange(n):
        _own_peaks_cpu_body(j, candidates, refined, positions, half, own)


@numba.njit(parallel=True, cache=True)
def _shape_medians_cpu(n, width, slope, medians):
    for e in numba.prange(n):
        _shape_medians_cpu_body(e, width, slope, medians)


@numba.njit(parallel=True, cache=True)
def _rescue_cpu(n, signal, positions, peak, search, base, despike, cap, step, shape_reach, polarity, rival, gap, half,
                medians, width_ratio, slope_ratio, reach, moved, width, slope, spare, own, state):
    settings = (search, base, despike, cap, step, shape_reach)
    for i in numba.prange(n):
        _rescue_cpu_body(i, signal, positions, peak, settings, polarity, rival, gap, half, medians, width_ratio,
                         slope_ratio, reach, moved, width, slope, spare, own, state)


@numba.njit(parallel=True, cache=True)
def _suppress_among_cpu(n, env, peak, passed, half, won):
    for i in numba.prange(n):
        _suppress_among_cpu_body(i, env, peak, passed, half, won)


@numba.njit(parallel=True, cache=True)
def _own_t_wave_cpu(n, env, thresholds, block, signal, positions, near, far, search, base, despike, cap, step,
                    shape_reach, polarity, rival_ratio, medians, width_ratio, slope_ratio, rival, moved, width, slope,
                    moved_width, moved_slope, spare, out):
    settings = (search, base, despike, cap, step, shape_reach)
    for i in numba.prange(n):
        _own_t_wave_cpu_body(i, env, thresholds, block, signal, positions, near, far, settings, polarity, rival_ratio,
                             medians, width_ratio, slope_ratio, rival, moved, width, slope, moved_width, moved_slope,
                             spare, out)


@numba.njit(parallel=True, cache=True)
def _second_look_cpu(n, signal, positions, extra, search, base, despike, cap, step, shape_reach, polarity, rival, gap,
                     medians, width_ratio, slope_ratio, moved, width, slope, spare, keep):
    settings = (search, base, despike, cap, step, shape_reach)
    for i in numba.prange(n):
        _second_look_cpu_body(i, signal, positions, extra, settings, polarity, rival, gap, medians, width_ratio,
                              slope_ratio, moved, width, slope, spare, keep)


# Set by _beat_cuda_kernels() on the GPU path only, as in pipeline._kernels: the CUDA wrappers reach
# numba.cuda and the device bodies as module globals rather than closure cells, so that their
# on-disk cache key is the same in every process.
cuda = _own_peaks_cuda_body = _shape_medians_cuda_body = _rescue_cuda_body = None
_suppress_among_cuda_body = _own_t_wave_cuda_body = _second_look_cuda_body = None


@functools.cache
def _beat_cuda_kernels() -> dict:
    """CUDA twins of this module's kernels, compiled on first use and cached on disk like
    :func:`pipeline._kernels._cuda_kernels`."""
    global cuda, _own_peaks_cuda_body, _shape_medians_cuda_body, _rescue_cuda_body
    global _suppress_among_cuda_body, _own_t_wave_cuda_body, _second_look_cuda_body
    from numba import cuda

    device = cuda.jit(device=True)
    search_left = device(_kernels._search_left)
    qrs_shape_one = device(_shape_kernels._qrs_shape_body(_shape_kernels._median_of_cuda()))
    refine, measure = (device(step) for step in _shape_steps(qrs_shape_one))
    stretch, qrs_like = device(_likeness_kernels._stretch), device(_qrs_like)
    _own_peaks_cuda_body = device(_own_peaks_body(search_left))
    _shape_medians_cuda_body = device(_shape_medians_body(device(_middle)))
    _rescue_cuda_body = device(_rescue_body(refine, measure, search_left, qrs_like, stretch))
    _suppress_among_cuda_body = device(_suppress_among_one)
    _own_t_wave_cuda_body = device(_own_t_wave_body(refine, measure, device(_strongest_before)))
    _second_look_cuda_body = device(_second_look_body(refine, measure, search_left, qrs_like))

    def own_peaks(n, candidates, refined, positions, half, own):
        j = cuda.grid(1)
        if j < n:
            _own_peaks_cuda_body(j, candidates, refined, positions, half, own)

    def shape_medians(n, width, slope, medians):
        e = cuda.grid(1)
        if e < n:
            _shape_medians_cuda_body(e, width, slope, medians)

    def rescue(n, signal, positions, peak, search, base, despike, cap, step, shape_reach, polarity, rival, gap, half,
               medians, width_ratio, slope_ratio, reach, moved, width, slope, spare, own, state):
        i = cuda.grid(1)
        if i < n:
            settings = (search, base, despike, cap, step, shape_reach)
            _rescue_cuda_body(i, signal, positions, peak, settings, polarity, rival, gap, half, medians, width_ratio,
                              slope_ratio, reach, moved, width, slope, spare, own, state)

    def suppress_among(n, env, peak, passed, half, won):
        i = cuda.grid(1)
        if i < n:
            _suppress_among_cuda_body(i, env, peak, passed, half, won)

    def own_t_wave(n, env, thresholds, block, signal, positions, near, far, search, base, despike, cap, step,
                   shape_reach, polarity, rival_ratio, medians, width_ratio, slope_ratio, rival, moved, width, slope,
                   moved_width, moved_slope, spare, out):
        i = cuda.grid(1)
        if i < n:
            settings = (search, base, despike, cap, step, shape_reach)
            _own_t_wave_cuda_body(i, env, thresholds, block, signal, positions, near, far, settings, polarity,
                                  rival_ratio, medians, width_ratio, slope_ratio, rival, moved, width, slope,
                                  moved_width, moved_slope, spare, out)

    def second_look(n, signal, positions, extra, search, base, despike, cap, step, shape_reach, polarity, rival, gap,
                    medians, width_ratio, slope_ratio, moved, width, slope, spare, keep):
        i = cuda.grid(1)
        if i < n:
            settings = (search, base, despike, cap, step, shape_reach)
            _second_look_cuda_body(i, signal, positions, extra, settings, polarity, rival, gap, medians, width_ratio,
                                   slope_ratio, moved, width, slope, spare, keep)

    kernels = {"own_peaks": own_peaks, "shape_medians": shape_medians, "rescue": rescue,
               "suppress_among": suppress_among, "own_t_wave": own_t_wave, "second_look": second_look}
    return {name: _launch.cuda_jit_cached(kernel) for name, kernel in kernels.items()}


_CPU = {"own_peaks": _own_peaks_cpu, "shape_medians": _shape_medians_cpu, "rescue": _rescue_cpu,
        "suppress_among": _suppress_among_cpu, "own_t_wave": _own_t_wave_cpu, "second_look": _second_look_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _beat_cuda_kernels, name, n, *arrays_and_scalars)
