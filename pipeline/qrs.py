"""Measures of the ECG itself at candidate beats: where the QRS extremum lies, how wide and steep
its deflection is (and the beats' median of both), and the beats' usual polarity.

The beat detector (:mod:`pipeline.peaks`) finds candidates on the Ricker response; every one of
its checks (T wave or QRS, baseline step, rival deflection, small or hidden beat) then asks these
questions of the ECG at the candidates. Per-candidate work: one Numba kernel (CUDA or CPU by the
input's type) or a few gathers, on the input's device.

See Also
--------
pipeline.peaks : the detector these measures serve.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pipeline import _beat_kernels, _likeness_kernels, _rhythm_kernels, _shape_kernels, backend


def qrs_shape(signal, positions, fs: float, *, search_s: float = 0.0, baseline_s: float = 0.15,
              despike_s: float = 0.006, width_cap_s: float = 0.15, slope_step_s: float = 0.008,
              slope_reach_s: float = 0.06, polarity: float = 0.0, rival: float = 1.0):
    """Per candidate: the QRS point near it, the width and the steepest slope of its deflection.

    All three are measured on the ECG with spikes removed: a running median over ±``despike_s``
    (5 samples at 250–360 Hz) erases pacing spikes, which are narrower, and keeps the QRS.
    Numba kernel (one thread per candidate), CUDA or CPU by the input's type.

    Returns
    -------
    refined : int64 array
        The sample within ±``search_s`` farthest from the mean over ±``baseline_s``; with
        ``polarity`` ±1, a deflection of the other sign must be ``rival`` × farther to win.
    width : int32 array
        Samples around it that stay beyond half of that deflection (capped at ±``width_cap_s``):
        about 20 ms for a narrow QRS, 60–100 ms for a ventricular beat, 100 ms or more for a T wave.
    slope : float32 array
        The largest rise over 2 × ``slope_step_s`` within ±``slope_reach_s`` (signal units).
    """
    xp = backend.xp_of(signal)
    # Contiguous, as the kernel was compiled (and warmed up) for: a strided view such as every
    # n-th beat would compile it again for that layout, seconds inside the run.
    positions = xp.ascontiguousarray(positions)
    count = int(positions.shape[0])
    refined = xp.empty(count, dtype=xp.int64)
    width = xp.empty(count, dtype=xp.int32)
    slope = xp.empty(count, dtype=xp.float32)
    settings = shape_settings(fs, search_s=search_s, baseline_s=baseline_s, despike_s=despike_s,
                              width_cap_s=width_cap_s, slope_step_s=slope_step_s, slope_reach_s=slope_reach_s)
    _shape_kernels.launch("qrs_shape", count, signal, positions, *settings, float(polarity), float(rival), refined,
                          width, slope)
    return refined, width, slope


def steepest_rises(signal, positions, fs: float, cfg) -> np.ndarray:
    """Host float32: each beat's steepest rise on ``signal`` (:func:`qrs_shape`, spikes removed and
    widths capped as the detector reads them, ``cfg`` a :class:`pipeline.config.SignalConfig`)."""
    if len(positions) == 0:
        return np.zeros(0, dtype=np.float32)
    xp = backend.xp_of(signal)
    _, _, slope = qrs_shape(signal, xp.asarray(positions), fs, despike_s=cfg.despike_s, width_cap_s=cfg.max_qrs_width_s)
    return backend.to_host(slope)


def shape_settings(fs: float, *, search_s: float = 0.0, baseline_s: float = 0.15, despike_s: float = 0.006,
                   width_cap_s: float = 0.15, slope_step_s: float = 0.008, slope_reach_s: float = 0.06) -> tuple:
    """:func:`qrs_shape`'s durations in samples, as its kernel takes them: (search, base, despike,
    cap, step, reach). The kernels of :mod:`pipeline._beat_kernels` measure with the same."""
    search, base, cap, reach = (max(0, int(round(v * fs))) for v in (search_s, baseline_s, width_cap_s, slope_reach_s))
    despike = min(7, max(1, int(round(despike_s * fs))))  # the median's cost grows with its square
    step = max(1, int(round(slope_step_s * fs)))
    return search, base, despike, cap, step, reach


def refine_to_extremum(signal, positions, fs: float, *, search_s: float = 0.05, baseline_s: float = 0.15,
                       despike_s: float = 0.006, polarity: float = 0.0, rival: float = 1.0):
    """Move each fiducial to the largest deflection of the ECG itself within ±``search_s``.

    The envelope peak marks the QRS complex; the R (or, for a downward beat, S/QS) extremum is
    where annotators put the beat. The deflection is measured from the mean over ±``baseline_s``,
    so baseline wander does not pull the point, and on the ECG with spikes removed (see
    :func:`qrs_shape`), so a pacing spike is never taken for the R wave. With ``polarity`` ±1
    (:func:`polarity_of`), a deflection of the other sign wins only when ``rival`` × larger.
    """
    if positions.shape[0] == 0:
        return positions
    return qrs_shape(signal, positions, fs, search_s=search_s, baseline_s=baseline_s, despike_s=despike_s,
                     polarity=polarity, rival=rival)[0]


def polarity_of(signal, positions, fs: float, share: float = 0.8, reach_s: float = 0.1, *,
                search_s: float = 0.05, rival: float = 1.5, near_share: float = 0.5) -> float:
    """+1 when at least ``share`` of the beats' fiducials are upward deflections (against the mean
    of the ECG ``reach_s`` before and after them), -1 when that share is downward. Otherwise, when
    at least ``near_share`` of the beats have an upward and a downward wave within ±``search_s``
    near equal (neither ``rival`` × the other), the sign of the median of their difference: the
    largest deflection alone hops between the two waves from beat to beat (a wide complex, its R
    blunted by a low sampling rate), so few of them agree, yet one wave is usually the larger.
    Else 0 (no usual polarity: beats of both kinds, or none)."""
    if positions.shape[0] == 0:
        return 0.0
    # The shares are taken on the host (copies of ~1000 deflections, where one number would sync
    # anyway): CuPy's mean of them needs a kernel that the warm-up's recording did not load.
    up = float((backend.to_host(deflection(signal, positions, fs, reach_s)) >= 0).mean())
    if up >= share or up <= 1.0 - share:
        return 1.0 if up >= share else -1.0
    upward, downward = (np.maximum(sign * backend.to_host(deflection(signal, refine_to_extremum(
        signal, positions, fs, search_s=search_s, polarity=sign, rival=np.inf), fs, reach_s)).astype(np.float64), 0.0)
        for sign in (1.0, -1.0))
    near = np.maximum(upward, downward) < rival * np.minimum(upward, downward)
    return float(np.sign(np.median(upward - downward))) if near.mean() >= near_share else 0.0


def deflection(signal, positions, fs: float, reach_s: float):
    """The ECG at each position less the mean of its values ``reach_s`` before and after (signed,
    indices clipped to the ECG), in the ECG's precision: one kernel (``deflection``), one thread a
    position."""
    xp = backend.xp_of(signal)
    out = xp.empty(positions.shape[0], dtype=signal.dtype)
    _rhythm_kernels.launch("deflection", positions.shape[0], signal, positions, max(1, int(round(reach_s * fs))), out)
    return out


def spread(positions, count: int = 1000):
    """Up to about ``count`` of ``positions``, evenly spread (every n-th)."""
    return positions[::max(1, positions.shape[0] // count)]


def sample_median(values):
    """The median of a measure over :func:`spread`'s sample of the beats (a NumPy scalar, as
    ``np.median`` gives it), taken on the host: one copy of ~1000 values. CuPy's median of so few
    takes one kernel below 1024 values and another above, and a recording's sample falls on either
    side: the one the warm-up did not meet would load inside the run."""
    return np.median(backend.to_host(values))


def shape_medians(signal, sample, fs: float, *, despike_s: float = 0.006, width_cap_s: float = 0.15):
    """The median width and slope of the deflections at ``sample`` (contiguous: :func:`spread`'s
    sample of the beats, copied), as :func:`sample_median` of :func:`qrs_shape`'s measures gives
    them, but left on the device (float64 [width, slope], the slope's float32 median held exactly):
    for the per-beat kernels of :mod:`pipeline._beat_kernels`, which then need no host
    synchronisation. One QRS-shape launch, and one thread a value and a measure for the medians."""
    xp = backend.xp_of(signal)
    _, width, slope = qrs_shape(signal, sample, fs, despike_s=despike_s, width_cap_s=width_cap_s)
    medians = xp.empty(2, dtype=xp.float64)
    _beat_kernels.launch("shape_medians", 2 * sample.shape[0], width, slope, medians)
    return medians


class LikenessSample(NamedTuple):
    """What the ``alike`` kernel compares a beat with: a sample of a recording's beats."""

    sample: Any     # their fiducials (contiguous)
    medians: Any    # their median QRS width and slope (float64 [width, slope], on the device)
    reach: int      # the samples compared on either side of a fiducial
    stretches: Any  # (beats, 2): each one's ECG stretch over ±reach, as the kernel reads it


def likeness_sample(signal, sample, fs: float, *, reach_s: float = 0.06, despike_s: float = 0.006,
                    width_cap_s: float = 0.15) -> LikenessSample:
    """The :class:`LikenessSample` of the beats ``sample`` (~1000 of them: :func:`spread`), compared
    over ±``reach_s``; their :func:`shape_medians` with ``despike_s`` and ``width_cap_s``."""
    xp = backend.xp_of(signal)
    sample = xp.ascontiguousarray(xp.asarray(sample))
    medians = shape_medians(signal, sample, fs, despike_s=despike_s, width_cap_s=width_cap_s)
    reach = max(1, int(round(reach_s * fs)))
    stretches = xp.empty((sample.shape[0], 2), dtype=xp.float64)
    _likeness_kernels.launch("stretches", sample.shape[0], signal, sample, reach, stretches)
    return LikenessSample(sample, medians, reach, stretches)


def detector_likeness_sample(signal, sample, fs: float, cfg) -> LikenessSample:
    """:func:`likeness_sample` with the detector's settings (``cfg``, a
    :class:`pipeline.config.SignalConfig`: ``rescue_likeness_s``, ``despike_s``, ``max_qrs_width_s``)."""
    return likeness_sample(signal, sample, fs, reach_s=cfg.rescue_likeness_s, despike_s=cfg.despike_s,
                           width_cap_s=cfg.max_qrs_width_s)
