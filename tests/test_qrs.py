"""Tests of pipeline.qrs: the refinement against a plain loop, the QRS width and slope against
the formulas of Gaussian deflections, the kernels' median against NumPy's. (The likeness the
rescue of hidden beats measures is tested with its kernel, in test_peaks.)"""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import backend
from pipeline.qrs import qrs_shape, refine_to_extremum, sample_median, shape_medians


def _host(x) -> np.ndarray:
    return backend.to_host(x)


# --------------------------------------------------------------------------- refinement
def _refine_reference(signal, positions, fs, search_s=0.05, baseline_s=0.15, despike_s=0.006):
    """Per beat: the sample within ±search whose running median (SciPy, edges repeated) lies farthest
    from the mean over ±baseline (first of equals), then the raw extremum of the same sign within
    ±despike of it; windows are clipped to the recording by repeating its edge samples."""
    from scipy.ndimage import median_filter

    search, base, half = round(search_s * fs), round(baseline_s * fs), max(1, round(despike_s * fs))
    smooth = median_filter(signal, size=2 * half + 1, mode="nearest")
    last = len(signal) - 1
    out = []
    for p in positions:
        baseline = np.mean([signal[min(max(k, 0), last)] for k in range(p - base, p + base + 1)])
        candidates = [min(max(k, 0), last) for k in range(p - search, p + search + 1)]
        deviation = [abs(float(smooth[k]) - baseline) for k in candidates]
        best = candidates[int(np.argmax(deviation))]
        sign = 1.0 if smooth[best] >= baseline else -1.0
        near = list(range(max(best - half, 0), min(best + half, last) + 1))
        out.append(near[int(np.argmax([sign * signal[k] for k in near]))])
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("fs", [250.0, 360.0])
def test_refine_to_extremum_equals_a_loop(fs, xp):
    rng = np.random.default_rng(int(fs))
    signal = np.cumsum(rng.standard_normal(20_000)).astype(np.float32)
    positions = np.concatenate([[3, 20], np.sort(rng.choice(np.arange(100, 19_900), 60, replace=False)), [19_990]])
    refined = refine_to_extremum(xp.asarray(signal), xp.asarray(positions.astype(np.int64)), fs)
    assert isinstance(refined, xp.ndarray) and refined.dtype == xp.int64
    np.testing.assert_array_equal(_host(refined), _refine_reference(signal, positions, fs))
    assert np.all(np.abs(_host(refined) - positions) <= round(0.05 * fs) + round(0.006 * fs))


def test_refine_moves_to_the_r_peak_of_either_polarity(xp):
    fs = 250.0
    t = np.arange(3000)
    signal = (1.5 * np.exp(-0.5 * ((t - 1000) / 2.5) ** 2) - 2.0 * np.exp(-0.5 * ((t - 2000) / 4.0) ** 2)).astype(np.float32)
    refined = refine_to_extremum(xp.asarray(signal), xp.asarray(np.array([995, 2008], np.int64)), fs)
    np.testing.assert_array_equal(_host(refined), [1000, 2000])  # an upward R and a downward QS deflection
    empty = refine_to_extremum(xp.asarray(signal), xp.zeros(0, dtype=xp.int64), fs)
    assert empty.shape == (0,)


def test_refine_skips_a_pacing_spike(xp):
    """A spike of one or two samples, taller than the QRS and inside the search window, is not the R."""
    fs = 360.0
    t = np.arange(4000)
    signal = (1.0 * np.exp(-0.5 * ((t - 2000) / 4.0) ** 2)).astype(np.float32)
    signal[1985:1987] = [4.0, 2.5]  # 40 ms before the R wave
    refined = refine_to_extremum(xp.asarray(signal), xp.asarray(np.array([1990], np.int64)), fs)
    np.testing.assert_array_equal(_host(refined), [2000])


@pytest.mark.parametrize("first, last", [(0, 0), (3, 9), (-4, 2), (95, 103), (10, 24), (-3, -1), (40, 42),
                                         (50, 54), (-2, 2), (97, 101), (98, 102)])
def test_median_of_equals_a_clipped_numpy_median(first, last):
    """The one device median of the QRS-shape and noise kernels: indices clipped to the array, as
    a clipped gather would repeat the end values (odd counts; for even ones, one of the two middles)."""
    from pipeline import _shape_kernels

    values = np.random.default_rng(abs(first * 31 + last)).standard_normal(100).astype(np.float32)
    window = values[np.clip(np.arange(first, last + 1), 0, 99)]
    got = _shape_kernels._median_of_cpu(values, first, last)
    if window.size % 2:
        assert got == np.median(window)
    else:
        middle = np.sort(window)[window.size // 2 - 1:window.size // 2 + 1]
        assert got in middle



@pytest.mark.parametrize("count", [3, 5])
def test_median_of_few_values_holds_with_ties(count):
    """Of 3 and 5 values the median comes from min/max, not from counting: every arrangement of
    the values 0..3 (ties of every kind) gives NumPy's median."""
    import itertools

    from pipeline import _shape_kernels

    for values in itertools.product(range(4), repeat=count):
        array = np.array(values, dtype=np.float32)
        assert _shape_kernels._median_of_cpu(array, 0, count - 1) == np.median(array), values


def test_qrs_shape_width_and_slope(xp):
    """Width at half height and the steepest rise of Gaussian deflections, against their formulas."""
    fs = 500.0
    t = np.arange(10_000)
    sigmas = {2000: 5.0, 5000: 20.0, 8000: 45.0}  # 10 ms (an R wave), 40 ms, 90 ms (a T wave)
    signal = sum(np.exp(-0.5 * ((t - c) / s) ** 2) for c, s in sigmas.items()).astype(np.float32)
    positions = np.array(list(sigmas), np.int64)
    refined, width, slope = qrs_shape(xp.asarray(signal), xp.asarray(positions), fs, baseline_s=0.5)
    np.testing.assert_array_equal(_host(refined), positions)
    for w, sigma in zip(_host(width), sigmas.values()):
        expected = 2 * np.sqrt(2 * np.log(2)) * sigma  # FWHM, measured from a baseline a little above 0
        assert abs(w - expected) <= 0.15 * expected + 2, (w, expected)
    step = round(0.008 * fs)
    for s_, (c, sigma) in zip(_host(slope), sigmas.items()):
        x = np.arange(c - round(0.06 * fs), c + round(0.06 * fs) + 1)  # the default reach, ±60 ms
        expected = np.max(np.abs(np.exp(-0.5 * ((x + step - c) / sigma) ** 2) - np.exp(-0.5 * ((x - step - c) / sigma) ** 2)))
        assert s_ == pytest.approx(expected, rel=0.02)


def test_shape_medians_are_the_sample_medians_of_the_measures(xp):
    """qrs.shape_medians (left on the device) holds what qrs.sample_median takes of qrs_shape's
    widths and slopes (on the host), for an odd and an even number of beats."""
    fs = 250.0
    rng = np.random.default_rng(8)
    signal = np.cumsum(rng.standard_normal(200_000)).astype(np.float32)
    for count in (1001, 1000):
        sample = np.sort(rng.choice(np.arange(200, 199_800), count, replace=False)).astype(np.int64)
        _, width, slope = qrs_shape(xp.asarray(signal), xp.asarray(sample), fs, despike_s=0.008, width_cap_s=0.12)
        got = _host(shape_medians(xp.asarray(signal), xp.asarray(sample), fs, despike_s=0.008, width_cap_s=0.12))
        assert got[0] == sample_median(width) and got[1] == float(sample_median(slope)), (got, count)



@pytest.mark.parametrize("fs", [128.0, 250.0, 360.0])
def test_deflection_kernel_equals_the_whole_array_formula(fs, xp):
    """The ``deflection`` kernel gives, bit for bit and in the ECG's precision, the whole-array
    formula it replaced (the ECG at each position less the mean of its values ``reach_s`` before
    and after, indices clipped): positions at both ends of the recording (clipped on either side)
    and throughout, float32 and float64."""
    from pipeline.qrs import deflection

    rng = np.random.default_rng(4)
    n = 5000
    for dtype in (np.float32, np.float64):
        signal = (3 * rng.standard_normal(n)).astype(dtype)
        positions = np.concatenate([[0, 1, 2], np.sort(rng.integers(0, n, 800)), [n - 3, n - 2, n - 1]])
        reach, last = max(1, int(round(0.15 * fs))), n - 1
        expected = signal[positions] - 0.5 * (signal[np.clip(positions - reach, 0, last)]
                                              + signal[np.clip(positions + reach, 0, last)])
        got = deflection(xp.asarray(signal), xp.asarray(positions.astype(np.int64)), fs, 0.15)
        assert got.dtype == dtype
        # On the GPU the subtraction may be fused with the halving (exact): the same number.
        np.testing.assert_array_equal(_host(got), expected)
