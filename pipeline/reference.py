"""The reference population of normal beats, and the calibrated outlier score it gives every beat.

Each recording's VAE ranks its beats well, but its scores share no scale with another
recording's, and what is common in a recording (bigeminy, frequent atrial premature beats) is
never an outlier in it. The reference answers both with three statistics per beat, each
calibrated against normal beats of other people (:mod:`pipeline.calibrate`):

- **shape**: the squared distance of the beat to its recording's *normal* template, over the
  median of that distance among the recording's normal beats. The reference model decides which
  beats are normal: the half of each block of ``block_beats`` beats nearest the population's
  normal beats (``centroids``, k-means centres of normal beats of many recordings), refined once
  by their distance to their own median. So a recording whose majority is ventricular still has
  a normal template, and its ventricular beats stay far from it.
- **rhythm**: :func:`pipeline.rhythm.rhythm_score` (robust z of the RR before and after the beat,
  relative to the local median RR over ``rhythm_half_window`` beats on each side).
- **population**: the squared distance to the nearest population centroid (how unlike anyone's
  normal beat the beat is); by default it weighs nothing in the score and only picks the normal
  template, because normal beats differ between people more than ectopic beats differ from
  normal ones within a person.

Beats are compared at one rate: the product's rows (``embed.embed_beats``: fiducial at column
``pre``, divided by the recording's median peak-to-peak amplitude) are resampled to ``fs``
(250 Hz: 256 samples over 1.024 s, fiducial at column 64) by one band-limited interpolation
matrix, so recordings at 128-1000 Hz give the same rows and run directories (``embeddings.npy``)
can train a reference without their signal. Every step is array code on the input's device
(NumPy or CuPy); no PyTorch.

See Also
--------
pipeline.embed.embed_beats : the rows scored here (the previous step).
pipeline.calibrate : tail tables, the combined score, the outlier threshold, explanations.
pipeline.results.beats_table : stores the calibrated score and its components (the next step).
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import warnings
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline import PipelineWarning, backend, calibrate

REFERENCE_DIR = Path(__file__).with_name("reference_data")
DEFAULT_REFERENCE = REFERENCE_DIR / "reference-v1.npz"
COMPONENTS = ("shape", "rhythm", "population")
NORMAL_SYMBOLS = frozenset("NLRej")  # AAMI class N: the only beats a reference learns from
# A squared distance below this (per row of unit median amplitude) is noise-free agreement: it keeps
# a synthetic recording of identical beats from dividing by zero.
DISTANCE_FLOOR_PER_SAMPLE = 0.005 ** 2


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


@dataclass
class ReferenceScores:
    """Per beat, on the input's device: ``score`` (calibrated, −log10 of the fraction of the
    population's normal beats at least as unusual; float32), the components' tail probabilities
    ``p`` ({name: float32}), their raw ``statistics`` ({name: float32}), ``is_core`` (the beats that
    made their block's normal template) and ``templates`` ((blocks, width) normal templates at the
    reference rate) with ``block`` (each beat's block index)."""

    score: object
    p: dict
    statistics: dict
    is_core: object
    templates: object
    block: object

    def columns(self) -> dict:
        """The beats-table columns that explain ``score`` (named and described in
        :data:`pipeline.calibrate.COLUMNS`), as arrays on the input's device."""
        return {"p_ref_shape": self.p["shape"], "p_ref_rhythm": self.p["rhythm"],
                "p_ref_population": self.p["population"], "ref_shape": self.statistics["shape"]}


# --------------------------------------------------------------------------- resampling
@functools.lru_cache(maxsize=16)
def _interpolation_matrix(width: int, pre: int, fs: float, out_width: int, out_pre: int, out_fs: float,
                          lowpass_hz: float = 0.0) -> np.ndarray:
    """(width, out_width) float32: column c is the band-limited interpolation kernel that gives
    output sample c (``(c − out_pre) / out_fs`` seconds from the fiducial) from the input samples.
    A Hann-windowed sinc with its cut-off at 0.45 × the lower of the two rates (anti-aliasing when
    going down, no invented content going up), three cut-off periods on either side; each column
    sums to 1 over the input samples it reaches, so a constant stays constant at the row's ends."""
    cutoff = 0.45 * min(fs, out_fs)
    cutoff = min(cutoff, lowpass_hz) if lowpass_hz > 0 else cutoff
    half_s = 3.0 / cutoff
    t_out = (np.arange(out_width) - out_pre) / out_fs
    t_in = (np.arange(width) - pre) / fs
    lag = t_in[:, None] - t_out[None, :]
    kernel = np.sinc(2.0 * cutoff * lag) * np.where(np.abs(lag) < half_s, 0.5 + 0.5 * np.cos(np.pi * lag / half_s), 0.0)
    total = kernel.sum(axis=0, keepdims=True)
    return (kernel / np.where(np.abs(total) > 1e-6, total, 1.0)).astype(np.float32)


def resample_rows(rows, fs: float, pre: int, cfg: ReferenceConfig = ReferenceConfig(), *, batch: int = 65536):
    """The product's beat rows (``embed.embed_beats``: (n, width) float32, fiducial at column
    ``pre``, sampled at ``fs``) at the reference rate: (n, ``cfg.width``) float32 with the fiducial
    at ``cfg.pre``, divided again by their median peak-to-peak amplitude (the product's
    normalisation, now at one rate). Rows rather than the signal are resampled, so the same call
    serves a run in progress (``beats.rows``) and a finished run (``embeddings.npy``). Array in,
    same array type out.

    See Also
    --------
    pipeline.embed.embed_beats : makes the rows.
    reference_statistics : the next step.
    """
    xp = backend.xp_of(rows)
    if rows.ndim != 2 or rows.dtype != xp.float32:
        raise ValueError(f"rows must be a 2-D float32 array (n_beats, width); got {rows.dtype} with shape {rows.shape}")
    if not (math.isfinite(fs) and fs > 0):
        raise ValueError(f"fs must be a positive sampling rate in Hz; got {fs}")
    if not 0 <= pre < rows.shape[1]:
        raise ValueError(f"pre must be a column of the rows (0 to {rows.shape[1] - 1}); got {pre}")
    matrix = xp.asarray(_interpolation_matrix(int(rows.shape[1]), int(pre), float(fs), cfg.width, cfg.pre,
                                              float(cfg.fs), float(cfg.lowpass_hz)))
    out = xp.concatenate([chunk @ matrix for chunk in _chunks(rows, batch)]) if rows.shape[0] else \
        xp.zeros((0, cfg.width), dtype=xp.float32)
    if out.shape[0]:
        scale = float(xp.median(out.max(axis=1) - out.min(axis=1)))  # sync point
        out /= scale if scale > 0 else 1.0
    return out.astype(xp.float32, copy=False)


def _chunks(rows, batch: int):
    return [rows[start:start + batch] for start in range(0, int(rows.shape[0]), batch)]


# --------------------------------------------------------------------------- statistics
def population_distance(rows, centroids, *, batch: int = 16384):
    """Squared distance of each reference-rate row to the nearest population centroid (float32,
    on the rows' device): ``|x|² − 2 x·c + |c|²``, minimised over the centroids, in batches."""
    xp = backend.xp_of(rows)
    c = xp.asarray(centroids, dtype=xp.float32)
    if rows.shape[1] != c.shape[1]:
        raise ValueError(f"rows must have the reference's width {c.shape[1]}; got {rows.shape[1]} "
                         "(resample them with resample_rows first)")
    c2 = (c * c).sum(axis=1)
    parts = [xp.maximum((chunk * chunk).sum(axis=1) + (c2[None, :] - 2.0 * (chunk @ c.T)).min(axis=1), 0.0)
             for chunk in _chunks(rows, batch)]
    return (xp.concatenate(parts) if parts else xp.zeros(0, dtype=xp.float32)).astype(xp.float32)


def block_edges(n_beats: int, block_beats: int) -> np.ndarray:
    """Boundaries of the blocks of a recording's beats: ``n // block_beats`` blocks of equal size
    (each holds ``block_beats`` to ``2 × block_beats − 1`` beats; one block when shorter)."""
    blocks = max(1, n_beats // max(1, block_beats))
    return np.linspace(0, n_beats, blocks + 1).round().astype(np.int64)


def template_distance(rows, population, cfg: ReferenceConfig = ReferenceConfig()):
    """Shape statistic of every beat: its squared distance to its block's normal template, over
    the median of that distance among the recording's normal ("core") beats.

    In each block the core is the ``core_fraction`` of beats nearest the population's normal beats
    (``population``: :func:`population_distance`); the template is the sample-wise median of the
    core; the core then keeps those of its beats no farther from that template than its median
    beat, and the template is their median. Returns ``(statistic, is_core, templates, block)``:
    float32 (n,), bool (n,), (blocks, width) and int64 (n,) on the rows' device.
    """
    xp = backend.xp_of(rows)
    n = int(rows.shape[0])
    if n == 0:
        return (xp.zeros(0, dtype=xp.float32), xp.zeros(0, dtype=bool), xp.zeros((0, rows.shape[1]), dtype=xp.float32),
                xp.zeros(0, dtype=xp.int64))
    edges = block_edges(n, cfg.block_beats)
    distance = xp.zeros(n, dtype=xp.float32)
    is_core = xp.zeros(n, dtype=bool)
    templates = []
    for start, stop in zip(edges[:-1].tolist(), edges[1:].tolist()):
        x, near = rows[start:stop], population[start:stop]
        core = near <= xp.quantile(near, cfg.core_fraction)
        d = ((x - xp.median(x[core], axis=0)) ** 2).sum(axis=1)
        core &= d <= xp.median(d[core])
        template = xp.median(x[core], axis=0)
        distance[start:stop] = ((x - template) ** 2).sum(axis=1)
        is_core[start:stop] = core
        templates.append(template)
    block = xp.asarray(np.repeat(np.arange(len(edges) - 1), np.diff(edges)))
    typical = float(xp.median(distance[is_core])) if n else 1.0  # sync point
    typical = max(typical, DISTANCE_FLOOR_PER_SAMPLE * rows.shape[1])
    templates = xp.stack(templates) if templates else xp.zeros((0, rows.shape[1]), dtype=xp.float32)
    return (distance / typical).astype(xp.float32), is_core, templates.astype(xp.float32), block


def reference_statistics(rows, positions, fs: float, centroids,
                         cfg: ReferenceConfig = ReferenceConfig()) -> tuple[dict, tuple]:
    """The raw statistics of every beat ({"shape", "rhythm", "population"}: float32 arrays on the
    rows' device) from reference-rate ``rows`` (:func:`resample_rows`) and the beats' fiducials
    ``positions`` (samples at ``fs``); also ``(is_core, templates, block)`` of
    :func:`template_distance`."""
    from pipeline import rhythm   # Numba: imported where used, so a cached start reads the digest without it

    xp = backend.xp_of(rows)
    if positions.shape[0] != rows.shape[0]:
        raise ValueError(f"positions must give one fiducial per row; got {positions.shape[0]} for {rows.shape[0]} rows")
    near = population_distance(rows, centroids)
    shape, is_core, templates, block = template_distance(rows, near, cfg)
    timing = rhythm.rhythm_score(*rhythm.rr_features(positions, fs, half_window=cfg.rhythm_half_window)[:2],
                                 floor=cfg.rhythm_floor)
    return {"shape": shape, "rhythm": timing.astype(xp.float32), "population": near}, (is_core, templates, block)


# --------------------------------------------------------------------------- scoring
def score_reference(rows, positions, fs: float, pre: int, reference: "Reference | None" = None) -> ReferenceScores:
    """Calibrated outlier scores of one recording's beats.

    Parameters
    ----------
    rows : (n, width) float32 array (NumPy or CuPy)
        The product's beat rows at ``fs`` (``embed.embed_beats(...).rows``, fiducial at ``pre``).
    positions : int array
        The beats' fiducials, in samples at ``fs``, on the same device.
    reference : Reference, optional
        Default: the shipped reference (:func:`load_reference`).

    Each statistic becomes its tail probability among the population's normal beats; the
    weighted Fisher sum of their logs is calibrated once more against the population's normal
    beats (cross-fitted: each training record's against tables that did not see it), so
    ``score`` ≥ :data:`pipeline.calibrate.OUTLIER_SCORE` means the same in every recording.

    See Also
    --------
    pipeline.embed.embed_beats : the previous step.
    pipeline.calibrate.explain_calibrated : a beat's score in words.
    pipeline.results.beats_table : the next step.
    """
    reference = reference or load_reference()
    cfg = reference.config
    xp = backend.xp_of(rows)
    at_reference_rate = resample_rows(rows, fs, pre, cfg)
    statistics, (is_core, templates, block) = reference_statistics(at_reference_rate, positions, fs,
                                                                   reference.centroids, cfg)
    log_p = {name: calibrate.log_tail_p(statistics[name], reference.tables[name]) for name in COMPONENTS}
    combined = calibrate.fisher_statistic(log_p, cfg.weights)
    score = calibrate.calibrated_score(combined, reference.tables["combined"])
    p = {name: xp.exp(value).astype(xp.float32) for name, value in log_p.items()}
    return ReferenceScores(score, p, statistics, is_core, templates, block)


# --------------------------------------------------------------------------- training
@dataclass
class ReferenceBeats:
    """One training recording: reference-rate ``rows`` (n, width), its beats' ``positions`` at
    ``fs``, ``normal`` (bool (n,): the beats whose statistics define "normal"), and ``source``
    (a name and, where known, the SHA-256 of the recording) for the reference's record."""

    rows: np.ndarray
    positions: np.ndarray
    fs: float
    normal: np.ndarray
    source: dict


def train_reference(inputs: Sequence, labels: Sequence | None = None, cfg: ReferenceConfig = ReferenceConfig(),
                    progress=None) -> Reference:
    """Train a reference from run directories or arrays.

    Parameters
    ----------
    inputs : sequence
        Each a run directory written by ``python -m pipeline run``/``batch`` (its
        ``embeddings.npy``, ``beats.parquet`` and ``report.json``, read by
        :func:`pipeline.results.load_run`), a :class:`~pipeline.results.RunResult`, or a
        ``(rows, positions, fs, pre)`` tuple of the product's native-rate rows.
    labels : sequence, optional
        Per input, the beats that are normal: a boolean array, or beat symbols (MIT-BIH; AAMI
        class N = ``N L R e j`` counts as normal). Default: a run's ``label`` column (the reference
        annotations matched to its beats) where it has one; an input with neither counts every
        beat as normal (with a warning: its abnormal beats will count as normal variation).
        Labels only choose the normal beats; nothing else here reads them.
    progress : callable, optional
        ``progress(fraction, message)``.

    Returns
    -------
    Reference
        Centroids: k-means of up to ``beats_per_record`` normal beats of each input. Tail tables
        of each statistic over every input's normal beats; the combined statistic's table is
        cross-fitted (each input's normal beats scored against component tables fitted without
        it), so that scoring a new recording and fitting the table see the same uncertainty.
    """
    inputs = list(inputs)
    if len(inputs) < 2:
        raise ValueError(f"a reference needs at least 2 recordings (their normal beats are compared across "
                         f"recordings); got {len(inputs)}")
    if labels is not None and len(labels) != len(inputs):
        raise ValueError(f"labels must give one entry per input; got {len(labels)} for {len(inputs)} inputs")
    beats = [reference_beats(item, None if labels is None else labels[i], cfg) for i, item in enumerate(inputs)]
    return fit_reference(beats, cfg, progress=progress)


def fit_reference(recordings: Sequence[ReferenceBeats], cfg: ReferenceConfig = ReferenceConfig(),
                  progress=None) -> Reference:
    """:func:`train_reference` on prepared :class:`ReferenceBeats` (host arrays)."""
    from sklearn.cluster import KMeans

    say = progress or (lambda fraction, message: None)
    rng = np.random.default_rng(cfg.seed)
    sample = []
    for rec in recordings:
        normal = np.flatnonzero(rec.normal)
        if len(normal):
            sample.append(rec.rows[rng.choice(normal, min(cfg.beats_per_record, len(normal)), replace=False)])
    sample = np.concatenate(sample) if sample else np.zeros((0, cfg.width), np.float32)
    if len(sample) < 2 * cfg.centroids:
        raise ValueError(f"need at least {2 * cfg.centroids} normal beats to place {cfg.centroids} centroids; "
                         f"got {len(sample)}")
    say(0.1, f"k-means of {len(sample):,} normal beats")
    centroids = KMeans(cfg.centroids, n_init=1, max_iter=100, random_state=cfg.seed).fit(sample).cluster_centers_
    centroids = centroids.astype(np.float32)
    say(0.6, "statistics of every recording")
    stats = []
    for rec in recordings:
        values, _ = reference_statistics(rec.rows, rec.positions, rec.fs, centroids, cfg)
        stats.append({name: values[name][rec.normal] for name in COMPONENTS})
    tables = {name: calibrate.fit_tail(np.concatenate([s[name] for s in stats])) for name in COMPONENTS}
    say(0.8, "cross-fitted calibration of the combined score")
    combined = []
    for i, own in enumerate(stats):
        if not len(own["shape"]):
            continue
        others = {name: calibrate.fit_tail(np.concatenate([s[name] for j, s in enumerate(stats) if j != i]))
                  for name in COMPONENTS}
        combined.append(calibrate.fisher_statistic(
            {name: calibrate.log_tail_p(own[name], others[name]) for name in COMPONENTS}, cfg.weights))
    tables["combined"] = calibrate.fit_tail(np.concatenate(combined), "identity")
    digest = hashlib.sha256()
    for rec in recordings:
        for array in (rec.rows, rec.positions, rec.normal):
            digest.update(np.ascontiguousarray(array).tobytes())
    meta = {"training_data_sha256": digest.hexdigest(),
            "records": [dict(rec.source, beats=int(len(rec.rows)), normal_beats=int(rec.normal.sum()))
                        for rec in recordings],
            "normal_beats": int(sum(int(rec.normal.sum()) for rec in recordings)),
            "what_it_saw": "reference-rate beat rows and fiducials of every beat; labels only to choose the "
                           "normal (AAMI N) beats whose statistics and rows define the population"}
    say(1.0, "done")
    return Reference(cfg, centroids, tables, meta)


def reference_beats(item, labels, cfg: ReferenceConfig) -> ReferenceBeats:
    """A training input as :class:`ReferenceBeats` (see :func:`train_reference`). A run's
    low-quality beats (its ``quality`` column) are never normal examples: noise is no normal
    variation of a heartbeat."""
    if isinstance(item, (str, Path)):
        from pipeline.results import load_run   # a finished run's directory: read as the product reads it

        item = load_run(Path(item))
    clean = None
    if isinstance(item, tuple):
        if len(item) != 4:
            raise ValueError(f"an array input must be (rows, positions, fs, pre); got a tuple of {len(item)}")
        rows, positions, fs, pre = item
        source, symbols = {"name": f"arrays {len(rows)} beats"}, None
    elif hasattr(item, "embeddings") and hasattr(item, "beats"):
        report = item.report
        rows, positions = np.asarray(item.embeddings), item.beats["fiducial"].to_numpy()
        fs = float(report["input"]["fs"])
        pre = int(round(report["config"]["signal"]["pre_fiducial"] * rows.shape[1]))
        source = {"name": Path(report["input"]["path"]).name, "sha256": report["input"].get("sha256"),
                  "annotations_sha256": report["input"].get("annotations_sha256"), "run": str(item.path.name)}
        symbols = item.beats["label"].to_numpy() if "label" in item.beats else None
        if "quality" in item.beats:
            from pipeline.quality import LOW_QUALITY

            clean = item.beats["quality"].to_numpy() >= LOW_QUALITY
    else:
        raise ValueError(f"inputs must be run directories, RunResults or (rows, positions, fs, pre) tuples; "
                         f"got {type(item).__name__}")
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    positions = np.asarray(positions, dtype=np.int64)
    chosen = labels if labels is not None else symbols
    if chosen is None:
        warnings.warn(f"{source['name']}: no labels; every beat counts as normal in the reference",
                      PipelineWarning, stacklevel=3)
        normal = np.ones(len(rows), dtype=bool)
    else:
        chosen = np.asarray(chosen)
        normal = chosen.astype(bool) if chosen.dtype == bool else np.isin(chosen.astype(str), list(NORMAL_SYMBOLS))
    if normal.shape != (len(rows),):
        raise ValueError(f"{source['name']}: labels must give one entry per beat; got {normal.shape[0]} "
                         f"for {len(rows)} beats")
    if clean is not None:
        normal &= clean
    return ReferenceBeats(resample_rows(rows, fs, pre, cfg), positions, fs, normal, source)


# --------------------------------------------------------------------------- files
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


@functools.lru_cache(maxsize=4)
def load_reference(path: Path | None = None) -> Reference:
    """Read a reference written by :func:`save_reference` (default: the shipped one). Raises
    ValueError when the ``.npz`` does not match the SHA-256 its ``.json`` records."""
    path = Path(path or DEFAULT_REFERENCE).with_suffix(".npz")
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


@functools.lru_cache(maxsize=4)
def reference_digest(path: Path | str | None = None) -> str:
    """The SHA-256 of a reference's ``.npz`` (default: the shipped one), as its ``.json`` records it:
    a run's cache key, read without loading the reference (:func:`load_reference` checks it)."""
    path = Path(path or DEFAULT_REFERENCE).with_suffix(".json")
    for needed in (path.with_suffix(".npz"), path):
        if not needed.is_file():
            raise ValueError(f"no reference at {path.with_suffix('.npz')}: {needed.name} is missing")
    try:
        return str(json.loads(path.read_text())["npz_sha256"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path.name} is not a reference's description (no npz_sha256)") from None


def describe(reference: Reference) -> str:
    """One line about a reference: what it was trained on."""
    meta = reference.meta
    digest = str(meta.get("training_data_sha256", "?"))[:12]
    return (f"reference of {len(meta.get('records', []))} recordings, {meta.get('normal_beats', 0):,} normal beats "
            f"at {reference.config.fs:g} Hz (training data SHA-256 {digest}…)")
