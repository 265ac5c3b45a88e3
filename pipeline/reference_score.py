"""Calibrated outlier scores of a recording's beats against a reference: the beats' rows resampled
to the reference rate, their shape, rhythm and population statistics, and the combined score.

Every step is array code on the input's device (NumPy or CuPy); no PyTorch. See
:mod:`pipeline.reference` for what the statistics mean.

See Also
--------
pipeline.embed.embed_beats : the rows scored here (the previous step).
pipeline.reference_store : the reference scored against.
pipeline.tables.beats_table : stores the calibrated score and its components (the next step).
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import numpy as np

from pipeline import backend, calibrate
from pipeline.reference_store import COMPONENTS, Reference, ReferenceConfig, load_reference

# A squared distance below this (per row of unit median amplitude) is noise-free agreement: it keeps
# a synthetic recording of identical beats from dividing by zero.
DISTANCE_FLOOR_PER_SAMPLE = 0.005 ** 2


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
    with _one_blas_thread(xp):
        out = xp.concatenate([chunk @ matrix for chunk in _chunks(rows, batch)]) if rows.shape[0] else \
            xp.zeros((0, cfg.width), dtype=xp.float32)
    if out.shape[0]:
        scale = float(xp.median(out.max(axis=1) - out.min(axis=1)))  # sync point
        out /= scale if scale > 0 else 1.0
    return out.astype(xp.float32, copy=False)


def _chunks(rows, batch: int):
    return [rows[start:start + batch] for start in range(0, int(rows.shape[0]), batch)]


def _one_blas_thread(xp):
    """On the CPU, BLAS on one thread for the products here: OpenBLAS splits a product among its
    threads in ways that round the last bit differently, and a reference must come out the same,
    bit for bit, trained in one process (every CPU) or on a cluster's workers (their share)."""
    if xp is not np:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


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
    with _one_blas_thread(xp):
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

    Blocks come in at most two sizes (:func:`block_edges`), so the blocks of each size are stacked
    and done at once: a Python loop over the blocks would launch a few kernels per block, and a long
    recording has hundreds of blocks.
    """
    xp = backend.xp_of(rows)
    n, width = int(rows.shape[0]), int(rows.shape[1])
    if n == 0:
        return (xp.zeros(0, dtype=xp.float32), xp.zeros(0, dtype=bool), xp.zeros((0, width), dtype=xp.float32),
                xp.zeros(0, dtype=xp.int64))
    edges = block_edges(n, cfg.block_beats)
    sizes = np.diff(edges)
    distance = xp.zeros(n, dtype=xp.float32)
    is_core = xp.zeros(n, dtype=bool)
    templates = xp.zeros((len(sizes), width), dtype=xp.float32)
    for size in np.unique(sizes).tolist():
        blocks = np.flatnonzero(sizes == size)
        index = xp.asarray(edges[blocks][:, None] + np.arange(size)[None, :])      # (g, size)
        x, near = rows[index], population[index]                                  # (g, size, width), (g, size)
        core = near <= xp.quantile(near, cfg.core_fraction, axis=1)[:, None]
        d = ((x - _masked_median(x, core[:, :, None], axis=1)[:, None, :]) ** 2).sum(axis=2)
        core &= d <= _masked_median(d, core, axis=1)[:, None]
        template = _masked_median(x, core[:, :, None], axis=1)                    # (g, width)
        distance[index] = ((x - template[:, None, :]) ** 2).sum(axis=2)
        is_core[index] = core
        templates[xp.asarray(blocks)] = template
    block = xp.asarray(np.repeat(np.arange(len(sizes)), sizes))
    typical = float(xp.median(distance[is_core]))  # sync point
    typical = max(typical, DISTANCE_FLOOR_PER_SAMPLE * width)
    return (distance / typical).astype(xp.float32), is_core, templates, block


def _masked_median(values, keep, axis: int):
    """The median along ``axis`` of the entries ``keep`` (broadcast to ``values``) marks, as
    ``median`` of those entries alone would give it; every line along ``axis`` keeps at least one."""
    xp = backend.xp_of(values)
    keep = xp.broadcast_to(keep, values.shape)
    ordered = xp.sort(xp.where(keep, values, xp.asarray(xp.inf, dtype=values.dtype)), axis=axis)
    count = keep.sum(axis=axis, keepdims=True)
    low = xp.take_along_axis(ordered, (count - 1) // 2, axis=axis)
    high = xp.take_along_axis(ordered, count // 2, axis=axis)
    return xp.squeeze((low + high) / 2, axis=axis).astype(values.dtype, copy=False)


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
    pipeline.tables.beats_table : the next step.
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

