"""The reviewer's labels as files for other tools: a WFDB annotation file, CSV, Parquet. Labels are
text from outside: a CSV cell that a spreadsheet would run as a formula is made text, a WFDB record
name keeps only safe characters, and free text goes into a WFDB aux note as UTF-8.

See Also
--------
dashboard.labels.ReviewLabels : the labels these files are written from (its ``*_bytes`` methods).
dashboard.review : the review panel's export buttons.
"""
from __future__ import annotations

import csv
import io
import re
import tempfile
from pathlib import Path

import pandas as pd

WFDB_SYMBOLS = {"N": "N", "S": "S", "V": "V", "F": "F", "Q": "Q", "artefact": "|"}  # '|': isolated QRS-like artefact
FREE_TEXT_SYMBOL = '"'        # WFDB comment annotation; the text goes into its aux note (UTF-8)

# A spreadsheet reads a cell that starts with one of these as a formula (OWASP, CSV injection;
# the full-width forms too, which some spreadsheets fold into the ASCII ones).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def wfdb_record_name(record: str) -> str:
    """``record`` as a WFDB record name: ASCII letters, digits and underscores ('rec 1' → 'rec_1')."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(record)).strip("_")
    return name or "record"


def csv_cell(text: str) -> str:
    """A text cell that a spreadsheet shows as text: a leading ``= + - @``, tab or line end gets a
    single quote before it (OWASP's advice against CSV injection)."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    """The export table (sample, time_s, label, who, labelled_at, source) as a Parquet file."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """The export table as UTF-8 CSV; text cells that a spreadsheet would run as a formula start
    with a quote (:func:`csv_cell`)."""
    frame = frame.copy()
    for column in ("label", "who", "source"):
        frame[column] = [csv_cell(text) for text in frame[column]]
    return frame.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC).encode("utf-8")


def wfdb_bytes(frame: pd.DataFrame, fs: float, record: str, extension: str = "rev") -> bytes:
    """A WFDB annotation file of the labelled beats in ``frame`` (sample, label; sampled at ``fs``),
    what ``wfdb.rdann(record, extension)`` reads: beat labels as their WFDB symbols ('|' for an
    artefact), your own labels as comments with the text as aux note, in UTF-8. ``record`` is made
    a WFDB record name first (:func:`wfdb_record_name`).

    wfdb-python writes each character of an aux note as one byte (``ord(c)``, cut to 8 bits)
    and reads each byte back as one character, so the UTF-8 bytes are handed to it as the
    characters of their Latin-1 reading: the file holds the UTF-8 bytes, which the WFDB tools
    print as they are, and ``note.encode('latin-1').decode('utf-8')`` recovers the text from
    what ``wfdb.rdann`` returns."""
    import wfdb

    if frame.empty:
        raise ValueError("no beats are labelled yet: nothing to export")
    symbols = [WFDB_SYMBOLS.get(label, FREE_TEXT_SYMBOL) for label in frame["label"]]
    notes = ["" if label in WFDB_SYMBOLS else label.encode("utf-8").decode("latin-1") for label in frame["label"]]
    too_long = [label for label, note in zip(frame["label"], notes) if len(note) > 255]
    if too_long:
        raise ValueError(f"a WFDB aux note holds at most 255 bytes; {too_long[0][:60]!r} is longer in UTF-8")
    record = wfdb_record_name(record)
    with tempfile.TemporaryDirectory() as folder:
        wfdb.wrann(record, extension, sample=frame["sample"].to_numpy(), symbol=symbols, aux_note=notes,
                   fs=fs, write_dir=folder)
        return (Path(folder) / f"{record}.{extension}").read_bytes()
