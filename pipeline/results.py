"""The run directory: beats table, model, decoded samples, report; atomic writes and a verified cache.

A run lives in ``<out>/<key>/`` where ``key`` hashes the input's bytes and every parameter.
It is written in a hidden temporary folder and renamed into place when complete, so a failed or
interrupted run never leaves a half-written or overwritten run behind. ``report.json`` lists the
SHA-256 of every other file, and its size and modification time (ns) as written; a run whose files
do not match is treated as damaged and rebuilt.

Checking a cached run reads no data: a file whose size and modification time are those recorded
is taken as written (any write, truncation or replacement changes them); only a file whose
stat differs is hashed again, and accepted if its SHA-256 still matches. Input hashes are kept
the same way in ``<out>/.input-hashes.json``, keyed by the input's path and its files' size,
modification and change times and inode, so that a restart with the same input reads it once.

See Also
--------
pipeline.score.score_beats : the previous step.
dashboard.data_store.DataStore : reads runs for the views.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline import PipelineWarning

if TYPE_CHECKING:
    import pandas as pd   # imported where a table is made or read: finding a cached run needs none (0.5-0.7 s)

NORMAL_SYMBOLS = frozenset("NLRej")
REPORT = "report.json"
FILES = ("beats.parquet", "fiducials.npy", "embeddings.npy", "signal.npy", "decoded.npz", "families.npz", "model.pt")


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
# Columns that explain the outlier score (``components`` of :func:`beats_table`), in table order.
SCORE_COMPONENTS = {
    "score_shape": "the VAE's shape score: negative ELBO of the beat (higher = less like the recording's beats)",
    "score_rhythm": "rhythm score: sqrt(z_early² + z_pause²), robust z-scores of rr_pre / rr_post in this recording",
    "p_shape": "fraction of the recording's beats whose shape score is at least this high",
    "p_rhythm": "fraction of the recording's beats whose rhythm score is at least this high",
    "rr_pre": "RR interval before the beat / local median RR (NaN for the first beat)",
    "rr_post": "RR interval after the beat / local median RR",
    "prematurity": "1 - rr_pre: 0.28 = the beat came 28 % early",
    "local_rr_s": "median RR of the ~17 intervals around the beat, seconds",
}


def beats_table(*, fiducial, length, start, fs, is_train, z, score, annotations=None, components=None,
                tolerance_s: float = 0.15) -> pd.DataFrame:
    """One row per kept beat (host arrays in). ``score`` is the outlier score the views rank by;
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
        "length_s": (length / fs).astype(np.float32),
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
HASH_CACHE = ".input-hashes.json"  # in the runs folder: input path → (stat signature, SHA-256)
HASH_CACHE_ENTRIES = 256


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _is_wfdb(path: Path) -> bool:
    return path.suffix.lower() in (".hea", ".dat") or (not path.suffix and path.with_suffix(".hea").exists())


def input_files(path: Path) -> list[Path]:
    """The files whose bytes define an input: the file itself, or a WFDB record's header, signal
    and annotation files."""
    path = Path(path)
    if _is_wfdb(path):
        record = path.with_suffix("")
        return sorted(p for p in record.parent.glob(record.name + ".*") if p.suffix in (".hea", ".dat", ".atr"))
    return [path]


def input_sha256(path: Path) -> str:
    """Hash of the input's bytes; for a WFDB record, of its header, signal and annotation files."""
    if _is_wfdb(Path(path)):
        return hashlib.sha256("".join(file_sha256(p) for p in input_files(path)).encode()).hexdigest()
    return file_sha256(path)


def input_signature(path: Path) -> list:
    """What changes whenever an input's bytes may have: each file's name, size, modification and
    change times (ns), inode and device. The change time cannot be set back by hand, so a file
    rewritten and given its old modification time still gets a new signature."""
    out = []
    for part in input_files(path):
        st = part.stat()
        out.append([part.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev])
    return out


def remembered_input_sha256(path: Path, folder: Path) -> tuple[str, list]:
    """``(input_sha256(path), signature)``, reusing the digest remembered in ``folder`` when the
    input's signature is unchanged (then nothing is read). Remember a new one with
    :func:`remember_input_sha256` once the run has succeeded."""
    signature = input_signature(path)  # before reading: a change while hashing is seen next time
    entry = _read_hash_cache(folder).get(str(Path(path).resolve()))
    if entry and entry.get("signature") == signature:
        return entry["sha256"], signature
    return input_sha256(path), signature


def remember_input_sha256(path: Path, folder: Path, signature: list, digest: str) -> None:
    """Remember ``digest`` for ``path`` with its ``signature`` in ``folder`` (best effort: a
    read-only or missing folder only means hashing again next time)."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    entries = _read_hash_cache(folder)
    key = str(Path(path).resolve())
    if entries.get(key) == {"signature": signature, "sha256": digest}:
        return
    entries.pop(key, None)
    entries[key] = {"signature": signature, "sha256": digest}
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
    warnings.warn(f"cached run {path} is damaged ({problem}); recomputing it", PipelineWarning, stacklevel=2)
    return None


def _verify(path: Path) -> str | None:
    """None when the run is intact, else what is wrong. A file whose size and modification time
    are those recorded at writing is not read; any other is hashed and compared."""
    try:
        report = json.loads((path / REPORT).read_text())
    except (OSError, ValueError) as err:
        return f"report.json unreadable: {type(err).__name__}"
    recorded = report.get("file_stats", {})
    for name, digest in report.get("files", {}).items():
        try:
            st = (path / name).stat()
        except OSError:
            return f"{name} missing"
        if recorded.get(name) == [st.st_size, st.st_mtime_ns]:
            continue
        if file_sha256(path / name) != digest:
            return f"{name} does not match its checksum"
    if set(report.get("files", {})) != set(FILES):
        return "report lists the wrong files"
    return None


def write_run(root: Path, key: str, *, report: dict, beats: pd.DataFrame, fiducials: np.ndarray, signal: np.ndarray,
              embeddings: np.ndarray, decoded_z: np.ndarray, decoded: np.ndarray, checkpoint: dict,
              families) -> Path:
    """Write a run atomically: everything into ``.<key>.tmp-<pid>``, checksums into the report,
    then one rename. A damaged run already at the destination is replaced; nothing else is touched."""
    import torch

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / key, root / f".{key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        digests = _write_and_hash(tmp, {
            "beats.parquet": lambda path: beats.to_parquet(path, index=False),
            "fiducials.npy": lambda path: np.save(path, fiducials),
            "embeddings.npy": lambda path: np.save(path, embeddings),
            "signal.npy": lambda path: np.save(path, signal),
            "decoded.npz": lambda path: np.savez(path, z=decoded_z, rows=decoded),
            "families.npz": lambda path: np.savez(path, count=families.count, median=families.median,
                                                  lower=families.lower, upper=families.upper),
            "model.pt": lambda path: torch.save(checkpoint, path),
        })
        report = dict(report, files=digests,
                      file_stats={name: [(tmp / name).stat().st_size, (tmp / name).stat().st_mtime_ns]
                                  for name in FILES})
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
    threads of their own: Arrow's and NumPy's writes and hashlib's updates release the GIL.
    Written and hashed one after another, a 20M-sample run's files (the signal 80 MB, the embedded
    beats 69 MB) cost a cold start 0.39-0.55 s on the H200; in threads 0.20-0.27 s."""
    def write_and_hash(name: str) -> str:
        writers[name](folder / name)
        return file_sha256(folder / name)

    with ThreadPoolExecutor(min(4, len(writers)), thread_name_prefix="write-run") as pool:
        return dict(zip(writers, pool.map(write_and_hash, writers)))


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
