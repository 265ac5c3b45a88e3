"""Which beats inside noise episodes, and which faint beats anywhere, stay: those that look like
the recording's beats, and of the others those that fit its rhythm; and where the deflections
taken out show the recording to be noise.

Inside a burst of muscle noise or electrode motion as large as the QRS complexes, a noise
deflection passes every check a QRS complex passes (threshold, width, slope), and the non-maximum
suppression may keep it. Such a deflection falls anywhere in the cardiac cycle, so it splits an
RR interval; a heartbeat does not (a premature beat is followed by a pause: its two intervals
together are longer than one). Electrode motion that no noise test flags (its swings are slow,
and smaller than the QRS complexes) leaves such deflections too, a fraction as steep as the
recording's beats: those faint beats are judged the same way wherever they lie. So are the
deflections much less steep than a beat beside them, on every lead read: a swing on one lead is
no QRS complex on the other, while a heartbeat shows on both. Such a deflection can correlate with
a wide beat's shape, so only the rhythm may keep it. A beat the other lead hardly shows at all
(a fifth as steep as its median beat there) is judged too. Where deflection after deflection is
taken out, the lead is not to be trusted, though no noise measure flags it: the stretch is a
noise episode (:func:`left_out_noise`).

See Also
--------
pipeline.segmentation.heartbeats : calls :func:`keep_plausible` once the noise episodes are known.
pipeline.peaks.rescue_suppressed : the likeness test used here, first made for hidden QRS complexes.
"""
from __future__ import annotations

import math

import numpy as np

from pipeline import _likeness_kernels, backend, episodes, qrs

# The stretch of a noise episode beyond the first and the last deflection taken out: a beat either side.
_LEFT_OUT_MARGIN_S = 2.0
_NONE = np.zeros(0, np.int64)          # no fiducial left out
# The other lead shows a beat at least this fraction as steep as its median beat.
_SHOWN = 0.5


def keep_plausible(signal, positions, found, added, fs: float, cfg, other=None):
    """The beats ``positions`` (sorted fiducials) less those inside ``found``'s noise episodes, or
    faint, that the rhythm shows are no beats.

    Judged are the beats inside noise episodes and the faint ones: less than ``cfg.faint_slope``
    × as steep as the median beat (the steepest rise near the fiducial,
    :func:`pipeline.qrs.qrs_shape`), or less than ``cfg.faint_neighbour_slope`` × as steep as the
    steeper of the two beats beside them, on the analysed lead and on the ``other`` lead if there
    is one (sample for sample, same device), or, on that other lead, less than
    ``cfg.absent_other_slope`` × as steep as its median beat: a heartbeat shows on every lead, a
    swing of noise on one lead does not. The beats that stay whatever their timing: those not
    judged, the first and the last, those from the other lead (``added``, host), and those whose
    ECG within ±``cfg.rescue_likeness_s`` correlates at least ``cfg.rescue_likeness`` with that of
    one of the recording's clean beats (neither judged; up to ~1000 of them,
    :func:`pipeline.qrs.spread`) and which are as narrow as a QRS complex (at most
    ``cfg.search_back_width`` × those beats' median width): a beat the noise leaves readable, a
    small beat of the recording's own shape. Beats judged for their neighbours alone are not
    measured so: a swing half as steep as a beat beside it may have a wide beat's shape.
    Each run of the other beats between two that stay is chosen again: the subset is kept whose RR
    intervals lie nearest the local rhythm (the least sum of squared log ratios to the median of
    the nine clean intervals nearby), a beat being left out only where its neighbours are then at
    most ``cfg.noise_rhythm_rr`` × that RR apart. So no gap a beat is missing from is made, and a
    premature beat with its pause stays.

    Before any of that, a beat the other lead does not show (under ``cfg.absent_other_slope`` ×
    its median slope) goes outright when it comes within ``cfg.absent_other_twave_s`` of the beat
    before and the other lead shows the beats on either side (at least half its median slope):
    the T wave of that beat, on a lead whose T waves rival its QRS complexes. No heartbeat is
    that early and missing from a lead that shows its neighbours, and the rhythm cannot always
    tell: leaving a T wave out leaves its neighbours one true RR apart, which can exceed
    ``cfg.noise_rhythm_rr`` × a local RR read in an irregular rhythm. They count among the
    deflections left out: a lead whose T waves pass for beats is not to be trusted there.

    A beat whose neighbours are farther apart than that never goes, whatever the others do (a
    subset left out spans a gap at least as long), so only the likeness of those that could go is
    measured. The rhythm is read on the host, from one copy of the fiducials and one of their
    slopes (three host waits in all: those copies and the likeness of the few that could go,
    measured on the device); the fiducials kept go back in one copy. Each of a dozen small device
    calls and waits would cost more host time than the copies.

    Returns the fiducials kept (on their device) and those left out (host int64), from which
    :func:`left_out_noise` reads where the recording is noise.
    """
    if positions.shape[0] < 4:
        return positions, _NONE
    judged, by_neighbours, every, t_waves = _judged(signal, positions, found, fs, cfg, other)
    if t_waves.shape[0]:
        positions = backend.xp_of(positions).asarray(every)
    kept, left_out = _by_rhythm(signal, positions, every, judged, by_neighbours, added, fs, cfg)
    return kept, (np.union1d(left_out, t_waves) if t_waves.shape[0] else left_out)


def _by_rhythm(signal, positions, every, judged, by_neighbours, added, fs: float, cfg):
    """:func:`keep_plausible`'s choice by the rhythm: the fiducials kept (on their device) and
    those left out (host), from the fiducials ``positions`` (``every`` on the host), the beats
    ``judged`` and those ``by_neighbours`` (host masks, :func:`_judged`)."""
    count = positions.shape[0]
    if not judged.any():
        return positions, _NONE
    where = _around(np.flatnonzero(judged), count)           # the judged beats and their context, by index
    host, sample = every[where], every[qrs.spread(np.flatnonzero(~judged))]    # a sample of the clean ones
    must = ~judged[where]                                    # False: inside a noise episode, or faint
    must[(where == 0) | (where == count - 1)] = True
    if added.shape[0]:
        must |= np.isin(host, added)
    interval = np.flatnonzero(must[:-1] & must[1:] & (np.diff(where) == 1))   # RR intervals between clean beats
    if must.all() or interval.shape[0] == 0:
        return positions, _NONE
    loose = np.flatnonzero(~must)
    local = _local_rr(_rr_windows(np.diff(host)[interval]), interval, loose)   # one value a run
    could_go = host[loose + 1] - host[loose - 1] <= cfg.noise_rhythm_rr * local
    if not could_go.any():
        return positions, _NONE
    doubtful = loose[could_go]
    must[loose[~could_go]] = True
    alike = _alike(signal, host[doubtful], sample, fs, cfg) & ~by_neighbours[where[doubtful]]
    must[doubtful[alike]] = True
    keep = np.ones(where.shape[0], dtype=bool)
    rr = dict(zip(loose.tolist(), local.tolist()))
    for a, b in _runs(~must).tolist():                       # beats a..b-1, kept beats around
        keep[a:b] = _best_rhythm(host[a - 1:b + 1].tolist(), rr[a], cfg.noise_rhythm_rr)[1:-1]
    if keep.all():
        return positions, _NONE
    return backend.xp_of(positions).asarray(np.delete(every, where[~keep])), every[where[~keep]]


def left_out_noise(left_out: np.ndarray, found, fs: float, cfg):
    """Noise episodes (confidence 0.5, as at the noise threshold) where the rhythm took out
    deflections in a row: at least ``cfg.noise_left_out`` of the fiducials ``left_out`` (host,
    sorted) each within ``cfg.noise_left_out_s`` of the next, the episode running from
    :data:`_LEFT_OUT_MARGIN_S` before the first to as long after the last, less what ``found``'s
    episodes already cover. A lead the detector has to clean up again and again there is not to
    be trusted there, though no noise measure flags it: electrode motion, or a lead whose T waves
    or P waves pass for beats. The beats inside then count as low quality."""
    times = np.asarray(left_out, dtype=np.float64) / fs
    if times.shape[0] < cfg.noise_left_out:
        return found
    breaks = np.flatnonzero(np.diff(times) > cfg.noise_left_out_s) + 1
    runs = [run for run in np.split(times, breaks) if run.shape[0] >= cfg.noise_left_out]
    if not runs:
        return found
    covered = episodes.episode_spans(found, episodes.KINDS, np)
    pieces = [piece for run in runs
              for piece in episodes.uncovered(run[0] - _LEFT_OUT_MARGIN_S, run[-1] + _LEFT_OUT_MARGIN_S, *covered)]
    if not pieces:
        return found
    start, end = np.array(pieces).T
    return found.with_noise(start, end)


def _judged(signal, positions, found, fs: float, cfg, other=None) -> tuple[np.ndarray, ...]:
    """Host masks of the beats to judge (inside ``found``'s noise episodes, faint, or absent from
    the ``other`` lead: see :func:`keep_plausible`) and of those judged only for being faint beside
    their neighbours, and the fiducials on the host: all of them but the T waves that go outright,
    which no beat is measured against, and those T waves' fiducials (host)."""
    slope = qrs.steepest_rises(signal, positions, fs, cfg)
    every = backend.to_host(positions)                      # ~0.75 + 0.4 MB a day of beats
    other_slope = None if other is None else qrs.steepest_rises(other, positions, fs, cfg)
    t_waves = _NONE
    if other_slope is not None:
        typical = np.median(qrs.spread(other_slope))
        beat = ~_t_waves(other_slope < cfg.absent_other_slope * typical, other_slope >= _SHOWN * typical, every,
                         cfg.absent_other_twave_s * fs)
        if not beat.all():                    # the beats left are judged among themselves
            t_waves = every[~beat]
            slope, other_slope, every = slope[beat], other_slope[beat], every[beat]
    judged = slope < cfg.faint_slope * np.median(qrs.spread(slope))
    by_neighbours = slope < cfg.faint_neighbour_slope * _steeper_neighbour(slope)
    absent = np.zeros_like(judged)
    if other_slope is not None:
        by_neighbours &= other_slope < cfg.faint_neighbour_slope * _steeper_neighbour(other_slope)
        absent = other_slope < cfg.absent_other_slope * np.median(qrs.spread(other_slope))
    noise = episodes.episode_spans(found, episodes.UNREADABLE, np)
    low, high = np.ceil(noise[0] * fs).astype(np.int64), np.floor(noise[1] * fs).astype(np.int64)
    for a, b in zip(np.searchsorted(every, low).tolist(), np.searchsorted(every, high, side="right").tolist()):
        judged[a:b] = True
    by_neighbours &= ~judged                  # judged for their neighbours alone: no likeness may keep them
    return judged | absent | by_neighbours, by_neighbours, every, t_waves


def _t_waves(absent: np.ndarray, shown: np.ndarray, every: np.ndarray, within: float) -> np.ndarray:
    """Host mask of the beats ``absent`` from the other lead that come ``within`` samples of the
    beat before, the other lead showing (``shown``) the beats on either side."""
    early = np.concatenate([[False], np.diff(every) <= within])
    beside = np.concatenate([[False], shown[:-1]]) & np.concatenate([shown[1:], [False]])
    return absent & early & beside


def _steeper_neighbour(slope: np.ndarray) -> np.ndarray:
    """Each beat's steeper neighbour's ``slope`` (the first and last beats have one neighbour)."""
    before = np.concatenate([slope[1:2], slope[:-1]])
    after = np.concatenate([slope[1:], slope[-2:-1]])
    return np.maximum(before, after)


# Beats copied on either side of a judged one: more than the four clean RR intervals on either
# side of the one a run's local rhythm is centred on.
_CONTEXT = 12


def _around(indices: np.ndarray, count: int) -> np.ndarray:
    """The indices (sorted, unique) of the beats ``indices`` and ``_CONTEXT`` beats on either side
    of each, within ``0..count - 1``."""
    return np.unique(np.clip(indices[:, None] + np.arange(-_CONTEXT, _CONTEXT + 1), 0, count - 1))


def _alike(signal, points: np.ndarray, sample: np.ndarray, fs: float, cfg) -> np.ndarray:
    """Host mask: which of the fiducials ``points`` look like one of the beats ``sample`` (the
    ``alike`` kernel of :func:`pipeline.peaks.rescue_suppressed`, one thread a point and a beat)
    and are as narrow as a QRS complex."""
    xp = backend.xp_of(signal)
    points = xp.asarray(points)
    likeness = qrs.detector_likeness_sample(signal, sample, fs, cfg)
    own = xp.empty((points.shape[0], 2), dtype=xp.float64)
    _likeness_kernels.launch("stretches", points.shape[0], signal, points, likeness.reach, own)
    state = xp.full(points.shape[0], _likeness_kernels.SHAPED, dtype=xp.int32)
    _likeness_kernels.launch("alike", points.shape[0] * likeness.sample.shape[0], signal, points, own,
                             likeness.sample, likeness.stretches, likeness.reach, np.float32(cfg.rescue_likeness),
                             state)
    _, width, _ = qrs.qrs_shape(signal, points, fs, despike_s=cfg.despike_s, width_cap_s=cfg.max_qrs_width_s)
    narrow = width <= cfg.search_back_width * likeness.medians[0]
    return backend.to_host((state == _likeness_kernels.RESCUED) & narrow)


def _runs(loose: np.ndarray) -> np.ndarray:
    """(k, 2): the [first, last) index ranges of ``loose``'s runs of True."""
    edges = np.diff(np.concatenate([[0], loose.astype(np.int8), [0]]))
    return np.stack([np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)], axis=1)


def _rr_windows(intervals: np.ndarray) -> np.ndarray:
    """(k, 9) view: the nine clean RR ``intervals`` around each one, the ends repeated."""
    return np.lib.stride_tricks.sliding_window_view(np.pad(intervals.astype(np.float64), 4, mode="edge"), 9)


def _local_rr(windows: np.ndarray, where: np.ndarray, beats: np.ndarray) -> np.ndarray:
    """For each of ``beats`` (indices), the median of the clean RR intervals' ``windows``
    (:func:`_rr_windows`; the intervals after the beats ``where``, sorted) of the first interval
    at or after it: the same for every beat of a run between clean beats."""
    return np.median(windows[np.minimum(np.searchsorted(where, beats), where.shape[0] - 1)], axis=1)


def _best_rhythm(points: list, local: float, most: float) -> list:
    """Which of ``points`` (the first and last kept) to keep so that the kept RR intervals lie
    nearest ``local`` (least sum of squared log ratios), no interval made by leaving points out
    being over ``most`` × ``local``. Dynamic programming over the few points of a noisy run, in
    plain Python: for so few, NumPy's calls cost more than the loops."""
    m = len(points)
    cost, before = [0.0] + [math.inf] * (m - 1), [-1] * m
    for k in range(1, m):
        for j in range(k - 1, -1, -1):
            gap = points[k] - points[j]
            if j < k - 1 and gap > most * local:
                break
            value = cost[j] + math.log(max(gap, 1) / local) ** 2
            if value < cost[k]:
                cost[k], before[k] = value, j
    keep = [False] * m
    k = m - 1
    while k >= 0:
        keep[k] = True
        k = before[k]
    return keep
