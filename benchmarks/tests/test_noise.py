"""benchmarks.noise: the noise stress test's layout and SNR, each kind's band, and the detection
benchmark's --noise sections on a WFDB record written here."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import welch

from benchmarks import detection, noise
from pipeline.synth import SynthConfig, synthesize

FS = 360.0


def _band_share(x: np.ndarray, fs: float, low: float, high: float) -> float:
    freqs, power = welch(x, fs=fs, nperseg=int(16 * fs))
    return float(power[(freqs >= low) & (freqs < high)].sum() / power.sum())


@pytest.fixture(scope="module")
def ecg():
    return synthesize(SynthConfig(n_samples=int(15 * 60 * FS), fs=FS, seed=4))


def test_noise_lies_in_the_alternate_two_minute_stretches_after_five_clean_minutes(ecg):
    noisy = noise.add_noise(ecg.signal, ecg.r_peaks, FS, "ma", 6.0, np.random.default_rng(0))
    added = np.abs(noisy.astype(np.float64) - ecg.signal) > 1e-6
    minute = lambda m: slice(int(m * 60 * FS), int((m + 1) * 60 * FS))
    for m in range(15):
        share = added[minute(m)].mean()
        assert share > 0.99 if m in (5, 6, 9, 10, 13, 14) else share == 0.0, (m, share)


@pytest.mark.parametrize("kind", noise.KINDS)
@pytest.mark.parametrize("snr_db", [12.0, 0.0])
def test_the_snr_is_the_qrs_peak_to_peak_squared_over_8_against_the_noise_power(ecg, kind, snr_db):
    noisy = noise.add_noise(ecg.signal, ecg.r_peaks, FS, kind, snr_db, np.random.default_rng(1))
    mask = noise.noisy_stretches(len(noisy), FS)
    added = (noisy.astype(np.float64) - ecg.signal)[mask]
    reach = int(0.05 * FS)
    peak_to_peak = np.median([np.ptp(ecg.signal[r - reach:r + reach + 1]) for r in ecg.r_peaks[5:-5]])
    measured = 10 * np.log10(peak_to_peak ** 2 / 8 / np.mean(added ** 2))
    assert measured == pytest.approx(snr_db, abs=0.5)


def test_each_kind_has_its_band_and_the_same_seed_gives_the_same_noise():
    n, rng = int(600 * FS), np.random.default_rng
    wander, muscle, motion = (noise.noise(kind, n, FS, rng(2)) for kind in ("bw", "ma", "em"))
    assert _band_share(wander, FS, 0, 1.0) > 0.95
    assert _band_share(muscle, FS, 8.0, 170.0) > 0.9
    assert _band_share(motion, FS, 0.3, 12.0) > 0.9 and _band_share(motion, FS, 0, 0.3) < 0.1
    for x in (wander, muscle, motion):
        assert abs(x.mean()) < 1e-9 and x.std() == pytest.approx(1.0)
    np.testing.assert_array_equal(noise.noise("em", n, FS, rng(2)), motion)
    with pytest.raises(ValueError, match="one of ma, em, bw"):
        noise.noise("pink", n, FS, rng(2))


def test_parse_reads_kind_and_snr_pairs_and_names_what_is_wrong():
    assert noise.parse("ma:6, em:0,bw:-3") == [("ma", 6.0), ("em", 0.0), ("bw", -3.0)]
    for bad, message in (("em", "KIND:SNR_DB"), ("em:loud", "KIND:SNR_DB"), ("xx:6", "one of ma, em, bw"),
                         (",", "expected KIND:SNR_DB")):
        with pytest.raises(ValueError, match=message):
            noise.parse(bad)


def test_detection_benchmark_adds_a_section_per_noise_and_degrades_with_it(tmp_path, ecg):
    import wfdb

    wfdb.wrsamp("n1", fs=FS, units=["mV"], sig_name=["MLII"], p_signal=ecg.signal[:, None].astype(np.float64),
                fmt=["16"], write_dir=str(tmp_path))
    wfdb.wrann("n1", "atr", ecg.r_peaks, np.asarray(ecg.symbols).tolist(), write_dir=str(tmp_path))
    out = tmp_path / "noise.md"
    assert detection.main([str(tmp_path), "--noise", "em:12,em:-6", "--out", str(out)]) == 0
    text = out.read_text()
    sections = text.split("### ")[1:]
    assert [s.splitlines()[0] for s in sections] == [str(tmp_path), f"{tmp_path}, em noise at 12 dB",
                                                     f"{tmp_path}, em noise at -6 dB"]
    ppv = [float(s.split("| gross |")[1].split("|")[3]) for s in sections]
    assert ppv[0] > 99.5 and ppv[2] < ppv[0]       # clean, then noise as large as the QRS complexes
    with pytest.raises(SystemExit) as exit_:
        detection.main([str(tmp_path), "--noise", "em"])
    assert exit_.value.code == 2
