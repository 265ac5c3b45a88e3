"""Numba kernels of a QRS complex's shape, twinned as in :mod:`pipeline._kernels`: the QRS-shape
measure (the point, the width and the steepest slope of the deflection near a candidate,
:func:`pipeline.qrs.qrs_shape`) and its running median, and the rival deflection search of the
rhythm kernel (:mod:`pipeline._rhythm_kernels`). The device functions are shared: the beat
detector's checks (:mod:`pipeline._beat_kernels`) and the noise measures
(:mod:`pipeline._episode_kernels`) call them inside their own kernels.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

from pipeline import _launch


# --------------------------------------------------------------------------- device functions
def _median_of(values, first, last):
    """Median of values[first : last+1] (indices clipped to the array, as a clipped gather repeats
    the end values) without an array. Of 3 or 5 values (the QRS-shape kernel's despiking window at
    128–375 Hz, ~100 medians a candidate): min/max of the values read once. Otherwise the element
    with at most count // 2 smaller and at most count // 2 larger ones (for an even count, the first
    such in order): O(count²), fine for the up to 15 values it meets. The one median of the
    QRS-shape and noise kernels."""
    n = values.shape[0]
    count = last - first + 1
    if count == 3 or count == 5:
        lo = np.int64(first)  # a CPU prange index is unsigned: Numba mixes it with ints as a float
        v0 = values[min(max(lo, 0), n - 1)]
        v1 = values[min(max(lo + 1, 0), n - 1)]
        v2 = values[min(max(lo + 2, 0), n - 1)]
        if count == 5:
            v3 = values[min(max(lo + 3, 0), n - 1)]
            v4 = values[min(max(lo + 4, 0), n - 1)]
            # The lowest and the highest of v0..v3 are neither the median of all five nor needed
            # for it: the median of the five is that of v4 and the two middle ones of the four.
            v0, v1, v2 = v4, max(min(v0, v1), min(v2, v3)), min(max(v0, v1), max(v2, v3))
        return max(min(v0, v1), min(max(v0, v1), v2))
    half = count // 2
    for a in range(first, last + 1):
        value = values[min(max(a, 0), n - 1)]
        below = 0
        above = 0
        for b in range(first, last + 1):
            other = values[min(max(b, 0), n - 1)]
            if other < value:
                below += 1
            elif other > value:
                above += 1
        if below <= half and above <= half:
            return value
    return values[min(max(first + half, 0), n - 1)]


def _qrs_shape_body(median_of):
    """The per-index body of the QRS-shape kernel, closed over ``median_of``: the CPU or the CUDA
    twin of :func:`_median_of` (a body may call only functions compiled for its own target)."""

    def qrs_shape_one(i, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope):
        """QRS point and shape of candidate i, measured on the ECG with spikes removed (running median
        of ``2 despike + 1`` samples: a pacing spike is narrower than that, a QRS is not).

        refined[i]: the sample within ±``search`` of ``positions[i]`` whose despiked value lies
        farthest from the mean over ±``base`` (first of equals), moved to the ECG's own extremum
        within ±``despike`` of it. With ``prefer`` ±1 (the recording's usual polarity), a deflection
        of the other sign counts only when ``rival`` times larger: R and S of a wide complex can be
        near equal, and the point must not hop between them from beat to beat. width[i]: samples around it that stay beyond half of that
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
            value = median_of(signal, kk - despike, kk + despike) - baseline
            dev = abs(value)
            if value * prefer < 0.0:
                dev = dev / rival
            if dev > best_dev:
                best_dev = dev
                best = kk
        peak = median_of(signal, best - despike, best + despike) - baseline
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
        while (left > max(best - cap, 0)
               and sign * (median_of(signal, left - 1 - despike, left - 1 + despike) - baseline) > half):
            left -= 1
        right = best
        while (right < min(best + cap, n - 1)
               and sign * (median_of(signal, right + 1 - despike, right + 1 + despike) - baseline) > half):
            right += 1
        width[i] = right - left + 1
        steepest = 0.0
        for k in range(best - reach, best + reach + 1):
            rise = abs(median_of(signal, k + step - despike, k + step + despike)
                       - median_of(signal, k - step - despike, k - step + despike))
            if rise > steepest:
                steepest = rise
        slope[i] = steepest

    return qrs_shape_one


def _strongest_around(env, p, near, far):
    """The sample ``near`` to ``far`` samples from p, on either side, where ``env`` is largest
    (indices clipped to the envelope). Of equals the first in the order p-far .. p-near, then
    p+near .. p+far, and a NaN counts as the largest: the argmax of a gather in that order."""
    n = env.shape[0]
    side = far - near + 1
    best = min(max(p - far, 0), n - 1)
    top = env[best]
    for t in range(1, 2 * side):
        k = min(max(p - far + t if t < side else p + near + t - side, 0), n - 1)
        value = env[k]
        if value > top or (value != value and top == top):
            best = k
            top = value
    return best


def _rival_body(strongest_around):
    """The rival search and verdict of the rhythm kernel (:mod:`pipeline._rhythm_kernels`), closed
    over ``strongest_around``: the CPU or the CUDA twin of :func:`_strongest_around`."""

    def rival_one(i, env, thresholds, block, positions, local, near, far, gain, rival_at, better):
        """rival_at[i]: the largest response ``near`` to ``far`` samples from beat i on either side
        (:func:`_strongest_around`). better[i]: whether beat i should move there, as
        :func:`pipeline.peaks.keep_the_rhythm` rules. A rival that passes its block's threshold
        moves its beat alone when it brings the two RR intervals around the beat nearer the local
        rhythm (``local``: one typical RR an interval, the median of the nine around) by ``gain``
        × the typical RR after the beat; two neighbouring beats whose rivals both pass, and neither
        of which moves alone, move together when their rivals bring the three RR intervals around
        them nearer by ``gain`` × the typical RR after the first. The first and the last beat
        never move (one neighbour only: no rhythm to keep), and the first's previous and the
        last's next beat count as one typical RR away.

        Beat i moves when it moves alone or with beat i-1 or i+1, and either pair asks whether
        both its beats move alone: the thread judges beats i-1, i and i+1 itself (three rival
        searches), so that no second pass over the beats is needed. The arithmetic is float64 in
        the order of the vectorised formula it replaced, so that its result is the same."""
        count = positions.shape[0]
        j = np.int64(i)          # a CPU prange index is unsigned: Numba mixes it with ints as a float
        rival_at[j] = strongest_around(env, positions[j], near, far)
        better[j] = False
        if j == 0 or j == count - 1:
            return
        moves = False
        # Beat k-1's measures while beat k is judged (the pair (k-1, k) needs both).
        last_at = last_p = np.int64(0)
        last_passes = last_alone = False
        last_early = last_found_early = last_after = 0.0
        for k in range(j - 1, j + 2):
            p = positions[k]
            at = rival_at[j] if k == j else strongest_around(env, p, near, far)
            passes = env[at] > thresholds[at // block]
            before = local[max(k - 1, 0)]                 # the typical RR ending at beat k
            after = local[min(k, count - 2)]              # and starting at it
            previous = float(positions[k - 1]) if k > 0 else p - before
            following = float(positions[k + 1]) if k + 1 < count else p + after
            early, late = abs(at - previous - before), abs(following - at - after)
            found_early, found_late = abs(p - previous - before), abs(following - p - after)
            alone = passes and early + late < found_early + found_late - gain * after
            if k == j:
                moves = moves or alone
            if k > j - 1:
                # Two beats in a row on the wrong wave keep each other's error (the RR between
                # them looks right): the pair is judged over its three RR intervals.
                moves = moves or (last_passes and passes and not last_alone and not alone
                                  and (last_early + abs(at - last_at - last_after) + late
                                       < last_found_early + abs(p - last_p - last_after) + found_late
                                       - gain * last_after))
            last_at, last_p, last_passes, last_alone = at, p, passes, alone
            last_early, last_found_early, last_after = early, found_early, after
        better[j] = moves

    return rival_one


# --------------------------------------------------------------------------- twins
_median_of_cpu = numba.njit(_median_of, cache=True)
_qrs_shape_cpu_body = numba.njit(_qrs_shape_body(_median_of_cpu), cache=True)
_strongest_around_cpu = numba.njit(_strongest_around, cache=True)
_rival_cpu_body = numba.njit(_rival_body(_strongest_around_cpu), cache=True)


@numba.njit(parallel=True, cache=True)
def _qrs_shape_cpu(n, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope):
    for i in numba.prange(n):
        _qrs_shape_cpu_body(i, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope)


# Set by _shape_cuda_kernels() on the GPU path only: the CUDA wrapper reaches numba.cuda and the
# device body as module globals rather than closure cells, so that its on-disk cache key is the
# same in every process (as in pipeline._kernels).
cuda = _qrs_shape_cuda_body = None


@functools.cache
def _median_of_cuda():
    """The CUDA twin of :func:`_median_of`, compiled once for every table of CUDA kernels that calls it."""
    from numba import cuda

    return cuda.jit(device=True)(_median_of)


@functools.cache
def _shape_cuda_kernels() -> dict:
    """The CUDA twin of the QRS-shape kernel, compiled on first use and cached on disk (see
    :func:`pipeline._kernels._cuda_kernels`)."""
    global cuda, _qrs_shape_cuda_body
    from numba import cuda

    _qrs_shape_cuda_body = cuda.jit(device=True)(_qrs_shape_body(_median_of_cuda()))

    def qrs_shape(n, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope):
        i = cuda.grid(1)
        if i < n:
            _qrs_shape_cuda_body(i, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope)

    return {"qrs_shape": _launch.cuda_jit_cached(qrs_shape)}


_CPU = {"qrs_shape": _qrs_shape_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _shape_cuda_kernels, name, n, *arrays_and_scalars)
