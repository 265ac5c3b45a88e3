"""Synthetic recordings written where the pipeline and other tools read them: a one-column CSV
with its annotation sidecar (written atomically, as a pair), or a WFDB record with its ``.atr``.

See Also
--------
pipeline.synth.synthesize : makes the recording.
pipeline.sidecar : the sidecar's name and format.
pipeline.load.load_ecg : reads both back.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Union

import numpy as np

from pipeline.sidecar import ANNOTATION_SUFFIX, annotation_bytes, annotations_path
from pipeline.synth_config import SyntheticECG

PathLike = Union[str, "os.PathLike[str]"]

_CSV_CHUNK = 2_000_000  # lines per chunk when formatting the CSV


def write_wfdb(ecg: SyntheticECG, record: PathLike, lead: str = "MLII") -> Path:
    """Write the recording as a WFDB record (``.hea`` + ``.dat``, 16-bit, 200 adu/mV like
    MIT-BIH) with its beats as ``.atr``, so that ``python -m pipeline evaluate`` and any
    WFDB tool read it like a PhysioNet record. Returns the ``.hea`` path."""
    import wfdb

    record = Path(record)
    record.parent.mkdir(parents=True, exist_ok=True)
    signal = np.asarray(ecg.signal, dtype=np.float64)[:, None]
    wfdb.wrsamp(record.name, fs=float(ecg.fs), units=["mV"], sig_name=[lead], p_signal=signal, fmt=["16"],
                adc_gain=[200.0], baseline=[0], write_dir=str(record.parent))
    wfdb.wrann(record.name, "atr", np.asarray(ecg.r_peaks, dtype=np.int64), np.asarray(ecg.symbols).tolist(),
               write_dir=str(record.parent))
    return record.with_suffix(".hea")


def _format_fixed4(x: np.ndarray) -> bytes:
    """``"%.4f\\n"`` of every value, vectorised (digits built as a byte matrix)."""
    v = np.rint(np.asarray(x, dtype=np.float64) * 10_000.0).astype(np.int64)
    n = v.size
    if n == 0:
        return b""
    neg = v < 0
    a = np.abs(v)
    ip = a // 10_000
    fp = a - ip * 10_000
    max_ip = int(ip.max())
    nd_max = len(str(max_ip))
    width = 1 + nd_max + 1 + 4 + 1  # sign, integer digits, '.', 4 decimals, '\n'
    mat = np.empty((n, width), dtype=np.uint8)
    mat[:, 0] = ord(" ")
    nd = np.ones(n, dtype=np.int64)
    tmp = ip.copy()
    for j in range(nd_max):
        col = nd_max - j  # integer digits right-aligned in columns 1..nd_max
        mat[:, col] = 48 + (tmp % 10)
        tmp //= 10
        if j:
            nd += ip >= 10**j
    mat[:, nd_max + 1] = ord(".")
    tmp = fp.copy()
    for j in range(4):
        mat[:, nd_max + 5 - j] = 48 + (tmp % 10)
        tmp //= 10
    mat[:, -1] = ord("\n")
    first = nd_max + 1 - nd  # first column of the number's integer part
    rows = np.flatnonzero(neg)
    first_sign = first - neg  # include the sign column for negative values
    mat[rows, first_sign[rows]] = ord("-")
    keep = np.arange(width)[None, :] >= first_sign[:, None]
    return mat[keep].tobytes()


def _open_temp_beside(path: Path):
    """Create a new hidden temporary file in ``path``'s folder; return (fd, temp path)."""
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"folder for {path} does not exist: {folder}")
    for _ in range(100):
        tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        return fd, tmp
    raise FileExistsError(f"could not create a temporary file beside {path}")


def _write_temp(path: Path, chunks) -> Path:
    """Write ``chunks`` (bytes) to a new temporary file beside ``path``; return its path."""
    fd, tmp = _open_temp_beside(path)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as fh:
            for chunk in chunks:
                fh.write(chunk)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_csv(ecg: SyntheticECG, path: PathLike) -> Path:
    """Write the recording as a one-column CSV plus an annotation sidecar.

    The recording file has ONE value per line, no header, printed with 4
    decimals (``"%.4f"``) — the format ``pipeline run`` reads.  The sidecar
    ``<stem>.annotations.csv`` beside it has the header ``sample,symbol`` and one
    row per beat.  Both files are written atomically: each to a temporary file
    in the same folder, then moved into place with ``os.replace`` once both are
    complete (sidecar first, so a recording never appears without its
    annotations; a failure leaves any previous pair untouched).

    Parameters
    ----------
    ecg : SyntheticECG
        The recording.
    path : str or os.PathLike
        Destination of the recording CSV; its folder must exist.  An existing
        file is replaced.

    Returns
    -------
    pathlib.Path
        The path of the recording CSV.

    Raises
    ------
    TypeError
        If ``ecg`` is not a :class:`SyntheticECG`.
    ValueError
        If the signal is not 1-D, contains NaN/inf or values of 1e12 or more, or
        ``path`` names the sidecar itself.
    FileNotFoundError
        If the destination folder does not exist.
    """
    if not isinstance(ecg, SyntheticECG):
        raise TypeError(f"ecg must be a SyntheticECG; got {type(ecg).__name__}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path must be a file path, not a folder; got {str(path)!r}")
    side = annotations_path(path)
    if side == path:
        raise ValueError(f"path must not end in {ANNOTATION_SUFFIX!r}; got {str(path)!r}")
    signal = np.asarray(ecg.signal)
    if signal.ndim != 1:
        raise ValueError(f"ecg.signal must be one-dimensional; got shape {signal.shape}")
    if not np.isfinite(signal).all():
        bad = int(np.count_nonzero(~np.isfinite(signal)))
        raise ValueError(f"ecg.signal must be finite to be written; got {bad} NaN/inf values")

    if signal.size and float(np.abs(signal).max()) >= 1e12:
        raise ValueError(
            "ecg.signal values must be below 1e12 in magnitude to be printed with 4 decimals; "
            f"got {float(np.abs(signal).max()):g}"
        )

    annotations = annotation_bytes(ecg.r_peaks, ecg.symbols)

    def chunks():
        for lo in range(0, signal.size, _CSV_CHUNK):
            yield _format_fixed4(signal[lo : lo + _CSV_CHUNK])

    # Both files go to temporaries first; only when both are complete are they
    # moved into place (sidecar first), so a failure leaves the old pair intact.
    tmp_csv = _write_temp(path, chunks())
    tmp_side = None
    try:
        tmp_side = _write_temp(side, [annotations])
        os.replace(tmp_side, side)
        tmp_side = None
        os.replace(tmp_csv, path)
    except BaseException:
        for tmp in (tmp_side, tmp_csv):
            if tmp is not None:
                _unlink_quietly(tmp)
        raise
    return path

