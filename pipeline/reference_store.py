"""A trained reference and its files: the settings it compares beats with, the population's
normal-beat centroids and tail tables, and the ``.npz`` + ``.json`` pair it is kept in.

The ``.json`` records the reference's settings, what it was trained on and the SHA-256 of the
``.npz``, which :func:`load_reference` checks; :func:`reference_digest` reads that digest alone,
so a run's cache key does not need the reference loaded.

See Also
--------
pipeline.reference_training.train_reference : makes a reference.
pipeline.reference_score.score_reference : scores beats against one.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pipeline import calibrate

REFERENCE_DIR = Path(__file__).with_name("reference_data")
DEFAULT_REFERENCE = REFERENCE_DIR / "reference-v1.npz"
COMPONENTS = ("shape", "rhythm", "population")


@dataclass(frozen=True)
class ReferenceConfig:
    """How beats are compared with the reference population, and how it is trained."""

    fs: float = 250.0              # the reference rate: every recording's rows are resampled to it
    window_s: float = 1.024        # row length (256 samples at 250 Hz), as the product's window
    pre_fiducial: float = 0.25     # fraction of the row before the fiducial, as the product's
    lowpass_hz: float = 0.0        # resampling cut-off; 0: 0.45 × the lower of the two rates
    centroids: int = 256           # k-means centres of the population's normal beats
    beats_per_record: int = 400    # normal beats drawn from each training record for k-means
    block_beats: int = 512         # a normal template per block of this many beats (~7 min at 70 bpm)
    core_fraction: float = 0.5     # the block's beats nearest the population that make its template
    rhythm_half_window: int = 32   # local median RR over this many intervals on each side
    rhythm_floor: float = 0.04     # robust z floor of the RR ratios (see rhythm.robust_z)
    weight_shape: float = 1.0      # weights of the components in the Fisher sum
    weight_rhythm: float = 1.0
    weight_population: float = 0.0
    seed: int = 0

    @property
    def width(self) -> int:
        return int(round(self.window_s * self.fs))

    @property
    def pre(self) -> int:
        return int(round(self.pre_fiducial * self.width))

    @property
    def weights(self) -> dict:
        return {"shape": self.weight_shape, "rhythm": self.weight_rhythm, "population": self.weight_population}


@dataclass(frozen=True)
class Reference:
    """A trained reference: its config, the population's normal-beat centroids ((centroids,
    width) float32, host), a :class:`~pipeline.calibrate.TailTable` per component and one for the
    combined statistic (``"combined"``), and ``meta`` (what it was trained on)."""

    config: ReferenceConfig
    centroids: np.ndarray
    tables: dict
    meta: dict = field(default_factory=dict)


def save_reference(reference: Reference, path: Path) -> Path:
    """Write ``<path>.npz`` (centroids and tables) and ``<path>.json`` beside it (config, what it
    was trained on, and the SHA-256 of the ``.npz``, which :func:`load_reference` checks)."""
    path = Path(path).with_suffix(".npz")
    arrays = {"centroids": reference.centroids.astype(np.float32)}
    for name, table in reference.tables.items():
        arrays.update(table.as_arrays(name))
    # Written member by member with a fixed timestamp (np.savez stamps the current time), so the same
    # reference always has the same bytes and the same SHA-256.
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in sorted(arrays.items()):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, buffer.getvalue())
    meta = {k: v for k, v in reference.meta.items() if k != "file"}
    sidecar = {"format": "ecg-reference", "version": 1, "config": asdict(reference.config),
               "npz_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), **meta}
    path.with_suffix(".json").write_text(json.dumps(sidecar, indent=1) + "\n")
    return path


def load_reference(path: Path | None = None) -> Reference:
    """Read a reference written by :func:`save_reference` (default: the shipped one). Raises
    ValueError when the ``.npz`` does not match the SHA-256 its ``.json`` records. Read once while
    its files are unchanged: a reference trained again under the same name is read again."""
    path = Path(path or DEFAULT_REFERENCE).with_suffix(".npz")
    return _load_reference(path, _signature(path))


@functools.lru_cache(maxsize=4)
def _load_reference(path: Path, signature: tuple) -> Reference:
    try:
        sidecar = json.loads(path.with_suffix(".json").read_text())
        payload = path.read_bytes()
    except FileNotFoundError as err:
        raise ValueError(f"no reference at {path}: {err.filename} is missing") from None
    if hashlib.sha256(payload).hexdigest() != sidecar.get("npz_sha256"):
        raise ValueError(f"{path.name} does not match the SHA-256 recorded in {path.with_suffix('.json').name}; "
                         "the reference is damaged or was replaced")
    known = ReferenceConfig.__dataclass_fields__
    cfg = ReferenceConfig(**{k: v for k, v in sidecar["config"].items() if k in known})
    with np.load(io.BytesIO(payload)) as arrays:
        tables = {name: calibrate.TailTable.from_arrays(arrays, name) for name in (*COMPONENTS, "combined")}
        centroids = arrays["centroids"].astype(np.float32)
    meta = {k: v for k, v in sidecar.items() if k not in ("format", "version", "config", "npz_sha256")}
    meta["file"] = {"name": path.name, "sha256": sidecar["npz_sha256"]}  # for a run's report and cache key
    return Reference(cfg, centroids, tables, meta)


def reference_digest(path: Path | str | None = None) -> str:
    """The SHA-256 of a reference's ``.npz`` (default: the shipped one), as its ``.json`` records it:
    a run's cache key, read without loading the reference (:func:`load_reference` checks it); read
    once while the files are unchanged."""
    path = Path(path or DEFAULT_REFERENCE).with_suffix(".json")
    return _reference_digest(path, _signature(path))


@functools.lru_cache(maxsize=16)
def _reference_digest(path: Path, signature: tuple) -> str:
    for needed in (path.with_suffix(".npz"), path):
        if not needed.is_file():
            raise ValueError(f"no reference at {path.with_suffix('.npz')}: {needed.name} is missing")
    try:
        return str(json.loads(path.read_text())["npz_sha256"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path.name} is not a reference's description (no npz_sha256)") from None


def describe_file(path: Path | str | None = None) -> str:
    """:func:`describe`'s line for the reference at ``path`` (default: the shipped one), read from
    its ``.json`` alone: for listing references without loading them. Raises ValueError when that
    file is missing or is no reference's description."""
    path = Path(path or DEFAULT_REFERENCE).with_suffix(".json")
    try:
        sidecar = json.loads(path.read_text())
        return _describe(sidecar, float(sidecar.get("config", {}).get("fs", ReferenceConfig.fs)))
    except OSError as err:
        raise ValueError(f"{path.name} cannot be read ({err.strerror or err})") from None
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{path.name} is not a reference's description") from None


def _signature(path: Path) -> tuple:
    """What changes when a reference's files are written again: size, modification time and inode
    of the ``.npz`` and the ``.json`` (None for one that is missing)."""
    signature = []
    for part in (path.with_suffix(".npz"), path.with_suffix(".json")):
        try:
            st = part.stat()
            signature.append((st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            signature.append(None)
    return tuple(signature)


def describe(reference: Reference) -> str:
    """One line about a reference: what it was trained on."""
    return _describe(reference.meta, reference.config.fs)


def _describe(meta: dict, fs: float) -> str:
    digest = str(meta.get("training_data_sha256", "?"))[:12]
    return (f"reference of {len(meta.get('records', []))} recordings, {meta.get('normal_beats', 0):,} normal beats "
            f"at {fs:g} Hz (training data SHA-256 {digest}…)")


def report_entry(population: Reference) -> dict:
    """What a run's calibrated scores were measured against, for its report."""
    from pipeline.calibrate import OUTLIER_SCORE

    meta = population.meta
    return {"file": meta.get("file", {}), "training_data_sha256": meta.get("training_data_sha256"),
            "description": describe(population), "outlier_score": OUTLIER_SCORE}
