"""Tests of pipeline.rhythm (RR features, rhythm score) and of the shape + rhythm combination and
explanations in pipeline.score: against plain loops, SciPy's chi-squared law and the synthesizer's
premature beats."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from pipeline import backend
from pipeline.rhythm import describe_rhythm, rhythm_score, robust_z, rr_features
from pipeline.score import combine_scores, explain, tail_probability


def _host(x) -> np.ndarray:
    return backend.to_host(x)


# --------------------------------------------------------------------------- RR features
def test_rr_features_equal_a_loop(xp):
    rng = np.random.default_rng(3)
    positions = np.cumsum(rng.integers(150, 400, 300)).astype(np.int64)
    rr_pre, rr_post, local = rr_features(xp.asarray(positions), 250.0, half_window=5)
    assert len(rr_pre) == len(rr_post) == len(local) == len(positions)
    rr = np.diff(positions).astype(float)
    for c, (got_pre, got_post, got_local) in enumerate(zip(_host(rr_pre), _host(rr_post), _host(local))):
        window = [rr[min(max(j, 0), len(rr) - 1)] for j in range(c - 5, c + 6)]
        expected_local = np.median(window)
        assert got_local == pytest.approx(expected_local, rel=1e-6)
        if c == len(rr):
            assert math.isnan(got_post)        # the last beat has no interval after it
        else:
            assert got_post == pytest.approx(rr[c] / expected_local, rel=1e-5)
        if c == 0:
            assert math.isnan(got_pre)
        else:
            assert got_pre == pytest.approx(rr[c - 1] / expected_local, rel=1e-5)


def test_robust_z_ignores_outliers_and_nan(xp):
    values = np.r_[np.linspace(0.9, 1.1, 101), 5.0, np.nan].astype(np.float32)
    z = _host(robust_z(xp.asarray(values), floor=1e-3))
    finite = values[:-1].astype(float)
    centre = np.median(finite)
    mad = 1.4826 * np.median(np.abs(finite - centre))
    np.testing.assert_allclose(z[:-1], (finite - centre) / mad, rtol=1e-4, atol=1e-5)
    assert abs(centre - 1.0) < 0.01 and z[101] > 20  # the outlier moved neither centre nor spread
    assert math.isnan(z[-1])
    flat = _host(robust_z(xp.asarray(np.ones(50, np.float32)), floor=0.5))
    np.testing.assert_array_equal(flat, 0.0)  # no spread: the floor, not a division by zero


def test_rhythm_score_is_one_sided(xp):
    pre, post = np.ones(100, np.float32), np.ones(100, np.float32)  # a steady rhythm: the floor is the spread
    pre[:5] = [1.0, 0.7, 1.3, 1.0, np.nan]
    post[:5] = [1.0, 1.3, 1.0, 0.7, 1.0]
    score = _host(rhythm_score(xp.asarray(pre), xp.asarray(post), floor=0.1))[:5]
    # early and followed by a pause: both count; late, or followed by a short interval: neither
    assert score[1] == pytest.approx(math.hypot(3.0, 3.0), rel=1e-5)
    assert score[0] == score[2] == score[3] == score[4] == 0.0


def test_premature_beats_of_the_synthesizer_score_high(small_ecg):
    """The rhythm score alone separates the synthesizer's premature beats (V, A, S) from sinus beats."""
    from pipeline.metrics import auroc

    ecg = small_ecg
    positions = ecg.r_peaks
    rhythm = describe_rhythm(positions, ecg.fs)
    symbols = ecg.symbols
    clean = symbols != "Q"
    premature = np.isin(symbols, ["V", "A", "S"])
    assert auroc(rhythm.score[clean], premature[clean]) > 0.97
    s_beats = symbols == "S"
    assert s_beats.sum() >= 3
    assert (rhythm.prematurity[s_beats] > 0.1).all() and (rhythm.rr_post[s_beats] > 1.0).all()


# --------------------------------------------------------------------------- combination
def test_tail_probability_counts_scores_at_least_as_high(xp):
    values = np.array([3.0, 1.0, 2.0, 2.0, 5.0])
    p = _host(tail_probability(xp.asarray(values)))
    np.testing.assert_allclose(p, [(values >= v).mean() for v in values])


def test_combine_scores_is_fishers_method(xp):
    rng = np.random.default_rng(0)
    shape, rhythm = rng.gamma(2.0, size=500), np.maximum(rng.standard_normal(500), 0)
    score, p_shape, p_rhythm = (_host(a) for a in combine_scores(xp.asarray(shape), xp.asarray(rhythm)))
    statistic = -2 * (np.log(_host(tail_probability(xp.asarray(shape)))) + np.log(_host(tail_probability(xp.asarray(rhythm)))))
    np.testing.assert_allclose(score, -np.log10(chi2.sf(statistic, 4)), rtol=1e-4)
    np.testing.assert_allclose(p_shape, [(shape >= v).mean() for v in shape], rtol=1e-6)
    assert score.dtype == np.float32 and np.isfinite(score).all()
    # the most extreme beat in both respects ranks first
    both = np.argmax(shape) if np.argmax(shape) == np.argmax(rhythm) else None
    if both is not None:
        assert np.argmax(score) == both


def test_a_premature_beat_with_a_normal_shape_ranks_near_the_top():
    """300 beats of ordinary shape and timing, one premature beat of ordinary shape and one beat of
    odd shape and ordinary timing: both rank above 97 % of the beats (Fisher dilutes an extreme
    in one component a little: a beat unusual in both, at 1 in 20 each, may outrank it)."""
    rng = np.random.default_rng(1)
    shape = rng.gamma(4.0, size=300)
    rhythm = np.abs(rng.standard_normal(300)) * (rng.random(300) < 0.5)
    shape[10], rhythm[10] = np.median(shape), 12.0   # premature, typical shape
    shape[20], rhythm[20] = shape.max() * 3, 0.0     # odd shape, on time
    score = combine_scores(shape, rhythm)[0]
    assert {10, 20} <= set(np.argsort(score)[-9:])  # above 97 % of the beats


# --------------------------------------------------------------------------- explanations
@pytest.mark.parametrize("row, expected", [
    ({"p_shape": 0.4, "rr_pre": 0.72, "rr_post": 1.31, "score_rhythm": 9.0},
     "premature by 28 %, long pause after it (1.31 × the local RR); shape typical"),
    ({"p_shape": 0.002, "rr_pre": 1.0, "rr_post": 1.0, "score_rhythm": 0.0},
     "shape unlike the recording's beats (rarer than 1 in 500); timing regular"),
    ({"p_shape": 0.03, "rr_pre": 0.6, "rr_post": 1.0, "score_rhythm": 8.0},
     "premature by 40 %; shape unusual (1 in 33)"),
    ({"p_shape": 0.5, "rr_pre": 1.0, "rr_post": 1.6, "score_rhythm": 7.0},
     "long pause after it (1.60 × the local RR); shape typical"),
    ({"p_shape": 0.5, "rr_pre": 1.0, "rr_post": 1.0, "score_rhythm": 0.0}, "shape typical, timing regular"),
    ({"p_shape": 0.5, "rr_pre": float("nan"), "rr_post": 1.0, "score_rhythm": 0.0}, "shape typical, timing regular"),
    ({"p_shape": 0.5, "rr_pre": 0.95, "rr_post": 1.0, "score_rhythm": 1.0}, "shape typical, timing regular"),
])
def test_explain(row, expected):
    assert explain(row) == expected


def test_explain_reads_a_beats_table_row(cpu_run):
    beats = cpu_run.run.beats
    top = beats.nlargest(20, "score")
    texts = [explain(row) for _, row in top.iterrows()]
    assert all(isinstance(t, str) and t for t in texts)
    premature = top[top["label"].isin(["S"])]
    for _, row in premature.iterrows():
        assert "premature by" in explain(row)


def test_pauses_are_the_long_intervals_with_both_beats(xp):
    from pipeline.rhythm import pauses

    fs = 250.0
    rr_s = [0.8, 0.8, 4.0, 0.8, 1.99, 2.0, 0.8, 2.6]          # a 4 s pause, one just under 2 s, two at or over
    positions = (np.concatenate([[0.5], 0.5 + np.cumsum(rr_s)]) * fs).round().astype(np.int64)
    found = _host(pauses(xp.asarray(positions), fs, min_pause_s=2.0))
    assert found.tolist() == [[positions[2], positions[3]], [positions[5], positions[6]], [positions[7], positions[8]]]
    assert _host(pauses(xp.asarray(positions[:1]), fs)).shape == (0, 2)
