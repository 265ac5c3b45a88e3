"""Beats the analysed lead cannot show or missed, found on another lead of the same recording.

An amplifier driven to its rail, a loose electrode or a burst of noise can hide the QRS
complexes of one lead for seconds while another lead shows them plainly; read on one lead, the
recording then holds a "pause" that never happened. Holter systems detect on several leads for
this reason. Here the analysed lead keeps the fiducials it found. Its pauses are read on the other
lead, and the beats found there fill a pause when the other lead agrees with the analysed one on
the beats around it (:func:`fill_gaps`). Elsewhere, a beat the other lead found is added where the
analysed lead shows a QRS its detector missed (:func:`add_missed`).

The other lead also vets the analysed lead's flutter episodes (:func:`vet_flutter`):
ventricular flutter and fibrillation are the whole heart's rhythm, and every lead shows them.

See Also
--------
pipeline.peaks.find_beats : the detector, run here on the other lead's stretches around the gaps.
pipeline.segmentation.heartbeats : calls :func:`fill_gaps`, :func:`vet_flutter` and
    :func:`add_missed`.
"""
from __future__ import annotations

import numpy as np

from pipeline import backend

# Beats of two leads within this of each other are the same heartbeat (AAMI EC57's window).
SAME_BEAT_S = 0.15
# A lead's smaller beats: this percentile of its beats' steepest rises (against the median, a lead
# whose normal beats are a seventh of its ventricular beats' height would not show its normal beats).
SMALL_BEATS = 10.0


def fill_gaps(positions, other, fs: float, cfg):
    """``positions`` with the beats the ``other`` lead shows inside the analysed lead's long gaps.

    Parameters
    ----------
    positions : int array
        Sorted fiducials of the analysed lead (CuPy or NumPy).
    other : float array or None
        Another lead of the same recording, sample for sample (same device); None: nothing to do.
    fs : float
        Sampling rate, Hz.
    cfg : pipeline.config.SignalConfig
        The gaps read are the pauses (RR intervals of ``cfg.pause_s`` or more) up to
        ``cfg.other_lead_max_s`` long, each with ``2 × cfg.other_lead_context_s`` around it, so
        that the other lead's adaptive threshold sees beats around the gap.

    Returns
    -------
    (positions, added, doubtful)
        The fiducials, sorted, and those that came from the other lead (host int64). A gap is
        filled only when the other lead's beats match the analysed lead's one to one, within
        ``cfg.other_lead_agree_s``, over ``cfg.other_lead_context_s`` on both sides of it (it shows
        the same heart, in step), and when every interval of the filled gap is at least
        ``cfg.other_lead_min_rr`` × the local RR (a burst of noise on the other lead makes
        intervals no heart makes). The added beats keep the other lead's fiducial: the analysed
        lead has no readable QRS there. ``doubtful``: the gaps (host (k, 2) int64 samples) where
        the other lead shows such beats but is not in step around them: the pause may be a lead
        that lost the heart rather than a heart that stopped (:func:`unreadable`).
    """
    xp = backend.xp_of(positions)
    nothing = np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
    if other is None or positions.shape[0] < 3:
        return positions, *nothing
    from pipeline.peaks import _local_rr

    rr = xp.diff(positions)
    long = xp.flatnonzero((rr >= cfg.pause_s * fs) & (rr <= cfg.other_lead_max_s * fs))
    if long.shape[0] == 0:                                   # host sync: one number
        return positions, *nothing
    host = backend.to_host(positions)
    at, local_rr = backend.to_host(long), backend.to_host(_local_rr(positions)[long])
    starts, ends = host[at], host[at + 1]
    found = _beats_around(other, fs, starts, ends, cfg)
    readable = _outside(found, starts, ends, cfg.other_lead_agree_s * fs)
    added, doubtful = [], []
    for a, b, rr_local in zip(starts, ends, local_rr):
        inside = _heart_inside(found, a, b, rr_local, fs, cfg)
        if inside.shape[0] and _in_step(readable, host, a, b, fs, cfg):
            added.append(inside)
        elif inside.shape[0]:
            doubtful.append((a, b))
    added = np.concatenate(added) if added else nothing[0]
    doubtful = np.asarray(doubtful, dtype=np.int64).reshape(-1, 2)
    if added.shape[0] == 0:
        return positions, added, doubtful
    merged = xp.sort(xp.concatenate([positions, xp.asarray(added, dtype=positions.dtype)]))
    return merged, added, doubtful


def add_missed(positions, signal, other_beats, found, fs: float, cfg):
    """``positions`` with the beats the other lead found (``other_beats``, read with the analysed
    lead beside it) that the analysed lead shows but missed, and those beats (host int64).

    A beat of the other lead with no beat of the analysed lead within :data:`SAME_BEAT_S` is added
    where the analysed lead is as steep there as its smaller beats (``cfg.other_lead_steep`` × the
    :data:`SMALL_BEATS` percentile of its beats' steepest rises): a QRS it shows, which noise or a
    neighbour's threshold hid from its detector. Its fiducial is the analysed lead's (the extreme
    within 60 ms), so that the beat lines up with the others; none is added within
    ``cfg.other_lead_apart_s`` of a beat of the analysed lead (the same beat, its fiducial read far
    apart on the two leads) or inside the analysed lead's flutter episodes (``found``).
    """
    from pipeline import episodes, qrs

    xp = backend.xp_of(positions)
    mine, theirs = backend.to_host(positions), backend.to_host(other_beats)
    if mine.shape[0] < 3 or theirs.shape[0] == 0:
        return positions, np.zeros(0, np.int64)
    alone = theirs[unmatched(theirs, mine, int(SAME_BEAT_S * fs))]
    small = np.percentile(qrs.steepest_rises(signal, positions, fs, cfg), SMALL_BEATS)
    alone = alone[qrs.steepest_rises(signal, alone, fs, cfg) >= cfg.other_lead_steep * small]
    if alone.shape[0] == 0:
        return positions, np.zeros(0, np.int64)
    refined = backend.to_host(qrs.qrs_shape(signal, xp.asarray(alone), fs, search_s=0.06)[0])
    refined = np.unique(refined)
    apart = _distance(refined, mine) >= cfg.other_lead_apart_s * fs
    outside = ~backend.to_host(episodes.in_episodes(xp.asarray(refined), found, fs, "flutter"))
    added = refined[apart & outside]
    if added.shape[0] == 0:
        return positions, added
    return xp.sort(xp.concatenate([positions, xp.asarray(added, dtype=positions.dtype)])), added


def unmatched(beats: np.ndarray, others: np.ndarray, within: int) -> np.ndarray:
    """Mask of ``beats`` (host) with none of ``others`` (sorted, host) within ``within`` samples."""
    return _distance(beats, others) > within


def _distance(beats: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Each of ``beats``' distance (samples) to the nearest of ``others`` (sorted, at least one)."""
    after = np.searchsorted(others, beats)
    gap_after = np.abs(others[np.minimum(after, len(others) - 1)] - beats)
    gap_before = np.abs(beats - others[np.maximum(after - 1, 0)])
    return np.minimum(gap_after, gap_before)


def unreadable(found, doubtful: np.ndarray, fs: float, cfg):
    """``found`` (:class:`pipeline.episodes.Episodes`) with a noise episode (confidence 0.5) over
    each ``doubtful`` gap of :func:`fill_gaps`, its two beats left out: the analysed lead shows no
    beat there while the other lead shows a rhythm, so the pause it makes is in doubt
    (:func:`pipeline.tables.episodes_table` lists it as such). Gaps across flutter are left as
    they are: their beats are taken out, and no pause is listed there."""
    flutter = found.select("flutter")
    start, end = doubtful[:, 0] / fs + cfg.other_lead_agree_s, doubtful[:, 1] / fs - cfg.other_lead_agree_s
    clear = ~((start[:, None] < flutter.end_s[None, :]) & (end[:, None] > flutter.start_s[None, :])).any(axis=1)
    if not clear.any():
        return found
    return found.with_noise(start[clear], end[clear])


def vet_flutter(found, other, fs: float, cfg):
    """``found`` (the analysed lead's :class:`pipeline.episodes.Episodes`) with each flutter episode
    that the ``other`` lead contradicts called noise instead (confidence 0.5, as at the noise
    threshold).

    Large, fast, regular waves pass the flutter tests on one lead when they are muscle tremor or
    electrode motion on that lead alone; the heart's flutter or fibrillation shows on every lead.
    An episode is contradicted where the other lead shows at least three intervals between beats
    inside it, their median at least ``cfg.flutter_other_rr_s`` (slower than any flutter, 150–300
    a minute) and their standard deviation at most ``cfg.flutter_other_cv`` × their mean (a steady
    rhythm, not a noisy lead's chance deflections). Its beats are then judged as beats in noise
    (:mod:`pipeline.noise_beats`) instead of taken out. Without another lead, or without flutter,
    ``found`` is returned as it is.
    """
    from pipeline.episodes import AT_THRESHOLD, Episodes

    flutter = np.flatnonzero(found.kind == "flutter")
    if other is None or flutter.shape[0] == 0:
        return found
    starts = np.round(found.start_s[flutter] * fs).astype(np.int64)
    ends = np.round(found.end_s[flutter] * fs).astype(np.int64)
    beats = _beats_around(other, fs, starts, ends, cfg)
    contradicted = [_steady_beats(beats[(beats >= a) & (beats <= b)], fs, cfg) for a, b in zip(starts, ends)]
    if not any(contradicted):
        return found
    kind, confidence = found.kind.copy(), found.confidence.copy()
    kind[flutter[contradicted]], confidence[flutter[contradicted]] = "noise", AT_THRESHOLD
    return Episodes(kind, found.start_s, found.end_s, confidence)


def _steady_beats(beats: np.ndarray, fs: float, cfg) -> bool:
    """Whether ``beats`` (sorted samples) beat at least as slowly as ``cfg.flutter_other_rr_s`` (median
    RR), at least three intervals of them, with a standard deviation at most ``cfg.flutter_other_cv``
    × their mean."""
    rr = np.diff(beats) / fs
    return bool(rr.shape[0] >= 3 and np.median(rr) >= cfg.flutter_other_rr_s
                and rr.std() <= cfg.flutter_other_cv * rr.mean())


def _beats_around(other, fs: float, starts: np.ndarray, ends: np.ndarray, cfg) -> np.ndarray:
    """The other lead's beats (host int64, sorted) in the stretches around the gaps: twice
    ``cfg.other_lead_context_s`` on each side, so that the stretch's own edges, where a detector
    sees half a picture, lie outside the context compared (:func:`_in_step`). The stretches,
    merged where they overlap, are joined by linear ramps (a ramp has no Ricker response, a step
    would) and detected in one pass."""
    from pipeline import peaks, wavelet

    xp = backend.xp_of(other)
    n = int(other.shape[0])
    context = int(round(2 * cfg.other_lead_context_s * fs))
    lo = np.maximum(starts - context, 0)
    hi = np.minimum(ends + context, n)
    spans = []
    for a, b in zip(lo, hi):                                 # merged, in order
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([int(a), int(b)])
    pieces, offsets, at = [], [], 0
    for a, b in spans:
        if pieces:
            ramp = xp.linspace(float(pieces[-1][-1]), float(other[a]), context + 2, dtype=xp.float32)[1:-1]
            pieces.append(ramp)
            at += ramp.shape[0]
        pieces.append(other[a:b].astype(xp.float32))
        offsets.append((at, at + (b - a), a))
        at += b - a
    joined = xp.concatenate(pieces)
    response = wavelet.ricker_response(joined, fs, cfg.ricker_width_s)
    found = backend.to_host(peaks.find_beats(response, joined, fs, cfg)).astype(np.int64)
    beats = [found[(found >= first) & (found < stop)] - first + start for first, stop, start in offsets]
    return np.concatenate(beats) if beats else np.zeros(0, np.int64)


def _heart_inside(found: np.ndarray, a: int, b: int, local_rr: float, fs: float, cfg) -> np.ndarray:
    """The other lead's beats strictly inside the gap (a, b), or none unless every interval of the
    gap they fill is at least ``cfg.other_lead_min_rr`` × ``local_rr`` (a heart's rhythm)."""
    agree = cfg.other_lead_agree_s * fs
    inside = found[(found > a + agree) & (found < b - agree)]
    if inside.shape[0] == 0:
        return inside
    intervals = np.diff(np.concatenate([[a], inside, [b]]))
    if intervals.min() < cfg.other_lead_min_rr * local_rr:
        return found[:0]
    return inside


def _in_step(found: np.ndarray, positions: np.ndarray, a: int, b: int, fs: float, cfg) -> bool:
    """Whether the other lead's beats ``found`` (those outside every gap) and the analysed lead's
    agree one to one, within ``cfg.other_lead_agree_s``, over ``cfg.other_lead_context_s`` before
    the gap (a, b) and after it, its two ends included: a lead that shows the heart's beats where
    both can be read is trusted where only it can."""
    agree, context = cfg.other_lead_agree_s * fs, cfg.other_lead_context_s * fs
    for lo, hi in ((a - context, a + agree), (b - agree, b + context)):
        mine = positions[(positions >= lo) & (positions <= hi)]
        theirs = found[(found >= lo - agree) & (found <= hi + agree)]
        if mine.shape[0] != theirs.shape[0] or not mine.shape[0]:
            return False
        if np.abs(mine - theirs).max() > agree:
            return False
    return True


def _outside(found: np.ndarray, starts: np.ndarray, ends: np.ndarray, agree: float) -> np.ndarray:
    """The beats of ``found`` inside no gap (a + agree, b - agree): those the analysed lead could
    have shown too."""
    gap = np.searchsorted(starts, found, side="right") - 1
    inside = (gap >= 0) & (found > starts[np.maximum(gap, 0)] + agree) & (found < ends[np.maximum(gap, 0)] - agree)
    return found[~inside]
