"""The run directory: beats table, model, decoded samples, report; atomic writes and a verified cache.

A run lives in ``<out>/<key>/`` where ``key`` hashes the input's bytes (the recording, and the
sidecar of reference labels beside it when there is one) and every parameter. It is written in a
hidden temporary folder and renamed into place when complete, so a failed or interrupted run never
leaves a half-written or overwritten run behind; what a killed process left there is removed at a
later start (:func:`clean_leftovers`). ``report.json`` lists the XXH3-128 digest of every other
file; a cached run is served only when every file's content still matches its digest, and is
otherwise treated as damaged and rebuilt.

Input hashes are kept in ``<out>/.input-hashes.json``, keyed by the input's path and its files'
size, modification and change times and inode, so that a restart with the same input reads it
once. Only regular files are hashed: a folder, a FIFO or a device given as input is refused with
a ValueError that names it (reading a FIFO would wait for a writer forever).

See Also
--------
pipeline.score.score_beats : the previous step.
dashboard.data_store.DataStore : reads runs for the views.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import shutil
import stat
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from pipeline import PipelineWarning, calibrate
from pipeline.sidecar import annotations_path  # the sidecar's name, as load.py finds it

if TYPE_CHECKING:
    import pandas as pd   # imported where a table is made or read: finding a cached run needs none (0.5-0.7 s)

NORMAL_SYMBOLS = frozenset("NLRej")
REPORT = "report.json"
FILES = ("beats.parquet", "episodes.parquet", "fiducials.npy", "embeddings.npy", "signal.npy", "decoded.npz",
         "families.npz", "model.pt")


@dataclass
class RunResult:
    """A finished run, in host memory."""

    path: Path
    report: dict
    beats: pd.DataFrame
    fiducials: np.ndarray        # every detected fiducial (kept or pruned), sample indices
    signal: np.ndarray           # the recording as analysed (float32)
    embeddings: np.ndarray       # (n_beats, width) rows the VAE saw
    decoded_z: np.ndarray        # (grid², 2) latent points of the decoded samples
    decoded: np.ndarray          # (grid², width) decoder outputs at those points
    families: dict = field(default_factory=dict)  # per family: count, median, lower, upper (templates)
    episodes: pd.DataFrame | None = None  # flutter, noise and pause episodes (EPISODE_COLUMNS)
    cached: bool = False
    _model: object = field(default=None, repr=False)

    @property
    def fs(self) -> float:
        return float(self.report["input"]["fs"])

    def model(self, device: str = "cpu"):
        """The trained VAE, loaded from ``model.pt`` on first use."""
        if self._model is None:
            self._model = load_model(self.path / "model.pt", device)
        return self._model


# --------------------------------------------------------------------------- table
# Columns that explain the outlier score (``components`` of :func:`beats_table`), in table order: the
# reference's calibrated components, then the recording's own ranking (its VAE and rhythm) and the
# rhythm's measures.
SCORE_COMPONENTS = {
    **calibrate.COLUMNS,
    "score_recording": "within-recording outlier score: -log10 of the Fisher-combined p_shape and p_rhythm "
                       "(as unusual as 1 beat in 10^score of this recording; no scale shared across recordings)",
    "score_shape": "the VAE's shape score: negative ELBO of the beat (higher = less like the recording's beats)",
    "score_rhythm": "rhythm score: sqrt(z_early² + z_pause²), robust z-scores of rr_pre / rr_post in this recording",
    "p_shape": "fraction of the recording's beats whose shape score is at least this high",
    "p_rhythm": "fraction of the recording's beats whose rhythm score is at least this high",
    "rr_pre": "RR interval before the beat / local median RR (NaN for the first beat)",
    "rr_post": "RR interval after the beat / local median RR",
    "prematurity": "1 - rr_pre: 0.28 = the beat came 28 % early",
    "local_rr_s": "median RR of the ~17 intervals around the beat, seconds",
}


# The episodes of a run, one row each, in time order: ventricular flutter/fibrillation and noise
# stretches (pipeline.episodes) and pauses (RR intervals of at least SignalConfig.pause_s).
EPISODE_COLUMNS = {
    "kind": "flutter | noise | pause",
    "start_s": "start, seconds from the recording's first sample (a pause: the beat before it)",
    "end_s": "end, seconds (a pause: the beat after it)",
    "confidence": "how sure the detector is, 0-1 (a pause: 1)",
}


def episodes_table(found, pauses: np.ndarray, fs: float) -> pd.DataFrame:
    """One frame of the detector's episodes (:class:`pipeline.episodes.Episodes`) and the pauses
    ((n, 2) host fiducial samples). A pause across a flutter episode is left out: the beats there
    were taken out, not missing."""
    import pandas as pd

    frame = found.to_frame()
    flutter = frame[frame["kind"] == "flutter"]
    start, end = pauses[:, 0] / fs, pauses[:, 1] / fs
    across = np.zeros(len(start), dtype=bool)
    for lo, hi in zip(flutter["start_s"], flutter["end_s"]):
        across |= (start < hi) & (end > lo)
    rows = pd.DataFrame({"kind": "pause", "start_s": start[~across], "end_s": end[~across],
                         "confidence": np.float32(1.0)})
    table = pd.concat([frame, rows], ignore_index=True) if len(rows) else frame
    table = table.astype({"kind": object, "start_s": np.float64, "end_s": np.float64, "confidence": np.float32})
    return table.sort_values("start_s", kind="stable").reset_index(drop=True)[list(EPISODE_COLUMNS)]


def beats_table(*, fiducial, length, start, fs, is_train, z, score, annotations=None, components=None,
                tolerance_s: float = 0.15) -> pd.DataFrame:
    """One row per beat (host arrays in); ``length`` is the samples to the next beat (-1 for the last
    one, whose ``length_s`` is NaN), so ``length_s`` is the RR interval after the beat and
    ``rr_before_s`` the one before it. ``score`` is the outlier score the views rank by (a run's
    calibrated score, :data:`pipeline.calibrate.SCORE_DESCRIPTION`);
    ``components`` (a dict of arrays named as in :data:`SCORE_COMPONENTS`) are added as float32
    columns after it. With reference annotations, each beat gets the symbol of the nearest
    reference beat within ``tolerance_s`` ('' when none) and ``abnormal``."""
    import pandas as pd

    table = pd.DataFrame({
        "beat_id": np.arange(len(fiducial), dtype=np.int32),
        "start": start.astype(np.int64),
        "fiducial": fiducial.astype(np.int64),
        "time_s": fiducial / fs,
        "length": length.astype(np.int32),
        "length_s": np.where(length >= 0, length / fs, np.nan).astype(np.float32),
        "rr_before_s": np.concatenate([[np.nan], np.diff(fiducial) / fs]).astype(np.float32)[:len(fiducial)],
        "split": pd.Categorical(np.where(is_train, "train", "test"), categories=["train", "test"]),
        "z1": z[:, 0].astype(np.float32),
        "z2": z[:, 1].astype(np.float32),
        "score": score.astype(np.float32),
    })
    for name, values in (components or {}).items():
        if name not in SCORE_COMPONENTS:
            raise ValueError(f"unknown score component {name!r}; known: {', '.join(SCORE_COMPONENTS)}")
        table[name] = np.asarray(values, dtype=np.float32)
    if annotations is not None:
        table["label"] = match_labels(fiducial, *annotations, int(round(tolerance_s * fs)))
        table["abnormal"] = ~table["label"].isin(NORMAL_SYMBOLS) & (table["label"] != "")
    return table


def match_labels(fiducial: np.ndarray, ref_samples: np.ndarray, ref_symbols: np.ndarray, tolerance: int) -> np.ndarray:
    """Symbol of the nearest reference beat within ``tolerance`` samples of each fiducial, else ''."""
    labels = np.full(len(fiducial), "", dtype=object)
    if len(ref_samples) == 0 or len(fiducial) == 0:
        return labels
    order = np.argsort(ref_samples)
    ref_samples, ref_symbols = ref_samples[order], np.asarray(ref_symbols)[order]
    right = np.clip(np.searchsorted(ref_samples, fiducial), 1, len(ref_samples) - 1)
    left = right - 1
    nearest = np.where(np.abs(ref_samples[left] - fiducial) <= np.abs(ref_samples[right] - fiducial), left, right)
    if len(ref_samples) == 1:
        nearest = np.zeros(len(fiducial), dtype=np.int64)
    close = np.abs(ref_samples[nearest] - fiducial) <= tolerance
    labels[close] = ref_symbols[nearest[close]]
    return labels


# --------------------------------------------------------------------------- hashing
HASH_CACHE = ".input-hashes.json"  # in the runs folder: input path → (stat signature, digests)
HASH_CACHE_ENTRIES = 256
FILE_HASH = "xxh3_128"             # of the run's files, named in the report
RECORDING_FORMATS = ".csv, .txt, .npy, .parquet, .edf, .bdf or a WFDB .hea record"


def _shown(path) -> str:
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
        raise ValueError(f"{_shown(path)} is a folder; give a recording file ({RECORDING_FORMATS})")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file")
    raise ValueError(f"{_shown(path)} is {kind}, not a regular file; give a recording file ({RECORDING_FORMATS})")


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
            raise ValueError(f"no such file: {_shown(part)}") from None
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


def remembered_input_digest(path: Path, folder: Path) -> tuple[dict, list]:
    """``(input_digest(path), signature)``, reusing the digests remembered in ``folder`` when the
    input's signature is unchanged (then nothing is read). Remember new ones with
    :func:`remember_input_digest` once the run has succeeded."""
    signature = input_signature(path)  # before reading: a change while hashing is seen next time
    entry = _read_hash_cache(folder).get(str(Path(path).resolve()))
    if isinstance(entry, dict) and entry.get("signature") == signature and isinstance(entry.get("digest"), dict):
        return entry["digest"], signature
    return input_digest(path), signature


def remember_input_digest(path: Path, folder: Path, signature: list, digest: dict) -> None:
    """Remember ``digest`` for ``path`` with its ``signature`` in ``folder`` (best effort: a
    read-only or missing folder only means hashing again next time)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    entries = _read_hash_cache(folder)
    key = str(Path(path).resolve())
    if entries.get(key) == {"signature": signature, "digest": digest}:
        return
    entries.pop(key, None)
    entries[key] = {"signature": signature, "digest": digest}
    entries = dict(list(entries.items())[-HASH_CACHE_ENTRIES:])  # the most recently remembered
    tmp = folder / f"{HASH_CACHE}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, folder / HASH_CACHE)  # atomic: a concurrent reader sees the old or the new file
    except OSError:
        tmp.unlink(missing_ok=True)


def _read_hash_cache(folder: Path) -> dict:
    try:
        entries = json.loads((Path(folder) / HASH_CACHE).read_text())
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- cache
def find_cached(root: Path, key: str) -> Path | None:
    """The verified run directory for ``key``, or None (missing or damaged: then warn)."""
    path = Path(root) / key
    if not path.exists():
        return None
    problem = _verify(path)
    if problem is None:
        return path
    warnings.warn(f"cached run {_shown(path)} is damaged ({problem}); recomputing it", PipelineWarning, stacklevel=2)
    return None


def _verify(path: Path) -> str | None:
    """None when the run is intact, else what is wrong. Every file's content is hashed and compared
    with the digest written beside it: a file damaged in place keeps its size, and its modification
    time can be set back, so nothing short of its bytes shows that it is the file written."""
    try:
        report = json.loads((path / REPORT).read_text())
    except (OSError, ValueError) as err:
        return f"report.json unreadable: {type(err).__name__}"
    digests = report.get("files")
    if not isinstance(digests, dict) or set(digests) != set(FILES):
        return "report lists the wrong files"
    hash_file = HASHES.get(report.get("file_hash", "sha256"))
    if hash_file is None:
        return f"report names an unknown hash {str(report.get('file_hash'))[:40]!r}"

    def check(name: str) -> str | None:
        try:
            return None if hash_file(path / name) == digests[name] else f"{name} does not match its checksum"
        except FileNotFoundError:
            return f"{name} missing"
        except (OSError, ValueError) as err:
            return f"{name} unreadable: {type(err).__name__}"

    # One thread a file: the hash releases the GIL, and the signal and the embedded beats are
    # most of the bytes.
    with ThreadPoolExecutor(min(4, len(FILES)), thread_name_prefix="verify-run") as pool:
        problems = [p for p in pool.map(check, FILES) if p]
    return problems[0] if problems else None


def write_run(root: Path, key: str, *, report: dict, beats: pd.DataFrame, fiducials: np.ndarray, signal: np.ndarray,
              embeddings: np.ndarray, decoded_z: np.ndarray, decoded: np.ndarray, checkpoint: dict,
              families, episodes: pd.DataFrame) -> Path:
    """Write a run atomically: everything into ``.<key>.tmp-<pid>``, checksums into the report,
    then one rename. A damaged run already at the destination is replaced; nothing else is touched.
    Files and folder get the modes the process's umask gives new files (0o666 and 0o777 less it),
    like every other file the pipeline writes."""
    import torch

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / key, root / f".{key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        digests = _write_and_hash(tmp, {
            "beats.parquet": lambda path: beats.to_parquet(path, index=False),
            "episodes.parquet": lambda path: episodes.to_parquet(path, index=False),
            "fiducials.npy": lambda path: np.save(path, fiducials),
            "embeddings.npy": lambda path: np.save(path, embeddings),
            "signal.npy": lambda path: np.save(path, signal),
            "decoded.npz": lambda path: np.savez(path, z=decoded_z, rows=decoded),
            "families.npz": lambda path: np.savez(path, count=families.count, median=families.median,
                                                  lower=families.lower, upper=families.upper),
            "model.pt": lambda path: torch.save(checkpoint, path),
        })
        report = dict(report, files=digests, file_hash=FILE_HASH)
        (tmp / REPORT).write_text(json.dumps(report, indent=1, default=_json_default))
        if final.exists():  # damaged (find_cached said so): move it aside, then swap in the new one
            trash = root / f".{key}.trash-{os.getpid()}"
            final.rename(trash)
            tmp.rename(final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _write_and_hash(folder: Path, writers: dict) -> dict[str, str]:
    """Write each file of ``writers`` (name → function of the path) and hash it, the files in
    threads of their own: Arrow's and NumPy's writes and xxhash release the GIL."""
    def write_and_hash(name: str) -> str:
        writers[name](folder / name)
        return file_xxh3(folder / name)

    with ThreadPoolExecutor(min(4, len(writers)), thread_name_prefix="write-run") as pool:
        return dict(zip(writers, pool.map(write_and_hash, writers)))


# --------------------------------------------------------------------------- leftovers
# Temporary names in a runs folder: ``.<name>.tmp-<pid>`` or ``.<name>.trash-<pid>`` (a run being
# written or replaced; ``-<thread>`` may follow), and ``.<name>.<random>.tmp`` (files written
# beside their final name, such as a synthetic input or a labels file).
_OWNED_TEMPORARY = re.compile(r"\..+\.(?:tmp|trash)-(?P<pid>\d+)(?:-\d+)?")
_ANONYMOUS_TEMPORARY = re.compile(r"\..+\.tmp")
_RUN_KEY = re.compile(r"[0-9a-f]{16}")
# A leftover untouched for this long is no write in progress: writing a run's files, or a
# synthetic input, keeps changing their modification times. It guards the writers whose process
# cannot be asked, on another machine or in another container sharing the folder.
LEFTOVER_IDLE_S = 300.0


def clean_leftovers(root: Path, *, idle_s: float = LEFTOVER_IDLE_S) -> list[Path]:
    """Remove what killed processes left in the runs folder ``root`` (and in its folders that are
    not runs, such as ``inputs``): temporary folders and files whose writer is gone. A name that
    carries a process id is removed when no process of that id lives on this machine, a name
    without one on its age alone; either way only once nothing in it has changed for ``idle_s``
    seconds. Only hidden names of those shapes are touched, never a run. Returns what was removed."""
    root = Path(root)
    removed = []
    for folder in [root, *_side_folders(root)]:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if not name.startswith("."):
                continue
            owned = _OWNED_TEMPORARY.fullmatch(name)
            if not owned and not _ANONYMOUS_TEMPORARY.fullmatch(name):
                continue
            path = folder / name
            if owned and _alive(int(owned["pid"])):
                continue
            if _idle_for(path) < idle_s:
                continue
            if _remove(path):
                removed.append(path)
    return removed


def _side_folders(root: Path) -> list[Path]:
    """Folders of ``root`` that are not runs (nor hidden): a run's own files are never temporary."""
    try:
        with os.scandir(root) as entries:
            return [Path(e.path) for e in entries if not e.name.startswith(".") and not _RUN_KEY.fullmatch(e.name)
                    and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (taken as alive when that cannot be told)."""
    if pid <= 0:
        return False  # no process has such an id (and os.kill(0, …) would signal this process group)
    if pid == os.getpid() or os.name != "posix":  # on Windows os.kill(pid, 0) would end the process
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except OSError:
        return True  # PermissionError: it lives, under another user
    return True


def _idle_for(path: Path) -> float:
    """Seconds since ``path`` or, for a folder, anything directly in it last changed."""
    try:
        st = os.lstat(path)
        newest = st.st_mtime
        if stat.S_ISDIR(st.st_mode):
            with os.scandir(path) as entries:
                for entry in entries:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    except OSError:
        return 0.0  # gone or unreadable: leave it
    return time.time() - newest


def _remove(path: Path) -> bool:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)  # a file or a link (never followed)
    except OSError:  # another process cleaned it first, or it is not ours to remove
        return False
    return True


def _json_default(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def load_run(path: Path) -> RunResult:
    """Read a finished run directory (host memory; the large arrays are memory-mapped).
    Check it with :func:`find_cached` first."""
    import pandas as pd

    path = Path(path)
    decoded = np.load(path / "decoded.npz")
    with np.load(path / "families.npz") as saved:
        families = {name: saved[name] for name in saved.files}
    return RunResult(
        path=path,
        report=json.loads((path / REPORT).read_text()),
        beats=pd.read_parquet(path / "beats.parquet"),
        fiducials=np.load(path / "fiducials.npy"),
        signal=np.load(path / "signal.npy", mmap_mode="r"),
        embeddings=np.load(path / "embeddings.npy", mmap_mode="r"),
        decoded_z=decoded["z"],
        decoded=decoded["rows"],
        families=families,
        episodes=pd.read_parquet(path / "episodes.parquet"),
        cached=True,
    )


def load_model(path: Path, device: str = "cpu"):
    """Rebuild the VAE from a checkpoint: the checkpoint carries its config and width."""
    import torch

    from pipeline.config import VAEConfig
    from pipeline.model import VAE

    checkpoint = torch.load(path, map_location="cuda" if device == "gpu" else "cpu", weights_only=True)
    cfg = dict(checkpoint["config"])
    cfg["channels"] = tuple(cfg["channels"])
    model = VAE(checkpoint["width"], VAEConfig(**cfg))
    model.load_state_dict(checkpoint["model"])
    return model.to("cuda" if device == "gpu" else "cpu").eval()
