"""Tests of pipeline.load: every format gives the values, rate and channel an independent reader
gives; every bad input gives one clear ValueError, also through the CLI."""
from __future__ import annotations

import gzip
import hashlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import PipelineWarning, backend
from pipeline.load import load_ecg

REPO = Path(__file__).resolve().parents[1]
FS = 250.0
N = 3000  # 12 s at 250 Hz: long enough for every check


@pytest.fixture(scope="module")
def leads() -> pd.DataFrame:
    """Three columns: a time index and two 'leads' of random values (no two samples equal)."""
    rng = np.random.default_rng(0)
    return pd.DataFrame({"time": np.arange(N) / FS, "MLII": rng.standard_normal(N).round(5),
                         "V5": rng.standard_normal(N).round(5)})


def _host(recording) -> np.ndarray:
    return backend.to_host(recording.signal)


def _check(recording, expected, device, *, fs=FS, channel=None):
    """Values, dtype, array type, rate and channel of a loaded recording."""
    assert recording.signal.dtype == np.float32
    assert backend.is_cupy_array(recording.signal) == (device == "gpu")
    assert recording.signal.ndim == 1 and recording.n_samples == len(expected)
    np.testing.assert_allclose(_host(recording), np.asarray(expected, dtype=np.float32), rtol=1e-6, atol=1e-6)
    assert recording.fs == fs
    if channel is not None:
        assert recording.channel == channel


def _write_csv(path: Path, frame: pd.DataFrame, *, header=True, sep=","):
    frame.to_csv(path, index=False, header=header, sep=sep, float_format="%.5f")
    return path


# --------------------------------------------------------------------------- formats
def test_csv_one_column_without_header(tmp_path, leads, device):
    path = _write_csv(tmp_path / "one.csv", leads[["MLII"]], header=False)
    expected = np.loadtxt(path, dtype=np.float32)
    _check(load_ecg(path, device=device), expected, device, channel="column 0")


def test_csv_header_default_skips_the_time_column(tmp_path, leads, device):
    path = _write_csv(tmp_path / "three.csv", leads)
    expected = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)[:, 1]
    _check(load_ecg(path, device=device), expected, device, channel="MLII")


@pytest.mark.parametrize("column, index, name", [("V5", 2, "V5"), (2, 2, "V5"), ("2", 2, "V5"),
                                                 ("MLII", 1, "MLII"), (0, 0, "time")])
def test_csv_column_by_name_or_index(tmp_path, leads, device, column, index, name):
    path = _write_csv(tmp_path / "three.csv", leads)
    expected = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)[:, index]
    _check(load_ecg(path, column=column, device=device), expected, device, channel=name)


def test_csv_without_header_several_columns(tmp_path, leads, device):
    path = _write_csv(tmp_path / "noheader.csv", leads[["MLII", "V5"]], header=False)
    expected = np.loadtxt(path, delimiter=",", dtype=np.float32)
    _check(load_ecg(path, device=device), expected[:, 0], device, channel="column 0")
    _check(load_ecg(path, column=1, device=device), expected[:, 1], device, channel="column 1")


@pytest.mark.parametrize("sep, suffix", [(";", ".csv"), ("\t", ".tsv"), ("\t", ".txt")])
def test_csv_other_delimiters(tmp_path, leads, device, sep, suffix):
    path = _write_csv(tmp_path / f"sep{suffix}", leads, sep=sep)
    expected = np.loadtxt(path, delimiter=sep, skiprows=1, dtype=np.float32)
    _check(load_ecg(path, device=device), expected[:, 1], device, channel="MLII")
    _check(load_ecg(path, column="V5", device=device), expected[:, 2], device, channel="V5")


def test_csv_gzip(tmp_path, leads, device):
    plain = _write_csv(tmp_path / "plain.csv", leads)
    path = tmp_path / "packed.csv.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    expected = np.loadtxt(plain, delimiter=",", skiprows=1, dtype=np.float32)[:, 2]
    _check(load_ecg(path, column="V5", device=device), expected, device, channel="V5")


def _decimal_comma(value: float, decimals: int = 3) -> str:
    return f"{value:.{decimals}f}".replace(".", ",")


DECIMAL_COMMA_FILES = {
    # name: (text of the file, column read, expected values' column in `leads`, channel)
    "one value a line": (lambda f: "".join(f"{_decimal_comma(v)}\n" for v in f["MLII"]), None, "MLII", "column 0"),
    "one value a line, a header": (lambda f: "ecg\n" + "".join(f"{_decimal_comma(v)}\n" for v in f["MLII"]),
                                   None, "MLII", "ecg"),
    "semicolons and a header": (lambda f: "time;MLII;V5\n" + "".join(
        f"{_decimal_comma(t)};{_decimal_comma(a)};{_decimal_comma(b)}\n" for t, a, b in f.to_numpy()),
        "V5", "V5", "V5"),
    "semicolons, no header": (lambda f: "".join(f"{_decimal_comma(a)};{_decimal_comma(b)}\n"
                                                for a, b in f[["MLII", "V5"]].to_numpy()), 1, "V5", "column 1"),
    "tabs": (lambda f: "MLII\tV5\n" + "".join(f"{_decimal_comma(a)}\t{_decimal_comma(b)}\n"
                                               for a, b in f[["MLII", "V5"]].to_numpy()), None, "MLII", "MLII"),
}


@pytest.mark.parametrize("kind", list(DECIMAL_COMMA_FILES))
@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_csv_decimal_comma(tmp_path, leads, device, kind, suffix):
    """Files written where the comma is the decimal mark ('0,125', fields split by ';' or a tab)
    are read as the numbers they hold, not split at the comma into integer columns."""
    make, column, expected, channel = DECIMAL_COMMA_FILES[kind]
    frame = leads.round(3)  # the values the file holds exactly
    text = make(frame)
    path = tmp_path / f"comma{suffix}"
    path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    _check(load_ecg(path, column=column, device=device), frame[expected], device, channel=channel)


def test_csv_two_integer_columns_stay_two_columns(tmp_path, device):
    """'512,498' may be one number with a decimal comma or two integer columns; without a sign that
    it is decimal ('-0,5', '0,05', a one-name header) it stays two columns, as a plain CSV."""
    counts = np.random.default_rng(4).integers(100, 999, (N, 2))
    path = tmp_path / "counts.csv"
    path.write_text("".join(f"{a},{b}\n" for a, b in counts))
    _check(load_ecg(path, column=1, device=device), counts[:, 1], device, channel="column 1")


@pytest.mark.parametrize("name", ["100.hea", "100.dat", "100"])
def test_wfdb_record_by_any_name(mitdb, device, name):
    import wfdb

    record = wfdb.rdrecord(str(mitdb / "100"))
    recording = load_ecg(mitdb / name, device=device)
    _check(recording, record.p_signal[:, 0], device, fs=360.0, channel="MLII")
    assert recording.n_samples == 650_000


@pytest.mark.parametrize("column", ["V5", 1, "1"])
def test_wfdb_lead_by_name_or_index(mitdb, device, column):
    import wfdb

    record = wfdb.rdrecord(str(mitdb / "100"))
    _check(load_ecg(mitdb / "100.hea", column=column, device=device), record.p_signal[:, 1], device,
           fs=360.0, channel="V5")


def test_npy_one_and_two_dimensional(tmp_path, leads, device):
    two = leads[["MLII", "V5"]].to_numpy()
    np.save(tmp_path / "one.npy", two[:, 0])
    np.save(tmp_path / "two.npy", two)
    _check(load_ecg(tmp_path / "one.npy", device=device), two[:, 0], device, channel="column 0")
    _check(load_ecg(tmp_path / "two.npy", device=device), two[:, 0], device, channel="column 0")
    _check(load_ecg(tmp_path / "two.npy", column=1, device=device), two[:, 1], device, channel="column 1")


def test_npy_integer_counts(tmp_path, device):
    counts = np.random.default_rng(1).integers(-2000, 2000, N).astype(np.int16)  # ADC units
    np.save(tmp_path / "adc.npy", counts)
    _check(load_ecg(tmp_path / "adc.npy", device=device), counts.astype(np.float32), device)


def test_parquet_columns(tmp_path, leads, device):
    path = tmp_path / "rec.parquet"
    frame = leads.assign(counts=np.arange(N, dtype=np.int32) % 97)
    frame.to_parquet(path, index=False)
    expected = pd.read_parquet(path)
    _check(load_ecg(path, device=device), expected["MLII"], device, channel="MLII")
    _check(load_ecg(path, column="V5", device=device), expected["V5"], device, channel="V5")
    _check(load_ecg(path, column=3, device=device), expected["counts"], device, channel="counts")


# --------------------------------------------------------------------------- sampling rate
def test_sampling_rate_file_then_argument_then_default(tmp_path, leads, mitdb):
    path = _write_csv(tmp_path / "rate.csv", leads[["MLII"]], header=False)
    assert load_ecg(path).fs == 250.0                       # CSV carries none: the default
    assert load_ecg(path, default_fs=500).fs == 500.0       # ... which is configurable
    assert load_ecg(path, fs=360).fs == 360.0               # --fs wins
    assert load_ecg(path, fs=360, default_fs=500).fs == 360.0
    assert load_ecg(mitdb / "100.hea").fs == 360.0          # WFDB carries its own
    assert load_ecg(mitdb / "100.hea", fs=250, default_fs=500).fs == 250.0  # --fs wins over the file


# --------------------------------------------------------------------------- annotations
def test_annotations_from_synthetic_sidecar(small_csv, small_ecg):
    recording = load_ecg(small_csv)
    samples, symbols = recording.annotations
    np.testing.assert_array_equal(samples, small_ecg.r_peaks)
    np.testing.assert_array_equal(symbols.astype(str), small_ecg.symbols.astype(str))
    assert {"N", "V", "A"} <= set(symbols.tolist())


def test_annotations_from_atr_keep_beats_only(mitdb):
    import wfdb

    reference = wfdb.rdann(str(mitdb / "208"), "atr")
    beat = np.isin(reference.symbol, list("NLRBAaJSVrFejnE/fQ?"))  # README: beat symbols
    samples, symbols = load_ecg(mitdb / "208.hea").annotations
    np.testing.assert_array_equal(samples, np.asarray(reference.sample)[beat])
    np.testing.assert_array_equal(symbols, np.asarray(reference.symbol)[beat])
    assert (~beat).any() and "+" not in set(symbols.tolist())  # rhythm marks existed and were dropped
    assert (symbols == "V").sum() == 992  # README's count for record 208


def test_no_annotations_without_sidecar(tmp_path, leads):
    path = _write_csv(tmp_path / "plain.csv", leads[["MLII"]], header=False)
    assert load_ecg(path).annotations is None


# --------------------------------------------------------------------------- gaps
def _linear_fill(values: np.ndarray) -> np.ndarray:
    """Reference: each non-finite run replaced by the straight line between its finite neighbours."""
    out = values.astype(np.float64).copy()
    bad = ~np.isfinite(out)
    i = 0
    while i < len(out):
        if bad[i]:
            j = i
            while bad[j]:
                j += 1
            left, right = i - 1, j  # interior gaps only in these tests
            for k in range(i, j):
                out[k] = out[left] + (out[right] - out[left]) * (k - left) / (right - left)
            i = j
        i += 1
    return out


def test_short_gaps_interpolated_linearly(tmp_path, device):
    rng = np.random.default_rng(2)
    values = np.cumsum(rng.standard_normal(N)).astype(np.float32)
    values[100:103] = np.nan
    values[500] = np.inf
    values[1000:1000 + 250] = np.nan  # exactly max_gap_s at 250 Hz: still repaired
    values[2000] = -np.inf
    np.save(tmp_path / "gaps.npy", values)
    with pytest.warns(PipelineWarning, match=r"interpolated 255 NaN/inf samples in 4 gap\(s\), longest 1000 ms"):
        recording = load_ecg(tmp_path / "gaps.npy", device=device)
    assert recording.repaired_samples == 255
    np.testing.assert_allclose(_host(recording), _linear_fill(values), rtol=1e-5, atol=1e-5)


def test_long_gaps_are_signal_lost(tmp_path, device):
    """A gap over max_gap_s (a loose electrode, a recorder's dropout) no longer refuses the whole
    recording: it is bridged like a short one, so that time runs on, and kept as signal lost."""
    rng = np.random.default_rng(2)
    values = np.cumsum(rng.standard_normal(N)).astype(np.float32)
    values[100:103] = np.nan
    values[1000:1000 + 251] = np.nan  # one sample over max_gap_s at 250 Hz
    values[2000:2500] = np.inf
    np.save(tmp_path / "lost.npy", values)
    with pytest.warns(PipelineWarning, match=r"interpolated 754 NaN/inf samples in 3 gap\(s\), longest 2000 ms; "
                                             r"2 gap\(s\) over 1 s \(3\.0 s\) are signal lost$"):
        recording = load_ecg(tmp_path / "lost.npy", device=device)
    np.testing.assert_allclose(recording.lost_s, [[1000 / FS, 1251 / FS], [2000 / FS, 2500 / FS]])
    np.testing.assert_allclose(_host(recording), _linear_fill(values), rtol=1e-5, atol=1e-5)


def test_gaps_in_csv_text_and_empty_cells(tmp_path, device):
    values = np.linspace(0.0, 1.0, N).round(6)
    lines = ["time,ecg"] + [f"{i / FS:.4f},{v:.6f}" for i, v in enumerate(values)]
    lines[1 + 10] = f"{10 / FS:.4f},nan"
    lines[1 + 20] = f"{20 / FS:.4f},"  # empty cell
    lines[1 + 30] = f"{30 / FS:.4f},inf"
    (tmp_path / "gaps.csv").write_text("\n".join(lines) + "\n")
    with pytest.warns(PipelineWarning, match="interpolated 3 NaN/inf samples"):
        recording = load_ecg(tmp_path / "gaps.csv", device=device)
    np.testing.assert_allclose(_host(recording), values, rtol=1e-5, atol=1e-6)  # a straight line stays one


def test_clean_signal_gives_no_warning(tmp_path, leads):
    path = _write_csv(tmp_path / "clean.csv", leads)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_ecg(path).repaired_samples == 0


# --------------------------------------------------------------------------- bad input
def _random_walk(n=N, seed=3) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).standard_normal(n)).astype(np.float32)


def _numbers(n=N) -> str:
    return "".join(f"{v:.4f}\n" for v in _random_walk(n))


def _write(name, content):
    def make(folder: Path) -> Path:
        path = folder / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif callable(content):
            content(path)
        else:
            path.write_text(content)
        return path
    return make


def _npy(array):
    return lambda path: np.save(path, array)


def _with_gap(length):
    values = _random_walk()
    values[500:500 + length] = np.nan
    return values


def _corrupt_header(path: Path):
    path.write_text("this is not a WFDB header\n\x01\x02 garbage 12 x y\n")


def _header_without_signal(path: Path):
    path.write_text("rec 1 360 3000\nrec.dat 16 200 16 0 0 0 0 MLII\n")  # rec.dat is not there


def _binary(path: Path):
    path.write_bytes(bytes(range(256)) * 64)  # has NUL bytes


def _latin1(path: Path):
    path.write_bytes("1.0\n2.0\n\xe9\xe8\xff\n".encode("latin-1"))  # not UTF-8, no NUL


def _gz_text(text):
    return lambda path: path.write_bytes(gzip.compress(text.encode()))


def _corrupt_gzip(path: Path):
    """A gzip stream damaged in its first deflate block (zlib.error while the layout is sniffed)."""
    packed = bytearray(gzip.compress(_numbers().encode(), mtime=0))
    packed[12:16] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(packed))


def _wfdb_rate(rate: str):
    """A valid one-lead WFDB record whose header declares ``rate`` as its sampling frequency."""
    def make(path: Path):
        import wfdb

        wfdb.wrsamp(path.stem, fs=250, units=["mV"], sig_name=["MLII"], p_signal=_random_walk()[:, None].astype(float),
                    fmt=["16"], write_dir=str(path.parent))
        lines = path.read_text().splitlines()
        fields = lines[0].split()
        fields[2] = rate
        path.write_text("\n".join([" ".join(fields)] + lines[1:]) + "\n")
    return make


def _one_bit_noise(path: Path):
    """Three hours at 250 Hz of random 0/1 samples: no ECG, but a detector finds 'beats' in it."""
    bits = np.random.default_rng(8).integers(0, 2, 3 * 3600 * 250)
    path.write_text("\n".join(map(str, bits.tolist())) + "\n")


BAD_INPUTS = {
    # name: (file maker or None, load_ecg keyword arguments, message pattern)
    "missing file": (None, {"path": "nope.csv"}, r"no such file: .*nope\.csv"),
    "missing WFDB record": (None, {"path": "nope.hea"}, r"no such WFDB record: .*nope\.hea does not exist"),
    "empty file": (_write("empty.csv", b""), {}, r"empty\.csv is empty"),
    "blank lines only": (_write("blank.csv", "\n  \n\n"), {}, r"blank\.csv has no data"),
    "header only": (_write("header.csv", "time,ecg\n"), {}, r"header\.csv has a header but no data rows"),
    "non-numeric text": (_write("text.csv", "0.5\n0.25\n1.5\nabc\n2.0\n" + _numbers()), {},
                         r"text\.csv: line 4 holds 'abc', which is not a number"),
    "non-numeric after a header": (_write("text2.csv", "t,ecg\n0,1.5\n1,oops\n" + _numbers().replace("\n", ",1\n")),
                                   {"column": "ecg"}, r"text2\.csv: line 3 holds 'oops', which is not a number"),
    "non-numeric in gzip": (_write("text.csv.gz", _gz_text(_numbers(50) + "1.2.3\n" + _numbers())), {},
                            r"text\.csv\.gz: line 51 holds '1\.2\.3', which is not a number"),
    "binary garbage": (_write("garbage.csv", _binary), {}, r"garbage\.csv is not a text file \(binary content\)"),
    "not UTF-8": (_write("latin.csv", _latin1), {}, r"latin\.csv is not UTF-8 text"),
    "missing column name": (_write("cols.csv", "time,MLII\n" + _numbers().replace("\n", ",1.0\n")), {"column": "V5"},
                            r"cols\.csv has no column 'V5'; columns are 'time', 'MLII'"),
    "missing column index": (_write("cols.csv", "time,MLII\n" + _numbers().replace("\n", ",1.0\n")), {"column": 5},
                             r"cols\.csv has 2 column\(s\); column index 5 does not exist"),
    "missing column in headerless CSV": (_write("one.csv", _numbers()), {"column": 1},
                                         r"one\.csv has 1 column\(s\); column index 1 does not exist"),
    "missing npy column index": (_write("two.npy", _npy(np.ones((N, 2), np.float32))), {"column": 2},
                                 r"two\.npy has 2 column\(s\); column index 2 does not exist"),
    "npy column by a name it lacks": (_write("two.npy", _npy(np.ones((N, 2), np.float32))), {"column": "MLII"},
                                      r"two\.npy has no column 'MLII'"),
    "npy of text": (_write("words.npy", _npy(np.array(["a", "b", "c"] * 1000))), {}, r"words\.npy: array dtype <U1 is not numeric"),
    "npy 3-D": (_write("cube.npy", _npy(np.ones((100, 10, 3), np.float32))), {},
                r"cube\.npy: expected a 1-D or 2-D \(samples, leads\) array; got shape \(100, 10, 3\)"),
    "npy garbage": (_write("junk.npy", b"not really an npy file" * 10), {}, r"junk\.npy: not a readable \.npy file"),
    "parquet garbage": (_write("junk.parquet", b"PAR1 not really parquet" * 10), {}, r"junk\.parquet: not a readable Parquet file"),
    "parquet text column": (_write("text.parquet", lambda p: pd.DataFrame({"ecg": ["x"] * N}).to_parquet(p)), {},
                            r"text\.parquet: column 'ecg' has type \w+, not numbers"),
    "parquet missing column": (_write("rec.parquet", lambda p: pd.DataFrame({"ecg": _random_walk()}).to_parquet(p)),
                               {"column": "II"}, r"rec\.parquet has no column 'II'; columns are 'ecg'"),
    "WFDB missing lead": ("mitdb", {"path": "100.hea", "column": "V1"}, r"100\.hea has no column 'V1'; columns are 'MLII', 'V5'"),
    "corrupt WFDB header": (_write("bad.hea", _corrupt_header), {}, r"cannot read WFDB header bad\.hea: "),
    "WFDB signal file missing": (_write("rec.hea", _header_without_signal), {}, r"cannot read WFDB record rec: "),
    "little but NaN": (_write("gap.npy", _npy(_with_gap(N - 600))), {},
                       r"gap\.npy: 2\.40 s of signal outside its gaps of NaN/inf; at least 2\.5 s are needed"),
    "all NaN": (_write("nan.npy", _npy(np.full(N, np.nan, np.float32))), {}, r"nan\.npy: every value is NaN or infinite"),
    "all NaN in CSV": (_write("nan.csv", "nan\n" * N), {}, r"nan\.csv: every value is NaN or infinite"),
    "too short for a beat": (_write("short.csv", _numbers(400)), {},
                             r"short\.csv: recording too short: 400 samples \(1\.60 s at 250 Hz\); at least 2\.5 s"),
    "flat line": (_write("flat.csv", "0.5\n" * N), {}, r"flat\.csv: the signal is flat \(all values ≈ 0\.5\)"),
    "implausible --fs 5": (_write("slow.csv", _numbers()), {"fs": 5},
                           r"slow\.csv: sampling rate 5 Hz is implausible for an ECG; expected 50–10000 Hz"),
    "implausible --fs 1e6": (_write("fast.csv", _numbers()), {"fs": 1e6}, r"fast\.csv: sampling rate 1e\+06 Hz is implausible"),
    "--fs nan": (_write("nan_fs.csv", _numbers()), {"fs": float("nan")},
                 r"nan_fs\.csv: sampling rate nan Hz is implausible for an ECG; expected 50–10000 Hz"),
    "implausible default_fs": (_write("slow.csv", _numbers()), {"default_fs": 0.0},
                               r"slow\.csv: sampling rate 0 Hz is implausible.*the default rate"),
    "WFDB header rate -5": (_write("neg.hea", _wfdb_rate("-5")), {},
                            r"neg\.hea: sampling rate -5 Hz is implausible for an ECG; expected 50–10000 Hz; "
                            r"it came from the record's header"),
    "WFDB header rate 1e9": (_write("giga.hea", _wfdb_rate("1e9")), {},
                             r"giga\.hea: sampling rate 1e\+09 Hz is implausible for an ECG; expected 50–10000 Hz"),
    "WFDB header rate nan": (_write("nanrate.hea", _wfdb_rate("nan/360")), {}, r"nanrate\.hea: sampling rate nan Hz"),
    "WFDB header rate not a number": (_write("word.hea", _wfdb_rate("fast")), {},
                                      r"word\.hea: sampling rate 'fast' is not a number"),
    "corrupt deflate stream": (_write("deflate.csv.gz", _corrupt_gzip), {},
                               r"deflate\.csv\.gz: corrupt or truncated gzip data \(.*\)$"),
    "truncated gzip": (_write("cut.csv.gz", lambda p: p.write_bytes(gzip.compress(b"0.5\n1.5\n" * 300)[:30])), {},
                       r"cut\.csv\.gz: corrupt or truncated gzip data"),
    "1-bit noise": (_write("bits.csv", _one_bit_noise), {},
                    r"bits\.csv: the signal takes only 2 distinct values \(0, 1\); an ECG takes at least 8"),
    "npy transposed": (_write("wide.npy", _npy(np.ones((2, N), np.float32))), {},
                       r"wide\.npy: expected \(samples, leads\); got shape \(2, 3000\), more leads than samples"),
    "npy of zero leads": (_write("none.npy", _npy(np.ones((N, 0), np.float32))), {}, r"none\.npy: .* holds no lead"),
    # cuDF counts the columns on line 1 and read a later column out of bounds (a crash) when it was blank
    "blank first line of a two-column CSV": (_write("blank1.csv", "\n" + _numbers().replace("\n", ";1\n")), {},
                                             r"blank1\.csv: line 1 is blank, but the rows have 2 fields"),
    "a directory": (lambda folder: (folder / "adir.csv").mkdir() or folder / "adir.csv", {}, r"adir\.csv is a directory; give a recording file"),
    "unknown suffix": (_write("rec.json", '{"ecg": [1, 2, 3]}'), {}, r"rec\.json: unknown format; expected \.csv, \.txt, \.npy, \.parquet or a WFDB \.hea record"),
}


@pytest.fixture
def bad_input(request, tmp_path):
    maker, kwargs, pattern = BAD_INPUTS[request.param]
    kwargs = dict(kwargs)
    if maker == "mitdb":
        folder = request.getfixturevalue("mitdb")
        kwargs["path"] = folder / kwargs["path"]
    elif maker is None:
        kwargs["path"] = tmp_path / kwargs["path"]
    else:
        kwargs["path"] = maker(tmp_path)
    return kwargs, pattern


@pytest.mark.parametrize("bad_input", list(BAD_INPUTS), indirect=True)
def test_bad_input_raises_one_clear_line(bad_input, device):
    kwargs, pattern = bad_input
    path = kwargs.pop("path")
    with pytest.raises(ValueError, match=pattern) as raised:
        load_ecg(path, device=device, **kwargs)
    message = str(raised.value)
    assert "\n" not in message and len(message) < 300
    # no chained library exception: the user sees this line and nothing else
    assert raised.value.__context__ is None or raised.value.__suppress_context__


# --------------------------------------------------------------------------- bad input through the CLI
def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _tree(root: Path) -> dict:
    """Every file and folder under ``root``, files with their SHA-256 (the exact state of a runs folder)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("bad_input", ["missing file", "non-numeric text", "flat line", "implausible --fs 5",
                                       "corrupt WFDB header", "corrupt deflate stream", "WFDB header rate -5",
                                       "WFDB header rate 1e9", "1-bit noise", "--fs nan"], indirect=True)
def test_cli_bad_input_exits_2_with_one_error_line(bad_input, tmp_path):
    kwargs, pattern = bad_input
    extra = ["--fs", str(kwargs["fs"])] if "fs" in kwargs else []
    out = tmp_path / "runs"
    result = _cli("run", kwargs["path"], "--device", "cpu", "--out", out, "--epochs", "1", *extra)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr  # progress bars may precede it
    assert re.search(pattern, errors[0]), errors[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not out.exists() or not [p for p in out.iterdir() if p.name.startswith(".")]


def _fifo(path: Path) -> Path:
    import os

    os.mkfifo(path)
    return path


def _load_without_waiting(path: Path, **kwargs):
    """load_ecg(path) in a thread: what it raised (None if it returned), or a test failure when it
    is still waiting after 20 s. A reader left blocked on a FIFO is released by opening the FIFO's
    other end, so that no thread outlives the test."""
    import os
    import threading

    outcome = {}

    def target():
        try:
            load_ecg(path, **kwargs)
        except BaseException as err:  # handed to the test below
            outcome["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():  # a FIFO's reader is released below; a reader stuck elsewhere stays behind
        for fifo in [p for p in path.parent.iterdir() if p.is_fifo()]:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the waiting reader sees end of file
            except OSError:
                pass
        thread.join(5)
        pytest.fail(f"load_ecg({path.name}) waited on a FIFO")
    return outcome.get("error")


@pytest.mark.parametrize("name", ["pipe.csv", "pipe.csv.gz", "pipe.npy", "pipe.parquet", "pipe.hea", "pipe.dat"])
def test_fifo_is_refused_without_waiting(tmp_path, device, name):
    """A FIFO (named pipe) given as the recording, a WFDB header or a WFDB signal file: refused at
    once with one line naming it, where opening it would wait for a writer for ever."""
    import wfdb

    if name.endswith((".hea", ".dat")):
        wfdb.wrsamp("pipe", fs=250, units=["mV"], sig_name=["MLII"], p_signal=_random_walk()[:, None].astype(float),
                    fmt=["16"], write_dir=str(tmp_path))
        (tmp_path / name).unlink()
    path = _fifo(tmp_path / name)
    error = _load_without_waiting(tmp_path / ("pipe.hea" if name.endswith(".dat") else name), device=device)
    assert isinstance(error, ValueError), repr(error)
    assert re.search(rf"{re.escape(name)} is a FIFO \(named pipe\), not a regular file", str(error)), str(error)
    assert path.is_fifo()


def test_cli_fifo_input_exits_2_without_waiting(tmp_path):
    """Through the CLI, where the input is hashed before it is loaded: one line, exit 2, at once
    (the subprocess is killed after 60 s, so a regression cannot block the test run)."""
    path = _fifo(tmp_path / "pipe.csv")
    try:
        result = _cli("run", path, "--device", "cpu", "--out", tmp_path / "runs", "--quiet", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("python -m pipeline run waited on a FIFO")
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert re.match(r"error: .*pipe\.csv is a FIFO \(named pipe\), not a regular file", result.stderr), result.stderr


@pytest.mark.parametrize("damage", ["flipped", "cut"])
def test_corrupt_deflate_past_the_sniffed_head(tmp_path, device, damage):
    """A gzip stream damaged or cut beyond the first 4 KiB, which only the full parse meets
    (pyarrow's decompression on the CPU, cuDF's on the GPU): the same one line."""
    packed = bytearray(gzip.compress(_numbers(20_000).encode(), mtime=0))
    if damage == "flipped":
        packed[len(packed) // 2] ^= 0xFF
    else:
        del packed[len(packed) * 2 // 3:]
    path = tmp_path / "late.csv.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(ValueError, match=r"^late\.csv\.gz: corrupt or truncated gzip data \(") as raised:
        load_ecg(path, device=device)
    assert raised.value.__suppress_context__


def test_parquet_with_damaged_pages_is_refused_without_waiting(tmp_path, device):
    """A Parquet file with 90 bytes cut out of its first column's pages, its footer intact (so the
    analysed column's offsets point into the wrong bytes): refused at once on either device. This
    is the fuzzing case on which cuDF's Parquet reader, used on the GPU before, did not return."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    walk = np.cumsum(np.random.default_rng(5).standard_normal((800, 2)), axis=0).round(4)
    table = pa.table({"time": np.arange(800) / FS, "MLII": walk[:, 0].astype(np.float32),
                      "counts": (walk[:, 1] * 200).astype(np.int16), "note": ["x"] * 800})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="snappy")
    data = buffer.getvalue()
    path = tmp_path / "damaged.parquet"
    path.write_bytes(data[:232] + data[322:])
    error = _load_without_waiting(path, device=device)
    assert isinstance(error, ValueError) and re.match(r"damaged\.parquet: not a readable Parquet file \(", str(error)), \
        repr(error)


def test_few_distinct_values_boundary(tmp_path, device):
    """Eight levels (a coarse 3-bit quantisation) are still read; seven are not; a recording whose
    first minutes are a constant (lead off) is judged on the whole recording, not its start."""
    walk = _random_walk(N)
    levels = np.round((walk - walk.min()) / np.ptp(walk) * 7).astype(np.float32)  # 0 … 7
    np.save(tmp_path / "eight.npy", levels)
    assert load_ecg(tmp_path / "eight.npy", device=device).n_samples == N
    np.save(tmp_path / "seven.npy", np.minimum(levels, 6))
    with pytest.raises(ValueError, match=r"seven\.npy: the signal takes only 7 distinct values \(0, 1, 2, 3, 4, 5, 6\)"):
        load_ecg(tmp_path / "seven.npy", device=device)
    lead_off = np.concatenate([np.zeros(120_000, np.float32), _random_walk(30_000)])
    np.save(tmp_path / "lead_off.npy", lead_off)
    assert load_ecg(tmp_path / "lead_off.npy", device=device).n_samples == 150_000


def test_wfdb_header_may_not_name_a_file_elsewhere(tmp_path):
    """A header is data: a signal file it names must be a regular file beside it (not a device,
    not a folder)."""
    import wfdb

    wfdb.wrsamp("rec", fs=250, units=["mV"], sig_name=["MLII"], p_signal=_random_walk()[:, None].astype(float),
                fmt=["16"], write_dir=str(tmp_path))
    (tmp_path / "rec.dat").unlink()
    (tmp_path / "rec.dat").symlink_to("/dev/zero")
    with pytest.raises(ValueError, match=r"cannot read WFDB record rec: its signal file .*rec\.dat is a character "
                                         r"device, not a regular file"):
        load_ecg(tmp_path / "rec.hea")


def test_cli_bad_input_quiet_prints_exactly_one_line(tmp_path):
    path = tmp_path / "text.csv"
    path.write_text("0.5\n0.25\nabc\n" + _numbers())
    result = _cli("run", path, "--device", "cpu", "--out", tmp_path / "runs", "--quiet")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: text.csv: line 3 holds 'abc', which is not a number"]


def test_cli_failed_run_leaves_cached_runs_intact(cpu_run, tmp_path):
    import shutil

    out = tmp_path / "runs"
    shutil.copytree(cpu_run.run.path, out / cpu_run.run.path.name)
    before = _tree(out)
    bad = tmp_path / "flat.csv"
    bad.write_text("0.5\n" * N)
    for args in ([bad], [cpu_run.request.input, "--fs", "5"]):  # a new input, and the cached input misread
        result = _cli("run", *args, "--device", "cpu", "--out", out, "--quiet", "--epochs", "1")
        assert result.returncode == 2 and result.stderr.startswith("error:"), result.stderr
    assert _tree(out) == before  # same files, same bytes, nothing added (no temporary folders)


# --------------------------------------------------------------------------- lead choice
def _two_lead_ecg(invert_second=False):
    """A synthetic ECG (first lead: the QRS buried in strong noise) and a clean copy as second lead."""
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=60_000, seed=4, noise_bursts_per_hour=0))
    clean = ecg.signal * (-1 if invert_second else 1)
    noisy = ecg.signal * 0.3 + np.random.default_rng(0).standard_normal(ecg.signal.size).astype(np.float32) * 0.4
    return noisy.astype(np.float32), clean.astype(np.float32)


def test_qrs_clarity_ranks_a_clean_lead_above_noise():
    from pipeline.leads import qrs_clarity

    noisy, clean = _two_lead_ecg()
    white = np.random.default_rng(1).standard_normal(60_000).astype(np.float32)
    assert qrs_clarity(clean, 250.0) > 15
    assert qrs_clarity(clean, 250.0) > 2 * qrs_clarity(noisy, 250.0)
    assert qrs_clarity(white, 250.0) < 8


@pytest.mark.parametrize("fmt", ["csv", "npy", "parquet"])
def test_unnamed_leads_clearest_qrs_wins(tmp_path, fmt, device):
    noisy, clean = _two_lead_ecg(invert_second=True)
    frame = pd.DataFrame({"a": noisy, "b": clean})
    if fmt == "csv":
        path = _write_csv(tmp_path / "two.csv", frame, header=False)
    elif fmt == "npy":
        path = tmp_path / "two.npy"
        np.save(path, frame.to_numpy())
    else:
        path = tmp_path / "two.parquet"
        frame.to_parquet(path)
    recording = load_ecg(path, device=device)
    assert recording.channel in ("column 1", "b")
    assert recording.lead_reason.startswith("clearest QRS of 2 leads")
    np.testing.assert_allclose(_host(recording), clean, atol=1e-4)
    first = load_ecg(path, column=0, device=device)  # --column / --lead still decide
    assert first.channel in ("column 0", "a") and first.lead_reason.startswith("chosen by the user")


def test_lead_ii_by_name_wins_over_clarity(tmp_path, device):
    noisy, clean = _two_lead_ecg()
    path = _write_csv(tmp_path / "named.csv", pd.DataFrame({"time": np.arange(noisy.size) / FS, "V1": clean,
                                                            "Lead II": noisy}))
    recording = load_ecg(path, device=device)
    assert recording.channel == "Lead II" and recording.lead_reason.startswith("lead II by name")


@pytest.mark.parametrize("names", [("ECG1", "ECG2"), ("ch1", "lead2"), ("ECG 1", "ECG 2")])
def test_a_channel_number_is_not_lead_ii(tmp_path, names):
    """Holter channels named by number (ECG1/ECG2) are not limb leads: the clearer QRS is read, and a
    second channel with a poorer QRS is not taken for lead II by its number."""
    noisy, clean = _two_lead_ecg()
    path = _write_csv(tmp_path / "holter.csv", pd.DataFrame({names[0]: clean, names[1]: noisy}))
    recording = load_ecg(path)
    assert recording.channel == names[0] and "lead II" not in recording.lead_reason


def test_wfdb_mlii_second_channel_is_chosen(tmp_path, device):
    """A record whose first channel is V5 and second MLII (as some MIT-BIH records are) is read on MLII."""
    import wfdb

    noisy, clean = _two_lead_ecg()
    wfdb.wrsamp("rec", fs=250.0, units=["mV", "mV"], sig_name=["V5", "MLII"],
                p_signal=np.stack([clean, noisy], axis=1).astype(np.float64), fmt=["16", "16"],
                adc_gain=[200.0, 200.0], baseline=[0, 0], write_dir=str(tmp_path))
    recording = load_ecg(tmp_path / "rec.hea", device=device)
    assert recording.channel == "MLII" and "lead II by name" in recording.lead_reason
    np.testing.assert_allclose(_host(recording), noisy, atol=0.01)
    assert load_ecg(tmp_path / "rec.hea", column="V5", device=device).channel == "V5"


def test_the_other_lead_is_an_ecg_lead_not_a_pressure_or_breathing_signal(tmp_path):
    """A record of lead II, arterial pressure and V5 (as PhysioNet's multi-parameter records are):
    the second lead read beside lead II is V5, not the pressure, and the leads drawn are II and V5;
    with lead II and breathing alone, there is no second lead."""
    import wfdb

    from pipeline.load import load_leads, load_other_lead

    noisy, clean = _two_lead_ecg()
    pressure = (80 + 40 * np.abs(np.sin(np.arange(clean.size) / 100))).astype(np.float64)
    wfdb.wrsamp("icu", fs=250.0, units=["mV", "mmHg", "mV"], sig_name=["II", "ABP", "V5"],
                p_signal=np.stack([clean, pressure, noisy], axis=1).astype(np.float64), fmt=["16"] * 3,
                adc_gain=[200.0, 10.0, 200.0], baseline=[0, 0, 0], write_dir=str(tmp_path))
    name, other, _ = load_other_lead(load_ecg(tmp_path / "icu.hea"))
    assert name == "V5"
    np.testing.assert_allclose(other, noisy, atol=0.01)
    names, values = load_leads(tmp_path / "icu.hea")
    assert names == ["II", "V5"] and values.shape == (clean.size, 2)
    np.testing.assert_allclose(values[:, 1], noisy, atol=0.01)
    wfdb.wrsamp("sleep", fs=250.0, units=["mV", "V"], sig_name=["ECG", "Resp"],
                p_signal=np.stack([clean, pressure / 100], axis=1).astype(np.float64), fmt=["16"] * 2,
                adc_gain=[200.0, 200.0], baseline=[0, 0], write_dir=str(tmp_path))
    assert load_other_lead(load_ecg(tmp_path / "sleep.hea")).name is None


@pytest.mark.parametrize("label, unit, ecg", [
    ("II", "", True), ("MLII", "mv", True), ("V1", "", True), ("ECG2", "", True), ("EKG II", "uv", True),
    ("CH1", "", True), ("ABP", "", False), ("ART", "mmhg", False), ("PLETH", "", False), ("Resp chest", "", False),
    ("SpO2", "%", False), ("EEG Fpz-Cz", "uv", False), ("II", "mmhg", False)])
def test_which_labels_can_be_an_ecg_lead(label, unit, ecg):
    from pipeline.leads import can_be_ecg

    assert can_be_ecg(label, unit) is ecg


def test_a_signal_named_as_no_ecg_lead_is_not_analysed():
    """A pleth channel first and a noisy V2 whose QRS clarity is not twice the pleth's: by clarity
    alone the first channel would stay; by its name it is no lead, so V2 is analysed."""
    from pipeline.leads import choose_lead, qrs_clarity
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=30_000, seed=6, noise_bursts_per_hour=0))
    rng = np.random.default_rng(1)
    v2 = (ecg.signal + rng.standard_normal(ecg.signal.size) * 0.12).astype(np.float32)
    pleth = rng.standard_normal(ecg.signal.size).astype(np.float32)
    columns = {"PLETH": pleth, "V2": v2}
    assert qrs_clarity(v2, 250.0) < 2 * qrs_clarity(pleth, 250.0)
    index, reason = choose_lead(list(columns), lambda i: list(columns.values())[i], 250.0)
    assert index == 1 and reason == "the only ECG lead of 2 signals"
    index, reason = choose_lead(["PLETH"], lambda i: pleth, 250.0)
    assert index == 0 and reason == "the only lead"


def test_a_first_lead_less_clear_but_readable_is_kept(tmp_path):
    """Leads named by number, the first with noise enough to score about two thirds of the second's
    QRS clarity: it still shows every QRS complex, and it is the recording's reference lead, so it
    is read; the second only where the first is far less clear."""
    from pipeline.leads import qrs_clarity
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=60_000, seed=4, noise_bursts_per_hour=0))
    noisy = (ecg.signal + np.random.default_rng(0).standard_normal(ecg.signal.size) * 0.04).astype(np.float32)
    assert 1.25 < qrs_clarity(ecg.signal, 250.0) / qrs_clarity(noisy, 250.0) < 2.0
    path = _write_csv(tmp_path / "holter.csv", pd.DataFrame({"ECG1": noisy, "ECG2": ecg.signal}))
    recording = load_ecg(path)
    assert recording.channel == "ECG1" and recording.lead_reason.startswith("first lead")


def test_similar_leads_keep_the_first(tmp_path, leads):
    """Two leads of plain noise: neither is clearly clearer, so the first is read (as before)."""
    path = _write_csv(tmp_path / "noise.csv", leads[["V5", "MLII"]].rename(columns={"MLII": "V6"}))
    recording = load_ecg(path)
    assert recording.channel == "V5" and recording.lead_reason.startswith("first lead")


def test_distinct_names_number_the_repeats():
    from pipeline.leads import distinct_names

    assert distinct_names(["ECG", "ECG"]) == ["ECG", "ECG #2"]
    assert distinct_names(["MLII", "V1"]) == ["MLII", "V1"]
    assert distinct_names(["ECG", "ECG", "ECG #2"]) == ["ECG", "ECG #3", "ECG #2"]  # no name is taken twice
    assert distinct_names(["ECG"] * 3) == ["ECG", "ECG #2", "ECG #3"]


@pytest.mark.parametrize("fmt", ["csv", "wfdb"])
def test_leads_named_alike_are_told_apart(tmp_path, fmt, device):
    """Two channels both named "ECG" (as some databases and recorders name every channel): the
    clearer second one is analysed as "ECG #2", the first is the lead read beside it, and each is
    read again, chosen by the user and drawn under its own name. Read by name, the second lead was
    never read: the clarity compared the first with itself, and the other lead was none."""
    from pipeline.load import load_leads, load_other_lead

    noisy, clean = _two_lead_ecg()
    if fmt == "csv":
        path = tmp_path / "alike.csv"
        path.write_text("ECG,ECG\n" + "\n".join(f"{a:.5f},{b:.5f}" for a, b in zip(noisy, clean)))
    else:
        import wfdb

        wfdb.wrsamp("alike", fs=FS, units=["mV", "mV"], sig_name=["ECG_A", "ECG_B"],
                    p_signal=np.stack([noisy, clean], axis=1).astype(np.float64), fmt=["16", "16"],
                    adc_gain=[200.0, 200.0], baseline=[0, 0], write_dir=str(tmp_path))
        path = tmp_path / "alike.hea"  # wfdb writes distinct names only; PhysioNet's headers may repeat one
        path.write_text(path.read_text().replace("ECG_A", "ECG").replace("ECG_B", "ECG"))
    recording = load_ecg(path, fs=FS, device=device)
    assert recording.channel == "ECG #2" and recording.leads == ("ECG", "ECG #2")
    assert recording.lead_reason.startswith("clearest QRS of 2 leads (clarity ECG ") and "ECG #2 " in recording.lead_reason
    np.testing.assert_allclose(_host(recording), clean, atol=0.01)
    name, other, _ = load_other_lead(recording)
    assert name == "ECG"
    np.testing.assert_allclose(backend.to_host(other), noisy, atol=0.01)
    for column, expected in (("ECG", noisy), ("ECG #2", clean), (1, clean)):
        np.testing.assert_allclose(_host(load_ecg(path, fs=FS, column=column, device=device)), expected, atol=0.01)
    names, values = load_leads(path)
    assert names == ["ECG", "ECG #2"]
    np.testing.assert_allclose(values, np.stack([noisy, clean], axis=1), atol=0.01)


def test_load_leads_reads_every_lead_of_each_format(mitdb, tmp_path):
    """Every lead, for display: a WFDB record's channels, a CSV's columns but its time column, a
    2-D NPY's columns; the analysed lead among them has the values load_ecg gives."""
    from pipeline.load import load_ecg, load_leads

    names, values = load_leads(mitdb / "208.hea")
    assert names == ["MLII", "V1"] and values.shape == (650_000, 2) and values.dtype == np.float32
    np.testing.assert_array_equal(values[:, 0], load_ecg(mitdb / "208.hea").signal)

    rng = np.random.default_rng(0)
    two = rng.standard_normal((3000, 2)).astype(np.float32)
    csv = tmp_path / "two.csv"
    csv.write_text("time,I,II\n" + "\n".join(f"{i / 250},{a},{b}" for i, (a, b) in enumerate(two)))
    names, values = load_leads(csv)
    assert names == ["I", "II"] and np.allclose(values, two, atol=1e-6)
    np.save(tmp_path / "two.npy", two)
    names, values = load_leads(tmp_path / "two.npy")
    assert names == ["column 0", "column 1"] and np.array_equal(values, two)


def test_errors_become_one_line_for_a_person():
    """pipeline.one_line, which the CLI's batch table, the server's child and its page share: the
    pipeline's refusals (ValueError) as their message, anything else after its type, a message's
    first line only, and the type alone for an empty message."""
    from pipeline import one_line

    assert one_line(ValueError("x.csv: column 3 does not exist\nmore detail")) == "x.csv: column 3 does not exist"
    assert one_line(KeyError("lead")) == "KeyError: 'lead'"
    assert one_line(RuntimeError()) == "RuntimeError" and one_line(ValueError("  ")) == "ValueError"
    assert one_line(FileNotFoundError("no such file: a.csv")) == "FileNotFoundError: no such file: a.csv"
    assert one_line(FileNotFoundError("no such file: a.csv"), bare=(ValueError, OSError)) == "no such file: a.csv"
