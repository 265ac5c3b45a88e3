"""Load an ECG recording into device memory, validated.

CSV (one value per line, optional header, optional several columns), WFDB (``.hea`` + signal
files, PhysioNet), ``.npy`` and Parquet. On the GPU, CSV and Parquet are parsed by cuDF straight
into device memory and handed to CuPy without a copy; elsewhere pyarrow parses on the host.

See Also
--------
pipeline.wavelet.ricker_response : the next step.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import PipelineWarning, backend, one_line

MIN_FS, MAX_FS = 50.0, 10_000.0
# Header names of columns that index time rather than hold a lead.
TIME_COLUMNS = {"time", "t", "sec", "secs", "seconds", "time_s", "sample", "samples", "index", "elapsed time"}


def lead_indices(names) -> list[int]:
    """Indices of the columns among ``names`` that are leads (not time or sample indexes)."""
    return [i for i, name in enumerate(names) if str(name).strip().lower() not in TIME_COLUMNS]
# WFDB annotation symbols that mark heartbeats (others are rhythm, noise or comment marks).
BEAT_SYMBOLS = set("NLRBAaJSVrFejnE/fQ?")


@dataclass
class Recording:
    """One loaded lead: ``signal`` is a float32 CuPy or NumPy array."""

    signal: object
    fs: float
    source: str
    channel: str
    annotations: tuple[np.ndarray, np.ndarray] | None = None  # (sample indices, beat symbols)
    repaired_samples: int = 0
    lead_reason: str = "the only lead"  # why this lead was analysed (see choose_lead)
    leads: tuple[str, ...] = ()  # every lead of the input (time columns left out)

    @property
    def n_samples(self) -> int:
        return int(self.signal.shape[0])


def load_ecg(path, *, fs: float | None = None, column: str | int | None = None,
             device: str = "cpu", default_fs: float = 250.0, max_gap_s: float = 1.0,
             min_duration_s: float = 2.5) -> Recording:
    """Read one ECG lead from ``path`` onto ``device`` ('gpu' or 'cpu') and validate it.

    Parameters
    ----------
    path : str or Path
        ``.csv``/``.txt`` (optionally ``.gz``), a WFDB record (``.hea``, ``.dat`` or the record
        name without suffix), ``.npy`` or ``.parquet``.
    fs : float, optional
        Sampling rate in Hz; overrides the file's own. Files without one use ``default_fs``.
    column : str or int, optional
        Column name or 0-based index (CSV, Parquet, NPY) or lead name/index (WFDB). Default: the
        lead named MLII / II when there is one, else the lead with the clearest QRS complexes
        (:func:`choose_lead`); columns that index time are never leads.
    max_gap_s : float
        Runs of NaN/inf up to this long are linearly interpolated (with a warning); longer runs
        are rejected, since inventing seconds of ECG would invent beats.

    Raises
    ------
    ValueError
        With a one-line message for every kind of bad input.
    """
    path = Path(path)
    reader = _reader_for(path)
    choice = _LeadChoice(column)
    signal, file_fs, channel, annotations = reader(path, choice, device)
    rate = float(fs if fs is not None else file_fs if file_fs is not None else default_fs)
    if not (MIN_FS <= rate <= MAX_FS):
        raise ValueError(f"sampling rate {rate:g} Hz is implausible for an ECG; expected {MIN_FS:g}–{MAX_FS:g} Hz")
    signal, repaired = _repair_gaps(signal, rate, max_gap_s, path.name)
    _check_usable(signal, rate, min_duration_s, path.name)
    leads = tuple(str(choice.names[i]) for i in lead_indices(choice.names))
    return Recording(signal, rate, str(path), channel, annotations, repaired, choice.reason, leads or (channel,))


# --------------------------------------------------------------------------- lead choice
# Names of the limb lead II, where the QRS complex is usually tallest and annotators of MIT-BIH
# worked ("MLII": modified lead II), compared without case, spaces or punctuation.
LEAD_II_NAMES = {"mlii", "ii", "leadii", "ecgii", "ecg2", "lead2"}
CLEARER_BY = 1.25  # another lead replaces the first only when its QRS clarity is this much higher


def _normalised(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


def qrs_clarity(values, fs: float | None, segment_s: float = 20.0, segments: int = 3) -> float:
    """How clearly QRS complexes stand out in one lead: the median over 1-s blocks of the largest
    |x[k+1] - x[k-1]|, divided by the median |x[k+1] - x[k-1]| of the lead.

    QRS complexes are the steepest part of an ECG, once a second; noise and slow waves are not.
    About 5 for white noise, 20–60 for a lead with clear QRS complexes. Reads ``segments``
    stretches of ``segment_s`` (start, middle, end), so it costs little on long recordings.
    """
    xp = backend.xp_of(values)
    rate = fs or 250.0
    n = int(values.shape[0])
    length = min(n, int(segment_s * rate))
    starts = sorted({0, max(0, (n - length) // 2), max(0, n - length)})[:segments]
    block = max(4, int(rate))
    ratios = []
    for start in starts:
        x = values[start:start + length].astype(xp.float32)
        slope = xp.abs(x[2:] - x[:-2])
        slope = slope[xp.isfinite(slope)]
        count = slope.shape[0] // block
        if count == 0:
            continue
        typical = float(xp.median(slope))  # sync point: one scalar per segment
        peaks = float(xp.median(slope[:count * block].reshape(count, block).max(axis=1)))
        ratios.append(peaks / typical if typical > 0 else (0.0 if peaks == 0 else float("inf")))
    return float(np.median(ratios)) if ratios else 0.0


class _LeadChoice:
    """Which lead a reader returns, and why: the one asked for, else :func:`choose_lead`."""

    def __init__(self, column):
        self.column = column
        self.reason = "the only lead"
        self.names: list[str] = []

    def pick(self, names: list[str], path: Path, read, fs: float | None = None) -> int:
        """Index among ``names``; ``read(index)`` gives a lead's values when they must be compared."""
        self.names = list(names)
        if self.column is not None:
            index = _pick_column(names, self.column, path)
            self.reason = f"chosen by the user ({self.column!r})"
            return index
        index, self.reason = choose_lead(names, read, fs)
        return index


def choose_lead(names: list[str], read, fs: float | None = None) -> tuple[int, str]:
    """The lead to analyse among ``names`` and why.

    Lead II (named MLII, II, lead II …) when there is one; otherwise the lead whose
    :func:`qrs_clarity` is highest, when it beats the first lead's by ``CLEARER_BY``; otherwise the
    first lead. Columns that index time (``time``, ``sample`` …) are never leads.
    """
    leads = lead_indices(names) or [0]
    for i in leads:
        if _normalised(names[i]) in LEAD_II_NAMES:
            return i, f"lead II by name ({names[i]})" + (f" among {len(leads)} leads" if len(leads) > 1 else "")
    if len(leads) == 1:
        return leads[0], "the only lead"
    clarity = {i: qrs_clarity(read(i), fs) for i in leads}
    best = max(leads, key=lambda i: clarity[i])
    listed = ", ".join(f"{names[i]} {clarity[i]:.1f}" for i in leads)
    if best != leads[0] and clarity[best] > CLEARER_BY * clarity[leads[0]]:
        return best, f"clearest QRS of {len(leads)} leads (clarity {listed})"
    return leads[0], f"first lead; no other has a clearly clearer QRS (clarity {listed})"


def load_leads(path) -> tuple[list[str], np.ndarray]:
    """Every lead of a recording, for display: their names and their samples as host float32
    columns (n_samples, n_leads), gaps left as NaN. Columns that index time are not leads.

    See Also
    --------
    load_ecg : the one lead the pipeline analyses (validated, gaps repaired, on the device).
    """
    path = Path(path)
    reader = _reader_for(path)
    first = _LeadChoice(0)
    columns = {0: _host(reader(path, first, "cpu")[0])}
    leads = lead_indices(first.names)
    for index in leads:
        if index not in columns:
            columns[index] = _host(reader(path, _LeadChoice(index), "cpu")[0])
    return [first.names[i] for i in leads], np.stack([columns[i] for i in leads], axis=1)


def _host(values) -> np.ndarray:
    return np.asarray(backend.to_host(values), dtype=np.float32)


# --------------------------------------------------------------------------- format dispatch
def _reader_for(path: Path):
    name = path.name.lower()
    if name.endswith((".hea", ".dat")) or (not path.suffix and path.with_suffix(".hea").exists()):
        return _read_wfdb
    if not path.exists():
        raise ValueError(f"no such file: {path}")
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a recording file")
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is empty")
    if name.endswith((".csv", ".txt", ".csv.gz", ".txt.gz", ".tsv")):
        return _read_csv
    if name.endswith(".npy"):
        return _read_npy
    if name.endswith((".parquet", ".pq")):
        return _read_parquet
    raise ValueError(f"{path.name}: unknown format; expected .csv, .txt, .npy, .parquet or a WFDB .hea record")


# --------------------------------------------------------------------------- CSV
def _open(path: Path, mode: str, **kwargs):
    """Open a CSV as it is stored: gzip-compressed when it ends in .gz."""
    import gzip

    return (gzip.open if path.name.lower().endswith(".gz") else open)(path, mode, **kwargs)


def _sniff_csv(path: Path) -> tuple[str, list[str] | None, int]:
    """Delimiter, header names (None without a header) and field count, from the first few KiB.
    Rejects binary content."""
    with _open(path, "rb") as f:
        head = f.read(4096)
    if b"\0" in head:
        raise ValueError(f"{path.name} is not a text file (binary content); expected one number per line")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        if len(head) < 4096:  # a multi-byte character cut at the 4 KiB mark is fine; anything else is not
            raise ValueError(f"{path.name} is not UTF-8 text (binary content?); expected one number per line") from None
        text = head[:4000].decode("utf-8", errors="ignore")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path.name} has no data")
    first = lines[0]
    delimiter = max((",", ";", "\t"), key=first.count) if any(d in first for d in ",;\t") else ","
    fields = [f.strip().strip('"') for f in first.split(delimiter)]
    if all(_is_number(f) for f in fields if f):
        return delimiter, None, len(fields)
    if len(lines) == 1:
        raise ValueError(f"{path.name} has a header but no data rows")
    return delimiter, fields, len(fields)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _pick_column(names: list[str], column, path: Path) -> int:
    """Index of ``column`` (name, index or None) among the file's column names.
    None picks the first column that is not a time index."""
    if column is None:
        return next(iter(lead_indices(names)), 0)
    if isinstance(column, int) or (isinstance(column, str) and column.isdigit()):
        index = int(column)
        if not 0 <= index < len(names):
            raise ValueError(f"{path.name} has {len(names)} column(s); column index {index} does not exist")
        return index
    if column not in names:
        raise ValueError(f"{path.name} has no column {column!r}; columns are {', '.join(map(repr, names))}")
    return names.index(column)


def _read_csv(path: Path, choice: _LeadChoice, device):
    delimiter, header, n_fields = _sniff_csv(path)
    names = header or [f"column {i}" for i in range(n_fields)]
    read = _read_csv_cudf if device == "gpu" else _read_csv_pyarrow
    parsed = {}

    def values_of(index):
        if index not in parsed:
            parsed[index] = read(path, index, delimiter, header is not None)
        return parsed[index]

    index = choice.pick(names, path, values_of)
    return values_of(index), None, names[index], _sidecar_annotations(path)


def _read_csv_pyarrow(path, index, delimiter, has_header):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read_opts = pacsv.ReadOptions(autogenerate_column_names=not has_header, block_size=1 << 24)
    # A blank line is a missing sample (a gap to repair), not nothing: skipping it would shift time.
    parse_opts = pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=False)
    try:  # the header alone gives the names, so that only the chosen column is converted
        names = pacsv.open_csv(path, read_options=read_opts, parse_options=parse_opts).schema.names
        if index >= len(names):
            raise ValueError(f"{path.name} has {len(names)} column(s); column index {index} does not exist")
        convert = pacsv.ConvertOptions(include_columns=[names[index]], column_types={names[index]: pa.float32()})
        table = pacsv.read_csv(path, read_options=read_opts, parse_options=parse_opts, convert_options=convert)
    except pa.ArrowInvalid as err:
        raise ValueError(f"{path.name}: {_describe_arrow_error(err, path, index, delimiter, has_header)}") from None
    return _writable_float32(table.column(0).to_numpy(zero_copy_only=False))


def _read_csv_cudf(path, index, delimiter, has_header):
    """Parse on the GPU straight to float32; nulls are either empty cells (gaps) or text."""
    import cudf

    options = dict(sep=delimiter, header=0 if has_header else None, usecols=[index], skip_blank_lines=False)
    try:
        frame = cudf.read_csv(path, dtype=["float32"], **options)
    except Exception as err:  # cuDF raises RuntimeError/ValueError subclasses of its own
        raise ValueError(f"{path.name}: not a readable CSV ({_first_line(err)})") from None
    series = frame[frame.columns[0]]
    if series.has_nulls:
        text = cudf.read_csv(path, dtype=["str"], **options)[frame.columns[0]]
        bad = text[~text.str.strip().str.isfloat() & (text.str.strip() != "") & text.notna()]
        if len(bad):
            value = bad.iloc[0]
            line = _line_of(path, index, delimiter, has_header, value) or int(bad.index[0]) + 1 + int(has_header)
            raise ValueError(f"{path.name}: line {line} holds {value!r}, which is not a number")
        series = series.fillna(np.nan)  # empty cells: gaps, repaired or rejected like 'nan' text
    return backend.cudf_to_cupy(series)


def _describe_arrow_error(err, path: Path, index: int, delimiter: str, has_header: bool) -> str:
    """Turn pyarrow's conversion error into 'line N holds 'x', which is not a number'.
    pyarrow names the value but (in recent releases) not the row, so the line is looked up."""
    import re

    text = _first_line(err)
    match = re.search(r"CSV conversion error to float: invalid value '(.*)'", text)
    if match:
        value = match.group(1)
        line = _line_of(path, index, delimiter, has_header, value)
        return f"{f'line {line}' if line else 'a line'} holds {value!r}, which is not a number"
    return f"not a readable CSV ({text})"


def _line_of(path: Path, index: int, delimiter: str, has_header: bool, value: str) -> int | None:
    """1-based line number (as an editor shows it) of the first data row whose field ``index`` is
    ``value``. Only called to word an error, so a plain scan of the text is fine."""
    wanted = value.strip().strip('"')
    with _open(path, "rt", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if number == 1 and has_header:
                continue
            fields = line.rstrip("\r\n").split(delimiter)
            if index < len(fields) and fields[index].strip().strip('"') == wanted:
                return number
    return None


def _first_line(err) -> str:
    """A library's error as a line inside the pipeline's own message (which names the file)."""
    return one_line(err, bare=(BaseException,))


def _sidecar_annotations(path: Path):
    from pipeline.synth import annotations_path, read_annotations

    side = annotations_path(path)
    return read_annotations(side) if side.exists() else None


# --------------------------------------------------------------------------- WFDB, NPY, Parquet
def _read_wfdb(path: Path, choice: _LeadChoice, device):
    import wfdb

    record_path = path.with_suffix("") if path.suffix.lower() in (".hea", ".dat") else path
    if not record_path.with_suffix(".hea").exists():
        raise ValueError(f"no such WFDB record: {record_path.with_suffix('.hea')} does not exist")
    try:
        header = wfdb.rdheader(str(record_path))
    except Exception as err:
        raise ValueError(f"cannot read WFDB header {record_path.name}.hea: {_first_line(err)}") from None
    leads = list(header.sig_name or [])
    if not leads:
        raise ValueError(f"WFDB header {record_path.name}.hea lists no signals")

    def read(index):
        try:
            record = wfdb.rdrecord(str(record_path), channels=[index])
        except Exception as err:
            raise ValueError(f"cannot read WFDB record {record_path.name}: {_first_line(err)}") from None
        return np.ascontiguousarray(record.p_signal[:, 0], dtype=np.float32)

    cached = functools.cache(read)  # a lead read to compare clarity is not read again
    index = choice.pick(leads, record_path.with_suffix(".hea"), cached, float(header.fs))
    lead = leads[index]
    values = cached(index)
    annotations = None
    if record_path.with_suffix(".atr").exists():
        ann = wfdb.rdann(str(record_path), "atr")
        symbols = np.asarray(ann.symbol)
        is_beat = np.isin(symbols, list(BEAT_SYMBOLS))
        annotations = (np.asarray(ann.sample, dtype=np.int64)[is_beat], symbols[is_beat])
    return _to_device(values, device), float(header.fs), lead, annotations


def _read_npy(path: Path, choice: _LeadChoice, device):
    try:
        values = np.load(path, allow_pickle=False, mmap_mode="r")
    except Exception as err:
        raise ValueError(f"{path.name}: not a readable .npy file ({_first_line(err)})") from None
    if values.dtype.kind not in "fiu":
        raise ValueError(f"{path.name}: array dtype {values.dtype} is not numeric")
    if values.ndim not in (1, 2):
        raise ValueError(f"{path.name}: expected a 1-D or 2-D (samples, leads) array; got shape {values.shape}")
    names = [f"column {i}" for i in range(values.shape[1] if values.ndim == 2 else 1)]
    index = choice.pick(names, path, lambda i: np.asarray(values[:, i] if values.ndim == 2 else values, np.float32))
    channel = names[index]
    values = _writable_float32(values[:, index] if values.ndim == 2 else values)
    return _to_device(values, device), None, channel, _sidecar_annotations(path)


def _read_parquet(path: Path, choice: _LeadChoice, device):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path.name}: not a readable Parquet file ({_first_line(err)})") from None

    def read(index):  # host values of one column, to compare the leads' clarity
        data = pq.read_table(path, columns=[names[index]]).column(0)
        if not (pa.types.is_floating(data.type) or pa.types.is_integer(data.type)):
            return np.zeros(1, np.float32)  # not numbers: never the clearest lead
        return data.to_numpy(zero_copy_only=False).astype(np.float32)

    name = names[choice.pick(names, path, read)]
    if device == "gpu":
        import cudf

        series = cudf.read_parquet(path, columns=[name])[name]
        if series.dtype.kind not in "fiu":
            raise ValueError(f"{path.name}: column {name!r} has type {series.dtype}, not numbers")
        series = series.astype("float32").fillna(np.nan) if series.has_nulls else series.astype("float32")
        return backend.cudf_to_cupy(series), None, name, _sidecar_annotations(path)
    column_data = pq.read_table(path, columns=[name]).column(name)
    if not (pa.types.is_floating(column_data.type) or pa.types.is_integer(column_data.type)):
        raise ValueError(f"{path.name}: column {name!r} has type {column_data.type}, not numbers")
    return _writable_float32(column_data.to_numpy(zero_copy_only=False)), None, name, _sidecar_annotations(path)


def _writable_float32(values) -> np.ndarray:
    """Arrow hands out read-only views; kernels are compiled for writable float32 arrays."""
    return np.require(values, np.float32, ["C_CONTIGUOUS", "WRITEABLE"])


def _to_device(values: np.ndarray, device: str):
    return backend.host_to_device(values) if device == "gpu" else values


# --------------------------------------------------------------------------- validation
def _repair_gaps(signal, fs: float, max_gap_s: float, name: str):
    """Interpolate short runs of NaN/inf linearly; reject long ones. Returns (signal, n_repaired)."""
    xp = backend.xp_of(signal)
    bad = ~xp.isfinite(signal)
    n_bad = int(bad.sum())  # sync point: one scalar
    if n_bad == 0:
        return signal, 0
    n = signal.shape[0]
    if n_bad == n:
        raise ValueError(f"{name}: every value is NaN or infinite")
    edges = xp.diff(bad.astype(xp.int8), prepend=xp.int8(0), append=xp.int8(0))
    starts, ends = xp.flatnonzero(edges == 1), xp.flatnonzero(edges == -1)
    runs = ends - starts
    longest = int(runs.max())
    if longest > max_gap_s * fs:
        at = int(starts[int(runs.argmax())])
        raise ValueError(f"{name}: {longest} consecutive NaN/inf samples ({longest / fs:.2f} s) from sample {at}; "
                         f"at most {max_gap_s:g} s can be interpolated")
    good = xp.flatnonzero(~bad)
    repaired = signal.copy()
    repaired[bad] = xp.interp(xp.flatnonzero(bad).astype(xp.float64), good.astype(xp.float64),
                              signal[good].astype(xp.float64)).astype(xp.float32)
    warnings.warn(f"{name}: interpolated {n_bad} NaN/inf samples in {int(runs.shape[0])} gap(s), "
                  f"longest {longest / fs * 1000:.0f} ms", PipelineWarning, stacklevel=3)
    return repaired, n_bad


def _check_usable(signal, fs: float, min_duration_s: float, name: str) -> None:
    n = int(signal.shape[0])
    if n < min_duration_s * fs:
        raise ValueError(f"{name}: recording too short: {n} samples ({n / fs:.2f} s at {fs:g} Hz); "
                         f"at least {min_duration_s:g} s are needed to find a beat")
    lo, hi = float(signal.min()), float(signal.max())  # sync point: two scalars
    if hi - lo <= 1e-6 * max(1.0, abs(hi), abs(lo)):
        raise ValueError(f"{name}: the signal is flat (all values ≈ {lo:g}): there are no heartbeats to find")
