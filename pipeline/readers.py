"""What every format reader shares: the one error they raise, the checks they make, and how they
hand values over.

A reader (``read_csv``, ``read_wfdb``, ``read_npy``, ``read_parquet``, ``read_edf``) takes a path, a
:class:`~pipeline.leads.LeadChoice` and a device, and returns ``(values, fs or None, lead name,
annotations or None)``: the values as a writable float32 array on the device, the lead's name as
the choice made it distinct (``LeadChoice.channel``), the annotations as ``(sample indices, beat
symbols)``. Every malformed input ends in one :class:`InputError` (a
ValueError) whose message is one line naming the file; only regular files are opened (a FIFO
would block for ever).

See Also
--------
pipeline.load.load_ecg : picks the reader for a file and validates what it returns.
pipeline.sidecar : the ``<stem>.annotations.csv`` beat labels read beside single-file recordings.
"""
from __future__ import annotations

import math
import stat
import zlib
from pathlib import Path

import numpy as np

from pipeline import backend, one_line
from pipeline.sidecar import annotations_path, read_annotations

MIN_FS, MAX_FS = 50.0, 10_000.0
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


def plausible_rate(rate) -> float | None:
    """``rate`` when it is a plausible ECG sampling rate, else None (for estimates that may fall back)."""
    return rate if rate is not None and math.isfinite(rate) and MIN_FS <= rate <= MAX_FS else None


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
        raise InputError(f"{what}{path}: cannot be read ({err.strerror or first_line(err)})") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{what}{path} is a directory; give a recording file")
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _FILE_KINDS.items() if test(mode)), "not a regular file")
        raise InputError(f"{what}{path} is {kind}, not a regular file; give a recording file")


def first_line(err) -> str:
    """A library's error as a line inside the pipeline's own message (which names the file)."""
    return one_line(err, bare=(BaseException,))


def sidecar_annotations(path: Path):
    """The beat labels of ``<stem>.annotations.csv`` beside a recording, None without that file."""
    side = annotations_path(path)
    if not side.exists() and not side.is_symlink():
        return None
    check_regular_file(side)
    try:
        return read_annotations(side)
    except (ValueError, OSError, EOFError, zlib.error) as err:  # pyarrow's parse errors are among them
        raise InputError(f"{side.name}: cannot read the beat annotations ({first_line(err)})") from None


def writable_float32(values) -> np.ndarray:
    """Arrow hands out read-only views; kernels are compiled for writable float32 arrays. Values
    beyond float32's range become ±inf, which the gap check then repairs or refuses."""
    with np.errstate(over="ignore"):
        return np.require(values, np.float32, ["C_CONTIGUOUS", "WRITEABLE"])


def to_device(values: np.ndarray, device: str):
    """Host values onto the device the run uses (a copy on the GPU; the same array on the CPU)."""
    return backend.host_to_device(values) if device == "gpu" else values
