"""Tests of pipeline.mains: the hum's share of the second difference's power against the
analytic value of a sine through that difference, at the rates recordings come in, and where the
hum is; nothing where there is no hum, nor for a burst of noise; the kernels against the
whole-array formula (a gather, a taper, matrix products); the same on NumPy and CuPy. And
what it is for: beats under hum are neither in noise episodes nor low quality (the ``mains_hum``
stress cases)."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import backend, quality, stress
from pipeline.mains import Hum, hum_power


def _recording(fs, hum_hz=None, amplitude=0.0, seconds=120.0, seed=0):
    """White noise of 20 µV, slow wander, and a sine of ``amplitude`` mV at ``hum_hz``."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * fs)) / fs
    x = 0.02 * rng.standard_normal(t.size) + 0.3 * np.sin(2 * np.pi * 1.1 * t)
    if hum_hz:
        x += amplitude * np.sin(2 * np.pi * hum_hz * t + 0.7)
    return x.astype(np.float32)


def _expected(fs, hum_hz, amplitude):
    """A sine's mean square after x[i-step] - 2 x[i] + x[i+step]: gain 4 sin²(π f step / fs)."""
    step = max(1, round(fs / 100))
    return (4 * np.sin(np.pi * hum_hz * step / fs) ** 2 * amplitude) ** 2 / 2


def _everywhere(hum: Hum, xp) -> np.ndarray:
    """The hum's power read every 100 samples over the recording it was measured on."""
    return backend.to_host(hum.at(xp.arange(0, hum.stride * (hum.power.shape[0] - 1) + hum.width, 100)))


@pytest.mark.parametrize("fs", [128.0, 250.0, 360.0, 1000.0])
@pytest.mark.parametrize("hum_hz, amplitude", [(50.0, 0.05), (60.0, 0.1), (50.4, 0.05), (59.7, 0.03)])
def test_hum_power_is_the_sine_through_the_second_difference(fs, hum_hz, amplitude, xp):
    expected = _expected(fs, hum_hz, amplitude)
    hum = hum_power(xp.asarray(_recording(fs, hum_hz, amplitude)), fs)
    assert hum.power.shape == (60,) and hum.power.dtype == np.float32           # 120 s: every window
    assert np.median(backend.to_host(hum.power)) == pytest.approx(expected, rel=0.1)
    assert np.all(np.abs(_everywhere(hum, xp) / expected - 1) < 0.4)             # one window's noise


def test_hum_is_read_where_it_is(xp):
    """Hum for the middle minute of five: its power there, none a window's reach away from it."""
    fs = 250.0
    signal = _recording(fs, seconds=300.0)
    t = np.arange(signal.shape[0]) / fs
    on = (t >= 120) & (t < 180)
    signal[on] += (0.05 * np.sin(2 * np.pi * 50.0 * t[on])).astype(np.float32)
    hum = hum_power(xp.asarray(signal), fs)
    assert hum.power.shape == (64,)                                              # at least 64 windows
    at = backend.to_host(hum.at(xp.asarray((np.array([60.0, 125.0, 150.0, 175.0, 240.0]) * fs).astype(np.int64))))
    expected = _expected(fs, 50.0, 0.05)
    assert at[1:4] == pytest.approx(expected, rel=0.15)
    assert at[0] < 0.01 * expected and at[4] < 0.01 * expected


def _formula(signal, fs, *, every_s=10.0, least=64, window_s=2.0, line_hz=1.0, floor_hz=(3.0, 8.0)):
    """hum_power's measure written over whole arrays in NumPy: each window's second difference
    gathered, its mean taken out, tapered, projected on the DFT's basis at the lines' and floor's
    frequencies by a matrix product."""
    step = max(1, round(fs / 100))
    n, width = signal.shape[0], round(window_s * fs)
    lines = [f for f in (50.0, 60.0) if f + line_hz + fs / width < fs / 2]
    count = min(max(least, int(n / (every_s * fs))), n // width)
    stride = (n - width) // max(count - 1, 1)
    pieces = signal[np.arange(count)[:, None] * stride + np.arange(width)[None, :]].astype(np.float64)
    second = pieces[:, :-2 * step] - 2.0 * pieces[:, step:-step] + pieces[:, 2 * step:]
    m = second.shape[1]
    second = (second - second.mean(axis=1, keepdims=True)) * np.hanning(m)
    spacing = fs / m
    total = np.zeros(count)
    for line in lines:
        reach, near, far = round(line_hz / spacing), round(floor_hz[0] / spacing), round(floor_hz[1] / spacing)
        top = int(np.ceil((fs / 2 - line) / spacing)) - 1
        offsets = np.concatenate([np.arange(-reach, reach + 1), np.arange(-far, -near + 1),
                                  np.arange(near, min(far, top) + 1)])
        phase = 2 * np.pi * np.arange(m)[:, None] * ((line + offsets * spacing) / fs)[None, :]
        power = (second @ np.cos(phase)) ** 2 + (second @ np.sin(phase)) ** 2
        lobe = 2 * reach + 1
        total += np.maximum(power[:, :lobe].sum(axis=1) - lobe * power[:, lobe:].mean(axis=1), 0) * 16 / 3 / m ** 2
    return total, stride, width


@pytest.mark.parametrize("fs, seconds", [(128.0, 700.0), (250.0, 120.0), (360.0, 300.0), (1000.0, 70.0),
                                         (115.0, 90.0)])   # 115 Hz: 50 Hz alone, its upper floor cut at Nyquist
def test_kernels_match_the_whole_array_formula(fs, seconds, xp):
    signal = _recording(fs, 50.0, 0.05, seconds=seconds, seed=3)
    signal[: int(fs)] += np.float32(0.5)                 # a step: a window whose mean is far from 0
    expected, stride, width = _formula(signal, fs)
    hum = hum_power(xp.asarray(signal), fs)
    assert (hum.stride, hum.width) == (stride, width)
    np.testing.assert_allclose(backend.to_host(hum.power), expected, rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("fs", [128.0, 360.0])
def test_no_hum_no_power(fs, xp):
    quiet = _recording(fs)
    faint = _expected(fs, 50.0, 0.01)               # a 10-µV hum, under the white noise
    assert _everywhere(hum_power(xp.asarray(quiet), fs), xp).max() < faint
    burst = quiet.copy()                                # muscle noise in the first window: broadband
    rng = np.random.default_rng(1)
    burst[: int(2 * fs)] += (0.3 * rng.standard_normal(int(2 * fs))).astype(np.float32)
    power = backend.to_host(hum_power(xp.asarray(burst), fs).power)
    assert power[0] < 0.02 * 6 * 0.3 ** 2               # a sliver of the burst's own (6 σ² through the difference)
    assert power[1:].max() < faint


def test_short_or_slow_recordings_have_none():
    for hum in (hum_power(_recording(360.0, 50.0, 0.1, seconds=1.0), 360.0),   # shorter than a window
                hum_power(_recording(90.0, 50.0, 0.1), 90.0)):                 # 50 Hz beyond its Nyquist
        assert hum.power.shape == (0,) and (hum.at(np.arange(0, 300, 7)) == 0).all()


@pytest.mark.parametrize("name", ["mains_hum", "mains_hum_60hz_128hz"])
def test_beats_under_hum_are_not_low_quality(name, xp):
    """The hum cases are the noise-burst cases with hum added for half the recording: their beats
    outside the bursts keep the quality they have without it (read as noise, hum made every beat
    under it low quality)."""
    hum = stress.make_case(name)
    bare = stress.make_case(name.replace("mains_hum", "noise_bursts").replace("_60hz", ""))
    assert np.array_equal(hum.beats, bare.beats) and hum.fs == bare.fs

    def low(case):
        positions = xp.asarray(case.beats)
        return backend.to_host(quality.low_quality(quality.beat_quality(xp.asarray(case.signal), positions, case.fs)))

    outside = (hum.symbols != "Q")
    assert low(hum)[outside].mean() <= low(bare)[outside].mean() + 0.02
