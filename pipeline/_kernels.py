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
import numpy as np

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


# --------------------------------------------------------------------------- twins
# CUDA kernels take a fixed argument list (no *args), so each body gets two explicit wrappers.
_nms_cpu_body = numba.njit(_nms_one, cache=True)
_embed_cpu_body = numba.njit(_embed_one, cache=True)
_median_of_cpu = numba.njit(_median_of, cache=True)
_qrs_shape_cpu_body = numba.njit(_qrs_shape_body(_median_of_cpu), cache=True)


@numba.njit(parallel=True, cache=True)
def _nms_cpu(n, envelope, threshold, block, half, gate):
    for i in numba.prange(n):
        _nms_cpu_body(i, envelope, threshold, block, half, gate)


@numba.njit(parallel=True, cache=True)
def _embed_cpu(n, signal, positions, pre, out):
    for i in numba.prange(n):
        _embed_cpu_body(i, signal, positions, pre, out)


@numba.njit(parallel=True, cache=True)
def _qrs_shape_cpu(n, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope):
    for i in numba.prange(n):
        _qrs_shape_cpu_body(i, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope)


# Set by _cuda_kernels() on the GPU path only. The CUDA wrappers reach numba.cuda and the device
# bodies as module globals rather than closure cells, so that their on-disk cache key (bytecode,
# closure contents, signature, GPU architecture) is the same in every process.
cuda = _nms_cuda_body = _embed_cuda_body = _qrs_shape_cuda_body = None


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
    global cuda, _nms_cuda_body, _embed_cuda_body, _qrs_shape_cuda_body
    from numba import cuda

    _nms_cuda_body = cuda.jit(device=True)(_nms_one)
    _embed_cuda_body = cuda.jit(device=True)(_embed_one)
    _qrs_shape_cuda_body = cuda.jit(device=True)(_qrs_shape_body(_median_of_cuda()))

    def nms(n, envelope, threshold, block, half, gate):
        i = cuda.grid(1)
        if i < n:
            _nms_cuda_body(i, envelope, threshold, block, half, gate)

    def embed(n, signal, positions, pre, out):
        i = cuda.grid(1)
        if i < n:
            _embed_cuda_body(i, signal, positions, pre, out)

    def qrs_shape(n, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope):
        i = cuda.grid(1)
        if i < n:
            _qrs_shape_cuda_body(i, signal, positions, search, base, despike, cap, step, reach, prefer, rival, refined, width, slope)

    return {"nms": _cuda_jit_cached(nms), "embed": _cuda_jit_cached(embed),
            "qrs_shape": _cuda_jit_cached(qrs_shape)}


def _cuda_jit_cached(kernel):
    """``cuda.jit(cache=True)``, or without the disk cache where no writable cache folder exists."""
    try:
        return cuda.jit(cache=True)(kernel)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return cuda.jit(kernel)


# --------------------------------------------------------------------------- episodes and beat quality
# The kernels of pipeline.episodes and pipeline.quality, twinned the same way. They keep their own
# table of CUDA twins, compiled when one of them is first needed.
def _block_stats_one(k, signal, size, step, low_rail, high_rail, out):
    """Statistics of block k, ``signal[k size : (k+1) size]``, written to ``out[k]``:
    0 the mean square of the second difference ``x[i-step] - 2 x[i] + x[i+step]`` (high-frequency
    content: its gain is 0 at 0 Hz and peaks at fs / (2 step)), 1 the minimum, 2 the maximum,
    3 the mean, 4 the number of samples at or beyond the rails (a clipped amplifier)."""
    n = signal.shape[0]
    start = k * size
    low = signal[start]
    high = low
    total = 0.0
    energy = 0.0
    rail = 0
    for i in range(start, start + size):
        value = signal[i]
        total += value
        low = min(low, value)
        high = max(high, value)
        if value >= high_rail or value <= low_rail:
            rail += 1
        if i >= step and i + step < n:
            d = signal[i - step] - 2.0 * value + signal[i + step]
            energy += d * d
    out[k, 0] = energy / size
    out[k, 1] = low
    out[k, 2] = high
    out[k, 3] = total / size
    out[k, 4] = rail


def _beat_stats_one(i, signal, positions, half_qrs, before, after, step, edge, t_lo, t_hi, t_step, k,
                    amp, hf, shift, corr, best):
    """Noise and shape measures of beat i (fiducial ``p = positions[i]``).

    amp[i]: peak-to-peak within ±``half_qrs`` of p (the QRS amplitude). The beat's window runs from
    p - ``before`` to p + ``after``, cut short ``half_qrs`` before the neighbouring fiducials so that
    no other QRS enters it. hf[i]: RMS of the second difference (step ``step``) over that window
    outside the beat's own QRS: muscle noise and mains, not the QRS. shift[i]: |mean of the window's
    last ``edge`` samples - mean of its first ``edge``|: a baseline step or fast wander across the
    beat. corr[i]: Pearson correlation, over offsets ``t_lo..t_hi`` from p (every ``t_step``-th: a
    QRS needs no more than ~125 samples a second), with the local template: at each offset the mean
    of the 2k neighbouring beats (i excluded; shifted inward at the recording's ends) without their
    highest and lowest value, so that one ectopic or noisy neighbour does not bend it. best[i]: the
    highest correlation with any one of those neighbours (a PVC among PVCs resembles one of them).
    corr and best are 1 where no neighbour exists."""
    n = signal.shape[0]
    m = positions.shape[0]
    p = positions[i]
    low = signal[min(max(p - half_qrs, 0), n - 1)]
    high = low
    for j in range(max(p - half_qrs, 0), min(p + half_qrs + 1, n)):
        low = min(low, signal[j])
        high = max(high, signal[j])
    amp[i] = high - low

    start = p - before
    if i > 0:
        start = max(start, positions[i - 1] + half_qrs + 1)
    stop = p + after
    if i + 1 < m:
        stop = min(stop, positions[i + 1] - half_qrs - 1)
    start = max(start, step)
    stop = min(stop, n - 1 - step)
    energy = 0.0
    count = 0
    for j in range(start, stop + 1):
        if j < p - half_qrs or j > p + half_qrs:
            d = signal[j - step] - 2.0 * signal[j] + signal[j + step]
            energy += d * d
            count += 1
    hf[i] = math.sqrt(energy / count) if count > 0 else 0.0
    g = min(edge, (stop - start + 1) // 2)
    if g > 0:
        first = 0.0
        last = 0.0
        for j in range(g):
            first += signal[start + j]
            last += signal[stop - j]
        shift[i] = abs(last - first) / g
    else:
        shift[i] = 0.0

    others = min(2 * k, m - 1)
    if others <= 0:
        corr[i] = 1.0
        best[i] = 1.0
        return
    lo = min(max(i - k, 0), m - 1 - others)
    sr = 0.0
    srr = 0.0
    st = 0.0
    stt = 0.0
    srt = 0.0
    w = (t_hi - t_lo) // t_step + 1
    for t in range(t_lo, t_hi + 1, t_step):
        r = signal[min(max(p + t, 0), n - 1)]
        total = 0.0
        low = r
        high = r
        seen = 0
        for a in range(lo, lo + others + 1):
            if a == i:
                continue
            v = signal[min(max(positions[a] + t, 0), n - 1)]
            if seen == 0:
                low = v
                high = v
            low = min(low, v)
            high = max(high, v)
            total += v
            seen += 1
        template = (total - low - high) / (others - 2) if others > 2 else total / others
        sr += r
        srr += r * r
        st += template
        stt += template * template
        srt += r * template
    var_r = srr - sr * sr / w
    var_t = stt - st * st / w
    corr[i] = (srt - sr * st / w) / math.sqrt(var_r * var_t) if var_r > 0.0 and var_t > 0.0 else 0.0
    top = -1.0
    for a in range(lo, lo + others + 1):
        if a == i:
            continue
        sn = 0.0
        snn = 0.0
        srn = 0.0
        for t in range(t_lo, t_hi + 1, t_step):
            r = signal[min(max(p + t, 0), n - 1)]
            v = signal[min(max(positions[a] + t, 0), n - 1)]
            sn += v
            snn += v * v
            srn += r * v
        var_n = snn - sn * sn / w
        if var_r > 0.0 and var_n > 0.0:
            top = max(top, (srn - sr * sn / w) / math.sqrt(var_r * var_n))
    best[i] = top


def _tick_measures_body(median_of):
    """The per-tick body of the noise measures, closed over ``median_of`` (the CPU or CUDA twin of
    :func:`_median_of`)."""

    def tick_measures_one(k, stats, means, half, few, out):
        """From the block statistics of :func:`_block_stats_one` (one block a tick), the measures
        of tick k: out[k] = (range over the ticks k-half..k+half-1, range over the ``few`` ticks
        centred on k, second-lowest mean square of the second difference over those ``few``,
        median block mean of the ``half`` ticks before k, of the ``half`` ticks from k on, rail
        samples over the ticks k-half..k+half-1). ``means`` is column 3 of ``stats`` as its own
        1-D array, for the median. Indices are clipped to the recording."""
        count = stats.shape[0]
        low = stats[min(max(k - half, 0), count - 1), 1]
        high = stats[min(max(k - half, 0), count - 1), 2]
        rails = 0.0
        for j in range(k - half, k + half):
            jj = min(max(j, 0), count - 1)
            low = min(low, stats[jj, 1])
            high = max(high, stats[jj, 2])
            rails += stats[jj, 4]
        near_first = k - few // 2
        near_low = stats[min(max(near_first, 0), count - 1), 1]
        near_high = stats[min(max(near_first, 0), count - 1), 2]
        lowest = stats[min(max(near_first, 0), count - 1), 0]
        second = lowest
        seen = 0
        for j in range(near_first, near_first + few):
            jj = min(max(j, 0), count - 1)
            near_low = min(near_low, stats[jj, 1])
            near_high = max(near_high, stats[jj, 2])
            value = stats[jj, 0]
            if seen == 0:
                lowest = value
            elif seen == 1:
                second = max(value, lowest)
                lowest = min(value, lowest)
            elif value < lowest:
                second = lowest
                lowest = value
            elif value < second:
                second = value
            seen += 1
        out[k, 0] = high - low
        out[k, 1] = near_high - near_low
        out[k, 2] = second
        out[k, 3] = median_of(means, k - half, k - 1)
        out[k, 4] = median_of(means, k, k + half - 1)
        out[k, 5] = rails

    return tick_measures_one


_block_stats_cpu_body = numba.njit(_block_stats_one, cache=True)
_beat_stats_cpu_body = numba.njit(_beat_stats_one, cache=True)
_tick_measures_cpu_body = numba.njit(_tick_measures_body(_median_of_cpu), cache=True)


@numba.njit(parallel=True, cache=True)
def _block_stats_cpu(n, signal, size, step, low_rail, high_rail, out):
    for k in numba.prange(n):
        _block_stats_cpu_body(k, signal, size, step, low_rail, high_rail, out)


@numba.njit(parallel=True, cache=True)
def _beat_stats_cpu(n, signal, positions, half_qrs, before, after, step, edge, t_lo, t_hi, t_step, k,
                    amp, hf, shift, corr, best):
    for i in numba.prange(n):
        _beat_stats_cpu_body(i, signal, positions, half_qrs, before, after, step, edge, t_lo, t_hi, t_step, k,
                             amp, hf, shift, corr, best)


@numba.njit(parallel=True, cache=True)
def _tick_measures_cpu(n, stats, means, half, few, out):
    for k in numba.prange(n):
        _tick_measures_cpu_body(k, stats, means, half, few, out)


_block_stats_cuda_body = _beat_stats_cuda_body = _tick_measures_cuda_body = None


@functools.cache
def _episode_cuda_kernels() -> dict:
    """CUDA twins of this section's kernels, compiled on first use and cached on disk like
    :func:`_cuda_kernels` (numba.cuda and the device bodies reached as module globals)."""
    global cuda, _block_stats_cuda_body, _beat_stats_cuda_body, _tick_measures_cuda_body
    from numba import cuda

    _block_stats_cuda_body = cuda.jit(device=True)(_block_stats_one)
    _beat_stats_cuda_body = cuda.jit(device=True)(_beat_stats_one)
    _tick_measures_cuda_body = cuda.jit(device=True)(_tick_measures_body(_median_of_cuda()))

    def block_stats(n, signal, size, step, low_rail, high_rail, out):
        k = cuda.grid(1)
        if k < n:
            _block_stats_cuda_body(k, signal, size, step, low_rail, high_rail, out)

    def beat_stats(n, signal, positions, half_qrs, before, after, step, edge, t_lo, t_hi, t_step, k,
                   amp, hf, shift, corr, best):
        i = cuda.grid(1)
        if i < n:
            _beat_stats_cuda_body(i, signal, positions, half_qrs, before, after, step, edge, t_lo, t_hi, t_step, k,
                                  amp, hf, shift, corr, best)

    def tick_measures(n, stats, means, half, few, out):
        k = cuda.grid(1)
        if k < n:
            _tick_measures_cuda_body(k, stats, means, half, few, out)

    return {"block_stats": _cuda_jit_cached(block_stats), "beat_stats": _cuda_jit_cached(beat_stats),
            "tick_measures": _cuda_jit_cached(tick_measures)}


_CPU = {"nms": _nms_cpu, "embed": _embed_cpu, "qrs_shape": _qrs_shape_cpu, "block_stats": _block_stats_cpu,
        "tick_measures": _tick_measures_cpu, "beat_stats": _beat_stats_cpu}
_EPISODE_KERNELS = frozenset({"block_stats", "tick_measures", "beat_stats"})


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    if n <= 0:
        return
    args = tuple(backend.as_kernel_array(a) if hasattr(a, "shape") else a for a in arrays_and_scalars)
    if any(backend.is_cupy_array(a) for a in arrays_and_scalars):
        kernel = (_episode_cuda_kernels() if name in _EPISODE_KERNELS else _cuda_kernels())[name]
        kernel[math.ceil(n / THREADS_PER_BLOCK), THREADS_PER_BLOCK](n, *args)
    else:
        _CPU[name](n, *args)
