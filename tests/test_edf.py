"""Tests of pipeline.edf: EDF, EDF+ and BDF recordings read as any other input (a DS1 record gives the
same beats and reference labels as its WFDB original), lead choice among an EDF's signals, units,
bad files refused in one line, and ``synth x.edf`` written and read back. Files are real, written
with edfio or patched byte for byte."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pipeline import PipelineWarning
from pipeline.__main__ import main
from pipeline.config import VAEConfig
from pipeline.edf import write_edf
from pipeline.load import load_ecg, load_leads
from pipeline.run import RunRequest, run_pipeline
from pipeline.synth import SynthConfig, synthesize

DS1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "mitdb-ds1"
FS = 250.0


@pytest.fixture(scope="module")
def ecg():
    """80 s of synthetic ECG with V and A beats."""
    return synthesize(SynthConfig(n_samples=20_000, seed=3, pvc_fraction=0.05, aberrant_fraction=0.03))


def _write(path: Path, leads, annotations=None, bdf: bool = False) -> Path:
    """An EDF (or BDF) of ``leads``, (label, values, unit, fs) each, with EDF+ annotations
    ((onset s, text) pairs) when given; written by edfio."""
    import edfio

    kind = edfio.BdfSignal if bdf else edfio.EdfSignal
    signals = [kind(np.asarray(values, np.float64), fs, label=label, physical_dimension=unit)
               for label, values, unit, fs in leads]
    notes = None if annotations is None else [edfio.EdfAnnotation(onset, None, text) for onset, text in annotations]
    (edfio.Bdf if bdf else edfio.Edf)(signals, annotations=notes).write(path)
    return path


def _patch(path: Path, offset: int, width: int, text: str, encoding: str = "ascii") -> None:
    """Overwrite one header field (space-padded, as EDF writes them)."""
    raw = bytearray(path.read_bytes())
    raw[offset:offset + width] = text.encode(encoding).ljust(width)
    path.write_bytes(bytes(raw))


def _header_field(path: Path, signal_offset: int, width: int, text: str, signal: int = 0, encoding="ascii") -> None:
    """Overwrite a field of one signal's header (``signal_offset``: where that field's block begins,
    per signal)."""
    n_signals = int(path.read_bytes()[252:256])
    _patch(path, 256 + n_signals * signal_offset + signal * width, width, text, encoding)


def _run(path: Path, out: Path):
    return run_pipeline(RunRequest(input=str(path), device="cpu", out=str(out), vae=VAEConfig(epochs=1),
                                   warm_up=False))


# --------------------------------------------------------------------------- a DS1 record as EDF+
@pytest.fixture(scope="module")
def ds1_106(tmp_path_factory):
    """The first 5 minutes of MIT-BIH record 106 (DS1; multiform PVCs) as a WFDB record and as an
    EDF+ of the same samples (the EDF's digital values are the record's, with the same gain) with
    every .atr annotation (beats, rhythm '+' and noise '~' marks) as EDF+ annotations."""
    wfdb = pytest.importorskip("wfdb")
    import edfio

    if not (DS1 / "106.hea").is_file():
        pytest.skip(f"MIT-BIH DS1 record 106 not found in {DS1}")
    folder = tmp_path_factory.mktemp("ds1")
    n = 5 * 60 * 360
    record = wfdb.rdrecord(str(DS1 / "106"), sampto=n, physical=False)
    ann = wfdb.rdann(str(DS1 / "106"), "atr", sampto=n)
    wfdb.wrsamp("106", fs=record.fs, units=record.units, sig_name=record.sig_name, d_signal=record.d_signal,
                fmt=record.fmt, adc_gain=record.adc_gain, baseline=record.baseline, write_dir=str(folder))
    wfdb.wrann("106", "atr", ann.sample, symbol=ann.symbol, aux_note=ann.aux_note, write_dir=str(folder))
    signals = []
    for i, name in enumerate(record.sig_name):
        gain, baseline = record.adc_gain[i], record.baseline[i]
        signals.append(edfio.EdfSignal.from_digital(
            record.d_signal[:, i].astype(np.int16), record.fs, label=name, physical_dimension="mV",
            digital_range=(0, 2047), physical_range=((0 - baseline) / gain, (2047 - baseline) / gain)))
    notes = [edfio.EdfAnnotation(s / record.fs, None, c) for s, c in zip(ann.sample, ann.symbol)]
    edfio.Edf(signals, annotations=notes).write(folder / "106.edf")
    assert {"+", "~"} <= set(ann.symbol)  # marks that are no beats, to be left out
    return folder / "106.hea", folder / "106.edf"


def test_a_ds1_record_as_edf_loads_as_its_wfdb_original(ds1_106):
    wfdb_path, edf_path = ds1_106
    original, converted = load_ecg(wfdb_path), load_ecg(edf_path)
    assert converted.channel == original.channel == "MLII"
    assert converted.lead_reason == original.lead_reason == "lead II by name (MLII) among 2 leads"
    assert converted.leads == original.leads == ("MLII", "V1")
    assert converted.fs == original.fs == 360.0
    np.testing.assert_array_equal(converted.signal, original.signal)
    for ours, theirs in zip(converted.annotations, original.annotations):
        np.testing.assert_array_equal(ours, theirs)
    assert converted.annotations[1].dtype.kind == "U" and converted.annotations[0].dtype == np.int64
    assert set(converted.annotations[1]) == {"N", "V"}


def test_a_ds1_record_as_edf_gives_the_same_beats_and_labels(ds1_106, tmp_path):
    wfdb_path, edf_path = ds1_106
    original, converted = _run(wfdb_path, tmp_path / "runs").beats, _run(edf_path, tmp_path / "runs").beats
    assert len(original) > 300
    np.testing.assert_array_equal(converted["fiducial"], original["fiducial"])
    np.testing.assert_array_equal(converted["label"].to_numpy(str), original["label"].to_numpy(str))
    assert (converted["label"] == "V").sum() > 40  # the reference column holds the record's PVCs


# --------------------------------------------------------------------------- BDF, units
def test_bdf_keeps_24_bit_resolution(ecg, tmp_path):
    path = write_edf(tmp_path / "rec.bdf", ecg.signal, ecg.fs, annotations=(ecg.r_peaks, ecg.symbols))
    assert path.read_bytes()[:8] == b"\xffBIOSEMI"
    recording = load_ecg(path)
    span = float(np.ptp(ecg.signal))
    assert np.abs(recording.signal - ecg.signal).max() <= span / (1 << 24) + 1e-6  # 16 bits would give span/65535
    np.testing.assert_array_equal(recording.annotations[0], ecg.r_peaks)
    np.testing.assert_array_equal(recording.annotations[1], ecg.symbols)


@pytest.mark.parametrize("unit, encoding, factor", [("uV", "ascii", 1000.0), ("µV", "latin-1", 1000.0),
                                                     ("µV", "utf-8", 1000.0), ("V", "ascii", 0.001),
                                                     ("mV", "ascii", 1.0)])
def test_voltages_are_read_in_millivolts(ecg, tmp_path, unit, encoding, factor):
    path = _write(tmp_path / "units.bdf", [("ECG", ecg.signal * factor, "", FS)], bdf=True)
    _header_field(path, 16 + 80, 8, unit, encoding=encoding)  # edfio writes ASCII only; recorders write µ
    np.testing.assert_allclose(load_ecg(path).signal, ecg.signal, atol=1e-5)


def test_a_unit_that_is_no_voltage_is_taken_as_it_is_with_a_warning(ecg, tmp_path):
    path = _write(tmp_path / "adu.edf", [("ECG", ecg.signal * 100, "ADU", FS)])
    with pytest.warns(PipelineWarning, match=r"adu\.edf: signal 'ECG' is in 'ADU', not a voltage"):
        recording = load_ecg(path)
    np.testing.assert_allclose(recording.signal, ecg.signal * 100, atol=0.01)


# --------------------------------------------------------------------------- lead choice
@pytest.mark.parametrize("labels, chosen, reason", [
    (["ECG2", "MLII"], "MLII", "lead II by name (MLII) among 2 leads"),
    (["ECG MLII", "ECG V1"], "ECG MLII", "lead II by name (ECG MLII) among 2 leads"),
    (["ECG III", "ECG II"], "ECG II", "lead II by name (ECG II) among 2 leads"),
    (["MV2", "ML2"], "ML2", "lead II by name (ML2) among 2 leads"),  # the Long-Term ST database's names
    (["ECG DI", "ECG DII", "ECG DIII"], "ECG DII", "lead II by name (ECG DII) among 3 leads"),
    (["ECG2"], "ECG2", "the only lead"),
])
def test_lead_ii_by_name(ecg, tmp_path, labels, chosen, reason):
    leads = [(label, ecg.signal * (1 + i), "mV", FS) for i, label in enumerate(labels)]
    recording = load_ecg(_write(tmp_path / "leads.edf", leads))
    assert (recording.channel, recording.lead_reason, recording.leads) == (chosen, reason, tuple(labels))


def test_a_channel_number_is_not_lead_ii(ecg, tmp_path):
    """'ECG2' numbers a recorder's second channel: the choice goes by QRS clarity, not by name."""
    noise = np.random.default_rng(0).normal(0, 0.3, ecg.signal.shape)
    recording = load_ecg(_write(tmp_path / "ch.edf", [("ECG1", ecg.signal, "mV", FS),
                                                       ("ECG2", ecg.signal + noise, "mV", FS)]))
    assert recording.channel == "ECG1" and recording.lead_reason.startswith("first lead; no other has a clearly")


def test_leads_labelled_alike_are_told_apart(ecg, tmp_path):
    """Two signals both labelled "ECG": the clearer second one is analysed as "ECG #2", and the
    first is the lead read beside it."""
    from pipeline.load import load_other_lead

    noisy = ecg.signal * 0.3 + np.random.default_rng(0).normal(0, 0.4, ecg.signal.shape)
    path = _write(tmp_path / "alike.edf", [("ECG", noisy, "mV", FS), ("ECG", ecg.signal, "mV", FS)])
    recording = load_ecg(path)
    assert (recording.channel, recording.leads) == ("ECG #2", ("ECG", "ECG #2"))
    np.testing.assert_allclose(recording.signal, ecg.signal, atol=0.01)
    name, other, _ = load_other_lead(recording)
    assert name == "ECG" and np.allclose(other, noisy, atol=0.01)


def test_other_signals_and_rates_are_no_leads_unless_named(ecg, tmp_path):
    seconds = len(ecg.signal) / FS
    rng = np.random.default_rng(1)
    path = _write(tmp_path / "psg.edf", [
        ("EEG Fpz-Cz", rng.normal(0, 20, int(seconds * 100)), "uV", 100.0),
        ("SpO2", 95 + rng.normal(0, 1, int(seconds)), "%", 1.0),
        ("Resp chest", rng.normal(0, 1, int(seconds * 25)), "", 25.0),
        ("ECG", ecg.signal, "mV", FS),
        ("Pleth", rng.normal(0, 1, int(seconds * FS)), "", FS),
    ], annotations=[(1.0, "Lights off")])
    recording = load_ecg(path)
    assert (recording.channel, recording.fs, recording.leads) == ("ECG", FS, ("ECG",))
    assert recording.annotations is None  # annotations, but none of a beat
    named = load_ecg(path, column="EEG Fpz-Cz")
    assert (named.channel, named.fs, named.lead_reason) == ("EEG Fpz-Cz", 100.0, "chosen by the user ('EEG Fpz-Cz')")
    assert load_leads(path)[0] == ["ECG"]


def test_leads_at_another_rate_than_most_are_left_out(ecg, tmp_path):
    slow = ecg.signal[::2]
    path = _write(tmp_path / "rates.edf", [("ECG1", slow, "mV", FS / 2), ("ECG2", ecg.signal, "mV", FS),
                                           ("ECG3", ecg.signal * 2, "mV", FS)])
    recording = load_ecg(path)
    assert recording.leads == ("ECG2", "ECG3") and recording.fs == FS
    assert load_ecg(path, column=1).channel == "ECG3"  # an index counts the leads
    named = load_ecg(path, column="ECG1")
    assert (named.channel, named.fs, named.leads) == ("ECG1", FS / 2, ("ECG1",))


def test_lead_by_name_on_the_command_line(ecg, tmp_path, capsys):
    path = _write(tmp_path / "two.edf", [("II", ecg.signal, "mV", FS), ("V5", ecg.signal * 2, "mV", FS)])
    assert load_ecg(path, column="V5").channel == "V5"
    status = main(["run", str(path), "--lead", "V9", "--device", "cpu", "--out", str(tmp_path / "runs"), "--quiet"])
    assert status == 2
    assert capsys.readouterr().err == "error: two.edf has no column 'V9'; columns are 'II', 'V5'\n"


# --------------------------------------------------------------------------- EDF+ annotations, EDF+D
def test_only_beat_symbols_become_reference_labels(ecg, tmp_path):
    notes = [(0.5, "Recording starts"), (1.0, "N"), (1.9, "+"), (2.8, "V"), (3.7, "(AFIB"), (4.6, " A "),
             (5.5, "n"), (6.4, "NV")]
    recording = load_ecg(_write(tmp_path / "notes.edf", [("ECG", ecg.signal, "mV", FS)], notes))
    np.testing.assert_array_equal(recording.annotations[0], [250, 700, 1150, 1375])
    np.testing.assert_array_equal(recording.annotations[1], ["N", "V", "A", "n"])


def _discontinuous(path: Path, after_s: int, by_s: int) -> Path:
    """The EDF+ at ``path`` made an EDF+D whose data records from ``after_s`` on (1-s records) start
    ``by_s`` later, their annotations with them: every time in its TALs (``+30``, ``+31.416``) from
    ``after_s`` on, moved in place (two-digit seconds stay two digits)."""
    _patch(path, 192, 44, "EDF+D")

    def later(match):
        seconds = float(match.group(1))
        if seconds < after_s:
            return match.group(0)
        text = match.group(1).decode()
        moved = f"{seconds + by_s:.{len(text.split('.')[1]) if '.' in text else 0}f}".encode()
        assert len(moved) == len(match.group(1))
        return b"+" + moved + b"\x14"

    path.write_bytes(re.sub(rb"\+(\d+(?:\.\d+)?)\x14", later, path.read_bytes()))
    return path


def test_discontinuous_edf_plus_is_read_on_its_time_line(ecg, tmp_path):
    """An EDF+D whose records stop for 10 s after 30 s (a recorder paused, a lead-off stretch cut
    out): each record lies where its time stamp puts it, the 10 s between are signal lost, and the
    beat annotations after the gap move with their records."""
    path = write_edf(tmp_path / "gaps.edf", ecg.signal, ecg.fs, annotations=(ecg.r_peaks, ecg.symbols))
    _patch(path, 192, 44, "EDF+D")
    assert len(load_ecg(path).annotations[0]) == len(ecg.r_peaks)  # back to back all the same: read
    _discontinuous(path, 30, 10)
    with pytest.warns(PipelineWarning, match=r"1 gap\(s\) over 1 s \(10\.0 s\) are signal lost"):
        recording = load_ecg(path)
    cut = int(30 * FS)
    assert recording.n_samples == len(ecg.signal) + int(10 * FS)
    np.testing.assert_allclose(recording.lost_s, [[30.0, 40.0]])
    np.testing.assert_allclose(recording.signal[:cut], ecg.signal[:cut], atol=1e-3)
    np.testing.assert_allclose(recording.signal[cut + int(10 * FS):], ecg.signal[cut:], atol=1e-3)
    samples, symbols = recording.annotations
    later = ecg.r_peaks >= cut
    np.testing.assert_array_equal(samples, np.where(later, ecg.r_peaks + int(10 * FS), ecg.r_peaks))
    np.testing.assert_array_equal(symbols, ecg.symbols)
    names, values = load_leads(path)
    assert np.isnan(values[cut:cut + int(10 * FS), 0]).all() and not np.isnan(values[:cut]).any()


def test_discontinuous_edf_plus_whose_records_overlap_or_lie_far_apart_is_refused(ecg, tmp_path, capsys,
                                                                                  monkeypatch):
    from pipeline import edf

    path = write_edf(tmp_path / "gaps.edf", ecg.signal, ecg.fs, annotations=(ecg.r_peaks, ecg.symbols))
    _patch(path, 192, 44, "EDF+D")
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b"+31\x14\x14", b"+29\x14\x14"))
    status = main(["run", str(path), "--device", "cpu", "--out", str(tmp_path / "runs"), "--quiet"])
    assert status == 2
    assert capsys.readouterr().err == ("error: gaps.edf: data record 31 of its EDF+D starts at 29 s, before the "
                                       "one before ends (31 s)\n")
    path.write_bytes(raw)
    _discontinuous(path, 30, 10)
    monkeypatch.setattr(edf, "MAX_GAPS_S", 5.0)
    with pytest.raises(ValueError, match=r"^gaps\.edf: the data records of its EDF\+D lie 0\.0 h apart in all, over "
                                         r"0\.00138889 h; analyse each continuous part as a file of its own$"):
        load_ecg(path)


def test_an_unknown_record_count_and_bytes_beyond_the_records(ecg, tmp_path):
    path = write_edf(tmp_path / "rec.edf", ecg.signal, ecg.fs, annotations=(ecg.r_peaks, ecg.symbols))
    expected = load_ecg(path).signal
    _patch(path, 236, 8, "-1")  # 'not known yet', as a recorder writes it while recording
    np.testing.assert_array_equal(load_ecg(path).signal, expected)
    _patch(path, 236, 8, "80")
    path.write_bytes(path.read_bytes() + b"\0" * 1000)
    with pytest.warns(PipelineWarning, match=r"rec\.edf: 1,000 bytes after its 80 data records are ignored"):
        np.testing.assert_array_equal(load_ecg(path).signal, expected)


# --------------------------------------------------------------------------- bad files, through the CLI
def _truncated(folder: Path, ecg) -> Path:
    path = write_edf(folder / "cut.edf", ecg.signal, ecg.fs, annotations=(ecg.r_peaks, ecg.symbols))
    path.write_bytes(path.read_bytes()[:-1001])
    return path


def _header_cut(folder: Path, ecg) -> Path:
    path = write_edf(folder / "short.edf", ecg.signal, ecg.fs)
    path.write_bytes(path.read_bytes()[:300])
    return path


def _text(folder: Path, ecg) -> Path:
    path = folder / "notes.edf"
    path.write_text("time,ecg\n" + "".join(f"{i / FS},{v:.4f}\n" for i, v in enumerate(ecg.signal[:2000])))
    return path


def _rate_zero(folder: Path, ecg) -> Path:
    path = _write(folder / "rate0.edf", [("ECG", ecg.signal, "mV", FS)])
    _header_field(path, 16 + 80 + 8 * 5 + 80, 8, "0")  # samples per data record
    return path


def _rate_zero_of_one_lead(folder: Path, ecg) -> Path:
    path = _write(folder / "lead0.edf", [("ECG", ecg.signal, "mV", FS), ("Resp", ecg.signal[::10], "", FS / 10)])
    _header_field(path, 16 + 80 + 8 * 5 + 80, 8, "0")
    path.write_bytes(path.read_bytes()[:512 + 256 + 80 * 25 * 2])  # the Resp samples alone are left
    return path


def _duration_zero(folder: Path, ecg) -> Path:
    path = _write(folder / "duration0.edf", [("ECG", ecg.signal, "mV", FS)])
    _patch(path, 244, 8, "0")
    return path


def _no_signals(folder: Path, ecg) -> Path:
    path = _write(folder / "empty.edf", [("ECG", ecg.signal, "mV", FS)])
    _patch(path, 252, 4, "0")
    _patch(path, 184, 8, "256")
    return path


def _annotations_only(folder: Path, ecg) -> Path:
    import edfio

    path = folder / "only.edf"
    edfio.Edf([], annotations=[edfio.EdfAnnotation(1.0, None, "N")]).write(path)
    return path


def _directory(folder: Path, ecg) -> Path:
    path = folder / "x.edf"
    path.mkdir()
    return path


BAD_FILES = {
    "truncated data": (_truncated, r"cut\.edf is truncated: its header declares 80 data records \([\d,]+ bytes after "
                                   r"the header\), the file holds [\d,]+"),
    "truncated header": (_header_cut, r"short\.edf is truncated: 300 bytes, fewer than the 768 of its header"),
    "text named .edf": (_text, r"notes\.edf is not an EDF or BDF file: it begins with b'time,ecg', where an EDF "
                               r"begins with '0' and 7 spaces"),
    "sampling rate 0": (_rate_zero, r"rate0\.edf: sampling rate 0 Hz: its header gives every signal 0 samples per "
                                    r"data record"),
    "sampling rate 0 of the lead": (_rate_zero_of_one_lead, r"lead0\.edf: sampling rate 0 Hz is implausible for an "
                                                            r"ECG; expected 50–10000 Hz; it came from the record's "
                                                            r"header"),
    "record duration 0": (_duration_zero, r"duration0\.edf: sampling rate undefined: its header gives a data record "
                                          r"duration of '0' s"),
    "no signals": (_no_signals, r"empty\.edf holds no signals: its header lists 0"),
    "annotations only": (_annotations_only, r"only\.edf holds no signal, only annotations"),
    "a directory": (_directory, r"x\.edf is a (directory|folder); give a recording file"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_end_in_one_error_line_and_status_2(case, ecg, tmp_path, capsys):
    make, pattern = BAD_FILES[case]
    path = make(tmp_path, ecg)
    status = main(["run", str(path), "--device", "cpu", "--epochs", "1", "--out", str(tmp_path / "runs"), "--quiet"])
    captured = capsys.readouterr()
    assert status == 2, captured
    assert captured.out == "" and re.fullmatch(rf"error: .*{pattern}.*\n", captured.err), captured.err
    if not path.is_dir():  # and load_ecg raises the same line, an InputError without a chained library error
        with pytest.raises(ValueError, match=pattern) as raised:
            load_ecg(path)
        assert raised.value.__suppress_context__ or raised.value.__context__ is None


# --------------------------------------------------------------------------- synth x.edf
def test_synth_writes_edf_that_round_trips(tmp_path, capsys):
    edf, csv = tmp_path / "x.edf", tmp_path / "x.csv"
    assert main(["synth", str(edf), "--samples", "20000"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {edf} (20,000 samples, ")
    assert main(["synth", str(csv), "--samples", "20000"]) == 0
    expected = synthesize(SynthConfig(n_samples=20_000))
    recording = load_ecg(edf)
    assert (recording.fs, recording.n_samples, recording.channel) == (250.0, 20_000, "ECG")
    np.testing.assert_allclose(recording.signal, expected.signal, atol=np.ptp(expected.signal) / 65535)
    np.testing.assert_array_equal(recording.annotations[0], expected.r_peaks)
    np.testing.assert_array_equal(recording.annotations[1], expected.symbols)
    from_edf, from_csv = _run(edf, tmp_path / "runs").beats, _run(csv, tmp_path / "runs").beats
    np.testing.assert_array_equal(from_edf["fiducial"], from_csv["fiducial"])
    np.testing.assert_array_equal(from_edf["label"].to_numpy(str), from_csv["label"].to_numpy(str))
    assert set(from_edf["label"]) >= {"N", "V"}


def test_write_edf_fills_the_last_record_and_refuses_what_edf_cannot_hold(ecg, tmp_path):
    with pytest.warns(PipelineWarning, match=r"odd\.edf: the last data record is filled with 100 copies"):
        path = write_edf(tmp_path / "odd.edf", ecg.signal[:19_900], FS)
    assert load_ecg(path).n_samples == 20_000
    with pytest.raises(ValueError, match=r"fs must be a positive ratio of small integers"):
        write_edf(tmp_path / "pi.edf", ecg.signal, np.pi * 100)
    with pytest.raises(ValueError, match=r"path must end in \.edf or \.bdf"):
        write_edf(tmp_path / "x.csv", ecg.signal, FS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.edf"]  # no temporary file left behind
