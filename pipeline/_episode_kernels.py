"""Numba kernels of the episodes (:mod:`pipeline.episodes`, with the flutter measures of
:mod:`pipeline.flutter`) and of the beats' quality (:mod:`pipeline.quality`), twinned as in
:mod:`pipeline._kernels`: each written once as a per-index body, compiled with ``numba.njit`` inside
a parallel loop on the CPU and with ``numba.cuda.jit`` (one thread per index) on the GPU, the twin
chosen from the array type. They keep their own table of CUDA twins, compiled when one of them is
first needed. The noise measures call :mod:`pipeline._shape_kernels`' median; Numba's disk cache
is keyed on this file alone: after a change to that, clear ``__pycache__``.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np

from pipeline import _launch, _shape_kernels


def _block_stats_one(k, signal, size, step, lowest, highest, out):
    """Statistics of block k, ``signal[k size : (k+1) size]``, written to ``out[:, k]``:
    0 the mean square of the second difference ``x[i-step] - 2 x[i] + x[i+step]`` (high-frequency
    content: its gain is 0 at 0 Hz and peaks at fs / (2 step)), 1 the minimum, 2 the maximum,
    3 the mean, 4 the number of samples at or beyond the rails (a clipped amplifier): within a
    thousandth of the recording's range of its extremes ``lowest[0]`` and ``highest[0]``, read on
    the device so that the host need not wait for them."""
    n = signal.shape[0]
    low_end, high_end = np.float64(lowest[0]), np.float64(highest[0])
    margin = 1e-3 * (high_end - low_end)
    low_rail, high_rail = low_end + margin, high_end - margin
    start = k * size
    low = signal[start]
    high = low
    total = energy = np.float64(0.0)  # typed, as the simulator's plain Python would add in float32
    rail = 0
    for i in range(start, start + size):
        value = signal[i]
        total += value
        low = min(low, value)
        high = max(high, value)
        if value >= high_rail or value <= low_rail:
            rail += 1
        if i >= step and i + step < n:
            d = signal[i - step] - np.float64(2.0) * value + signal[i + step]
            energy += d * d
    out[0, k] = energy / size
    out[1, k] = low
    out[2, k] = high
    out[3, k] = total / size
    out[4, k] = rail


def _beat_range_one(i, signal, positions, every, half, out):
    """out[i]: the peak-to-peak of ``signal`` within ±``half`` samples of fiducial
    ``positions[i every]`` (indices clipped to the recording, as a clipped gather repeats the
    ends); NaN where a sample there is NaN, as NumPy's max and min give. Every ``every``-th
    fiducial is read by its index rather than passed as a strided view, whose layout would make
    another compilation for long recordings only."""
    n = signal.shape[0]
    p = positions[np.int64(i) * every]  # a CPU prange index is unsigned: Numba mixes it with ints as a float
    low = high = signal[min(max(p - half, 0), n - 1)]
    for j in range(p - half, p + half + 1):
        value = signal[min(max(j, 0), n - 1)]
        if value != value:
            out[i] = value
            return
        low = min(low, value)
        high = max(high, value)
    out[i] = high - low


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
    :func:`pipeline._shape_kernels._median_of`)."""

    def tick_measures_one(k, stats, means, half, few, out):
        """From the block statistics of :func:`_block_stats_one` (one block a tick, a row a
        statistic), the measures of tick k, ``out[:, k]``: 0 range over the ticks
        k-half..k+half-1, 1 range over the ``few`` ticks centred on k, 2 second-lowest mean square
        of the second difference over those ``few``, 3 median block mean of the ``half`` ticks
        before k, 4 of the ``half`` ticks from k on, 5 rail samples over the ticks
        k-half..k+half-1. ``means`` is row 3 of ``stats``, for the median. Indices are clipped to
        the recording."""
        count = stats.shape[1]
        low = stats[1, min(max(k - half, 0), count - 1)]
        high = stats[2, min(max(k - half, 0), count - 1)]
        rails = np.float64(0.0)
        for j in range(k - half, k + half):
            jj = min(max(j, 0), count - 1)
            low = min(low, stats[1, jj])
            high = max(high, stats[2, jj])
            rails += stats[4, jj]
        near_first = k - few // 2
        near_low = stats[1, min(max(near_first, 0), count - 1)]
        near_high = stats[2, min(max(near_first, 0), count - 1)]
        lowest = stats[0, min(max(near_first, 0), count - 1)]
        second = lowest
        seen = 0
        for j in range(near_first, near_first + few):
            jj = min(max(j, 0), count - 1)
            near_low = min(near_low, stats[1, jj])
            near_high = max(near_high, stats[2, jj])
            value = stats[0, jj]
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
        out[0, k] = high - low
        out[1, k] = near_high - near_low
        out[2, k] = second
        out[3, k] = median_of(means, k - half, k - 1)
        out[4, k] = median_of(means, k, k + half - 1)
        out[5, k] = rails

    return tick_measures_one


# float32's smallest normal number: the floor of the flutter kernels' divisors.
_FLOAT32_TINY = np.finfo(np.float32).tiny


def _flutter_frames_one(w, signal, q, hop, t, trend, frames, off_baseline):
    """Window w of :func:`pipeline.flutter.flutter_features`, detrended, into ``frames[w]``: its
    ``frames.shape[1]`` block means of ``q`` samples of ``signal`` from sample ``w hop q`` on, less
    their mean, then less their linear trend (slope: the sum of the values times ``trend``,
    ``t / sum(t²)``, with ``t`` the samples' times from the window's centre). off_baseline[w]: the
    share of its samples beyond 20 % of its largest deflection. Sums are float64 (typed where they
    start, as in :func:`_flutter_measures_one`); the frame is float32, each step rounded as the
    whole-array code this replaced rounded it (a block summed in the signal's order, the mean taken
    out before the slope is measured), so that a sample at the 20 % line falls on the same side."""
    length = frames.shape[1]
    start = np.int64(w) * hop * q  # a CPU prange index is unsigned: Numba mixes it with ints as a float
    total = np.float64(0.0)
    for j in range(length):
        at = start + j * q
        block = np.float32(signal[at])
        for r in range(1, q):
            block = np.float32(block + signal[at + r])
        value = block / np.float32(q)
        frames[w, j] = value
        total += value
    mean = np.float32(total / length)
    moment = np.float64(0.0)
    for j in range(length):
        value = frames[w, j] - mean
        frames[w, j] = value
        moment += value * trend[j]
    slope = np.float32(moment)
    peak = np.float32(0.0)
    for j in range(length):
        value = frames[w, j] - slope * t[j]
        frames[w, j] = value
        peak = max(peak, abs(value))
    limit = np.float32(0.2) * peak
    above = 0
    for j in range(length):
        if abs(frames[w, j]) > limit:
            above += 1
    off_baseline[w] = above / length


def _flutter_measures_one(w, spectrum, freqs, first, last, low, reach, half_reach, dominant, concentration,
                          sine_ratio, subharmonic):
    """The spectral measures of window w of :func:`pipeline.flutter.flutter_features` from its row
    of ``spectrum`` (the cosine parts of the bins ``freqs``, then their sine parts; the cosine half
    is overwritten with the power, float32 as the spectrum is). The dominant bin is the strongest of
    ``first..last`` (ties: the first, as ``argmax``); bin indices count from bin ``low`` of the
    transform, and sums over a bin ± ``reach`` leave out the bins beyond ``freqs``. Writes
    dominant[w] (Hz), concentration[w] (power within ± ``reach`` of it over the total),
    subharmonic[w] (power within ± ``half_reach`` of half the dominant frequency over that around
    it) and sine_ratio[w] (the power's mean frequency over the dominant one). Sums are float64, the
    ratios float32 (a divisor floored at float32's smallest normal number: a flat window gives 0,
    not NaN). Every accumulator is typed where it starts, so that the twins and Numba's CUDA
    simulator (plain Python, in which ``0.0 + float32`` is a float32) add alike."""
    bins = freqs.shape[0]
    total = moment = np.float64(0.0)
    for k in range(bins):
        power = spectrum[w, k] * spectrum[w, k] + spectrum[w, bins + k] * spectrum[w, bins + k]
        spectrum[w, k] = power
        total += power
        moment += power * freqs[k] * freqs[k]
    peak = first
    for k in range(first + 1, last + 1):  # a loop of its own: a branch in the one above halves its speed
        if spectrum[w, k] > spectrum[w, peak]:
            peak = k
    near = at_peak = np.float64(0.0)
    for k in range(max(peak - reach, 0), min(peak + reach + 1, bins)):
        near += spectrum[w, k]
        if abs(k - peak) <= half_reach:
            at_peak += spectrum[w, k]
    half = (peak + low) // 2 - low
    at_half = np.float64(0.0)
    for k in range(max(half - half_reach, 0), min(half + half_reach + 1, bins)):
        at_half += spectrum[w, k]
    whole = max(np.float32(total), _FLOAT32_TINY)
    dominant[w] = freqs[peak]
    concentration[w] = np.float32(near) / whole
    subharmonic[w] = np.float32(at_half) / max(np.float32(at_peak), _FLOAT32_TINY)
    sine_ratio[w] = math.sqrt(np.float32(moment) / whole) / freqs[peak]


_block_stats_cpu_body = numba.njit(_block_stats_one, cache=True)
_beat_range_cpu_body = numba.njit(_beat_range_one, cache=True)
_beat_stats_cpu_body = numba.njit(_beat_stats_one, cache=True)
_tick_measures_cpu_body = numba.njit(_tick_measures_body(_shape_kernels._median_of_cpu), cache=True)
_flutter_frames_cpu_body = numba.njit(_flutter_frames_one, cache=True)
_flutter_measures_cpu_body = numba.njit(_flutter_measures_one, cache=True)


@numba.njit(parallel=True, cache=True)
def _block_stats_cpu(n, signal, size, step, lowest, highest, out):
    for k in numba.prange(n):
        _block_stats_cpu_body(k, signal, size, step, lowest, highest, out)


@numba.njit(parallel=True, cache=True)
def _beat_range_cpu(n, signal, positions, every, half, out):
    for i in numba.prange(n):
        _beat_range_cpu_body(i, signal, positions, every, half, out)


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


@numba.njit(parallel=True, cache=True)
def _flutter_frames_cpu(n, signal, q, hop, t, trend, frames, off_baseline):
    for w in numba.prange(n):
        _flutter_frames_cpu_body(w, signal, q, hop, t, trend, frames, off_baseline)


@numba.njit(parallel=True, cache=True)
def _flutter_measures_cpu(n, spectrum, freqs, first, last, low, reach, half_reach, dominant, concentration,
                          sine_ratio, subharmonic):
    for w in numba.prange(n):
        _flutter_measures_cpu_body(w, spectrum, freqs, first, last, low, reach, half_reach, dominant,
                                   concentration, sine_ratio, subharmonic)


# Set by _episode_cuda_kernels() on the GPU path only, as in pipeline._kernels: the CUDA wrappers
# reach numba.cuda and the device bodies as module globals rather than closure cells, so that their
# on-disk cache key is the same in every process.
cuda = _block_stats_cuda_body = _beat_range_cuda_body = _beat_stats_cuda_body = _tick_measures_cuda_body = None
_flutter_frames_cuda_body = _flutter_measures_cuda_body = None


@functools.cache
def _episode_cuda_kernels() -> dict:
    """CUDA twins of this module's kernels, compiled on first use and cached on disk like
    :func:`pipeline._kernels._cuda_kernels` (numba.cuda and the device bodies reached as module
    globals, so that the cache key is the same in every process)."""
    global cuda, _block_stats_cuda_body, _beat_range_cuda_body, _beat_stats_cuda_body, _tick_measures_cuda_body
    global _flutter_frames_cuda_body, _flutter_measures_cuda_body
    from numba import cuda

    _block_stats_cuda_body = cuda.jit(device=True)(_block_stats_one)
    _beat_range_cuda_body = cuda.jit(device=True)(_beat_range_one)
    _beat_stats_cuda_body = cuda.jit(device=True)(_beat_stats_one)
    _tick_measures_cuda_body = cuda.jit(device=True)(_tick_measures_body(_shape_kernels._median_of_cuda()))
    _flutter_frames_cuda_body = cuda.jit(device=True)(_flutter_frames_one)
    _flutter_measures_cuda_body = cuda.jit(device=True)(_flutter_measures_one)

    def block_stats(n, signal, size, step, lowest, highest, out):
        k = cuda.grid(1)
        if k < n:
            _block_stats_cuda_body(k, signal, size, step, lowest, highest, out)

    def beat_range(n, signal, positions, every, half, out):
        i = cuda.grid(1)
        if i < n:
            _beat_range_cuda_body(i, signal, positions, every, half, out)

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

    def flutter_frames(n, signal, q, hop, t, trend, frames, off_baseline):
        w = cuda.grid(1)
        if w < n:
            _flutter_frames_cuda_body(w, signal, q, hop, t, trend, frames, off_baseline)

    def flutter_measures(n, spectrum, freqs, first, last, low, reach, half_reach, dominant, concentration,
                         sine_ratio, subharmonic):
        w = cuda.grid(1)
        if w < n:
            _flutter_measures_cuda_body(w, spectrum, freqs, first, last, low, reach, half_reach, dominant,
                                        concentration, sine_ratio, subharmonic)

    return {"block_stats": _launch.cuda_jit_cached(block_stats),
            "beat_range": _launch.cuda_jit_cached(beat_range),
            "beat_stats": _launch.cuda_jit_cached(beat_stats),
            "tick_measures": _launch.cuda_jit_cached(tick_measures),
            "flutter_frames": _launch.cuda_jit_cached(flutter_frames),
            "flutter_measures": _launch.cuda_jit_cached(flutter_measures)}


_CPU = {"block_stats": _block_stats_cpu, "beat_range": _beat_range_cpu, "tick_measures": _tick_measures_cpu,
        "beat_stats": _beat_stats_cpu, "flutter_frames": _flutter_frames_cpu, "flutter_measures": _flutter_measures_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _episode_cuda_kernels, name, n, *arrays_and_scalars)
