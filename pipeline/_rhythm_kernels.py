"""Numba kernels of the beat detector's rhythm checks: the rhythm step
(:func:`pipeline.peaks.keep_the_rhythm`: one thread a beat searches its rival deflection, judges
whether it keeps the rhythm, and, where it does, moves it to its QRS extremum and compares their
shapes), and the drop of T waves and baseline steps (:func:`pipeline.peaks.drop_non_qrs`: one
thread a candidate judges it against the candidate before, the early beats in a second pass), and
the search-back's long gaps and its candidates' shapes (:func:`pipeline.peaks.search_back`); and
the deflection :func:`pipeline.qrs.polarity_of` reads.
Twinned as in :mod:`pipeline._kernels` and :mod:`pipeline._beat_kernels`: a per-index body,
compiled with ``numba.njit`` inside a parallel loop on the CPU and with ``numba.cuda.jit`` (one
thread per index) on the GPU, the twin chosen from the array type. On the GPU the step was the
rival kernel, then a host synchronisation, a refinement, a shape launch over three gathered
groups, a host median and a dozen small operations over the qualifying beats.

The bodies call the device functions of :mod:`pipeline._shape_kernels` (the rival body, the
QRS-shape body) and :mod:`pipeline._beat_kernels` (refine and measure). Numba's disk cache is
keyed on this file alone: after a change to those, clear ``__pycache__``.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np

from pipeline import _beat_kernels, _launch, _shape_kernels


# --------------------------------------------------------------------------- device functions
def _window_median(values, first, last):
    """(True, NumPy's median of values[first : last+1]) (indices clipped to the array, as a
    clipped gather repeats the end values), (False, a value) where any value is NaN (the median
    is NaN): the middle value of an odd count, the mean of the two middle values of an even one,
    in the values' own precision (a NaN of its own would make it float64). O(count²) without an
    array, for the few candidates that need it."""
    n = values.shape[0]
    count = last - first + 1
    low, high = (count - 1) // 2, count // 2
    for a in range(first, last + 1):
        if values[min(max(a, 0), n - 1)] != values[min(max(a, 0), n - 1)]:
            return False, values[min(max(a, 0), n - 1)]
    for a in range(first, last + 1):
        value = values[min(max(a, 0), n - 1)]
        below = equal = 0
        upper = value
        larger = False
        for b in range(first, last + 1):
            other = values[min(max(b, 0), n - 1)]
            below += other < value
            equal += other == value
            if other > value and (not larger or other < upper):
                upper = other
                larger = True
        if below <= low < below + equal:
            if high < below + equal:
                return True, value
            return True, (value + upper) * np.float32(0.5)
    return False, values[min(max(first, 0), n - 1)]


def _steps_baseline_body(window_median):
    """The baseline-step test of one candidate, closed over the CPU or the CUDA twin of
    :func:`_window_median`."""

    def steps_baseline(signal, p, before_first, before_last, after_first, after_last, reach):
        """Whether the median of the ECG ``after_first``..``after_last`` samples from p lies more
        than half the peak-to-peak deflection within ±``reach`` away from the median over
        ``before_first``..``before_last`` (indices clipped): :func:`pipeline.peaks._steps_baseline`
        for one candidate, False where a value in the windows is NaN."""
        n = signal.shape[0]
        found_before, before = window_median(signal, p + before_first, p + before_last)
        found_after, after = window_median(signal, p + after_first, p + after_last)
        if not (found_before and found_after):
            return False
        top = bottom = signal[min(max(p - reach, 0), n - 1)]
        for t in range(p - reach, p + reach + 1):
            value = signal[min(max(t, 0), n - 1)]
            if value != value:
                return False
            top = max(top, value)
            bottom = min(bottom, value)
        return abs(after - before) > np.float32(0.5) * (top - bottom)

    return steps_baseline


def _deflection(signal, p, reach):
    """|ECG at p less the mean of its values ``reach`` before and after| (indices clipped), in the
    ECG's precision: :func:`pipeline.qrs.deflection`'s size."""
    n = signal.shape[0]
    return abs(signal[p] - np.float32(0.5) * (signal[min(max(p - reach, 0), n - 1)]
                                              + signal[min(max(p + reach, 0), n - 1)]))


# --------------------------------------------------------------------------- per-index bodies
def _non_qrs_body(steps_baseline):
    """The per-candidate body of the non-QRS kernel, closed over the CPU or the CUDA twin of
    :func:`_steps_baseline_body`'s test."""

    def non_qrs_one(i, signal, positions, width, slope, medians, cap, step_ratio, before_first, before_last,
                    after_first, after_last, reach, window, rr_fraction, width_ratio, slope_ratio, flat_ratio, keep,
                    slow, any_slow):
        """keep[i]: whether candidate i stays a beat in :func:`pipeline.peaks.drop_non_qrs`, taking
        it for no early beat. A deflection wider than ``cap`` is a baseline step unless at least
        ``step_ratio`` (float32) × as steep as the candidates' median slope (medians[1]); a wide,
        steep one is still a step where the baseline stays moved (``steps_baseline``). A candidate
        less than ``window`` samples (at most ``rr_fraction`` × the gap before the previous one,
        from the last candidate before it that is not flat against its own predecessor, up to three
        back) after the previous one is a T wave when more than ``width_ratio`` × as wide and less than
        ``slope_ratio`` × as steep ("wide and slow"), or less than ``flat_ratio`` × as steep.
        slow[i]: 0 where candidate i is not wide and slow, 2 where it is, is not flat and is no
        step (an early beat would keep it, :func:`_early_beats_body`), else 1; any_slow[0] is set
        to 1 where any candidate is wide and slow (several threads write the same 1)."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        wide = width[j] > cap
        steep = slope[j] >= step_ratio * np.float32(medians[1])
        stays = not wide or steep
        if wide and steep:
            stays = not steps_baseline(signal, positions[j], before_first, before_last, after_first, after_last,
                                       reach)
        slow[j] = 0
        if j >= 1:
            gap = positions[j] - positions[j - 1]
            gap_before = math.inf
            if j >= 2:
                # The candidate before the previous one may itself be a T wave (flat against its
                # own predecessor): the gap before then runs from that beat's QRS, up to three
                # such candidates back, or alternating T waves would each look premature.
                k = j - 2
                while k > 0 and k > j - 5 and slope[k] < flat_ratio * slope[k - 1]:
                    k -= 1
                gap_before = float(positions[j - 1] - positions[k])
            near = gap < min(window, rr_fraction * gap_before)
            wide_and_slow = near and width[j] > width_ratio * width[j - 1] and slope[j] < slope_ratio * slope[j - 1]
            flat = near and slope[j] < flat_ratio * slope[j - 1]
            if wide_and_slow:
                any_slow[0] = 1
                slow[j] = 2 if stays and not flat else 1
            stays = stays and not (wide_and_slow or flat)
        keep[j] = stays

    return non_qrs_one


def _early_beats_body(deflection):
    """The per-candidate body of the early-beat kernel, closed over the CPU or the CUDA twin of
    :func:`_deflection`."""

    def early_beats_one(i, signal, positions, slow, reach, height_ratio, gap, keep):
        """keep[i] = True where slow[i] is 2 (:func:`_non_qrs_body`) and candidate i an early beat:
        its deflection (:func:`_deflection` over ±``reach``) at least ``height_ratio`` (float32) ×
        the previous candidate's, and its neighbours more than ``gap`` (float64) samples apart
        (none after the last candidate)."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        if slow[j] != 2:
            return
        between = float(positions[j + 1] - positions[j - 1]) if j + 1 < positions.shape[0] else 0.0
        if (deflection(signal, positions[j], reach) >= height_ratio * deflection(signal, positions[j - 1], reach)
                and between > gap):
            keep[j] = True

    return early_beats_one


def _rhythm_body(rival_one, refine, measure):
    """The per-beat body of the rhythm kernel, closed over the CPU or the CUDA twins of
    :func:`pipeline._shape_kernels._rival_body`'s body and
    :func:`pipeline._beat_kernels._shape_steps`' refine and measure."""

    def rhythm_one(i, env, thresholds, block, positions, local, near, far, gain, signal, settings, polarity,
                   rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width, slope, moved_width,
                   moved_slope, spare, out, any_better):
        """out[i]: where beat i belongs, as :func:`pipeline.peaks.keep_the_rhythm` rules: the beat
        itself, or its rival (rival_at[i], better[i]: :func:`pipeline._shape_kernels._rival_body`) moved
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


def _gap_bounds_one(i, positions, local, long_ratio, longest, gap, block, blocks, first, stop, flag):
    """For RR interval i (beats i and i+1), as :func:`pipeline.peaks.search_back` rules: flag[i]
    = 1 where it is longer than ``long_ratio`` × its local RR (``local``) and at most ``longest``
    samples, and whole blocks of ``block`` samples lie inside it ``max(gap, local / 2)`` away from
    both beats: blocks first[i] to stop[i] - 1 (the last at most ``blocks``); else 0 (first[i]
    and stop[i] then unset where the interval is not long). Float64 in the order of the
    whole-array formula it replaced."""
    j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
    flag[j] = 0
    rr = positions[j + 1] - positions[j]
    if not (rr > long_ratio * local[j] and rr <= longest):
        return
    margin = max(gap, 0.5 * local[j])
    first[j] = np.int64(math.ceil((positions[j] + margin) / block))
    stop[j] = min(np.int64(math.floor((positions[j + 1] - margin) / block)), blocks)
    if stop[j] > first[j]:
        flag[j] = 1


def _narrow_body(refine, measure):
    """The per-candidate body of the search-back's shape kernel, closed over the CPU or the CUDA
    twins of :func:`pipeline._beat_kernels._shape_steps`' refine and measure."""

    def narrow_one(i, signal, extra, settings, polarity, rival, medians, width_ratio, moved, width, slope, spare,
                   narrow):
        """moved[i]: candidate i moved to its QRS extremum (``settings``' search, ``polarity``,
        ``rival``); narrow[i]: whether its deflection there is at most ``width_ratio`` × the beats'
        median width (medians[0]) wide."""
        j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
        refine(j, signal, extra, settings, polarity, rival, moved, width, slope)
        measure(j, signal, moved, settings, spare, width, slope)
        narrow[j] = width[j] <= width_ratio * medians[0]

    return narrow_one


def _deflection_one(i, signal, positions, reach, out):
    """out[i]: the ECG at positions[i] less the mean of its values ``reach`` before and after
    (indices clipped), signed, in the ECG's precision: :func:`pipeline.qrs.deflection`."""
    j = np.int64(i)      # a CPU prange index is unsigned: Numba mixes it with ints as a float
    n, p = signal.shape[0], positions[j]
    out[j] = signal[p] - np.float32(0.5) * (signal[min(max(p - reach, 0), n - 1)]
                                            + signal[min(max(p + reach, 0), n - 1)])


# --------------------------------------------------------------------------- twins
_deflection_cpu_body = numba.njit(_deflection_one, cache=True)
_gap_bounds_cpu_body = numba.njit(_gap_bounds_one, cache=True)
_narrow_cpu_body = numba.njit(_narrow_body(_beat_kernels._refine_cpu, _beat_kernels._measure_cpu), cache=True)
_non_qrs_cpu_body = numba.njit(_non_qrs_body(numba.njit(_steps_baseline_body(numba.njit(_window_median, cache=True)),
                                                        cache=True)), cache=True)
_early_beats_cpu_body = numba.njit(_early_beats_body(numba.njit(_deflection, cache=True)), cache=True)
_rhythm_cpu_body = numba.njit(_rhythm_body(_shape_kernels._rival_cpu_body, _beat_kernels._refine_cpu,
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


@numba.njit(parallel=True, cache=True)
def _non_qrs_cpu(n, signal, positions, width, slope, medians, cap, step_ratio, before_first, before_last, after_first,
                 after_last, reach, window, rr_fraction, width_ratio, slope_ratio, flat_ratio, keep, slow, any_slow):
    for i in numba.prange(n):
        _non_qrs_cpu_body(i, signal, positions, width, slope, medians, cap, step_ratio, before_first, before_last,
                          after_first, after_last, reach, window, rr_fraction, width_ratio, slope_ratio, flat_ratio,
                          keep, slow, any_slow)


@numba.njit(parallel=True, cache=True)
def _early_beats_cpu(n, signal, positions, slow, reach, height_ratio, gap, keep):
    for i in numba.prange(n):
        _early_beats_cpu_body(i, signal, positions, slow, reach, height_ratio, gap, keep)


@numba.njit(parallel=True, cache=True)
def _gap_bounds_cpu(n, positions, local, long_ratio, longest, gap, block, blocks, first, stop, flag):
    for i in numba.prange(n):
        _gap_bounds_cpu_body(i, positions, local, long_ratio, longest, gap, block, blocks, first, stop, flag)


@numba.njit(parallel=True, cache=True)
def _narrow_cpu(n, signal, extra, search, base, despike, cap, step, shape_reach, polarity, rival, medians, width_ratio,
                moved, width, slope, spare, narrow):
    settings = (search, base, despike, cap, step, shape_reach)
    for i in numba.prange(n):
        _narrow_cpu_body(i, signal, extra, settings, polarity, rival, medians, width_ratio, moved, width, slope, spare,
                         narrow)


@numba.njit(parallel=True, cache=True)
def _deflection_cpu(n, signal, positions, reach, out):
    for i in numba.prange(n):
        _deflection_cpu_body(i, signal, positions, reach, out)


# Set by _rhythm_cuda_kernels() on the GPU path only, as in pipeline._kernels: the CUDA wrappers reach
# numba.cuda and the device bodies as module globals rather than closure cells, so that their
# on-disk cache key is the same in every process.
cuda = _rhythm_cuda_body = _non_qrs_cuda_body = _early_beats_cuda_body = _gap_bounds_cuda_body = _narrow_cuda_body = None
_deflection_cuda_body = None


@functools.cache
def _rhythm_cuda_kernels() -> dict:
    """CUDA twins of this module's kernels, compiled on first use and cached on disk like
    :func:`pipeline._kernels._cuda_kernels`."""
    global cuda, _rhythm_cuda_body, _non_qrs_cuda_body, _early_beats_cuda_body, _gap_bounds_cuda_body
    global _narrow_cuda_body, _deflection_cuda_body
    from numba import cuda

    device = cuda.jit(device=True)
    qrs_shape_one = device(_shape_kernels._qrs_shape_body(_shape_kernels._median_of_cuda()))
    refine, measure = (device(step) for step in _beat_kernels._shape_steps(qrs_shape_one))
    rival_one = device(_shape_kernels._rival_body(device(_shape_kernels._strongest_around)))
    _rhythm_cuda_body = device(_rhythm_body(rival_one, refine, measure))
    _non_qrs_cuda_body = device(_non_qrs_body(device(_steps_baseline_body(device(_window_median)))))
    _early_beats_cuda_body = device(_early_beats_body(device(_deflection)))
    _gap_bounds_cuda_body = device(_gap_bounds_one)
    _narrow_cuda_body = device(_narrow_body(refine, measure))
    _deflection_cuda_body = device(_deflection_one)

    def rhythm(n, env, thresholds, block, positions, local, near, far, gain, signal, search, base, despike, cap, step,
               shape_reach, polarity, rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width,
               slope, moved_width, moved_slope, spare, out, any_better):
        i = cuda.grid(1)
        if i < n:
            settings = (search, base, despike, cap, step, shape_reach)
            _rhythm_cuda_body(i, env, thresholds, block, positions, local, near, far, gain, signal, settings, polarity,
                              rival_ratio, medians, width_ratio, slope_ratio, rival_at, better, moved, width, slope,
                              moved_width, moved_slope, spare, out, any_better)

    def non_qrs(n, signal, positions, width, slope, medians, cap, step_ratio, before_first, before_last, after_first,
                after_last, reach, window, rr_fraction, width_ratio, slope_ratio, flat_ratio, keep, slow, any_slow):
        i = cuda.grid(1)
        if i < n:
            _non_qrs_cuda_body(i, signal, positions, width, slope, medians, cap, step_ratio, before_first,
                               before_last, after_first, after_last, reach, window, rr_fraction, width_ratio,
                               slope_ratio, flat_ratio, keep, slow, any_slow)

    def early_beats(n, signal, positions, slow, reach, height_ratio, gap, keep):
        i = cuda.grid(1)
        if i < n:
            _early_beats_cuda_body(i, signal, positions, slow, reach, height_ratio, gap, keep)

    def gap_bounds(n, positions, local, long_ratio, longest, gap, block, blocks, first, stop, flag):
        i = cuda.grid(1)
        if i < n:
            _gap_bounds_cuda_body(i, positions, local, long_ratio, longest, gap, block, blocks, first, stop, flag)

    def narrow(n, signal, extra, search, base, despike, cap, step, shape_reach, polarity, rival, medians, width_ratio,
               moved, width, slope, spare, narrow):
        i = cuda.grid(1)
        if i < n:
            settings = (search, base, despike, cap, step, shape_reach)
            _narrow_cuda_body(i, signal, extra, settings, polarity, rival, medians, width_ratio, moved, width, slope,
                              spare, narrow)

    def deflection(n, signal, positions, reach, out):
        i = cuda.grid(1)
        if i < n:
            _deflection_cuda_body(i, signal, positions, reach, out)

    kernels = {"rhythm": rhythm, "non_qrs": non_qrs, "early_beats": early_beats, "gap_bounds": gap_bounds,
               "narrow": narrow, "deflection": deflection}
    return {name: _launch.cuda_jit_cached(kernel) for name, kernel in kernels.items()}


_CPU = {"rhythm": _rhythm_cpu, "non_qrs": _non_qrs_cpu, "early_beats": _early_beats_cpu, "gap_bounds": _gap_bounds_cpu,
        "narrow": _narrow_cpu, "deflection": _deflection_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _rhythm_cuda_kernels, name, n, *arrays_and_scalars)
