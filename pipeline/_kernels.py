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
_median_of_cpu = numba.njit(_median_of, cache=True)
_qrs_shape_cpu_body = numba.njit(_qrs_shape_body(_median_of_cpu), cache=True)
_strongest_around_cpu = numba.njit(_strongest_around, cache=True)
_rival_cpu_body = numba.njit(_rival_body(_strongest_around_cpu), cache=True)
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
def _qrs_shape_cpu(n, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope):
    for i in numba.prange(n):
        _qrs_shape_cpu_body(i, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope)


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
cuda = _nms_cuda_body = _embed_cuda_body = _qrs_shape_cuda_body = _gap_peaks_cuda_body = None
_unsuppressed_cuda_body = _chunk_maxima_cuda_body = _noise_floor_cuda_body = None


@functools.cache
def _median_of_cuda():
    """The CUDA twin of :func:`_median_of`, compiled once for both tables of CUDA kernels."""
    from numba import cuda

    return cuda.jit(device=True)(_median_of)


@functools.cache
def _cuda_kernels() -> dict:
    """Compile-on-first-use CUDA twins (numba.cuda is imported only on the GPU path), cached on disk
    like the CPU ones (``cache=True``: in ``__pycache__``, invalidated when this file changes), so
    that only the first process on a machine pays the compilation."""
    global cuda, _nms_cuda_body, _embed_cuda_body, _qrs_shape_cuda_body, _gap_peaks_cuda_body
    global _unsuppressed_cuda_body, _chunk_maxima_cuda_body, _noise_floor_cuda_body
    from numba import cuda

    _nms_cuda_body = cuda.jit(device=True)(_nms_one)
    _chunk_maxima_cuda_body = cuda.jit(device=True)(_chunk_maxima_one)
    _noise_floor_cuda_body = cuda.jit(device=True)(_noise_floor_one)
    _embed_cuda_body = cuda.jit(device=True)(_embed_one)
    _qrs_shape_cuda_body = cuda.jit(device=True)(_qrs_shape_body(_median_of_cuda()))
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

    def qrs_shape(n, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope):
        i = cuda.grid(1)
        if i < n:
            _qrs_shape_cuda_body(i, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope)

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
            "qrs_shape": _launch.cuda_jit_cached(qrs_shape),
            "gap_peaks": _launch.cuda_jit_cached(gap_peaks), "unsuppressed": _launch.cuda_jit_cached(unsuppressed)}


_CPU = {"nms": _nms_cpu, "chunk_maxima": _chunk_maxima_cpu, "noise_floor": _noise_floor_cpu, "embed": _embed_cpu,
        "qrs_shape": _qrs_shape_cpu,
        "gap_peaks": _gap_peaks_cpu, "unsuppressed": _unsuppressed_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _cuda_kernels, name, n, *arrays_and_scalars)
