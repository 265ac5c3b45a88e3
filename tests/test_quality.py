"""Tests of pipeline.quality: the per-beat kernel against a plain NumPy computation, the quality on
the project's synthetic recording and on the stress cases, the same on NumPy and CuPy."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import _decision_kernels, _episode_kernels, backend, stress
from pipeline.quality import LOW_QUALITY, beat_quality, low_quality, quality_measures, steepness

# Tolerances: beats inside noise are low quality, clean beats (normal or not) are not.
NOISY_LOW = 0.9       # share of beats inside noise bursts that must score low
CLEAN_HIGH = 0.99     # share of clean beats that must score high
NEAR_NOISE_S = 0.7    # beats this close to a burst see it in their window: not counted as clean


@pytest.fixture(scope="module")
def cases() -> dict:
    return {name: stress.make_case(name) for name in ("noise_bursts", "noise_bursts_128hz", "noise_bursts_1khz",
                                                      "electrode_motion", "tall_t_slow", "bigeminy", "pauses",
                                                      "flutter", "ventricular_tachycardia", "atrial_flutter",
                                                      "av_block")}


def _quality(case, xp, both_leads: bool = False):
    other = xp.asarray(case.second) if both_leads else None
    return beat_quality(xp.asarray(case.signal), xp.asarray(case.beats), case.fs, other=other)


def _far_from(case, kind="noise", reach_s=NEAR_NOISE_S) -> np.ndarray:
    far = np.ones(case.beats.shape[0], dtype=bool)
    for k, start, end in case.episodes:
        if k == kind:
            far &= (case.beats < (start - reach_s) * case.fs) | (case.beats > (end + reach_s) * case.fs)
    return far


# --------------------------------------------------------------------------- the project's recording
def test_default_synthetic_recording(synthetic_ecg, xp):
    """Beats in noise bursts score low; at least 99 % of clean normal beats, and of the premature
    beats, score high."""
    e = synthetic_ecg
    quality = backend.to_host(beat_quality(xp.asarray(e.signal), xp.asarray(e.r_peaks), e.fs))
    noisy = e.symbols == "Q"
    assert noisy.sum() >= 3
    assert np.mean(quality[noisy] < LOW_QUALITY) >= NOISY_LOW
    case = stress.StressCase("default", e.fs, e.signal, e.signal, e.r_peaks, e.symbols,
                             tuple(("noise", a / e.fs, (b + 1) / e.fs) for a, b in e.noise_bursts))
    far = _far_from(case)
    assert np.mean(quality[(e.symbols == "N") & far] >= LOW_QUALITY) >= CLEAN_HIGH
    ectopic = np.isin(e.symbols, ["V", "A", "S"]) & far
    assert ectopic.sum() > 20 and np.mean(quality[ectopic] >= LOW_QUALITY) >= CLEAN_HIGH


# --------------------------------------------------------------------------- stress cases
@pytest.mark.parametrize("name", ["noise_bursts", "noise_bursts_128hz", "noise_bursts_1khz"])
def test_noise_bursts(cases, name, xp):
    case = cases[name]
    quality = backend.to_host(_quality(case, xp))
    noisy = case.symbols == "Q"
    assert noisy.sum() >= 3
    assert np.mean(quality[noisy] < LOW_QUALITY) >= NOISY_LOW
    assert np.mean(quality[~noisy & _far_from(case)] >= LOW_QUALITY) >= CLEAN_HIGH


def test_electrode_motion(cases, xp):
    """Slow swings leave the QRS sharp: the noise episodes find them (tests/test_episodes.py);
    beat by beat, the baseline shift and a poor likeness to the neighbours catch half of them, and
    the beats across the electrode pop."""
    case = cases["electrode_motion"]
    quality = backend.to_host(_quality(case, xp))
    noisy = case.symbols == "Q"
    assert np.mean(quality[noisy] < LOW_QUALITY) >= 0.5
    pop = case.episodes[1]
    across = (case.beats > pop[1] * case.fs) & (case.beats < (pop[2] + 0.5) * case.fs)
    assert across.any() and (quality[across] < LOW_QUALITY).all()
    assert np.mean(quality[_far_from(case)] >= LOW_QUALITY) >= CLEAN_HIGH


@pytest.mark.parametrize("name", ["tall_t_slow", "bigeminy", "pauses", "flutter", "ventricular_tachycardia",
                                  "atrial_flutter", "av_block"])
@pytest.mark.parametrize("both_leads", [False, True], ids=["one lead", "two leads"])
def test_clean_cases_score_high(cases, name, both_leads, xp):
    """Tall T waves, large PVCs beside small beats, pauses, beats around flutter, a run of VT, beats
    on atrial flutter's sawtooth and AV block's lone P waves are all clean: every beat scores high,
    read on one lead or on two (the second lead's QRS complexes smaller, inverted, noisier)."""
    quality = backend.to_host(_quality(cases[name], xp, both_leads))
    assert np.mean(quality >= LOW_QUALITY) >= CLEAN_HIGH, np.sort(quality)[:5]


def test_shape_alone_never_makes_a_beat_low(cases):
    """A lone PVC among normal beats: no neighbour resembles it, yet it scores 1 - shape_weight."""
    case = cases["pauses"]
    signal = case.signal.copy()
    k = case.beats[30]
    half = int(0.1 * case.fs)
    signal[k - half:k + half] -= 2.0 * np.hanning(2 * half).astype(np.float32)  # a wide negative complex
    m = quality_measures(signal, case.beats, case.fs)
    assert m["shape"][30] < 0.3
    assert beat_quality(signal, case.beats, case.fs)[30] == pytest.approx(0.6, abs=0.02)
    assert beat_quality(signal, case.beats, case.fs, shape_weight=0.0)[30] == pytest.approx(1.0)


def _triangles(n: int, fs: float, beats, rises) -> np.ndarray:
    """A flat lead with a triangle at each of ``beats``: up for 40 ms at ``rises`` (signal units a
    second, one per beat), down as fast."""
    signal = np.zeros(n, dtype=np.float32)
    up = np.arange(int(0.04 * fs)) / fs
    for at, rise in zip(beats, rises):
        signal[at - up.size:at] = rise * up
        signal[at:at + up.size] = rise * up[::-1]
    return signal


def test_steepness_on_two_leads(xp):
    """Beats as steep as their neighbours on both leads score 1; a deflection a third as steep on
    both scores a third; one on a single lead, flat on the other, scores 0. The quality falls by
    the steepness factor (1 at 0.5, 1 - steepness_weight at 0.25), and not at all on one lead."""
    fs, rr = 250.0, 200
    beats = np.arange(rr, 40 * rr, rr)
    faint, lone = 20, 30                                    # beats[20]: faint on both; beats[30]: one lead only
    rises = np.full(beats.size, 40.0)
    rises[faint] = 40.0 / 3
    first = _triangles(40 * rr, fs, beats, rises)
    second = _triangles(40 * rr, fs, np.delete(beats, lone), -0.5 * np.delete(rises, lone))   # inverted, smaller
    signal, other, positions = xp.asarray(first), xp.asarray(second), xp.asarray(beats)
    measured = backend.to_host(steepness(signal, other, positions, fs))
    expected = np.ones(beats.size)
    expected[[faint, lone]] = [1 / 3, 0.0]
    np.testing.assert_allclose(measured, expected, atol=0.02)
    alone = backend.to_host(beat_quality(signal, positions, fs))
    both = backend.to_host(beat_quality(signal, positions, fs, other=other))
    factor = np.ones(beats.size)
    factor[[faint, lone]] = [1 - 0.5 * (1 - (1 / 3 - 0.25) / 0.25), 0.5]
    np.testing.assert_allclose(both, alone * factor, atol=0.02)


def test_a_swing_on_one_lead_loses_quality_where_the_other_lead_is_read():
    """Through the segmentation: triangles between beats on lead II alone, 0.6 × as steep as its QRS
    complexes (too steep for the rules that leave faint deflections out; the one for deflections
    the other lead does not show is off), stay as beats. With the second lead read, where they are
    no deflection, each loses at least a tenth of its quality; the real beats lose none."""
    from pipeline import qrs
    from pipeline.config import SignalConfig
    from pipeline.segmentation import segment

    case = stress.make_case("pauses")
    signal, fs = case.signal.copy(), case.fs
    _, _, slope = qrs.qrs_shape(signal, case.beats, fs)
    rise = 0.6 * float(np.median(slope)) / (2 * 0.008)          # qrs_shape: the rise over ±8 ms, per second
    swings = (case.beats[10:40:6] + case.beats[11:41:6]) // 2
    up = rise * np.arange(int(0.06 * fs)) / fs
    for at in swings:
        signal[at - up.size:at] += up
        signal[at:at + up.size] += up[::-1]
    cfg = SignalConfig(absent_other_slope=0.0)   # the detector would take out what the other lead lacks
    alone = segment(signal, fs, cfg)
    both = segment(signal, fs, cfg, other=case.second)
    positions = backend.to_host(alone.positions)
    np.testing.assert_array_equal(positions, backend.to_host(both.positions))
    found = np.abs(positions[:, None] - swings[None, :]).argmin(axis=0)
    assert (np.abs(positions[found] - swings) <= 2).all()
    drop = backend.to_host(alone.quality) - backend.to_host(both.quality)
    assert (drop[found] >= 0.1).all(), drop[found]
    np.testing.assert_array_equal(np.delete(drop, found), 0)


# --------------------------------------------------------------------------- the kernel
def _reference(signal, positions, fs):
    """beat_stats in plain NumPy, one beat at a time."""
    n, m = signal.shape[0], positions.shape[0]
    half, before, after = int(round(0.06 * fs)), int(round(0.35 * fs)), int(round(0.5 * fs))
    step, edge = max(1, int(round(fs / 100))), int(round(0.04 * fs))
    t_lo, t_hi, t_step, k = int(round(-0.1 * fs)), int(round(0.15 * fs)), max(1, int(fs // 125)), 4
    x = signal.astype(np.float64)
    out = {key: np.zeros(m) for key in ("amp", "hf", "shift", "corr", "best")}
    offsets = np.arange(t_lo, t_hi + 1, t_step)
    for i, p in enumerate(positions):
        out["amp"][i] = np.ptp(x[max(p - half, 0):min(p + half + 1, n)])
        start = max(p - before, positions[i - 1] + half + 1 if i > 0 else -10**9, step)
        stop = min(p + after, positions[i + 1] - half - 1 if i + 1 < m else 10**12, n - 1 - step)
        j = np.arange(start, stop + 1)
        j = j[(j < p - half) | (j > p + half)]
        d2 = x[j - step] - 2 * x[j] + x[j + step]
        out["hf"][i] = np.sqrt(np.mean(d2 ** 2)) if j.size else 0.0
        g = min(edge, (stop - start + 1) // 2)
        out["shift"][i] = abs(x[stop - g + 1:stop + 1].mean() - x[start:start + g].mean()) if g > 0 else 0.0
        others = min(2 * k, m - 1)
        lo = min(max(i - k, 0), m - 1 - others)
        nb = [a for a in range(lo, lo + others + 1) if a != i]
        beat = x[np.clip(p + offsets, 0, n - 1)]
        rows = x[np.clip(positions[nb][:, None] + offsets[None, :], 0, n - 1)]
        template = (rows.sum(0) - rows.max(0) - rows.min(0)) / (others - 2)
        out["corr"][i] = np.corrcoef(beat, template)[0, 1]
        out["best"][i] = max(np.corrcoef(beat, row)[0, 1] for row in rows)
    return out


def test_kernel_equals_numpy(xp):
    case = stress.make_case("noise_bursts")
    signal, positions = case.signal[: int(20 * case.fs)], case.beats[case.beats < int(20 * case.fs)]
    expected = _reference(signal, positions, case.fs)
    count = positions.shape[0]
    out = [xp.empty(count, dtype=xp.float32) for _ in range(5)]
    fs = case.fs
    _episode_kernels.launch("beat_stats", count, xp.asarray(signal), xp.asarray(positions), int(round(0.06 * fs)),
                            int(round(0.35 * fs)), int(round(0.5 * fs)), max(1, int(round(fs / 100))),
                            int(round(0.04 * fs)), int(round(-0.1 * fs)), int(round(0.15 * fs)), max(1, int(fs // 125)), 4,
                            *out)
    for key, values in zip(("amp", "hf", "shift", "corr", "best"), out):
        np.testing.assert_allclose(backend.to_host(values), expected[key], rtol=1e-4, atol=1e-5, err_msg=key)


def _quality_reference(raw: dict, noisy, hf_ramp=(0.15, 0.35), shift_ramp=(0.6, 1.5), amplitude_ramp=(2.5, 5.0),
                       shape_ramp=(0.8, 0.3), shape_weight=0.4) -> np.ndarray:
    """The whole-array formula that the beat_quality kernel replaced, from beat_stats' measures and
    the running median of the amplitudes (``local``), capped where ``noisy``."""
    def ramp(values, good, bad):
        return np.clip((values - bad) / (good - bad), 0.0, 1.0)

    local = np.maximum(raw["local"], np.float32(1e-12))
    ratio = np.maximum((raw["amp"] / local).astype(np.float32), np.float32(1e-6))
    quality = (ramp((raw["hf"] / local).astype(np.float32), *hf_ramp)
               * ramp((raw["shift"] / local).astype(np.float32), *shift_ramp)
               * ramp(np.maximum(ratio, 1.0 / ratio), *amplitude_ramp)
               * (1.0 - shape_weight * (1.0 - ramp(np.maximum(raw["corr"], raw["best"]), *shape_ramp))))
    quality[noisy] = np.minimum(quality[noisy], LOW_QUALITY / 2)
    return quality


def test_quality_kernel_matches_the_whole_array_formula(xp):
    """Measures on the ramps' ends and between, NaN, a local amplitude of 0, beats on the bounds
    of the noise; the default ramps and others (one in reverse order, no shape weight)."""
    rng = np.random.default_rng(6)
    n = 3000
    local = rng.choice(np.float32([0.0, 0.5, 1.0, 2.0]), n)
    level = np.maximum(local, np.float32(1e-12))
    raw = {"local": local, "amp": (rng.choice(np.float32([0.1, 0.2, 0.4, 1.0, 2.5, 5.0, 7.0]), n) * level),
           "hf": rng.choice(np.float32([0.0, 0.15, 0.2, 0.35, 0.5, np.nan]), n) * level,
           "shift": rng.choice(np.float32([0.0, 0.6, 1.0, 1.5, 2.0]), n) * level,
           "corr": rng.choice(np.float32([-1.0, 0.0, 0.3, 0.5, 0.8, 0.95, np.nan]), n),
           "best": rng.choice(np.float32([-1.0, 0.3, 0.6, 0.8, 1.0]), n)}
    raw = {key: np.where(rng.random(n) < 0.5, value, value * rng.uniform(0.5, 1.5, n)).astype(np.float32)
           for key, value in raw.items()}   # half of them between the special values
    positions = np.arange(n, dtype=np.int64) * 50
    fs = 250.0
    spans = np.array([[10.0, 200.0, 400.0], [20.0, 300.0, 400.2]])
    t = positions / fs
    noisy = ((spans[0][None, :] <= t[:, None]) & (t[:, None] <= spans[1][None, :])).any(axis=1)
    assert noisy.sum() > 100 and (t == 400.0).any()
    for options in ({}, {"hf_ramp": (0.35, 0.15), "shape_weight": 0.0, "amplitude_ramp": (2.0, 4.0)}):
        ramps = {"hf_ramp": (0.15, 0.35), "shift_ramp": (0.6, 1.5), "amplitude_ramp": (2.5, 5.0),
                 "shape_ramp": (0.8, 0.3), "shape_weight": 0.4, **options}
        quality = xp.full(n, -1.0, dtype=xp.float32)
        _decision_kernels.launch("beat_quality", n, *(xp.asarray(raw[k]) for k in ("amp", "hf", "shift", "corr",
                                                                                  "best", "local")),
                                 *ramps["hf_ramp"], *ramps["shift_ramp"], *ramps["amplitude_ramp"],
                                 *ramps["shape_ramp"], ramps["shape_weight"], xp.asarray(positions), fs,
                                 xp.asarray(spans[0]), xp.asarray(spans[1]), LOW_QUALITY / 2, quality)
        expected = _quality_reference(raw, noisy, **ramps)
        assert np.isnan(expected).any() and (expected == 0).any() and (expected == 1).any()
        if xp is np:
            np.testing.assert_array_equal(quality, expected)
        else:   # CUDA contracts a multiply and an add into one rounding (FMA): within a float32 step
            np.testing.assert_allclose(backend.to_host(quality), expected, rtol=2.4e-7, atol=0)


@pytest.mark.parametrize("name", ["noise_bursts", "electrode_motion"])
def test_beats_in_noise_are_capped(cases, name, xp):
    """beat_quality with noise spans: the whole-array formula on its own measures, capped inside."""
    case = cases[name]
    signal, positions = xp.asarray(case.signal), xp.asarray(case.beats)
    spans = np.array([[start for _, start, _ in case.episodes], [end for _, _, end in case.episodes]])
    t = case.beats / case.fs
    noisy = ((spans[0][None, :] <= t[:, None]) & (t[:, None] <= spans[1][None, :])).any(axis=1)
    quality = backend.to_host(beat_quality(signal, positions, case.fs, noise_spans=xp.asarray(spans)))
    free = backend.to_host(beat_quality(signal, positions, case.fs))
    assert noisy.sum() >= 3 and (quality[noisy] <= LOW_QUALITY / 2).all()
    np.testing.assert_array_equal(quality[~noisy], free[~noisy])
    np.testing.assert_array_equal(quality[noisy], np.minimum(free[noisy], np.float32(LOW_QUALITY / 2)))


# --------------------------------------------------------------------------- backends, shapes, errors
@pytest.mark.parametrize("name", ["noise_bursts", "bigeminy"])
@pytest.mark.parametrize("both_leads", [False, True], ids=["one lead", "two leads"])
def test_same_on_every_backend(cases, name, both_leads, xp):
    case = cases[name]
    mine = _quality(case, xp, both_leads)
    assert isinstance(mine, xp.ndarray) and mine.dtype == xp.float32 and mine.shape == case.beats.shape
    np.testing.assert_allclose(backend.to_host(mine), _quality(case, np, both_leads), atol=1e-4)


def test_range_and_low_quality_mask(cases):
    case = cases["noise_bursts"]
    quality = beat_quality(case.signal, case.beats, case.fs)
    assert quality.dtype == np.float32 and ((quality >= 0) & (quality <= 1)).all()
    np.testing.assert_array_equal(low_quality(quality), quality < LOW_QUALITY)
    assert set(quality_measures(case.signal, case.beats, case.fs)) == {"hf", "shift", "amplitude", "shape",
                                                                      "qrs_amplitude"}


def test_few_beats(cases):
    case = cases["pauses"]
    assert beat_quality(case.signal, case.beats[:0], case.fs).shape == (0,)
    one = beat_quality(case.signal, case.beats[5:6], case.fs)
    assert one.shape == (1,) and one[0] == pytest.approx(1.0)
    three = beat_quality(case.signal, case.beats[5:8], case.fs)
    assert (three >= LOW_QUALITY).all()


def test_bad_input_is_refused(cases):
    case = cases["pauses"]
    with pytest.raises(ValueError, match=r"signal must be 1-D \(one lead\); got shape \(2, 10800\)"):
        beat_quality(case.signal.reshape(2, -1), case.beats, case.fs)
    with pytest.raises(ValueError, match="positions must be a 1-D integer array.*dtype float64"):
        beat_quality(case.signal, case.beats.astype(float), case.fs)
    with pytest.raises(ValueError, match="fs must be a positive number of Hz; got -1"):
        beat_quality(case.signal, case.beats, -1)
