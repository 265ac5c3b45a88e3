"""The annotation sidecar: a recording's beat labels in ``<stem>.annotations.csv`` beside it.

The format is a header ``sample,symbol`` and one row a beat: the sample index of its fiducial and
its MIT-BIH symbol. The synthesiser writes it beside every recording it makes; the loader reads it
beside a CSV, NPY or Parquet recording as the recording's reference labels; the run's input
digest includes it. This module is the one place that knows the file's name and layout, so that
the loader does not depend on the synthesiser.

See Also
--------
pipeline.synth_files.write_csv : writes a recording with its sidecar.
pipeline.load.load_ecg : reads the sidecar as the recording's annotations.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Tuple, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]

ANNOTATION_SUFFIX = ".annotations.csv"
HEADER = b"sample,symbol\n"


def annotations_path(csv_path: PathLike) -> Path:
    """Path of the annotation sidecar of a recording CSV.

    Parameters
    ----------
    csv_path : str or os.PathLike
        The recording, e.g. ``"data/rec.csv"``.

    Returns
    -------
    pathlib.Path
        ``"<dir>/<stem>.annotations.csv"``, e.g. ``"data/rec.annotations.csv"``.
    """
    p = Path(csv_path)
    return p.with_name(p.stem + ANNOTATION_SUFFIX)


def annotation_bytes(samples: np.ndarray, symbols: np.ndarray) -> bytes:
    """The sidecar's content: :data:`HEADER`, then one ``sample,symbol`` row a beat (UTF-8)."""
    samples = np.asarray(samples, dtype=np.int64)
    symbols = np.asarray(symbols).astype(str)
    lines = "".join(f"{s},{c}\n" for s, c in zip(samples.tolist(), symbols.tolist()))
    return HEADER + lines.encode("utf-8")


def read_annotations(path: PathLike) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """Read the ``sample,symbol`` annotation sidecar of a recording.

    Parameters
    ----------
    path : str or os.PathLike
        Either the recording CSV (its sidecar ``<stem>.annotations.csv`` is read)
        or the sidecar itself (a name ending in ``.annotations.csv``).

    Returns
    -------
    (samples, symbols) or None
        ``samples`` int64 and ``symbols`` str arrays, one entry per beat, or
        ``None`` when the sidecar does not exist.

    Raises
    ------
    ValueError
        If the sidecar lacks the ``sample`` and ``symbol`` columns or cannot be
        parsed.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    p = Path(path)
    side = p if p.name.endswith(ANNOTATION_SUFFIX) else annotations_path(p)
    if not side.is_file():
        return None
    try:
        table = pacsv.read_csv(
            side,
            convert_options=pacsv.ConvertOptions(
                column_types={"sample": pa.int64(), "symbol": pa.string()}
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"annotation file {side} could not be parsed: {exc}") from exc
    missing = {"sample", "symbol"} - set(table.column_names)
    if missing:
        raise ValueError(
            f"annotation file {side} must have columns 'sample,symbol'; got {table.column_names}"
        )
    samples = table.column("sample").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    symbols = np.asarray(table.column("symbol").to_pylist(), dtype=str)
    if symbols.size == 0:
        symbols = symbols.astype("<U1")
    return samples, symbols
