"""Tests of pipeline.embed: rows against a plain NumPy slicing implementation; every beat kept."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import backend
from pipeline.embed import embed_beats

FS = 250.0
WIDTH = 256
PRE = 64  # 0.25 × 256


def reference_embedding(signal, positions, width, pre_fiducial=0.25):
    """Beat i: ``signal[p_i - pre : p_{i+1} - pre]`` (the last: ``width`` samples) minus the mean of
    what lies inside the recording, zero-padded or cut to ``width``, zero outside the recording,
    divided by the median peak-to-peak of the rows. Returns (rows, scale)."""
    pre = round(pre_fiducial * width)
    rows = np.zeros((len(positions), width))
    for i, p in enumerate(positions):
        start = p - pre
        used = min(positions[i + 1] - p, width) if i + 1 < len(positions) else width
        inside = np.arange(start, start + used)
        inside = inside[(inside >= 0) & (inside < len(signal))]
        segment = signal[inside].astype(np.float64)
        rows[i, inside - start] = segment - segment.mean()
    scale = float(np.median(rows.max(axis=1) - rows.min(axis=1))) if len(rows) else 1.0
    return rows / scale, scale


def _host(x):
    return backend.to_host(x)


@pytest.fixture(scope="module")
def beats_input(synthetic_ecg):
    """The synthetic recording and its true R peaks."""
    return synthetic_ecg.signal, synthetic_ecg.r_peaks


def test_rows_equal_numpy_slicing(beats_input, xp):
    signal, positions = beats_input
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    rows, scale = reference_embedding(signal, positions, WIDTH)
    assert isinstance(beats.rows, xp.ndarray) and beats.rows.dtype == xp.float32
    assert beats.rows.shape == (len(positions), WIDTH) and beats.rows.flags.c_contiguous
    np.testing.assert_array_equal(_host(beats.fiducial), positions)
    np.testing.assert_array_equal(_host(beats.length), np.append(np.diff(positions), -1))
    assert beats.scale == pytest.approx(scale, rel=1e-5)
    np.testing.assert_allclose(_host(beats.rows), rows, rtol=0, atol=1e-5 * np.abs(rows).max())


@pytest.mark.parametrize("width, pre_fiducial, fs", [(368, 0.25, 360.0), (256, 0.4, 250.0), (64, 0.1, 250.0)])
def test_rows_equal_numpy_slicing_other_geometry(width, pre_fiducial, fs, xp):
    rng = np.random.default_rng(width)
    positions = np.cumsum(rng.integers(int(0.2 * fs), int(2.2 * fs), 300)).astype(np.int64)
    signal = rng.standard_normal(positions[-1] + width // 2).astype(np.float32)
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), fs, width=width, pre_fiducial=pre_fiducial)
    rows, _ = reference_embedding(signal, positions, width, pre_fiducial)
    np.testing.assert_allclose(_host(beats.rows), rows, rtol=0, atol=1e-5 * np.abs(rows).max())


def test_fiducial_sits_in_the_same_column(xp):
    """A spike at every fiducial lands in column ``pre`` of every row, whatever the beat length."""
    rng = np.random.default_rng(3)
    positions = np.cumsum(rng.integers(100, 400, 200)).astype(np.int64) + 100
    signal = np.zeros(positions[-1] + 500, np.float32)
    signal[positions] = 1.0
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    rows = _host(beats.rows)
    assert len(rows) == len(positions)
    np.testing.assert_array_equal(rows.argmax(axis=1), np.full(len(rows), PRE))


def test_no_beat_is_dropped_for_its_interval_or_the_edges(xp):
    """A beat before a 4 s pause, one 0.2 s after its neighbour, and beats whose window reaches past
    either end of the recording all get a row, zero where the window leaves the recording."""
    n = 3000
    positions = np.array([30, 300, 350, 600, 1600, 1900, 2990], np.int64)   # 350: 0.2 s; 600 → 1600: 4 s
    signal = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    np.testing.assert_array_equal(_host(beats.fiducial), positions)
    rows, _ = reference_embedding(signal, positions, WIDTH)
    got = _host(beats.rows)
    np.testing.assert_allclose(got, rows, atol=1e-5)
    assert np.all(got[0, :PRE - 30] == 0)                   # before sample 0
    assert np.all(got[-1, PRE + 10:] == 0)                  # past the last sample
    assert np.all(got[1, 50:] == 0) and np.all(got[1, :50] != 0)   # a short beat is padded


def test_short_beats_are_zero_padded_and_long_ones_cut(xp):
    positions = np.array([100, 200, 700, 1000], np.int64)  # lengths 100 (padded), 500 (cut), 300 (cut)
    signal = np.random.default_rng(6).standard_normal(2000).astype(np.float32)
    rows = _host(embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH).rows)
    assert np.all(rows[0, 100:] == 0) and np.all(rows[0, :100] != 0)
    assert np.all(rows[1] != 0)
    assert rows[0, :100].mean() == pytest.approx(0, abs=1e-6)  # the mean is taken over the beat, not the row
    assert rows[1].mean() == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("n_positions", [0, 1])
def test_no_beat_or_one(n_positions, xp):
    beats = embed_beats(xp.zeros(1000, dtype=xp.float32), xp.arange(n_positions, dtype=xp.int64) + 500, FS,
                        width=WIDTH)
    assert beats.rows.shape == (n_positions, WIDTH) and beats.fiducial.shape == (n_positions,)


def test_input_is_not_modified(xp):
    signal = np.random.default_rng(7).standard_normal(5000).astype(np.float32)
    positions = np.arange(200, 4800, 250, dtype=np.int64)
    device_signal, device_positions = xp.asarray(signal.copy()), xp.asarray(positions.copy())
    embed_beats(device_signal, device_positions, FS, width=WIDTH)
    np.testing.assert_array_equal(_host(device_signal), signal)
    np.testing.assert_array_equal(_host(device_positions), positions)


@pytest.mark.parametrize("signal, positions, width, message", [
    (np.zeros(1000, np.float64), np.array([100, 400], np.int64), WIDTH, r"signal must be a 1-D float32 array; got float64"),
    (np.zeros((1000, 2), np.float32), np.array([100, 400], np.int64), WIDTH, r"signal must be a 1-D float32 array; got float32 with shape \(1000, 2\)"),
    (np.zeros(1000, np.float32), np.array([100.0, 400.0]), WIDTH, r"positions must be a 1-D array of sample indices \(integers\); got float64"),
    (np.zeros(1000, np.float32), np.array([[100, 400]], np.int64), WIDTH, r"positions must be .* with shape \(1, 2\)"),
    (np.zeros(1000, np.float32), np.array([100, 400], np.int64), 0, r"width must be at least 1 sample; got 0"),
])
def test_invalid_input(signal, positions, width, message, xp):
    with pytest.raises(ValueError, match=message):
        embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=width)


def test_beat_coherence_tells_heartbeats_from_noise(beats_input, xp):
    from pipeline.embed import beat_coherence

    signal, positions = beats_input
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    assert beat_coherence(beats.rows, 0.25, 1.024) > 0.9
    rng = np.random.default_rng(8)
    noise = rng.standard_normal(200_000).astype(np.float32)
    spots = np.sort(rng.choice(np.arange(500, 199_000), 300, replace=False)).astype(np.int64)
    random_rows = embed_beats(xp.asarray(noise), xp.asarray(spots), FS, width=WIDTH).rows
    assert abs(beat_coherence(random_rows, 0.25, 1.024)) < 0.2
