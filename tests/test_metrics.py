"""Tests of pipeline.metrics: EC57 matching with flutter episodes left out, flutter episodes read
from a WFDB annotation file, AUROC against a brute-force count."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.metrics import aami_class, auroc, ec57_counts, flutter_episodes, outside, sensitivity_ppv


def test_ec57_counts_leave_flutter_out_of_both_sides():
    reference = np.array([100, 400, 700, 1000, 1300, 1600])
    # 700 is missed; 1000 and 1300 lie in a flutter episode, where the detector also found 1150
    detected = np.array([102, 395, 1150, 1290, 1610, 1900])
    flutter = np.array([[950, 1350]])
    counts = ec57_counts(reference, detected, fs=1000.0, excluded=flutter, tolerances_s=(0.05,))
    assert counts == {"tp_50": 3, "fn_50": 1, "fp_50": 1}          # 1900 is the one false beat left
    everything = ec57_counts(reference, detected, fs=1000.0, tolerances_s=(0.05,))
    assert everything == {"tp_50": 4, "fn_50": 2, "fp_50": 2}
    strict = ec57_counts(reference, detected, fs=1000.0, excluded=flutter, tolerances_s=(0.004,))
    assert strict == {"tp_4": 1, "fn_4": 3, "fp_4": 3}             # only 102 is within 4 ms (of 100)



@pytest.mark.parametrize("fs, tolerance_s, inside", [(360.0, 0.15, 54), (360.0, 0.05, 18), (128.0, 0.05, 6),
                                                     (128.0, 0.15, 19), (250.0, 0.05, 12)])
def test_a_beat_exactly_at_the_tolerance_matches_and_one_sample_more_does_not(fs, tolerance_s, inside):
    """EC57's window holds every beat within the tolerance: ``inside`` is the most whole samples in
    it (150 ms at 360 Hz is 54 samples; 50 ms at 128 Hz is 6.4, so 6)."""
    assert inside / fs <= tolerance_s + 1e-12 < (inside + 1) / fs
    ms = int(round(tolerance_s * 1000))
    for offset, matched in ((inside, 1), (-inside, 1), (inside + 1, 0), (-inside - 1, 0)):
        counts = ec57_counts(np.array([10_000]), np.array([10_000 + offset]), fs, tolerances_s=(tolerance_s,))
        assert counts[f"tp_{ms}"] == matched, offset


def test_outside_keeps_episode_ends_out():
    np.testing.assert_array_equal(outside(np.arange(10), np.array([[2, 4], [7, 7]])), [0, 1, 5, 6, 8, 9])


def test_flutter_episodes_from_a_wfdb_annotation_file(tmp_path):
    import wfdb

    samples = np.array([100, 300, 500, 900, 1200, 1500])
    symbols = ["N", "[", "!", "]", "N", "["]          # the second episode is still open at the end
    wfdb.wrann("rec", "atr", sample=samples, symbol=symbols, fs=250, write_dir=str(tmp_path))
    episodes = flutter_episodes(tmp_path / "rec.hea")
    assert episodes[0].tolist() == [300, 900]
    assert episodes[1, 0] == 1500 and episodes[1, 1] == np.iinfo(np.int64).max


def test_auroc_equals_the_pairwise_count():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=300)
    positive = rng.random(300) < 0.2
    scores[positive] += 1.0
    pairs = scores[positive][:, None] - scores[~positive][None, :]
    expected = ((pairs > 0).sum() + 0.5 * (pairs == 0).sum()) / pairs.size
    assert auroc(scores, positive) == pytest.approx(expected)
    assert np.isnan(auroc(scores, np.zeros(300, bool)))


def test_sensitivity_ppv_and_aami_classes():
    assert sensitivity_ppv(99, 1, 0) == (99.0, 100.0)
    assert all(np.isnan(sensitivity_ppv(0, 0, 0)))
    assert aami_class(["N", "A", "V", "F", "/", "+"]).tolist() == ["N", "S", "V", "F", "Q", ""]
