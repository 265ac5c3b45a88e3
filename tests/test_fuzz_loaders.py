"""Property-based tests of the loaders (pipeline.load) with Hypothesis: any bytes, and valid files
mutated (truncated, bytes flipped, junk inserted or cut out, odd header fields), give either a
valid Recording or one InputError line naming the file: never another exception, never a hang.

Readers are called in-process for speed; one subprocess test shows the CLI turning such a refusal
into one stderr line and exit status 2. Examples are derandomised and no example database is kept,
so every CI run tries the same cases.
"""
from __future__ import annotations

import gzip
import io
import math
import subprocess
import sys
import tempfile
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import PipelineWarning
from pipeline.load import load_ecg
from pipeline.readers import MAX_FS, MIN_FS, InputError

REPO = Path(__file__).resolve().parents[1]
FS = 250.0
N = 800  # 3.2 s at 250 Hz: just above the 2.5 s a recording needs, so mutations land on both sides
STEM = "fuzz"  # every file is named fuzz.<suffix>, so that a message can be checked for the name


def _fuzz(max_examples: int):
    """Settings of one fuzz test: fixed examples (derandomised, no database), a deadline that flags
    a reader that waits or loops (generous, for a loaded CI machine)."""
    return settings(max_examples=max_examples, deadline=timedelta(seconds=5), derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory(prefix="fuzz-loaders-") as name:
        yield Path(name)


def _write(folder: Path, suffix: str, content: bytes) -> Path:
    path = folder / f"{STEM}{suffix}"
    path.write_bytes(content)
    return path


def _load_or_refuse(path: Path, **kwargs):
    """load_ecg's outcome, checked: a valid Recording, or an InputError of one printable line that
    names the file and chains no library error. Any other exception fails the test."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PipelineWarning)  # repaired gaps are a valid outcome
            recording = load_ecg(path, device="cpu", **kwargs)
    except InputError as err:
        message = str(err)
        assert message and message.isprintable() and len(message) < 600, message
        assert STEM in message, message
        assert err.__context__ is None or err.__suppress_context__, repr(err.__context__)
        return None
    signal = recording.signal
    assert isinstance(signal, np.ndarray) and signal.dtype == np.float32 and signal.ndim == 1
    assert MIN_FS <= recording.fs <= MAX_FS and math.isfinite(recording.fs)
    assert signal.shape[0] >= 2.5 * recording.fs and np.isfinite(signal).all()
    assert isinstance(recording.channel, str)
    return recording


def _fuzz_file(suffix: str, content, max_examples: int):
    """A fuzz test: every example of the strategy ``content``, written as a ``suffix`` file, loads or is
    refused as :func:`_load_or_refuse` allows."""
    @_fuzz(max_examples)
    @given(content=content)
    def test(folder, content):
        _load_or_refuse(_write(folder, suffix, content))
    return test


# --------------------------------------------------------------------------- mutations
def _flip(base: bytes, flips) -> bytes:
    data = bytearray(base)
    for position, mask in flips:
        data[position % len(data)] ^= mask
    return bytes(data)


def mutations(base: bytes, header_bytes: int | None = None):
    """Structured damage to a valid file: truncation, flipped bytes (anywhere, or within its first
    ``header_bytes``), junk inserted, a span cut out."""
    size = len(base)
    near = header_bytes or size
    return st.one_of(
        st.integers(0, size - 1).map(lambda n: base[:n]),
        st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 255)), min_size=1, max_size=6)
        .map(lambda flips: _flip(base, flips)),
        st.lists(st.tuples(st.integers(0, near - 1), st.integers(1, 255)), min_size=1, max_size=3)
        .map(lambda flips: _flip(base, flips)),
        st.tuples(st.integers(0, size), st.binary(min_size=1, max_size=48))
        .map(lambda t: base[:t[0]] + t[1] + base[t[0]:]),
        st.tuples(st.integers(0, size - 1), st.integers(1, 256)).map(lambda t: base[:t[0]] + base[t[0] + t[1]:]),
    )


def _walk(n: int = N, leads: int = 1) -> np.ndarray:
    return np.cumsum(np.random.default_rng(5).standard_normal((n, leads)), axis=0).round(4)


# --------------------------------------------------------------------------- CSV and gzip
def _csv(kind: str) -> bytes:
    values = _walk(leads=2)
    if kind == "one column":
        rows = [f"{a:.4f}" for a, _ in values]
    elif kind == "header":
        rows = ["time,MLII,V5"] + [f"{i / FS:.3f},{a:.4f},{b:.4f}" for i, (a, b) in enumerate(values)]
    elif kind == "decimal comma":
        rows = [f"{a:.3f}".replace(".", ",") for a, _ in values]
    else:  # semicolons and decimal commas, as a spreadsheet in many locales writes them
        rows = ["time;ecg"] + [f"{i / FS:.3f};{a:.3f}".replace(".", ",") for i, (a, _) in enumerate(values)]
    return ("\n".join(rows) + "\n").encode()


CSV_KINDS = ("one column", "header", "decimal comma", "semicolons")
CSV_BASES = {kind: _csv(kind) for kind in CSV_KINDS}
FIELDS = ["0", "1", "-0,5", "0,05", "0.25", "-1.5e-3", "1e9", "nan", "inf", "-inf", "", "abc", '"', '"1"', "-",
          "1,2,3", "1.2.3", "MLII", "time", "é", "\u2028", "\x1b[31m", "\r", "99999999999999999999"]


@st.composite
def edited_csv(draw):
    """A valid CSV of each kind with whole lines replaced by fields drawn from odd values."""
    lines = CSV_BASES[draw(st.sampled_from(CSV_KINDS))].decode().split("\n")
    for _ in range(draw(st.integers(1, 4))):
        delimiter = draw(st.sampled_from([",", ";", "\t", " "]))
        line = delimiter.join(draw(st.lists(st.sampled_from(FIELDS), max_size=4)))
        lines[draw(st.integers(0, len(lines) - 1))] = line
    return "\n".join(lines).encode()


test_csv_any_bytes = _fuzz_file(".csv", st.binary(max_size=4096), 300)


test_csv_mutated = _fuzz_file(
    ".csv", st.sampled_from(CSV_KINDS).flatmap(lambda kind: mutations(CSV_BASES[kind], 64)), 300)


test_csv_odd_lines = _fuzz_file(".csv", edited_csv(), 200)


GZ_BASE = gzip.compress(CSV_BASES["header"], mtime=0)


test_gzip_mutated = _fuzz_file(
    ".csv.gz", st.one_of(mutations(GZ_BASE, 32), st.binary(max_size=512).map(lambda b: b"\x1f\x8b\x08\x00" + b)), 250)


test_gzip_odd_lines = _fuzz_file(".csv.gz", edited_csv().map(lambda text: gzip.compress(text, mtime=0)), 100)


# --------------------------------------------------------------------------- WFDB
def _wfdb_base() -> tuple[str, bytes]:
    import wfdb

    with tempfile.TemporaryDirectory() as name:
        wfdb.wrsamp(STEM, fs=FS, units=["mV", "mV"], sig_name=["MLII", "V5"], p_signal=_walk(leads=2),
                    fmt=["16", "16"], adc_gain=[200.0, 200.0], baseline=[0, 0], write_dir=name)
        return (Path(name) / f"{STEM}.hea").read_text(), (Path(name) / f"{STEM}.dat").read_bytes()


HEA_BASE, DAT_BASE = _wfdb_base()
HEADER_FIELDS = ["-5", "1e9", "nan", "inf", "0", "360", "250/500(0)", "abc", "0.0001", "99999999999", "-1", "1.5",
                 "~", "../fuzz.dat", "/dev/zero", ".", "fuzz.dat", "other.dat", "16", "212", "8", "80", "310", "24",
                 "508", "200(0)/mV", "0(0)/mV", "-200/uV", "#", "MLII", "é", "12:00:00", "01/01/2000", "1x2:3+4"]


@st.composite
def edited_header(draw):
    """The record's header with fields replaced by odd values, lines dropped or repeated, comments."""
    lines = [line.split(" ") for line in HEA_BASE.strip("\n").split("\n")]
    for _ in range(draw(st.integers(1, 4))):
        line = lines[draw(st.integers(0, len(lines) - 1))]
        line[draw(st.integers(0, len(line) - 1))] = draw(st.sampled_from(HEADER_FIELDS))
    text = [" ".join(line) for line in lines]
    edit = draw(st.sampled_from(["none", "drop a line", "repeat a line", "comment first"]))
    if edit == "drop a line":
        text.pop(draw(st.integers(0, len(text) - 1)))
    elif edit == "repeat a line":
        text.append(text[draw(st.integers(0, len(text) - 1))])
    elif edit == "comment first":
        text.insert(0, "# " + draw(st.sampled_from(HEADER_FIELDS)))
    return "\n".join(text) + "\n"


def _write_record(folder: Path, header: bytes, signal: bytes) -> Path:
    _write(folder, ".dat", signal)
    return _write(folder, ".hea", header)


@_fuzz(250)
@given(header=edited_header())
def test_wfdb_odd_header_fields(folder, header):
    _load_or_refuse(_write_record(folder, header.encode(), DAT_BASE))


@_fuzz(150)
@given(header=st.one_of(mutations(HEA_BASE.encode()), st.binary(max_size=256)))
def test_wfdb_header_any_bytes(folder, header):
    _load_or_refuse(_write_record(folder, header, DAT_BASE))


@_fuzz(120)
@given(signal=mutations(DAT_BASE))
def test_wfdb_signal_mutated(folder, signal):
    _load_or_refuse(_write_record(folder, HEA_BASE.encode(), signal))


# --------------------------------------------------------------------------- NPY
def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


NPY_BASES = [_npy_bytes(_walk().ravel().astype(np.float32)), _npy_bytes(_walk(leads=2))]
DESCRS = ["'<f4'", "'>f8'", "'<i2'", "'|u1'", "'<f2'", "'<U1'", "'|O'", "'<c8'", "'|b1'", "'|V8'", "[('a', '<f4')]",
          "'<M8[s]'", "'x'", "1"]
SHAPES = ["(800,)", "(800, 2)", "(2, 800)", "(800, 0)", "(0,)", "()", "(10, 10, 8)", "(-1,)", "(99999999999,)",
          "(400, 2)", "(800", "'800'"]


@st.composite
def npy_with_odd_header(draw):
    """An .npy whose header dictionary holds odd dtypes, orders and shapes, over a payload of random size."""
    header = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (
        draw(st.sampled_from(DESCRS)), draw(st.sampled_from(["False", "True", "0", "'yes'"])), draw(st.sampled_from(SHAPES)))
    header = header.ljust(118) + "\n"
    payload = _walk(2000).astype("<f4").tobytes()[:draw(st.sampled_from([0, 7, 1600, 3200, 6400, 8000]))]
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + payload


test_npy_mutated = _fuzz_file(
    ".npy", st.one_of(st.sampled_from(range(len(NPY_BASES))).flatmap(lambda i: mutations(NPY_BASES[i], 128)),
                      st.binary(max_size=1024).map(lambda b: b"\x93NUMPY" + b)), 200)


test_npy_odd_headers = _fuzz_file(".npy", npy_with_odd_header(), 150)


# --------------------------------------------------------------------------- Parquet
def _parquet_bytes(compression: str) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = _walk(leads=2)
    table = pa.table({"time": np.arange(N) / FS, "MLII": values[:, 0].astype(np.float32),
                      "counts": (values[:, 1] * 200).astype(np.int16), "note": ["x"] * N})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression=compression)
    return buffer.getvalue()


PARQUET_BASES = [_parquet_bytes("none"), _parquet_bytes("snappy")]


test_parquet_mutated = _fuzz_file(".parquet", st.one_of(
    st.sampled_from(range(len(PARQUET_BASES))).flatmap(lambda i: mutations(PARQUET_BASES[i], 64)),
    # the footer (schema, row groups) sits at the end: damage it there too
    st.sampled_from(range(len(PARQUET_BASES))).flatmap(
        lambda i: st.lists(st.tuples(st.integers(len(PARQUET_BASES[i]) - 400, len(PARQUET_BASES[i]) - 9),
                                     st.integers(1, 255)), min_size=1, max_size=4)
        .map(lambda flips, i=i: _flip(PARQUET_BASES[i], flips))),
    st.binary(max_size=512).map(lambda b: b"PAR1" + b + b"PAR1")), 250)


@_fuzz(80)
@given(column=st.one_of(st.sampled_from(["MLII", "counts", "note", "time", "missing"]), st.integers(-1, 5)))
def test_parquet_any_column(folder, column):
    _load_or_refuse(_write(folder, ".parquet", PARQUET_BASES[1]), column=column)


# --------------------------------------------------------------------------- the CLI
def test_cli_turns_a_malformed_file_into_one_line_and_exit_2(tmp_path):
    """A damaged gzip stream (a library's zlib error inside) and a Parquet file cut short (its footer
    gone), through ``python -m pipeline run``: exit status 2, one 'error:' line naming the file, no
    traceback."""
    damaged = {"fuzz.csv.gz": _flip(GZ_BASE, [(len(GZ_BASE) // 2, 0xFF)]),
               "fuzz.parquet": PARQUET_BASES[0][:len(PARQUET_BASES[0]) // 2]}
    for name, content in damaged.items():
        path = tmp_path / name
        path.write_bytes(content)
        result = subprocess.run([sys.executable, "-m", "pipeline", "run", str(path), "--device", "cpu", "--quiet",
                                 "--out", str(tmp_path / "runs")], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(f"error: {name}: "), result.stderr
        assert result.stdout == ""
