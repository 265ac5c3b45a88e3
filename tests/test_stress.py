"""Tests of pipeline.stress: every synthetic stress case is well formed, deterministic, and holds
what its name says; the two-channel files name their leads ECG1/ECG2 (CPU, fast)."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import stress
from pipeline.sidecar import read_annotations


@pytest.fixture(scope="module")
def cases() -> dict:
    return {name: stress.make_case(name) for name in stress.CASES}


@pytest.mark.parametrize("name", list(stress.CASES))
def test_case_is_well_formed(cases, name):
    case = cases[name]
    n = case.signal.shape[0]
    assert case.name == name
    assert case.signal.dtype == np.float32 and case.signal.ndim == 1 and np.isfinite(case.signal).all()
    assert case.second.shape == case.signal.shape and case.second.dtype == np.float32
    assert case.beats.dtype == np.int64 and case.beats.shape == case.symbols.shape
    assert case.beats.size > 20 and (np.diff(case.beats) > 0).all()
    assert case.beats[0] >= 0 and case.beats[-1] < n
    assert set(case.symbols.tolist()) <= {"N", "V", "A", "S", "Q"}
    for kind, start, end in case.episodes:
        assert kind in ("flutter", "noise") and 0 <= start < end <= case.duration_s


def test_rates_of_the_resampled_cases(cases):
    assert cases["flutter_128hz"].fs == 128.0 and cases["noise_bursts_128hz"].fs == 128.0
    assert cases["flutter_1khz"].fs == 1000.0 and cases["noise_bursts_1khz"].fs == 1000.0
    for name in ("flutter_128hz", "flutter_1khz"):
        assert cases[name].episodes == cases["flutter"].episodes


def test_cases_are_deterministic():
    a, b = stress.make_case("bigeminy", seed=3), stress.make_case("bigeminy", seed=3)
    np.testing.assert_array_equal(a.signal, b.signal)
    np.testing.assert_array_equal(a.beats, b.beats)
    assert not np.array_equal(a.signal, stress.make_case("bigeminy", seed=4).signal)


def test_unknown_case_is_refused():
    with pytest.raises(ValueError, match="unknown stress case 'nope'; known: pauses"):
        stress.make_case("nope")


def test_pauses_are_there(cases):
    case = cases["pauses"]
    rr = np.diff(case.beats) / case.fs
    long = np.sort(rr[rr > 1.5])
    np.testing.assert_allclose(long, [2.0, 3.0, 4.5, 6.0], atol=0.01)
    assert case.episodes == ()


def test_flutter_has_no_beats_inside(cases):
    case = cases["flutter"]
    assert case.episodes == (("flutter", 12.0, 22.0),)
    assert not case.inside("flutter").any()
    # flutter waves as large as the R waves, oscillating at ~4.5 Hz
    during = case.signal[int(14 * case.fs):int(20 * case.fs)]
    spectrum = np.abs(np.fft.rfft(during - during.mean()))
    peak_hz = np.argmax(spectrum) * case.fs / during.size
    assert 4.0 < peak_hz < 5.0


def test_pvcs_lead_into_the_flutter(cases):
    case = cases["pvcs_into_flutter"]
    assert case.episodes == cases["flutter"].episodes and not case.inside("flutter").any()
    pvcs = case.beats[case.symbols == "V"] / case.fs
    np.testing.assert_allclose(np.diff(pvcs), 0.4, atol=0.01)
    assert pvcs.size == 6 and 11.5 < pvcs[-1] < 12.0


def test_noise_cases_label_the_beats_inside(cases):
    for name in ("noise_bursts", "electrode_motion"):
        case = cases[name]
        assert len(case.episodes) >= 3
        hidden = case.symbols == "Q"
        assert hidden.any()
        assert case.inside("noise")[hidden].all()  # every Q beat lies in a true episode


def test_bigeminy_alternates_large_pvcs_and_small_beats(cases):
    case = cases["bigeminy"]
    assert (case.symbols[1::2] == "V").all() and (case.symbols[0::2] == "N").all()
    half = int(0.05 * case.fs)
    windows = case.signal[case.beats[:, None] + np.arange(-half, half + 1)[None, :]]
    size = np.ptp(windows, axis=1)
    assert np.median(size[case.symbols == "V"]) > 2.5 * np.median(size[case.symbols == "N"])


def test_tall_t_waves_outgrow_the_qrs(cases):
    case = cases["tall_t_slow"]
    rr = np.diff(case.beats) / case.fs
    assert 1.2 < np.median(rr) < 1.5  # ~45 bpm
    t_wave = case.signal[case.beats[:-1, None] + np.arange(int(0.2 * case.fs), int(0.45 * case.fs))[None, :]]
    qrs = case.signal[case.beats[:-1]]
    assert np.median(t_wave.max(axis=1)) > np.median(qrs)


def test_second_lead_is_the_weaker_one(cases):
    case = cases["flutter"]
    half = int(0.05 * case.fs)
    around = case.beats[:, None] + np.arange(-half, half + 1)[None, :]
    assert np.median(np.ptp(case.second[around], axis=1)) < 0.5 * np.median(np.ptp(case.signal[around], axis=1))


def test_csv_names_the_leads_ecg1_ecg2(cases, tmp_path):
    from pipeline.load import load_leads

    case = cases["pauses"]
    path = stress.write_case(case, tmp_path / "pauses.csv")
    assert path.read_text().splitlines()[0] == "ECG1,ECG2"
    names, values = load_leads(path)
    assert names == ["ECG1", "ECG2"]
    np.testing.assert_allclose(values[:, 0], case.signal, atol=6e-5)  # 4 decimals
    np.testing.assert_allclose(values[:, 1], case.second, atol=6e-5)
    samples, symbols = read_annotations(path)
    np.testing.assert_array_equal(samples, case.beats)
    np.testing.assert_array_equal(symbols, case.symbols)


def test_wfdb_names_the_leads_ecg1_ecg2(cases, tmp_path):
    import wfdb

    case = cases["flutter_1khz"]
    header = stress.write_case(case, tmp_path / "flutter")
    assert header.suffix == ".hea"
    record = wfdb.rdrecord(str(header.with_suffix("")))
    assert record.sig_name == ["ECG1", "ECG2"] and record.fs == 1000.0
    np.testing.assert_allclose(record.p_signal[:, 0], case.signal, atol=0.003)  # 200 adu/mV
    annotation = wfdb.rdann(str(header.with_suffix("")), "atr")
    np.testing.assert_array_equal(annotation.sample, case.beats)


def test_write_case_refuses_other_suffixes(cases, tmp_path):
    with pytest.raises(ValueError, match=r"path must end in \.csv or \.hea .*got 'x\.parquet'"):
        stress.write_case(cases["pauses"], tmp_path / "x.parquet")


def test_amplifier_recovery_shrinks_the_beats_after_the_rail(cases):
    case = cases["amplifier_recovery"]
    assert [e[0] for e in case.episodes] == ["noise", "noise"]
    qrs = np.ptp(case.signal[np.clip(case.beats[:, None] + np.arange(-18, 19), 0, case.signal.size - 1)], axis=1)
    after = np.zeros(case.beats.size, dtype=bool)
    for _, start, end in case.episodes:
        after |= (case.beats > (end + 0.3) * case.fs) & (case.beats < (end + 5.5) * case.fs)
    assert after.sum() >= 10
    assert np.median(qrs[after]) < 0.25 * np.median(qrs[~after & ~case.inside()])
