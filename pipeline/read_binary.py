"""The readers of the binary formats: WFDB records (PhysioNet: ``.hea`` with its signal and
``.atr`` files), NumPy ``.npy``, Parquet and EDF/EDF+/BDF (:mod:`pipeline.edf`).

A WFDB header is data: the signal files and segments it names must be plain files beside it.
A Parquet column is decoded by pyarrow on the host on either device (cuDF's reader hung on a
file with damaged compressed pages, which pyarrow refuses) and then copied.

See Also
--------
pipeline.readers : what every reader shares.
pipeline.load.load_ecg : picks the reader for a file.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.readers import (BEAT_SYMBOLS, InputError, check_regular_file, first_line, plausible_rate,
                              sidecar_annotations, to_device, writable_float32)

if TYPE_CHECKING:
    from pipeline.leads import LeadChoice


def read_wfdb(path: Path, choice: LeadChoice, device):
    import wfdb

    record_path = path.with_suffix("") if path.suffix.lower() in (".hea", ".dat") else path
    hea = record_path.with_suffix(".hea")
    if not hea.exists():
        raise InputError(f"no such WFDB record: {hea} does not exist")
    check_regular_file(hea)
    try:
        header = wfdb.rdheader(str(record_path))
    except Exception as err:  # wfdb raises many types (HeaderSyntaxError, ValueError, IndexError …) on a bad header
        raise InputError(f"cannot read WFDB header {record_path.name}.hea: {first_line(err)}") from None
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
            raise InputError(f"cannot read WFDB record {record_path.name}: {first_line(err)}") from None
        return np.ascontiguousarray(values, dtype=np.float32)

    cached = functools.cache(read)  # a lead read to compare clarity is not read again
    values = cached(choice.pick(leads, hea, cached, plausible_rate(file_fs)))
    annotations = None
    atr = record_path.with_suffix(".atr")
    if atr.exists() or atr.is_symlink():
        check_regular_file(atr)
        try:
            ann = wfdb.rdann(str(record_path), "atr")
            symbols = np.asarray(ann.symbol if ann.symbol is not None else [], dtype=str)
            samples = np.asarray(ann.sample, dtype=np.int64)
        except Exception as err:
            raise InputError(f"cannot read WFDB annotations {atr.name}: {first_line(err)}") from None
        is_beat = np.isin(symbols, list(BEAT_SYMBOLS))
        annotations = (samples[is_beat], symbols[is_beat])
    return to_device(values, device), file_fs, choice.channel, annotations


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
            raise InputError(f"{what}cannot read its segment header {segment}.hea: {first_line(err)}") from None
        for name in dict.fromkeys(getattr(part, "file_name", None) or []):
            _check_plain_name(name, what + "its signal file ")
            check_regular_file(folder / name, what + "its signal file ")


def _check_plain_name(name, what: str) -> None:
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        raise InputError(f"{what}{name!r} is not a file name in the record's folder")


def read_npy(path: Path, choice: LeadChoice, device):
    try:
        values = np.load(path, allow_pickle=False, mmap_mode="r")
    except Exception as err:  # NumPy raises ValueError, OSError, EOFError, SyntaxError … on a bad header
        raise InputError(f"{path.name}: not a readable .npy file ({first_line(err)})") from None
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
    values = writable_float32(values[:, index] if values.ndim == 2 else values)
    return to_device(values, device), None, choice.channel, sidecar_annotations(path)


def read_parquet(path: Path, choice: LeadChoice, device):
    import pyarrow as pa

    try:
        return _read_parquet_columns(path, choice, device)
    except (pa.ArrowException, OSError) as err:  # a malformed file: footer, thrift metadata, pages
        raise InputError(f"{path.name}: not a readable Parquet file ({first_line(err)})") from None


def _read_parquet_columns(path: Path, choice: LeadChoice, device):
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
    values = writable_float32(column_data.to_numpy(zero_copy_only=False))  # nulls become NaN: gaps
    return to_device(values, device), None, choice.channel, sidecar_annotations(path)


def read_edf(path: Path, choice: LeadChoice, device):
    from pipeline import edf

    try:
        values, fs, _, annotations = edf.read_edf(path, choice.column, choice.pick, BEAT_SYMBOLS)
    except edf.EdfError as err:  # one line naming the file already
        raise InputError(str(err)) from None
    return to_device(values, device), fs, choice.channel, annotations
