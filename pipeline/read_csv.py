"""The CSV reader: one value per line, optional header, optional several columns (``,``, ``;`` or
tab), a decimal point or a decimal comma, optionally gzip-compressed.

On the GPU the CSV is parsed by cuDF straight into device memory and handed to CuPy without a
copy (a ``.gz`` stream is inflated once more beside the parse to check its CRC, which cuDF does
not); elsewhere pyarrow parses on the host. The layout is read from the first few KiB; a value
that is not a number is reported with its line.

See Also
--------
pipeline.readers : what every reader shares.
pipeline.load.load_ecg : calls :func:`read_csv` for ``.csv``/``.txt``/``.tsv`` (and ``.gz``).
"""
from __future__ import annotations

import contextlib
import csv
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pipeline import backend
from pipeline.readers import InputError, first_line, sidecar_annotations, writable_float32

if TYPE_CHECKING:
    from pipeline.leads import LeadChoice

SNIFF_BYTES = 4096  # the CSV's layout is read from its first few KiB (decompressed)


def _open(path: Path, mode: str, **kwargs):
    """Open a CSV as it is stored: gzip-compressed when it ends in .gz."""
    import gzip

    return (gzip.open if path.name.lower().endswith(".gz") else open)(path, mode, **kwargs)


def _unreadable(path: Path, err: BaseException) -> InputError:
    """The error for a file whose bytes cannot be read back (corrupt or truncated compression, I/O)."""
    what = "corrupt or truncated gzip data" if path.name.lower().endswith(".gz") else "cannot be read"
    return InputError(f"{path.name}: {what} ({first_line(err)})")


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

def read_csv(path: Path, choice: LeadChoice, device):
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
    return values, None, choice.channel, sidecar_annotations(path)


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

    # Columns are named by their place, the header row skipped: a header may name two columns
    # alike ("ECG,ECG"), and a name would then always find the first.
    names = [f"f{i}" for i in range(layout.n_fields)]
    read_opts = pacsv.ReadOptions(column_names=names, skip_rows=int(layout.header is not None), block_size=1 << 24)
    # A blank line is a missing sample (a gap to repair), not nothing: skipping it would shift time.
    parse_opts = pacsv.ParseOptions(delimiter=layout.delimiter, ignore_empty_lines=False)
    if index >= len(names):
        raise InputError(f"{path.name} has {len(names)} column(s); column index {index} does not exist")
    try:  # only the chosen column is converted
        convert = pacsv.ConvertOptions(include_columns=[names[index]], column_types={names[index]: pa.float32()},
                                       decimal_point=layout.decimal)
        table = pacsv.read_csv(path, read_options=read_opts, parse_options=parse_opts, convert_options=convert)
    except pa.ArrowInvalid as err:
        raise InputError(f"{path.name}: {_describe_arrow_error(err, path, index, layout)}") from None
    except (pa.ArrowException, OSError, EOFError, zlib.error) as err:  # decompression, I/O
        raise _unreadable(path, err) from None
    return writable_float32(table.column(0).to_numpy(zero_copy_only=False))


def _read_csv_cudf(path, index, layout: _Layout):
    """Parse on the GPU straight to float32; nulls are either empty cells (gaps) or text."""
    cudf = backend.import_cudf()

    has_header = layout.header is not None
    options = dict(sep=layout.delimiter, header=0 if has_header else None, usecols=[index], skip_blank_lines=False)
    try:
        frame = cudf.read_csv(path, dtype=["float32"], decimal=layout.decimal, **options)
    except Exception as err:  # cuDF raises RuntimeError/ValueError subclasses of its own
        raise InputError(f"{path.name}: not a readable CSV ({first_line(err)})") from None
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
    text = first_line(err)
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

