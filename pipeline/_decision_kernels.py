"""Numba kernels that turn the measures of :mod:`pipeline._episode_kernels` into decisions: which
flutter windows and noise ticks are flagged (:mod:`pipeline.episodes`), the runs of flagged indices
as a table, which times lie inside episodes, and each beat's quality (:mod:`pipeline.quality`).
Twinned as in :mod:`pipeline._kernels` (a per-index body compiled with ``numba.njit`` inside a
parallel loop on the CPU and with ``numba.cuda.jit``, one thread per index, on the GPU), with their
own table of CUDA twins.

Each replaces a chain of whole-array operations whose every step cost a launch on the GPU, and
the runs' table replaces the searches for their bounds that synchronised with the host. Their
arithmetic follows those operations step by step, in float32 where they were float32 (NumPy
compares and divides a float32 array by a Python float in float32), so that the results are the
same.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np

from pipeline import _launch

# The bits of the flags kernels write: a flutter window that passes the spectral tests
# (CANDIDATE) and also the sine test (SINE); a noise tick at or above its threshold (NOISY).
CANDIDATE, SINE, NOISY = 1, 2, 1

# The columns of a run table's row (see _runs_body); row 0's first column holds the number of runs.
RUN_COLUMNS = 8


# --------------------------------------------------------------------------- device helpers
def _joined(flags, bit, gap, i):
    """Whether index i lies in a run of ``bit`` in ``flags`` once the gaps of at most ``gap``
    indices between runs are bridged: i has the bit, or the nearest indices with it before and
    after i are at most ``gap + 1`` apart."""
    if flags[i] & bit:
        return True
    n = flags.shape[0]
    for before in range(i - 1, max(i - gap, 0) - 1, -1):
        if flags[before] & bit:
            for after in range(i + 1, min(before + gap + 2, n)):
                if flags[after] & bit:
                    return True
            return False
    return False


def _inside(t, start, end):
    """Whether time ``t`` lies in one of the sorted, disjoint intervals ``start[j]..end[j]``: the
    interval of the last start at or before t (NumPy's ``searchsorted``, side right) reaches it."""
    low, high = 0, start.shape[0]
    while low < high:
        middle = (low + high) // 2
        if start[middle] <= t:
            low = middle + 1
        else:
            high = middle
    return low > 0 and t <= end[low - 1]


def _median_of_ranked(ranked):
    """NumPy's median of ``ranked`` (float64), an array partitioned around its middle and its last
    element: NaN where that last is (NaN is the largest), else the middle value or the mean of the
    two middle ones, summed in the array's precision as NumPy's mean sums them."""
    m = ranked.shape[0]
    if ranked[m - 1] != ranked[m - 1]:
        return np.float64(ranked[m - 1])
    if m % 2:
        return np.float64(ranked[m // 2])
    return np.float64(ranked[m // 2 - 1] + ranked[m // 2]) * 0.5


def _larger(a, b):
    """NumPy's ``maximum`` of two floats: NaN if either is."""
    return a if a >= b or a != a else b


def _ramp(value, good, bad):
    """1 at or before ``good``, 0 at or beyond ``bad``, linear between, in float32 as the
    whole-array ``clip((value - bad) / (good - bad), 0, 1)`` it replaced (NaN stays NaN; -0 clips
    to 0, as NumPy's clip does)."""
    x = np.float32(value - np.float32(bad)) / np.float32(good - bad)
    if x != x:
        return x
    x = x if x > 0 else np.float32(0.0)
    return x if x < 1 else np.float32(1.0)


# --------------------------------------------------------------------------- per-index bodies
def _flutter_flags_one(w, dominant, concentration, off_baseline, sine_ratio, subharmonic, low_hz, high_hz,
                       min_concentration, min_off_baseline, max_sine_ratio, max_subharmonic, flags):
    """flags[w]: CANDIDATE when window w passes the spectral tests of
    :func:`pipeline.episodes.find_episodes` (concentration, share off the baseline, dominant
    frequency within low_hz..high_hz), + SINE when it is also sine-like (spectral mean frequency
    ratio, and no strong subharmonic where half the dominant frequency is still in the band).
    Thresholds are compared in float32, as NumPy compares a float32 array with a Python float."""
    d = dominant[w]
    candidate = (concentration[w] >= np.float32(min_concentration) and off_baseline[w] >= np.float32(min_off_baseline)
                 and d >= np.float32(low_hz) and d <= np.float32(high_hz))
    halving = subharmonic[w] > np.float32(max_subharmonic) and d >= np.float32(2 * low_hz)
    sine = candidate and sine_ratio[w] <= np.float32(max_sine_ratio) and not halving
    flags[w] = (CANDIDATE if candidate else 0) + (SINE if sine else 0)


def _tick_severity_body(inside, larger, median_of_ranked):
    """The per-tick body of the noise severity, closed over ``inside``, ``larger`` and
    ``median_of_ranked`` (the CPU or the CUDA twins of :func:`_inside`, :func:`_larger` and
    :func:`_median_of_ranked`: a body may call only functions compiled for its own target)."""

    def tick_severity_one(k, measures, ranked, hf_ratio, range_ratio, step_ratio, rail_limit, flat_ratio,
                          tick_s, masked_start, masked_end, severity, flags, capped):
        """Severity of tick k from the rows of ``measures`` (those of ``tick_measures``: 0 range,
        1 short range, 2 high-frequency floor, 3 and 4 the median levels before and after, 5 rail
        samples) against the typical QRS amplitude, the median of ``ranked`` (1 where it is not
        positive): the largest measure / threshold ratio, in float32 step by step as the
        whole-array formula it replaced. 0 where the tick's centre, ``(k + 0.5) tick_s`` seconds,
        lies in one of the intervals masked_start..masked_end (sorted, disjoint). flags[k]: NOISY
        at or above 1; capped[k]: the severity capped at 10 where NOISY, else 0."""
        typical = median_of_ranked(ranked)
        if not typical > 0:
            typical = 1.0
        value = larger(np.float32(math.sqrt(measures[2, k])) / np.float32(hf_ratio * typical),
                       measures[0, k] / np.float32(range_ratio * typical))
        value = larger(value, np.float32(abs(measures[4, k] - measures[3, k])) / np.float32(step_ratio * typical))
        value = larger(value, measures[5, k] / np.float32(rail_limit))
        value = larger(value, np.float32(flat_ratio * typical) / larger(measures[1, k], np.float32(1e-30)))
        if inside((k + 0.5) * tick_s, masked_start, masked_end):
            value = np.float32(0.0)
        severity[k] = value
        noisy = value >= 1.0
        flags[k] = NOISY if noisy else 0
        capped[k] = min(value, np.float32(10.0)) if noisy else np.float32(0.0)

    return tick_severity_one


def _marked_within_body(joined):
    """The walk within a run, closed over ``joined`` (the CPU or CUDA twin of :func:`_joined`)."""

    def marked_within(flags, bit, gap, mark, i, step):
        """The nearest index from i on, going ``step`` (1 or -1) within i's run of ``bit`` (see
        :func:`_joined`), that has ``mark``; -1 where none has."""
        n = flags.shape[0]
        while 0 <= i < n and joined(flags, bit, gap, i):
            if flags[i] & mark:
                return i
            i += step
        return -1

    return marked_within


def _runs_body(joined, marked_within):
    """The per-chunk body of the run table, closed over the CPU or CUDA twins of :func:`_joined`
    and of the walk within a run (:func:`_marked_within_body`)."""

    def runs_one(c, flags, bit, mark, gap, chunk, prefix, counts, tables, t, write):
        """The runs of ``bit`` in ``flags`` (gaps of at most ``gap`` bridged, see :func:`_joined`)
        that start or end in chunk c, ``flags[c chunk : (c+1) chunk]``. In the first pass
        (``write`` 0) counts[c] = (runs starting in the chunk, indices with ``mark``). In the
        second, ``counts`` holds those counts summed over the chunks up to each (the host's
        cumulative sum between the passes), and the runs go to table ``tables[:, t]`` in order,
        one row each from row 1 on, at the offsets the chunks before give: 0 first index, 1 last
        index, 2 and 3 the number of indices with ``mark`` before the first and up to the last, 4 and 5
        ``prefix[first - 1]`` and ``prefix[last]`` (0 before the recording or without a prefix),
        6 and 7 the first and the last index with ``mark`` within the run (-1: none). The
        differences of columns 2/3 and 4/5 are the run's count and sum; the last chunk writes the
        number of runs to row 0. A run's first index is written by the chunk it starts in, its
        last by the chunk it ends in."""
        n = flags.shape[0]
        index = np.int64(c)  # a CPU prange index is unsigned: Numba mixes it with ints as a float
        first = index * chunk
        stop = min(first + chunk, n)
        offset = base = np.int64(0)
        if write and index > 0:
            offset, base = counts[index - 1, 0], counts[index - 1, 1]
        before = first > 0 and joined(flags, bit, gap, first - 1)
        # A run that started before the chunk and goes on in it ends here: its row is the last one
        # of the runs started before.
        ends = -1 if before and first < n and joined(flags, bit, gap, first) else 0
        starts = marked = 0
        for i in range(first, stop + 1):
            now = i < n and joined(flags, bit, gap, i)
            if i > first and before and not now:             # a run ended at i - 1
                if write:
                    row = 1 + offset + ends
                    tables[row, t, 1] = i - 1
                    tables[row, t, 3] = base + marked
                    tables[row, t, 5] = prefix[i - 1] if prefix.shape[0] else 0.0
                    tables[row, t, 7] = marked_within(flags, bit, gap, mark, i - 1, -1)
                ends += 1
            if i < stop:
                if now and not before:                         # a run starts at i
                    if write:
                        row = 1 + offset + starts
                        tables[row, t, 0] = i
                        tables[row, t, 2] = base + marked
                        tables[row, t, 4] = prefix[i - 1] if i > 0 and prefix.shape[0] else 0.0
                        tables[row, t, 6] = marked_within(flags, bit, gap, mark, i, 1)
                    starts += 1
                if flags[i] & mark:
                    marked += 1
            before = now
        if not write:
            counts[index, 0] = starts
            counts[index, 1] = marked
        elif stop == n:
            tables[0, t, 0] = offset + starts
            for column in range(1, tables.shape[2]):
                tables[0, t, column] = 0.0

    return runs_one


def _in_spans_body(inside):
    """The per-position body of the membership test, closed over ``inside``."""

    def in_spans_one(i, positions, fs, start, end, out):
        """out[i]: whether ``positions[i] / fs`` seconds lies in one of the sorted, disjoint
        intervals start..end."""
        out[i] = inside(positions[i] / fs, start, end)

    return in_spans_one


def _beat_quality_body(inside, larger, ramp):
    """The per-beat body of the quality, closed over the twins of ``inside``, ``larger`` and
    ``ramp``."""

    def beat_quality_one(i, amp, hf, shift, corr, best, local, hf_good, hf_bad, shift_good, shift_bad, amp_good,
                         amp_bad, shape_good, shape_bad, shape_weight, positions, fs, noise_start, noise_end,
                         noisy_cap, quality):
        """quality[i] from the measures of ``beat_stats`` and ``local`` (the running median of
        the QRS amplitudes): the product of the ramps of :func:`pipeline.quality.beat_quality`,
        in float32 step by step as the whole-array formula it replaced, at most ``noisy_cap``
        where ``positions[i] / fs`` seconds lies in one of the intervals noise_start..noise_end
        (sorted, disjoint)."""
        level = larger(local[i], np.float32(1e-12))
        ratio = larger(amp[i] / level, np.float32(1e-6))
        good_hf = ramp(hf[i] / level, hf_good, hf_bad)
        good_shift = ramp(shift[i] / level, shift_good, shift_bad)
        good_amplitude = ramp(larger(ratio, np.float32(1.0) / ratio), amp_good, amp_bad)  # 0.4 counts as 2.5
        good_shape = ramp(larger(corr[i], best[i]), shape_good, shape_bad)
        shape_factor = np.float32(1.0) - np.float32(shape_weight) * np.float32(np.float32(1.0) - good_shape)
        value = np.float32(np.float32(good_hf * good_shift) * good_amplitude) * shape_factor
        if inside(positions[i] / fs, noise_start, noise_end):
            cap = np.float32(noisy_cap)
            value = value if value < cap or value != value else cap
        quality[i] = value

    return beat_quality_one


# --------------------------------------------------------------------------- twins
_joined_cpu = numba.njit(_joined, cache=True)
_inside_cpu = numba.njit(_inside, cache=True)
_larger_cpu = numba.njit(_larger, cache=True)
_median_of_ranked_cpu = numba.njit(_median_of_ranked, cache=True)
_ramp_cpu = numba.njit(_ramp, cache=True)
_flutter_flags_cpu_body = numba.njit(_flutter_flags_one, cache=True)
_tick_severity_cpu_body = numba.njit(_tick_severity_body(_inside_cpu, _larger_cpu, _median_of_ranked_cpu), cache=True)
_runs_cpu_body = numba.njit(_runs_body(_joined_cpu, numba.njit(_marked_within_body(_joined_cpu), cache=True)),
                            cache=True)
_in_spans_cpu_body = numba.njit(_in_spans_body(_inside_cpu), cache=True)
_beat_quality_cpu_body = numba.njit(_beat_quality_body(_inside_cpu, _larger_cpu, _ramp_cpu), cache=True)


@numba.njit(parallel=True, cache=True)
def _flutter_flags_cpu(n, dominant, concentration, off_baseline, sine_ratio, subharmonic, low_hz, high_hz,
                       min_concentration, min_off_baseline, max_sine_ratio, max_subharmonic, flags):
    for w in numba.prange(n):
        _flutter_flags_cpu_body(w, dominant, concentration, off_baseline, sine_ratio, subharmonic, low_hz, high_hz,
                                min_concentration, min_off_baseline, max_sine_ratio, max_subharmonic, flags)


@numba.njit(parallel=True, cache=True)
def _tick_severity_cpu(n, measures, ranked, hf_ratio, range_ratio, step_ratio, rail_limit, flat_ratio, tick_s,
                       masked_start, masked_end, severity, flags, capped):
    for k in numba.prange(n):
        _tick_severity_cpu_body(k, measures, ranked, hf_ratio, range_ratio, step_ratio, rail_limit, flat_ratio,
                                tick_s, masked_start, masked_end, severity, flags, capped)


@numba.njit(parallel=True, cache=True)
def _runs_cpu(n, flags, bit, mark, gap, chunk, prefix, counts, tables, t, write):
    for c in numba.prange(n):
        _runs_cpu_body(c, flags, bit, mark, gap, chunk, prefix, counts, tables, t, write)


@numba.njit(parallel=True, cache=True)
def _in_spans_cpu(n, positions, fs, start, end, out):
    for i in numba.prange(n):
        _in_spans_cpu_body(i, positions, fs, start, end, out)


@numba.njit(parallel=True, cache=True)
def _beat_quality_cpu(n, amp, hf, shift, corr, best, local, hf_good, hf_bad, shift_good, shift_bad, amp_good,
                      amp_bad, shape_good, shape_bad, shape_weight, positions, fs, noise_start, noise_end, noisy_cap,
                      quality):
    for i in numba.prange(n):
        _beat_quality_cpu_body(i, amp, hf, shift, corr, best, local, hf_good, hf_bad, shift_good, shift_bad,
                               amp_good, amp_bad, shape_good, shape_bad, shape_weight, positions, fs, noise_start,
                               noise_end, noisy_cap, quality)


# Set by _decision_cuda_kernels() on the GPU path only, as in pipeline._kernels: the CUDA wrappers
# reach numba.cuda and the device bodies as module globals rather than closure cells, so that their
# on-disk cache key is the same in every process.
cuda = _flutter_flags_cuda_body = _tick_severity_cuda_body = _runs_cuda_body = None
_in_spans_cuda_body = _beat_quality_cuda_body = None


@functools.cache
def _decision_cuda_kernels() -> dict:
    """CUDA twins of this module's kernels, compiled on first use and cached on disk like
    :func:`pipeline._kernels._cuda_kernels`."""
    global cuda, _flutter_flags_cuda_body, _tick_severity_cuda_body, _runs_cuda_body
    global _in_spans_cuda_body, _beat_quality_cuda_body
    from numba import cuda

    device = cuda.jit(device=True)
    inside, larger, joined = device(_inside), device(_larger), device(_joined)
    _flutter_flags_cuda_body = device(_flutter_flags_one)
    _tick_severity_cuda_body = device(_tick_severity_body(inside, larger, device(_median_of_ranked)))
    _runs_cuda_body = device(_runs_body(joined, device(_marked_within_body(joined))))
    _in_spans_cuda_body = device(_in_spans_body(inside))
    _beat_quality_cuda_body = device(_beat_quality_body(inside, larger, device(_ramp)))

    def flutter_flags(n, dominant, concentration, off_baseline, sine_ratio, subharmonic, low_hz, high_hz,
                      min_concentration, min_off_baseline, max_sine_ratio, max_subharmonic, flags):
        w = cuda.grid(1)
        if w < n:
            _flutter_flags_cuda_body(w, dominant, concentration, off_baseline, sine_ratio, subharmonic, low_hz,
                                     high_hz, min_concentration, min_off_baseline, max_sine_ratio, max_subharmonic,
                                     flags)

    def tick_severity(n, measures, ranked, hf_ratio, range_ratio, step_ratio, rail_limit, flat_ratio, tick_s,
                      masked_start, masked_end, severity, flags, capped):
        k = cuda.grid(1)
        if k < n:
            _tick_severity_cuda_body(k, measures, ranked, hf_ratio, range_ratio, step_ratio, rail_limit,
                                     flat_ratio, tick_s, masked_start, masked_end, severity, flags, capped)

    def runs(n, flags, bit, mark, gap, chunk, prefix, counts, tables, t, write):
        c = cuda.grid(1)
        if c < n:
            _runs_cuda_body(c, flags, bit, mark, gap, chunk, prefix, counts, tables, t, write)

    def in_spans(n, positions, fs, start, end, out):
        i = cuda.grid(1)
        if i < n:
            _in_spans_cuda_body(i, positions, fs, start, end, out)

    def beat_quality(n, amp, hf, shift, corr, best, local, hf_good, hf_bad, shift_good, shift_bad, amp_good,
                     amp_bad, shape_good, shape_bad, shape_weight, positions, fs, noise_start, noise_end, noisy_cap,
                     quality):
        i = cuda.grid(1)
        if i < n:
            _beat_quality_cuda_body(i, amp, hf, shift, corr, best, local, hf_good, hf_bad, shift_good, shift_bad,
                                    amp_good, amp_bad, shape_good, shape_bad, shape_weight, positions, fs,
                                    noise_start, noise_end, noisy_cap, quality)

    return {"flutter_flags": _launch.cuda_jit_cached(flutter_flags),
            "tick_severity": _launch.cuda_jit_cached(tick_severity),
            "runs": _launch.cuda_jit_cached(runs),
            "in_spans": _launch.cuda_jit_cached(in_spans),
            "beat_quality": _launch.cuda_jit_cached(beat_quality)}


_CPU = {"flutter_flags": _flutter_flags_cpu, "tick_severity": _tick_severity_cpu, "runs": _runs_cpu,
        "in_spans": _in_spans_cpu, "beat_quality": _beat_quality_cpu}


def launch(name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``; arrays may be CuPy (GPU) or NumPy (CPU), not mixed."""
    _launch.launch_from(_CPU, _decision_cuda_kernels, name, n, *arrays_and_scalars)
