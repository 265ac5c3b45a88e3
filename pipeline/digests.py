"""What identifies a run's input, and the hashes of files: which files make a recording (a WFDB
record's header, signal and annotation files; a single file with the sidecar of reference labels
beside it), their SHA-256, and the XXH3-128 that checks a run's own files against damage.

Only regular files are hashed: a folder, a FIFO or a device given as input is refused with a
ValueError that names it (reading a FIFO would wait for a writer forever).

See Also
--------
pipeline.results : keys a run by the input's digest, and remembers digests between runs.
pipeline.sidecar : the sidecar of reference labels beside a recording.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import stat
from pathlib import Path

import xxhash

from pipeline.sidecar import annotations_path

FILE_HASH = "xxh3_128"             # of the run's files, named in the report
RECORDING_FORMATS = ".csv, .txt, .npy, .parquet, .edf, .bdf or a WFDB .hea record"


def printable_path(path) -> str:
    """A path for a one-line message: as it is, or quoted when it holds a line break or other
    control character (a file name is data, and must not end the message early)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def _check_regular(path, mode: int) -> None:
    """Refuse anything but a regular file, naming it: reading a FIFO waits for a writer (forever),
    a device never ends, a folder has no bytes of its own."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise ValueError(f"{printable_path(path)} is a folder; give a recording file ({RECORDING_FORMATS})")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file")
    raise ValueError(f"{printable_path(path)} is {kind}, not a regular file; give a recording file ({RECORDING_FORMATS})")


def _open_regular(path: Path):
    """``path`` opened for reading in binary, or a ValueError when it is not a regular file. The
    type is checked on the opened descriptor, so a file swapped for a FIFO after an earlier check
    is still refused; O_NONBLOCK lets that open return instead of waiting for a writer (it changes
    nothing for a regular file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        _check_regular(path, os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with _open_regular(path) as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_xxh3(path: Path) -> str:
    """XXH3-128 of a file's bytes: a check against damage (not against forgery) that costs a run's
    files far less than SHA-256. The file is memory-mapped rather than read, which saves copying
    it (the hash is then bound by memory bandwidth); xxhash releases the GIL meanwhile. A file cut
    short while mapped raises SIGBUS, as it already would for the arrays load_run memory-maps."""
    with _open_regular(path) as f:
        if os.fstat(f.fileno()).st_size == 0:
            return xxhash.xxh3_128_hexdigest(b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return xxhash.xxh3_128_hexdigest(mapped)


HASHES = {"sha256": file_sha256, FILE_HASH: file_xxh3}  # runs written before FILE_HASH carry SHA-256


def _is_wfdb(path: Path) -> bool:
    return path.suffix.lower() in (".hea", ".dat") or (not path.suffix and path.with_suffix(".hea").exists())


def recording_files(path: Path) -> list[Path]:
    """The files that hold a recording: the file itself, or a WFDB record's header, signal and
    annotation files. Raises ValueError for one that is not a regular file (a folder, a FIFO, a
    device): nothing would come of reading it, or reading would never end."""
    path = Path(path)
    if _is_wfdb(path):
        record = path.with_suffix("")
        files = sorted(p for p in record.parent.glob(record.name + ".*") if p.suffix in (".hea", ".dat", ".atr"))
    else:
        files = [path]
    for part in files:
        try:
            _check_regular(part, part.stat().st_mode)  # stat, unlike open, never waits on a FIFO
        except FileNotFoundError:
            raise ValueError(f"no such file: {printable_path(part)}") from None
    return files


def annotations_sidecar(path: Path) -> Path | None:
    """The reference labels beside a single-file recording, ``<stem>.annotations.csv``, when it is
    a regular file: the one :func:`pipeline.load.load_ecg` reads (named by the same rule,
    :func:`pipeline.sidecar.annotations_path`; anything else there is ignored by both). A WFDB
    record's labels are its ``.atr`` file, one of :func:`recording_files`."""
    path = Path(path)
    if _is_wfdb(path):
        return None
    side = annotations_path(path)
    return side if side.is_file() else None


def input_files(path: Path) -> list[Path]:
    """The files whose bytes define an input: :func:`recording_files` and, when there is one, the
    :func:`annotations_sidecar`."""
    side = annotations_sidecar(path)
    return recording_files(path) + ([side] if side else [])


def input_sha256(path: Path) -> str:
    """Hash of the recording's bytes; for a WFDB record, of its header, signal and annotation files.
    A sidecar of labels is not part of it (see :func:`input_digest`)."""
    files = recording_files(path)
    if _is_wfdb(Path(path)):
        return hashlib.sha256("".join(file_sha256(p) for p in files).encode()).hexdigest()
    return file_sha256(files[0])


def input_digest(path: Path) -> dict:
    """What the run's key is made of: ``sha256``, the recording's (:func:`input_sha256`, which also
    names the recording's review labels), and ``annotations``, the SHA-256 of its sidecar of
    reference labels (None without one), so that adding, changing or removing that file gives
    another run."""
    side = annotations_sidecar(path)
    return {"sha256": input_sha256(path), "annotations": file_sha256(side) if side else None}


def input_signature(path: Path) -> list:
    """What changes whenever an input's bytes may have: each of :func:`input_files`' name, size,
    modification and change times (ns), inode and device. The change time cannot be set back by
    hand, so a file rewritten and given its old modification time still gets a new signature; a
    sidecar added or removed changes the list."""
    out = []
    for part in input_files(path):
        st = part.stat()
        out.append([part.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev])
    return out
