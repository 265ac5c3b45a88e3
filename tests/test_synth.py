"""Tests of pipeline.synth: the synthetic ECG generator and its CSV writer (CPU, fast)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import pipeline.synth as synth
import pipeline.synth_files as synth_files
from pipeline.sidecar import annotations_path, read_annotations
from pipeline.synth import SynthConfig, SyntheticECG, synthesize, write_csv

FS = 250.0


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def ecg() -> SyntheticECG:
    """~33 minutes at the default settings (about 2300 beats)."""
    return synthesize(SynthConfig(n_samples=500_000, seed=3))


@pytest.fixture(scope="module")
def bursty() -> SyntheticECG:
    """20 minutes with many noise bursts."""
    return synthesize(SynthConfig(n_samples=300_000, seed=5, noise_bursts_per_hour=60.0))


def _interior(e: SyntheticECG, margin_s: float = 0.8) -> np.ndarray:
    """Beats far enough from both ends of the recording to take windows around them."""
    m = int(margin_s * e.fs)
    return (e.r_peaks >= m) & (e.r_peaks < e.signal.size - m)


def _near_burst(e: SyntheticECG, pad_s: float = 0.5) -> np.ndarray:
    """Beats whose R peak lies within ``pad_s`` of a noise burst."""
    pad = int(pad_s * e.fs)
    near = np.zeros(e.r_peaks.size, dtype=bool)
    for s0, s1 in e.noise_bursts:
        near |= (e.r_peaks >= s0 - pad) & (e.r_peaks <= s1 + pad)
    return near


def _beats(e: SyntheticECG, symbol: str) -> np.ndarray:
    """Sample indices of interior beats of one kind, away from noise bursts."""
    return e.r_peaks[(e.symbols == symbol) & _interior(e) & ~_near_burst(e)]


def _fwhm(x: np.ndarray, r: int, fs: float) -> int:
    """Width in samples of the main deflection at half its height (measured from the data)."""
    half_win = int(0.4 * fs)
    w = x[r - half_win : r + half_win + 1].astype(np.float64)
    y = w - np.median(w)
    peak = y[half_win]
    above = np.sign(peak) * y > 0.5 * abs(peak)
    lo = hi = half_win
    while lo > 0 and above[lo - 1]:
        lo -= 1
    while hi < above.size - 1 and above[hi + 1]:
        hi += 1
    return hi - lo + 1


def _qrs_extent(x: np.ndarray, r: int, fs: float, rel: float = 0.15) -> float:
    """Seconds between the first and last sample within +-120 ms that deviate from the
    local median by more than ``rel`` x the fiducial's deflection."""
    half_win = int(0.4 * fs)
    w = x[r - half_win : r + half_win + 1].astype(np.float64)
    y = w - np.median(w)
    k = int(0.12 * fs)
    seg = np.abs(y[half_win - k : half_win + k + 1]) > rel * abs(y[half_win])
    idx = np.flatnonzero(seg)
    return (idx[-1] - idx[0] + 1) / fs


def _template(x: np.ndarray, rs: np.ndarray, fs: float) -> np.ndarray:
    a, b = int(-0.25 * fs), int(0.45 * fs)
    win = np.stack([x[r + a : r + b] for r in rs]).astype(np.float64)
    win -= np.median(win, axis=1, keepdims=True)
    return np.median(win, axis=0)


# --------------------------------------------------------------------------- basics
def test_shape_dtype_and_labels(ecg):
    assert ecg.signal.shape == (500_000,)
    assert ecg.signal.dtype == np.float32
    assert np.isfinite(ecg.signal).all()
    assert ecg.fs == FS
    assert ecg.r_peaks.dtype == np.int64
    assert ecg.r_peaks.shape == ecg.symbols.shape
    assert np.all(np.diff(ecg.r_peaks) > 0)
    assert ecg.r_peaks[0] >= 0 and ecg.r_peaks[-1] < ecg.signal.size
    assert set(np.unique(ecg.symbols)) <= {"N", "V", "A", "S", "Q"}
    assert {"N", "V", "A", "S"} <= set(np.unique(ecg.symbols))
    # millivolt scale: R waves around 1 mV, nothing absurd
    assert 0.8 < np.percentile(ecg.signal[ecg.r_peaks[ecg.symbols == "N"]], 50) - np.median(ecg.signal) < 2.0
    assert np.abs(ecg.signal).max() < 6.0


def test_deterministic_by_seed():
    cfg = SynthConfig(n_samples=60_000, seed=11)
    a, b = synthesize(cfg), synthesize(cfg)
    np.testing.assert_array_equal(a.signal, b.signal)
    np.testing.assert_array_equal(a.r_peaks, b.r_peaks)
    np.testing.assert_array_equal(a.symbols, b.symbols)
    c = synthesize(SynthConfig(n_samples=60_000, seed=12))
    assert not np.array_equal(a.signal, c.signal)
    assert not np.array_equal(a.r_peaks[:20], c.r_peaks[:20])


def test_noise_level_follows_config():
    quiet = synthesize(SynthConfig(n_samples=60_000, seed=2, noise_mv=0.0, noise_bursts_per_hour=0))
    loud = synthesize(SynthConfig(n_samples=60_000, seed=2, noise_mv=0.1, noise_bursts_per_hour=0))
    # same beats, only the white noise differs; its std is what was asked for
    np.testing.assert_array_equal(quiet.r_peaks, loud.r_peaks)
    diff = loud.signal.astype(np.float64) - quiet.signal
    assert diff.std() == pytest.approx(0.1, rel=0.05)


# --------------------------------------------------------------------------- fiducials
def test_r_peak_is_the_local_maximum_of_normal_beats(ecg):
    x = ecg.signal
    rs = _beats(ecg, "N")
    assert rs.size > 1500
    offsets = np.array([np.argmax(x[r - 3 : r + 4]) - 3 for r in rs])
    assert np.all(np.abs(offsets) <= 2), np.bincount(offsets + 3)
    assert np.mean(offsets == 0) > 0.9


def test_fiducial_is_the_main_deflection_of_abnormal_beats(ecg):
    x = ecg.signal.astype(np.float64)
    for r in _beats(ecg, "A"):
        assert abs(np.argmax(x[r - 3 : r + 4]) - 3) <= 2
    for r in _beats(ecg, "V"):  # either polarity: extremum relative to the local level
        local = x[r - 3 : r + 4] - np.median(x[r - 50 : r + 51])
        assert abs(np.argmax(np.abs(local)) - 3) <= 2
        # and it is the largest deflection of the beat
        assert np.abs(local).max() >= 0.9 * np.abs(x[r - 40 : r + 41] - np.median(x[r - 50 : r + 51])).max()


# --------------------------------------------------------------------------- rhythm
@pytest.mark.parametrize("hr, seed", [(70.0, 3), (110.0, 4), (45.0, 6)])
def test_mean_heart_rate_matches_config(hr, seed):
    e = synthesize(SynthConfig(n_samples=150_000, seed=seed, heart_rate=hr))
    measured = 60.0 * e.fs / np.mean(np.diff(e.r_peaks))
    assert measured == pytest.approx(hr, rel=0.10)


def test_heart_rate_variability_present(ecg):
    r, s = ecg.r_peaks, ecg.symbols
    rr = np.diff(r) / ecg.fs
    nn = rr[(s[1:] == "N") & (s[:-1] == "N")]
    cv = nn.std() / nn.mean()
    assert 0.01 < cv < 0.12
    # not a fixed pattern: many distinct successive differences
    assert np.unique(np.diff(r)[:200]).size > 10


def test_abnormal_fractions_close_to_config(ecg):
    n = ecg.symbols.size
    assert np.sum(ecg.symbols == "V") / n == pytest.approx(0.015, abs=0.003)
    assert np.sum(ecg.symbols == "A") / n == pytest.approx(0.01, abs=0.003)
    e = synthesize(SynthConfig(n_samples=150_000, seed=8, pvc_fraction=0.08, aberrant_fraction=0.05,
                               noise_bursts_per_hour=0))
    n = e.symbols.size
    assert np.sum(e.symbols == "V") / n == pytest.approx(0.08, abs=0.01)
    assert np.sum(e.symbols == "A") / n == pytest.approx(0.05, abs=0.01)
    none = synthesize(SynthConfig(n_samples=100_000, seed=8, pvc_fraction=0, aberrant_fraction=0,
                                  premature_atrial_fraction=0, noise_bursts_per_hour=0))
    assert set(np.unique(none.symbols)) == {"N"}


def test_abnormal_beats_have_normal_neighbours(ecg):
    s = ecg.symbols
    idx = np.flatnonzero((s == "V") | (s == "A"))
    assert np.all(np.diff(idx) >= 3)


def test_pvcs_are_premature_with_compensatory_pause(ecg):
    r, s, fs = ecg.r_peaks, ecg.symbols, ecg.fs
    rr = np.diff(r) / fs
    median_nn = np.median(rr[(s[1:] == "N") & (s[:-1] == "N")])
    v = np.flatnonzero(s == "V")
    v = v[(v >= 2) & (v < r.size - 1)]
    assert v.size > 20
    pre = (r[v] - r[v - 1]) / fs
    post = (r[v + 1] - r[v]) / fs
    local = (r[v - 1] - r[v - 2]) / fs  # the sinus interval just before
    assert np.all(pre < 0.85 * median_nn)
    assert np.all(pre < 0.85 * local)
    assert np.all(post > 1.1 * median_nn)
    ratio = (pre + post) / (2 * local)
    assert np.all((ratio > 0.85) & (ratio < 1.15)), ratio


def test_aberrant_beats_are_premature(ecg):
    r, s, fs = ecg.r_peaks, ecg.symbols, ecg.fs
    a = np.flatnonzero(s == "A")
    a = a[(a >= 2) & (a < r.size - 1)]
    assert a.size > 10
    pre = (r[a] - r[a - 1]) / fs
    local = (r[a - 1] - r[a - 2]) / fs
    assert np.all(pre < 0.95 * local)


# --------------------------------------------------------------------------- morphology
def test_pvc_qrs_is_wider_than_normal(ecg):
    x = ecg.signal
    w_n = np.array([_fwhm(x, r, ecg.fs) for r in _beats(ecg, "N")])
    w_v = np.array([_fwhm(x, r, ecg.fs) for r in _beats(ecg, "V")])
    assert np.median(w_v) > 2.0 * np.median(w_n)
    assert np.percentile(w_v, 10) > np.percentile(w_n, 90)
    # normal R waves are narrow (FWHM ~ 20-30 ms), PVC main deflections broad
    assert np.median(w_n) / ecg.fs < 0.035
    assert np.median(w_v) / ecg.fs > 0.05


def test_aberrant_qrs_is_wider_than_normal(ecg):
    x = ecg.signal
    e_n = np.median([_qrs_extent(x, r, ecg.fs) for r in _beats(ecg, "N")])
    e_a = np.median([_qrs_extent(x, r, ecg.fs) for r in _beats(ecg, "A")])
    assert e_n < 0.1
    assert e_a > 1.5 * e_n


def test_beat_shapes_differ_by_kind(ecg):
    x = ecg.signal
    n = _beats(ecg, "N")
    t_n1, t_n2 = _template(x, n[::2], ecg.fs), _template(x, n[1::2], ecg.fs)
    t_a = _template(x, _beats(ecg, "A"), ecg.fs)
    t_v = _template(x, _beats(ecg, "V"), ecg.fs)

    def corr(u, v):
        return float(np.corrcoef(u, v)[0, 1])

    assert corr(t_n1, t_n2) > 0.98
    assert corr(t_n1, t_a) < 0.8
    assert abs(corr(t_n1, t_v)) < 0.7


def test_normal_template_has_p_qrs_t(ecg):
    fs = ecg.fs
    t = _template(ecg.signal, _beats(ecg, "N"), fs)
    zero = int(0.25 * fs)  # template index of the R peak

    def seg(a, b):
        return t[zero + int(a * fs) : zero + int(b * fs)]

    iso = np.median(seg(-0.1, -0.06))  # PR segment
    assert seg(-0.25, -0.1).max() - iso > 0.08  # P wave
    assert t[zero] - iso > 0.8  # R wave
    assert seg(0.01, 0.06).min() - iso < -0.1  # S wave
    assert seg(0.15, 0.4).max() - iso > 0.15  # T wave
    # and the PVC template has no P wave before its QRS
    tv = _template(ecg.signal, _beats(ecg, "V"), fs)
    assert np.ptp(tv[zero - int(0.2 * fs) : zero - int(0.08 * fs)]) < 0.08 + abs(tv[zero]) * 0.05


# --------------------------------------------------------------------------- noise bursts
def test_q_labels_are_exactly_the_beats_inside_bursts(bursty):
    r, s = bursty.r_peaks, bursty.symbols
    assert bursty.noise_bursts.shape[1] == 2 and len(bursty.noise_bursts) >= 5
    inside = np.zeros(r.size, dtype=bool)
    for s0, s1 in bursty.noise_bursts:
        assert 0.5 * FS - 2 <= s1 - s0 + 1 <= 3.0 * FS + 2
        inside |= (r >= s0) & (r <= s1)
    np.testing.assert_array_equal(s == "Q", inside)
    assert inside.sum() >= 5


def test_q_beats_have_high_frequency_energy(bursty):
    x = bursty.signal.astype(np.float64)
    d = np.diff(x)
    half = int(0.2 * bursty.fs)
    ok = _interior(bursty)
    hf = np.array([np.mean(d[r - half : r + half] ** 2) for r in bursty.r_peaks[ok]])
    sym = bursty.symbols[ok]
    q, n = hf[sym == "Q"], hf[sym == "N"]
    assert q.size >= 5
    assert np.median(q) > 10 * np.median(n)
    assert q.min() > np.percentile(n, 99)
    # amplitude comparable to the R wave
    for s0, s1 in bursty.noise_bursts:
        assert np.ptp(x[s0 : s1 + 1]) > 0.8


# --------------------------------------------------------------------------- a longer run
def test_two_hours_rates_and_drift():
    """One larger recording (~2.2 h): label fractions hold and the heart rate drifts."""
    e = synthesize(SynthConfig(n_samples=2_000_000, seed=21))
    n = e.symbols.size
    assert np.sum(e.symbols == "V") / n == pytest.approx(0.015, abs=0.0015)
    assert np.sum(e.symbols == "A") / n == pytest.approx(0.01, abs=0.0015)
    assert 60.0 * e.fs / np.mean(np.diff(e.r_peaks)) == pytest.approx(70.0, rel=0.1)
    seg = e.r_peaks // int(600 * e.fs)
    per_10_min = np.bincount(seg)[:-1] / 10.0  # beats per minute in whole 10-min blocks
    assert np.ptp(per_10_min) > 1.0
    assert np.all(np.isfinite(e.signal))


# --------------------------------------------------------------------------- CSV output
def _small() -> SyntheticECG:
    return synthesize(SynthConfig(n_samples=20_000, seed=9, pvc_fraction=0.05, noise_bursts_per_hour=300))


def test_annotations_path():
    assert annotations_path("/data/rec.csv") == Path("/data/rec.annotations.csv")
    assert annotations_path(Path("rec.txt")) == Path("rec.annotations.csv")


def test_write_csv_round_trip(tmp_path):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    e = _small()
    out = write_csv(e, tmp_path / "rec.csv")
    assert out == tmp_path / "rec.csv"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.annotations.csv", "rec.csv"]

    text = out.read_text()
    lines = text.splitlines()
    assert len(lines) == e.signal.size and text.endswith("\n")
    pattern = re.compile(r"-?\d+\.\d{4}")
    assert all(pattern.fullmatch(line) for line in lines)  # no header, 4 decimals

    table = pacsv.read_csv(
        out,
        read_options=pacsv.ReadOptions(column_names=["mv"]),
        convert_options=pacsv.ConvertOptions(column_types={"mv": pa.float64()}),
    )
    back = table.column("mv").to_numpy()
    assert back.size == e.signal.size
    np.testing.assert_allclose(back, e.signal.astype(np.float64), rtol=0, atol=5.01e-5)
    np.testing.assert_array_equal(back, np.loadtxt(out))

    side = annotations_path(out)
    assert side.read_text().splitlines()[0] == "sample,symbol"
    for arg in (out, side):
        samples, symbols = read_annotations(arg)
        assert samples.dtype == np.int64
        np.testing.assert_array_equal(samples, e.r_peaks)
        np.testing.assert_array_equal(symbols, e.symbols)
    assert {"Q", "V"} <= set(symbols)


def test_write_csv_formats_values_like_printf(tmp_path):
    values = np.array([-1.23456, 0.0, 0.00004, -0.00004, 12.5, -123.45678, 5.99999, -0.5, 1000.0],
                      dtype=np.float32)
    e = SyntheticECG(signal=values, fs=FS, r_peaks=np.array([1, 4]), symbols=np.array(["N", "V"]))
    out = write_csv(e, tmp_path / "v.csv")
    expected = ["-1.2346", "0.0000", "0.0000", "0.0000", "12.5000", "-123.4568", "6.0000", "-0.5000",
                "1000.0000"]
    assert out.read_text().splitlines() == expected
    for line, v in zip(expected, values):
        assert float(line) == pytest.approx(float(f"{v:.4f}"), abs=1e-12)


def test_write_csv_is_atomic_and_replaces(tmp_path, monkeypatch):
    e = _small()
    path = tmp_path / "rec.csv"
    write_csv(e, path)
    before = path.read_bytes()
    side_before = annotations_path(path).read_bytes()

    # a failure half-way leaves the old file untouched and no temporary file behind
    monkeypatch.setattr(synth_files, "_CSV_CHUNK", 1000)
    calls = {"n": 0}
    real = synth_files._format_fixed4

    def failing(x):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full (simulated)")
        return real(x)

    monkeypatch.setattr(synth_files, "_format_fixed4", failing)
    other = synthesize(SynthConfig(n_samples=20_000, seed=10))
    with pytest.raises(OSError, match="simulated"):
        write_csv(other, path)
    assert path.read_bytes() == before
    assert annotations_path(path).read_bytes() == side_before  # the pair stays consistent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.annotations.csv", "rec.csv"]
    monkeypatch.undo()

    # a successful write replaces the old content, with small chunks too
    monkeypatch.setattr(synth_files, "_CSV_CHUNK", 777)
    write_csv(other, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.annotations.csv", "rec.csv"]
    np.testing.assert_allclose(np.loadtxt(path), other.signal, atol=5.01e-5, rtol=0)
    samples, _ = read_annotations(path)
    np.testing.assert_array_equal(samples, other.r_peaks)


def test_read_annotations_missing_and_malformed(tmp_path):
    assert read_annotations(tmp_path / "nothing.csv") is None
    bad = tmp_path / "x.annotations.csv"
    bad.write_text("time,label\n1,N\n")
    with pytest.raises(ValueError, match="sample,symbol"):
        read_annotations(tmp_path / "x.csv")


def test_write_csv_errors(tmp_path):
    e = _small()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_csv(e, tmp_path / "missing" / "rec.csv")
    bad = SyntheticECG(signal=np.array([0.0, np.nan], dtype=np.float32), fs=FS,
                       r_peaks=np.array([], dtype=np.int64), symbols=np.array([], dtype=str))
    with pytest.raises(ValueError, match="finite"):
        write_csv(bad, tmp_path / "bad.csv")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(TypeError, match="SyntheticECG"):
        write_csv(e.signal, tmp_path / "rec.csv")


# --------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_samples": 100}, r"n_samples must be at least 250 \(one second.*got 100"),
        ({"n_samples": 1e6}, r"n_samples must be an integer; got 1000000\.0"),
        ({"n_samples": 400, "fs": 500.0}, r"n_samples must be at least 500 .*got 400"),
        ({"fs": 50.0}, r"fs must be .*between 100 and 10000; got 50\.0"),
        ({"fs": float("nan")}, r"fs must be .*got nan"),
        ({"seed": -1}, r"seed must be a non-negative integer; got -1"),
        ({"seed": 1.5}, r"seed must be a non-negative integer; got 1\.5"),
        ({"heart_rate": 10.0}, r"heart_rate must be between 30 and 180 bpm; got 10\.0"),
        ({"pvc_fraction": -0.1}, r"pvc_fraction must be between 0 and 0\.2; got -0\.1"),
        ({"aberrant_fraction": 0.5}, r"aberrant_fraction must be between 0 and 0\.2; got 0\.5"),
        ({"pvc_fraction": 0.15, "aberrant_fraction": 0.1},
         r"pvc_fraction \+ aberrant_fraction \+ premature_atrial_fraction must be at most 0\.2.*got 0\.15 \+ 0\.1"),
        ({"noise_bursts_per_hour": -1.0}, r"noise_bursts_per_hour must be between 0 and 600; got -1\.0"),
        ({"noise_mv": float("inf")}, r"noise_mv must be between 0 and 1 mV; got inf"),
    ],
)
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SynthConfig(**kwargs)


def test_synthesize_rejects_non_config():
    with pytest.raises(TypeError, match="SynthConfig"):
        synthesize({"n_samples": 1000})


def test_synthetic_ecg_checks_lengths():
    with pytest.raises(ValueError, match="same length"):
        SyntheticECG(signal=np.zeros(10, np.float32), fs=FS, r_peaks=np.array([1, 2]),
                     symbols=np.array(["N"]))


def test_short_recording_edge_case():
    e = synthesize(SynthConfig(n_samples=250, seed=0))  # exactly one second
    assert e.signal.shape == (250,) and np.isfinite(e.signal).all()
    assert np.all((e.r_peaks >= 0) & (e.r_peaks < 250))


# --------------------------------------------------------------------------- stress cases
def test_premature_atrial_beats_have_normal_qrs_and_come_early():
    e = synthesize(SynthConfig(n_samples=300_000, seed=2, pvc_fraction=0, aberrant_fraction=0,
                               premature_atrial_fraction=0.05, noise_bursts_per_hour=0))
    r, s, fs = e.r_peaks, e.symbols, e.fs
    idx = np.flatnonzero(s == "S")
    idx = idx[(idx >= 2) & (idx < r.size - 1)]
    assert idx.size > 30
    local = (r[idx - 1] - r[idx - 2]) / fs
    assert np.all((r[idx] - r[idx - 1]) / fs < 0.9 * local)           # early
    pause = (r[idx + 1] - r[idx]) / fs / local
    assert np.median(pause) > 1.1 and np.all(pause > 0.95)            # followed by a pause
    normal = _beats(e, "N")[:200]
    early = r[idx][:100]
    half = int(0.06 * fs)  # the QRS (±60 ms) has the shape of a sinus beat: same template within noise
    qrs_n = np.median([e.signal[c - half:c + half + 1] for c in normal], axis=0)
    qrs_s = np.median([e.signal[c - half:c + half + 1] for c in early], axis=0)
    assert np.abs(qrs_s - qrs_n).max() < 0.1 * np.ptp(qrs_n)


def test_stress_settings_change_what_they_say():
    base = synthesize(SynthConfig(n_samples=100_000, seed=1))
    inverted = synthesize(SynthConfig(n_samples=100_000, seed=1, invert=True))
    np.testing.assert_array_equal(inverted.signal, -base.signal)
    np.testing.assert_array_equal(inverted.r_peaks, base.r_peaks)
    tall = synthesize(SynthConfig(n_samples=100_000, seed=1, t_wave_scale=3.0, qrs_scale=0.5))
    normal = base.r_peaks[(base.symbols == "N")][5:50]
    t_window = lambda e, c: e.signal[c + int(0.15 * FS):c + int(0.45 * FS)]  # noqa: E731
    ratio = np.median([np.ptp(t_window(tall, c)) / np.ptp(t_window(base, c)) for c in normal])
    assert 2.2 < ratio < 3.5
    paced = synthesize(SynthConfig(n_samples=100_000, seed=1, paced=True))
    assert set(np.unique(paced.symbols)) <= {"/", "Q"}
    assert np.std(np.diff(paced.r_peaks)) / np.mean(np.diff(paced.r_peaks)) < 0.01  # a fixed pacing rate
    spikes = np.abs(np.diff(paced.signal)) > 1.0  # pacing spikes: steeper than anything else
    assert spikes.sum() >= paced.r_peaks.size
    jumps = synthesize(SynthConfig(n_samples=100_000, seed=1, baseline_jumps_per_hour=300.0))
    assert np.abs(jumps.signal - base.signal).max() > 0.4


def test_stress_config_names_and_errors():
    assert set(synth.STRESS_CASES) >= {"tall_t_slow", "bradycardia", "inverted", "paced", "noise_bursts",
                                       "baseline_jumps", "premature_atrial"}
    assert synth.stress_config("paced").paced and synth.stress_config("paced").fs == 360.0
    with pytest.raises(ValueError, match="unknown stress case 'nope'; known: default, "):
        synth.stress_config("nope")


def test_write_wfdb_round_trip(tmp_path):
    import wfdb

    e = synthesize(SynthConfig(n_samples=20_000, seed=3, fs=360.0))
    hea = synth.write_wfdb(e, tmp_path / "rec")
    record, ann = wfdb.rdrecord(str(tmp_path / "rec")), wfdb.rdann(str(tmp_path / "rec"), "atr")
    assert hea == tmp_path / "rec.hea" and record.fs == 360.0 and record.sig_name == ["MLII"]
    np.testing.assert_allclose(record.p_signal[:, 0], e.signal, atol=0.5 / 200 + 1e-6)  # 200 adu/mV
    np.testing.assert_array_equal(ann.sample, e.r_peaks)
    assert ann.symbol == e.symbols.tolist()
