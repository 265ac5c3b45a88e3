"""The run directory: tables, model, decoded samples, report; atomic writes and a verified cache.

A run lives in ``<out>/<key>/`` where ``key`` hashes the input's bytes (the recording, and the
sidecar of reference labels beside it when there is one; :mod:`pipeline.digests`) and every
parameter. It is written in a hidden temporary folder and renamed into place when complete, so a
failed or interrupted run never leaves a half-written or overwritten run behind; what a killed
process left there is removed at a later start (:mod:`pipeline.leftovers`). ``report.json`` lists
the XXH3-128 digest of every other file; a cached run is served only when every file's content
still matches its digest, and is otherwise treated as damaged and rebuilt.

Input digests are remembered in ``<out>/.input-hashes.json``, keyed by the input's path and its
files' size, modification and change times and inode, so that a restart with the same input
reads it once.

The tables, the input's digest and the cleaning of leftovers live in modules of their own; their
names are also found here, where callers have always found them.

See Also
--------
pipeline.tables : the beats and episodes tables written here.
pipeline.score.score_beats : the previous step.
dashboard.shared_run.SharedRun : reads runs for the views.
"""
from __future__ import annotations

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
from pipeline.digests import (FILE_HASH, HASHES, RECORDING_FORMATS, annotations_sidecar, file_sha256,  # noqa: F401
                              file_xxh3, input_digest, input_files, input_sha256, input_signature, printable_path,
                              recording_files)
from pipeline.leftovers import LEFTOVER_IDLE_S, clean_leftovers  # noqa: F401
from pipeline.tables import (EPISODE_COLUMNS, NORMAL_SYMBOLS, SCORE_COMPONENTS, beats_table,  # noqa: F401
                             episodes_table, match_labels)

if TYPE_CHECKING:
    import pandas as pd   # imported where a table is made or read: finding a cached run needs none (0.5-0.7 s)

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


# --------------------------------------------------------------------------- remembered input digests
HASH_CACHE = ".input-hashes.json"  # in the runs folder: input path → (stat signature, digests)
HASH_CACHE_ENTRIES = 256


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
    problem = run_problem(path)
    if problem is None:
        return path
    warnings.warn(f"cached run {printable_path(path)} is damaged ({problem}); recomputing it", PipelineWarning, stacklevel=2)
    return None


def run_problem(path: Path) -> str | None:
    """None when the run directory ``path`` is intact, else what is wrong with it, in a few words.
    Every file's content is hashed and compared with the digest written beside it: a file damaged
    in place keeps its size, and its modification time can be set back, so nothing short of its
    bytes shows that it is the file written."""
    path = Path(path)
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

    return _write_atomically(Path(root), key, report, {
        "beats.parquet": lambda path: beats.to_parquet(path, index=False),
        "episodes.parquet": lambda path: episodes.to_parquet(path, index=False),
        "fiducials.npy": lambda path: np.save(path, fiducials),
        "embeddings.npy": lambda path: np.save(path, embeddings),
        "signal.npy": lambda path: np.save(path, signal),
        "decoded.npz": lambda path: np.savez(path, z=decoded_z, rows=decoded),
        "families.npz": lambda path: np.savez(path, count=families.count, median=families.median,
                                              lower=families.lower, upper=families.upper),
        "model.pt": lambda path: torch.save(checkpoint, path),
    }, f"{os.getpid()}")


def write_rescored(root: Path, key: str, *, source: Path, report: dict, beats: pd.DataFrame) -> Path:
    """Write, as :func:`write_run` does (atomically, with checksums), the run ``<root>/<key>`` that
    is the finished run ``source`` with another beats table and report: every other file is
    copied unchanged, and ``source`` is not touched. A rescored run (:func:`pipeline.rescore.rescore_run`)
    is written so. The temporary folder carries the thread's id as well: sessions of one server
    may rescore at the same time."""
    source = Path(source)
    writers = {name: (lambda path, name=name: shutil.copyfile(source / name, path)) for name in FILES}
    writers["beats.parquet"] = lambda path: beats.to_parquet(path, index=False)
    return _write_atomically(Path(root), key, report, writers, f"{os.getpid()}-{threading.get_ident()}")


def _write_atomically(root: Path, key: str, report: dict, writers: dict, owner: str) -> Path:
    """Every file of ``writers`` (name → function of the path) into ``.<key>.tmp-<owner>``, their
    digests into ``report`` (written as ``report.json``), then one rename to ``<root>/<key>``. A
    damaged run already there is moved aside and replaced; a failure leaves nothing behind."""
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / key, root / f".{key}.tmp-{owner}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        digests = _write_and_hash(tmp, writers)
        report = dict(report, files=digests, file_hash=FILE_HASH)
        (tmp / REPORT).write_text(json.dumps(report, indent=1, default=_json_default))
        if final.exists():  # damaged (find_cached said so): move it aside, then swap in the new one
            trash = root / f".{key}.trash-{owner}"
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
