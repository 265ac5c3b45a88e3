"""Load an ECG recording into device memory, validated.

CSV (one value per line, optional header, optional several columns, a decimal point or a
decimal comma), WFDB (``.hea`` + signal files, PhysioNet), ``.npy``, Parquet and EDF/EDF+/BDF
(:mod:`pipeline.edf`). On the GPU, CSV is
parsed by cuDF straight into device memory and handed to CuPy without a copy; elsewhere pyarrow
parses on the host. A Parquet column is decoded by pyarrow on the host on either device (cuDF's
reader hung on a file with damaged compressed pages, which pyarrow refuses) and then copied.

Every malformed input ends in one :class:`InputError` (a ValueError) whose message is one line
naming the file: the readers turn the libraries' errors (zlib, gzip, pyarrow, NumPy, wfdb) into it
at this module's boundary, and only regular files are opened (a FIFO would block for ever).

See Also
--------
pipeline.wavelet.ricker_response : the next step.
"""
from __future__ import annotations

import contextlib
import csv
import functools
import math
import re
import stat
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pipeline import PipelineWarning, backend, one_line

MIN_FS, MAX_FS = 50.0, 10_000.0
# An ECG lead, even from a coarse 8-bit recorder, takes dozens of distinct values; fewer than this
# many is a status or marker channel, 1-bit noise, or a signal stored in too coarse a unit.
MIN_LEVELS = 8
# Header names of columns that index time rather than hold a lead.
TIME_COLUMNS = {"time", "t", "sec", "secs", "seconds", "time_s", "sample", "samples", "index", "elapsed time"}


def lead_indices(names) -> list[int]:
    """Indices of the columns among ``names`` that are leads (not time or sample indexes)."""
    return [i for i, name in enumerate(names) if str(name).strip().lower() not in TIME_COLUMNS]
# WFDB annotation symbols that mark heartbeats (others are rhythm, noise or comment marks).
BEAT_SYMBOLS = set("NLRBAaJSVrFejnE/fQ?")


class InputError(ValueError):
    """Bad input: the message is one line naming the file (or option) and what is wrong with it.
    The CLI prints it as ``error: …`` and exits with status 2.

    Characters that a terminal would not print as themselves (line breaks, escape sequences from a
    file's bytes or name) are shown escaped, so the message stays one harmless line.
    """

    def __init__(self, message: str):
        super().__init__(_printable(message))


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))


def check_sampling_rate(rate, name: str, source: str) -> float:
    """``rate`` as a float when it is a plausible ECG sampling rate (finite, ``MIN_FS``–``MAX_FS``
    Hz); else an :class:`InputError` naming ``name`` (the file or option), the value and ``source``
    (where the rate came from)."""
    try:
        value = float(rate)
    except (TypeError, ValueError):
        raise InputError(f"{name}: sampling rate {rate!r} is not a number; it came from {source}") from None
    if not (math.isfinite(value) and MIN_FS <= value <= MAX_FS):
        raise InputError(f"{name}: sampling rate {value:g} Hz is implausible for an ECG; "
                         f"expected {MIN_FS:g}–{MAX_FS:g} Hz; it came from {source}")
    return value


def _plausible_rate(rate) -> float | None:
    """``rate`` when it is a plausible ECG sampling rate, else None (for estimates that may fall back)."""
    return rate if rate is not None and math.isfinite(rate) and MIN_FS <= rate <= MAX_FS else None


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
        name without suffix), ``.npy``, ``.parquet``, or ``.edf``/``.bdf`` (EDF, EDF+, BDF).
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
    InputError
        A ValueError with a one-line message naming the file for every kind of bad input: no
        regular file (a folder, FIFO, device), damaged compression or content, a sampling rate
        outside ``MIN_FS``–``MAX_FS`` Hz (given, from the file, or the default), long gaps, too
        short, flat, or fewer than ``MIN_LEVELS`` distinct values (no ECG is so coarse).
    """
    path = Path(path)
    if fs is not None:  # checked before anything is read
        rate = check_sampling_rate(fs, path.name, "the fs argument")
    reader = _reader_for(path)
    choice = _LeadChoice(column)
    signal, file_fs, channel, annotations = _read(reader, path, choice, device)
    if fs is None:  # the file's own rate, else the default: each checked where it is used
        rate = (check_sampling_rate(file_fs, _rate_source(path), "the record's header") if file_fs is not None
                else check_sampling_rate(default_fs, path.name, "the default rate; the file carries none"))
    signal, repaired = _repair_gaps(signal, rate, max_gap_s, path.name)
    _check_usable(signal, rate, min_duration_s, path.name)
    leads = tuple(str(choice.names[i]) for i in lead_indices(choice.names))
    return Recording(signal, rate, str(path), channel, annotations, repaired, choice.reason, leads or (channel,))


# --------------------------------------------------------------------------- lead choice
# Names of the limb lead II, where the QRS complex is usually tallest and annotators of MIT-BIH
# worked ("MLII": modified lead II), compared without case, spaces or punctuation. Only names that
# say lead II: "ECG2" or "ch2" number a recorder's channels (a Holter's second channel is often a
# precordial lead), so a channel number never counts as lead II.
LEAD_II_NAMES = {"mlii", "ii", "leadii", "ecgii", "limbleadii", "ecgmlii", "ekgii"}  # EDF+: "ECG MLII", "EKG II"
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
        with np.errstate(invalid="ignore"):  # gaps not yet repaired give non-finite slopes, dropped here
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
    columns = {0: _host(_read(reader, path, first, "cpu")[0])}
    leads = lead_indices(first.names)
    for index in leads:
        if index not in columns:
            columns[index] = _host(_read(reader, path, _LeadChoice(index), "cpu")[0])
    return [first.names[i] for i in leads], np.stack([columns[i] for i in leads], axis=1)


def _read(reader, path: Path, choice: "_LeadChoice", device: str):
    """``reader(path, choice, device)``, with the errors a library raises on a malformed file
    (decompression, decoding, parsing, a short read) turned into one :class:`InputError` naming the
    file. The readers word the errors they expect; this catches what they did not foresee."""
    try:
        return reader(path, choice, device)
    except InputError:
        raise
    except (ValueError, OSError, EOFError, zlib.error) as err:  # UnicodeError, pyarrow's errors are among them
        raise InputError(f"{path.name}: cannot be read ({_first_line(err)})") from None


def _rate_source(path: Path) -> str:
    """Name of the file a recording's own sampling rate was read from (a WFDB record's header)."""
    return path.with_suffix(".hea").name if path.suffix.lower() in ("", ".dat") else path.name


def _host(values) -> np.ndarray:
    return np.asarray(backend.to_host(values), dtype=np.float32)


# --------------------------------------------------------------------------- format dispatch
def _reader_for(path: Path):
    name = path.name.lower()
    if name.endswith((".hea", ".dat")) or (not path.suffix and path.with_suffix(".hea").exists()):
        return _read_wfdb
    check_regular_file(path)
    if path.stat().st_size == 0:
        raise InputError(f"{path} is empty")
    if name.endswith((".csv", ".txt", ".csv.gz", ".txt.gz", ".tsv")):
        return _read_csv
    if name.endswith(".npy"):
        return _read_npy
    if name.endswith((".parquet", ".pq")):
        return _read_parquet
    if name.endswith((".edf", ".bdf")):
        return _read_edf
    raise InputError(f"{path.name}: unknown format; expected .csv, .txt, .npy, .parquet or a WFDB .hea record, or "
                     ".edf/.bdf (EDF, EDF+, BDF)")


_FILE_KINDS = {stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISSOCK: "a socket", stat.S_ISCHR: "a character device",
               stat.S_ISBLK: "a block device"}


def check_regular_file(path, what: str = "") -> None:
    """Refuse anything but an existing regular file (symbolic links to one are fine): reading a
    FIFO or a character device such as /dev/zero would wait or run for ever, a folder cannot be read.
    ``what`` prefixes the message (e.g. ``"cannot read WFDB record 100: its signal file "``)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{what}no such file: {path}" if not what else f"{what}{path.name} does not exist") from None
    except OSError as err:
        raise InputError(f"{what}{path}: cannot be read ({err.strerror or _first_line(err)})") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{what}{path} is a directory; give a recording file")
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _FILE_KINDS.items() if test(mode)), "not a regular file")
        raise InputError(f"{what}{path} is {kind}, not a regular file; give a recording file")


# --------------------------------------------------------------------------- CSV
SNIFF_BYTES = 4096  # the CSV's layout is read from its first few KiB (decompressed)


def _open(path: Path, mode: str, **kwargs):
    """Open a CSV as it is stored: gzip-compressed when it ends in .gz."""
    import gzip

    return (gzip.open if path.name.lower().endswith(".gz") else open)(path, mode, **kwargs)


def _unreadable(path: Path, err: BaseException) -> InputError:
    """The error for a file whose bytes cannot be read back (corrupt or truncated compression, I/O)."""
    what = "corrupt or truncated gzip data" if path.name.lower().endswith(".gz") else "cannot be read"
    return InputError(f"{path.name}: {what} ({_first_line(err)})")


class _Layout(NamedTuple):
    """How a CSV is written: field delimiter, header names (None without one), field count and
    decimal mark ('.' or ',')."""

    delimiter: str
    header: list[str] | None
    n_fields: int
    decimal: str = "."


def _sniff_csv(path: Path) -> _Layout:
    """The CSV's layout, from the first few KiB. Rejects binary content and corrupt compression."""
    try:
        with _open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        raise _unreadable(path, err) from None
    if b"\0" in head:
        raise InputError(f"{path.name} is not a text file (binary content); expected one number per line")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        if len(head) < SNIFF_BYTES:  # a multi-byte character cut at the 4 KiB mark is fine; anything else is not
            raise InputError(f"{path.name} is not UTF-8 text (binary content?); expected one number per line") from None
        text = head[:SNIFF_BYTES - 96].decode("utf-8", errors="ignore")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(head) == SNIFF_BYTES and len(lines) > 2:
        lines = lines[:-1]  # the last line may be cut short
    if not lines:
        raise InputError(f"{path.name} has no data")
    layout = _decimal_comma_layout(lines)
    if layout is None:
        first = lines[0]
        delimiter = max((",", ";", "\t"), key=first.count) if any(d in first for d in ",;\t") else ","
        fields = _split_fields(first, delimiter)
        layout = _Layout(delimiter, None if all(_is_number(f) for f in fields if f) else fields, len(fields))
    if layout.header is not None and len(lines) == 1:
        raise InputError(f"{path.name} has a header but no data rows")
    if layout.n_fields > 1 and not text.split("\n", 1)[0].strip():
        # The parsers count a file's columns on its first line: a blank one gives one column, so
        # the rows do not parse (pyarrow) or a later column is read out of bounds (cuDF crashed).
        raise InputError(f"{path.name}: line 1 is blank, but the rows have {layout.n_fields} fields; "
                         "remove the blank line(s) before the first row")
    return layout


def _split_fields(line: str, delimiter: str) -> list[str]:
    """A line's fields as the CSV parsers split them (a quoted field may hold the delimiter)."""
    try:
        return [f.strip() for f in next(csv.reader([line], delimiter=delimiter), [""])]
    except csv.Error:  # a stray line break character: split plainly
        return [f.strip().strip('"') for f in line.split(delimiter)]


# One number written with a decimal comma (and no thousands separator): '-0,125', '3,2e-3'.
_COMMA_NUMBER = re.compile(r"[-+]?\d+,\d+(?:[eE][-+]?\d+)?")
# A field of a decimal-comma file that carries no comma: an integer, a gap ('', nan, inf).
_PLAIN_FIELD = re.compile(r"[-+]?\d+|[-+]?(?:nan|inf|infinity)|", re.IGNORECASE)


def _decimal_comma_layout(lines: list[str]) -> _Layout | None:
    """The layout of a CSV written with decimal commas, or None when it is not one.

    Where the comma is the decimal mark, fields are separated by ';' (or a tab): '0,125;-0,250'.
    A file of one value a line ('0,125') reads the same as two integer columns ('0' and '125'),
    so it counts as decimal only when its header names one column, or when a line could not be
    two integer columns: an integer part '-0' (an integer is never written so), or a part after
    the comma with a leading zero ('0,05'; an integer is not written '05').
    """
    separator = next((d for d in (";", "\t") if any(d in line for line in lines)), None)

    def split(line):
        return _split_fields(line, separator) if separator else [line.strip().strip('"')]

    def is_value(field):
        return bool(_COMMA_NUMBER.fullmatch(field) or _PLAIN_FIELD.fullmatch(field))

    first = split(lines[0])
    header = None if all(is_value(f) for f in first) else first
    rows = [split(line) for line in (lines[1:] if header else lines)]
    if not rows or not any("," in f for row in rows for f in row):
        return None
    if any(len(row) != len(first) or not all(is_value(f) for f in row) for row in rows):
        return None
    if separator is None and header is None:
        numbers = [_COMMA_NUMBER.fullmatch(row[0]) and row[0].split(",") for row in rows]
        if not any(n and (n[0] in ("-0", "+0") or (len(n[1]) > 1 and n[1].startswith("0"))) for n in numbers):
            return None
    if separator is None and header is not None and "," in lines[0]:
        return None  # a header of comma-separated names: commas separate fields
    return _Layout(separator or ";", header, len(first), ",")


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
            raise InputError(f"{path.name} has {len(names)} column(s); column index {index} does not exist")
        return index
    if column not in names:
        listed = ", ".join(map(repr, names[:12])) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        raise InputError(f"{path.name} has no column {column!r}; columns are {listed}")
    return names.index(column)


def _read_csv(path: Path, choice: _LeadChoice, device):
    layout = _sniff_csv(path)
    names = layout.header or [f"column {i}" for i in range(layout.n_fields)]
    read = _read_csv_cudf if device == "gpu" else _read_csv_pyarrow
    parsed = {}

    def values_of(index):
        if index not in parsed:
            parsed[index] = read(path, index, layout)
        return parsed[index]

    with _gzip_checked_beside(path, device):
        index = choice.pick(names, path, values_of)
        values = values_of(index)
    return values, None, names[index], _sidecar_annotations(path)


@contextlib.contextmanager
def _gzip_checked_beside(path: Path, device: str):
    """Around cuDF's parse of a .gz: cuDF inflates the stream (with zlib, on the host) but checks
    no CRC, so a damaged stream parsed into wrong numbers. The stream is inflated once more in a
    thread beside the parse (zlib releases the GIL; the output is dropped), which costs no wall
    time, and its CRC and length checked: a damaged stream raises here, whatever the parse gave.
    pyarrow, on the CPU, checks the CRC itself."""
    if device != "gpu" or not path.name.lower().endswith(".gz"):
        yield
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix="gzip-check")
    check = pool.submit(_check_gzip_stream, path)
    pool.shutdown(wait=False)
    try:
        yield
    finally:
        check.result()  # the InputError of a damaged stream, in place of any parse error


def _check_gzip_stream(path: Path, chunk_bytes: int = 1 << 20) -> None:
    """Inflate the whole gzip file (every member), dropping the output: an InputError when a
    member is damaged, its CRC or length does not match, or the file ends inside one."""
    try:
        with open(path, "rb") as f:
            inflater = zlib.decompressobj(wbits=31)
            while chunk := f.read(chunk_bytes):
                while chunk:
                    inflater.decompress(chunk, chunk_bytes * 16)  # bounded output; the rest waits in the tail
                    chunk = inflater.unconsumed_tail
                    if inflater.eof and inflater.unused_data:  # another member follows
                        chunk, inflater = inflater.unused_data, zlib.decompressobj(wbits=31)
            if not inflater.eof:
                raise EOFError("the file ends inside the compressed stream")
    except (OSError, EOFError, zlib.error) as err:
        raise _unreadable(path, err) from None


def _read_csv_pyarrow(path, index, layout: _Layout):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    has_header = layout.header is not None
    read_opts = pacsv.ReadOptions(autogenerate_column_names=not has_header, block_size=1 << 24)
    # A blank line is a missing sample (a gap to repair), not nothing: skipping it would shift time.
    parse_opts = pacsv.ParseOptions(delimiter=layout.delimiter, ignore_empty_lines=False)
    try:  # the header alone gives the names, so that only the chosen column is converted
        names = pacsv.open_csv(path, read_options=read_opts, parse_options=parse_opts).schema.names
        if index >= len(names):
            raise InputError(f"{path.name} has {len(names)} column(s); column index {index} does not exist")
        convert = pacsv.ConvertOptions(include_columns=[names[index]], column_types={names[index]: pa.float32()},
                                       decimal_point=layout.decimal)
        table = pacsv.read_csv(path, read_options=read_opts, parse_options=parse_opts, convert_options=convert)
    except pa.ArrowInvalid as err:
        raise InputError(f"{path.name}: {_describe_arrow_error(err, path, index, layout)}") from None
    except (pa.ArrowException, OSError, EOFError, zlib.error) as err:  # decompression, I/O
        raise _unreadable(path, err) from None
    return _writable_float32(table.column(0).to_numpy(zero_copy_only=False))


def _read_csv_cudf(path, index, layout: _Layout):
    """Parse on the GPU straight to float32; nulls are either empty cells (gaps) or text."""
    import cudf

    has_header = layout.header is not None
    options = dict(sep=layout.delimiter, header=0 if has_header else None, usecols=[index], skip_blank_lines=False)
    try:
        frame = cudf.read_csv(path, dtype=["float32"], decimal=layout.decimal, **options)
    except Exception as err:  # cuDF raises RuntimeError/ValueError subclasses of its own
        raise InputError(f"{path.name}: not a readable CSV ({_first_line(err)})") from None
    series = frame[frame.columns[0]]
    if series.has_nulls:
        text = cudf.read_csv(path, dtype=["str"], **options)[frame.columns[0]].str.strip()
        numbers = text.str.replace(",", ".", regex=False) if layout.decimal == "," else text
        bad = text[~numbers.str.isfloat() & (text != "") & text.notna()]
        if len(bad):
            value = bad.iloc[0]
            line = _line_of(path, index, layout, value) or int(bad.index[0]) + 1 + int(has_header)
            raise InputError(f"{path.name}: line {line} holds {value!r}, which is not a number")
        series = series.fillna(np.nan)  # empty cells: gaps, repaired or rejected like 'nan' text
    return backend.cudf_to_cupy(series)


def _describe_arrow_error(err, path: Path, index: int, layout: _Layout) -> str:
    """Turn pyarrow's conversion error into 'line N holds 'x', which is not a number'.
    pyarrow names the value but (in recent releases) not the row, so the line is looked up."""
    text = _first_line(err)
    match = re.search(r"CSV conversion error to float: invalid value '(.*)'", text)
    if match:
        value = match.group(1)
        line = _line_of(path, index, layout, value)
        return f"{f'line {line}' if line else 'a line'} holds {value!r}, which is not a number"
    return f"not a readable CSV ({text})"


def _line_of(path: Path, index: int, layout: _Layout, value: str) -> int | None:
    """1-based line number (as an editor shows it) of the first data row whose field ``index`` is
    ``value``. Only called to word an error, so a plain scan of the text is fine; None when the
    text cannot be scanned (corrupt compression further on)."""
    wanted = value.strip().strip('"')
    try:
        with _open(path, "rt", encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, start=1):
                if number == 1 and layout.header is not None:
                    continue
                fields = line.rstrip("\r\n").split(layout.delimiter)
                if index < len(fields) and fields[index].strip().strip('"') == wanted:
                    return number
    except (OSError, EOFError, zlib.error):
        pass
    return None


def _first_line(err) -> str:
    """A library's error as a line inside the pipeline's own message (which names the file)."""
    return one_line(err, bare=(BaseException,))


def _sidecar_annotations(path: Path):
    """The beat labels of ``<stem>.annotations.csv`` beside a recording, None without that file."""
    from pipeline.sidecar import annotations_path, read_annotations

    side = annotations_path(path)
    if not side.exists() and not side.is_symlink():
        return None
    check_regular_file(side)
    try:
        return read_annotations(side)
    except (ValueError, OSError, EOFError, zlib.error) as err:  # pyarrow's parse errors are among them
        raise InputError(f"{side.name}: cannot read the beat annotations ({_first_line(err)})") from None


# --------------------------------------------------------------------------- WFDB, NPY, Parquet
def _read_wfdb(path: Path, choice: _LeadChoice, device):
    import wfdb

    record_path = path.with_suffix("") if path.suffix.lower() in (".hea", ".dat") else path
    hea = record_path.with_suffix(".hea")
    if not hea.exists():
        raise InputError(f"no such WFDB record: {hea} does not exist")
    check_regular_file(hea)
    try:
        header = wfdb.rdheader(str(record_path))
    except Exception as err:  # wfdb raises many types (HeaderSyntaxError, ValueError, IndexError …) on a bad header
        raise InputError(f"cannot read WFDB header {record_path.name}.hea: {_first_line(err)}") from None
    leads = list(getattr(header, "sig_name", None) or [])
    if not leads:
        raise InputError(f"WFDB header {record_path.name}.hea lists no signals")
    declared = _header_rate(hea)
    file_fs = declared if declared is not None else float(header.fs)  # WFDB's own default when none is written
    _check_wfdb_files(record_path, header)

    def read(index):
        try:
            record = wfdb.rdrecord(str(record_path), channels=[index])
            values = record.p_signal[:, 0]
        except Exception as err:  # likewise for a signal file that does not match its header
            raise InputError(f"cannot read WFDB record {record_path.name}: {_first_line(err)}") from None
        return np.ascontiguousarray(values, dtype=np.float32)

    cached = functools.cache(read)  # a lead read to compare clarity is not read again
    index = choice.pick(leads, hea, cached, _plausible_rate(file_fs))
    lead = leads[index]
    values = cached(index)
    annotations = None
    atr = record_path.with_suffix(".atr")
    if atr.exists() or atr.is_symlink():
        check_regular_file(atr)
        try:
            ann = wfdb.rdann(str(record_path), "atr")
            symbols = np.asarray(ann.symbol if ann.symbol is not None else [], dtype=str)
            samples = np.asarray(ann.sample, dtype=np.int64)
        except Exception as err:
            raise InputError(f"cannot read WFDB annotations {atr.name}: {_first_line(err)}") from None
        is_beat = np.isin(symbols, list(BEAT_SYMBOLS))
        annotations = (samples[is_beat], symbols[is_beat])
    return _to_device(values, device), file_fs, lead, annotations


def _header_rate(hea: Path) -> float | None:
    """The sampling rate a WFDB header's record line declares, None where it declares none.

    Read here because wfdb reads only plain decimals there and falls back silently: '-5' gave its
    default 250 Hz, '1e9' gave 1 Hz. The value is returned as written, to be checked by the caller.
    """
    with open(hea, "rb") as f:
        text = f.read(1 << 16).decode("utf-8", errors="replace")
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 3:
            return None
        written = re.split(r"[/(]", fields[2], maxsplit=1)[0]  # 'fs/counter_frequency(base_counter)'
        try:
            return float(written)
        except ValueError:
            raise InputError(f"{hea.name}: sampling rate {fields[2]!r} is not a number") from None
    return None


def _check_wfdb_files(record_path: Path, header) -> None:
    """Refuse a record whose header names a signal file (or segment) that is not a regular file
    beside the header: a header is data, and must not send the reader to a FIFO, a device or
    another folder."""
    import wfdb

    folder = record_path.parent
    what = f"cannot read WFDB record {record_path.name}: "
    for name in dict.fromkeys(getattr(header, "file_name", None) or []):
        _check_plain_name(name, what + "its signal file ")
        check_regular_file(folder / name, what + "its signal file ")
    for segment in dict.fromkeys(getattr(header, "seg_name", None) or []):
        if segment == "~":  # an empty segment: no file
            continue
        _check_plain_name(segment, what + "its segment ")
        check_regular_file(folder / f"{segment}.hea", what + "its segment header ")
        try:
            part = wfdb.rdheader(str(folder / segment))
        except Exception as err:
            raise InputError(f"{what}cannot read its segment header {segment}.hea: {_first_line(err)}") from None
        for name in dict.fromkeys(getattr(part, "file_name", None) or []):
            _check_plain_name(name, what + "its signal file ")
            check_regular_file(folder / name, what + "its signal file ")


def _check_plain_name(name, what: str) -> None:
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        raise InputError(f"{what}{name!r} is not a file name in the record's folder")


def _read_npy(path: Path, choice: _LeadChoice, device):
    try:
        values = np.load(path, allow_pickle=False, mmap_mode="r")
    except Exception as err:  # NumPy raises ValueError, OSError, EOFError, SyntaxError … on a bad header
        raise InputError(f"{path.name}: not a readable .npy file ({_first_line(err)})") from None
    if values.dtype.kind not in "fiu":
        raise InputError(f"{path.name}: array dtype {values.dtype} is not numeric")
    if values.ndim not in (1, 2):
        raise InputError(f"{path.name}: expected a 1-D or 2-D (samples, leads) array; got shape {values.shape}")
    if values.ndim == 2 and values.shape[1] == 0:
        raise InputError(f"{path.name}: a 2-D array of shape {values.shape} holds no lead")
    if values.ndim == 2 and values.shape[1] > values.shape[0]:
        raise InputError(f"{path.name}: expected (samples, leads); got shape {values.shape}, more leads than "
                         "samples (transposed?)")
    names = [f"column {i}" for i in range(values.shape[1] if values.ndim == 2 else 1)]

    def lead(i):  # a view where the file holds float32 already: the clarity reads a few stretches only
        with np.errstate(over="ignore"):
            return np.asarray(values[:, i] if values.ndim == 2 else values, np.float32)

    index = choice.pick(names, path, lead)
    channel = names[index]
    values = _writable_float32(values[:, index] if values.ndim == 2 else values)
    return _to_device(values, device), None, channel, _sidecar_annotations(path)


def _read_parquet(path: Path, choice: _LeadChoice, device):
    import pyarrow as pa

    try:
        return _read_parquet_columns(path, choice, device)
    except (pa.ArrowException, OSError) as err:  # a malformed file: footer, thrift metadata, pages
        raise InputError(f"{path.name}: not a readable Parquet file ({_first_line(err)})") from None


def _read_parquet_columns(path: Path, choice: _LeadChoice, device):
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    if not names:
        raise InputError(f"{path.name}: the Parquet file has no columns")

    def read(index):  # host values of one column, to compare the leads' clarity
        data = pq.read_table(path, columns=[names[index]]).column(0)
        if not (pa.types.is_floating(data.type) or pa.types.is_integer(data.type)):
            return np.zeros(1, np.float32)  # not numbers: never the clearest lead
        return data.to_numpy(zero_copy_only=False).astype(np.float32)

    name = names[choice.pick(names, path, read)]
    # pyarrow on the GPU too: cuDF's reader did not return on damaged compressed pages
    column_data = pq.read_table(path, columns=[name]).column(0)
    if not (pa.types.is_floating(column_data.type) or pa.types.is_integer(column_data.type)):
        raise InputError(f"{path.name}: column {name!r} has type {column_data.type}, not numbers")
    values = _writable_float32(column_data.to_numpy(zero_copy_only=False))  # nulls become NaN: gaps
    return _to_device(values, device), None, name, _sidecar_annotations(path)


def _read_edf(path: Path, choice: _LeadChoice, device):
    from pipeline import edf

    try:
        values, fs, lead, annotations = edf.read_edf(path, choice.column, choice.pick, BEAT_SYMBOLS)
    except edf.EdfError as err:  # one line naming the file already
        raise InputError(str(err)) from None
    return _to_device(values, device), fs, lead, annotations


def _writable_float32(values) -> np.ndarray:
    """Arrow hands out read-only views; kernels are compiled for writable float32 arrays. Values
    beyond float32's range become ±inf, which the gap check then repairs or refuses."""
    with np.errstate(over="ignore"):
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
        raise InputError(f"{name}: every value is NaN or infinite")
    edges = xp.diff(bad.astype(xp.int8), prepend=xp.int8(0), append=xp.int8(0))
    starts, ends = xp.flatnonzero(edges == 1), xp.flatnonzero(edges == -1)
    runs = ends - starts
    longest = int(runs.max())
    if longest > max_gap_s * fs:
        at = int(starts[int(runs.argmax())])
        raise InputError(f"{name}: {longest} consecutive NaN/inf samples ({longest / fs:.2f} s) from sample {at}; "
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
        raise InputError(f"{name}: recording too short: {n} samples ({n / fs:.2f} s at {fs:g} Hz); "
                         f"at least {min_duration_s:g} s are needed to find a beat")
    lo, hi = float(signal.min()), float(signal.max())  # sync point: two scalars
    if hi - lo <= 1e-6 * max(1.0, abs(hi), abs(lo)):
        raise InputError(f"{name}: the signal is flat (all values ≈ {lo:g}): there are no heartbeats to find")
    levels = _distinct_values(signal, MIN_LEVELS)
    if levels.shape[0] < MIN_LEVELS:
        shown = ", ".join(f"{v:g}" for v in backend.to_host(levels).tolist())  # sync point: a few scalars
        raise InputError(f"{name}: the signal takes only {levels.shape[0]} distinct values ({shown}); an ECG takes "
                         f"at least {MIN_LEVELS} (is this a binary or status channel, or a unit too coarse?)")


def _distinct_values(signal, enough: int):
    """The distinct values of ``signal`` (sorted), looked for in its first 65,536 samples and, when
    those hold fewer than ``enough``, in about a million samples spread over the whole recording:
    cheap on a long recording, and a few distinct values in that many samples is not an ECG."""
    xp = backend.xp_of(signal)
    found = xp.unique(signal[:1 << 16])
    if found.shape[0] >= enough or signal.shape[0] <= 1 << 16:
        return found
    return xp.unique(signal[::max(1, signal.shape[0] >> 20)])
