"""Tests of pipeline.embed: rows against a plain NumPy slicing implementation; pruning rules."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import backend
from pipeline.embed import embed_beats

FS = 250.0
WIDTH = 256
PRE = 64  # 0.25 × 256


def reference_embedding(signal, positions, fs, width, pre_fiducial=0.25, min_beat_s=0.25, max_beat_s=2.0):
    """Beat i: ``signal[p_i - pre : p_{i+1} - pre]`` minus its mean, zero-padded or cut to ``width``,
    divided by the median peak-to-peak of the rows. Returns (rows, kept candidate indices, scale)."""
    pre = round(pre_fiducial * width)
    shortest, longest = round(min_beat_s * fs), round(max_beat_s * fs)
    rows, kept = [], []
    for i in range(len(positions) - 1):
        start, stop = positions[i] - pre, positions[i + 1] - pre
        if not shortest <= stop - start <= longest or start < 0 or start + width > len(signal):
            continue
        segment = signal[start:min(stop, start + width)].astype(np.float64)
        row = np.zeros(width)
        row[:len(segment)] = segment - segment.mean()
        rows.append(row)
        kept.append(i)
    rows = np.array(rows).reshape(-1, width)
    scale = float(np.median(rows.max(axis=1) - rows.min(axis=1))) if len(rows) else 1.0
    return rows / scale, np.array(kept, dtype=np.int64), scale


def _host(x):
    return backend.to_host(x)


@pytest.fixture(scope="module")
def beats_input(synthetic_ecg):
    """The synthetic recording and its true R peaks."""
    return synthetic_ecg.signal, synthetic_ecg.r_peaks


def test_rows_equal_numpy_slicing(beats_input, xp):
    signal, positions = beats_input
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    rows, kept, scale = reference_embedding(signal, positions, FS, WIDTH)
    assert len(kept) > 0.98 * len(positions)
    assert isinstance(beats.rows, xp.ndarray) and beats.rows.dtype == xp.float32 and beats.rows.shape == (len(kept), WIDTH)
    assert beats.rows.flags.c_contiguous
    np.testing.assert_array_equal(_host(beats.candidate), kept)
    np.testing.assert_array_equal(_host(beats.fiducial), positions[kept])
    np.testing.assert_array_equal(_host(beats.length), positions[kept + 1] - positions[kept])
    assert beats.scale == pytest.approx(scale, rel=1e-5)
    np.testing.assert_allclose(_host(beats.rows), rows, rtol=0, atol=1e-5 * np.abs(rows).max())


@pytest.mark.parametrize("width, pre_fiducial, fs", [(368, 0.25, 360.0), (256, 0.4, 250.0), (64, 0.1, 250.0)])
def test_rows_equal_numpy_slicing_other_geometry(width, pre_fiducial, fs, xp):
    rng = np.random.default_rng(width)
    positions = np.cumsum(rng.integers(int(0.2 * fs), int(2.2 * fs), 300)).astype(np.int64)
    signal = rng.standard_normal(positions[-1] + width).astype(np.float32)
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), fs, width=width, pre_fiducial=pre_fiducial)
    rows, kept, scale = reference_embedding(signal, positions, fs, width, pre_fiducial)
    assert 0 < len(kept) < len(positions) - 1  # some beats were pruned by length
    np.testing.assert_array_equal(_host(beats.candidate), kept)
    np.testing.assert_allclose(_host(beats.rows), rows, rtol=0, atol=1e-5 * np.abs(rows).max())


def test_fiducial_sits_in_the_same_column(xp):
    """A spike at every fiducial lands in column ``pre`` of every row, whatever the beat length."""
    rng = np.random.default_rng(3)
    positions = np.cumsum(rng.integers(100, 400, 200)).astype(np.int64) + 100
    signal = np.zeros(positions[-1] + 500, np.float32)
    signal[positions] = 1.0
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    rows = _host(beats.rows)
    assert len(rows) == len(positions) - 1
    np.testing.assert_array_equal(rows.argmax(axis=1), np.full(len(rows), PRE))


def test_pruning_drops_short_long_and_edge_beats(xp):
    n = 3000
    # candidate 0: window starts before sample 0; 2: too short (50 < 62 samples); 4: too long (600 > 500);
    # 9: its window runs past the end; the last fiducial has no successor and starts no beat
    positions = np.array([30, 300, 600, 650, 900, 1500, 1800, 2100, 2400, 2850, 2990], np.int64)
    signal = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    np.testing.assert_array_equal(_host(beats.candidate), [1, 3, 5, 6, 7, 8])
    rows, kept, _ = reference_embedding(signal, positions, FS, WIDTH)
    np.testing.assert_array_equal(kept, [1, 3, 5, 6, 7, 8])
    np.testing.assert_allclose(_host(beats.rows), rows, atol=1e-5)


def test_boundaries_of_the_length_rule(xp):
    """Lengths exactly at min_beat_s and max_beat_s are kept; one sample beyond is not."""
    lengths = [62, 61, 500, 501, 300]  # 0.25 s = 62.5 → 62 samples; 2.0 s = 500 samples
    positions = np.concatenate([[100], 100 + np.cumsum(lengths)]).astype(np.int64)
    signal = np.random.default_rng(5).standard_normal(positions[-1] + 1000).astype(np.float32)
    beats = embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH)
    np.testing.assert_array_equal(_host(beats.candidate), [0, 2, 4])


def test_short_beats_are_zero_padded_and_long_ones_cut(xp):
    positions = np.array([100, 200, 700, 1000], np.int64)  # lengths 100 (padded), 500 (cut), 300 (cut)
    signal = np.random.default_rng(6).standard_normal(2000).astype(np.float32)
    rows = _host(embed_beats(xp.asarray(signal), xp.asarray(positions), FS, width=WIDTH).rows)
    assert np.all(rows[0, 100:] == 0) and np.all(rows[0, :100] != 0)
    assert np.all(rows[1] != 0)
    assert rows[0, :100].mean() == pytest.approx(0, abs=1e-6)  # the mean is taken over the beat, not the row
    assert rows[1].mean() == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("n_positions", [0, 1])
def test_no_beats(n_positions, xp):
    beats = embed_beats(xp.zeros(1000, dtype=xp.float32), xp.arange(n_positions, dtype=xp.int64) + 500, FS,
                        width=WIDTH)
    assert beats.rows.shape == (0, WIDTH) and beats.candidate.shape == (0,) and beats.scale == 1.0


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
