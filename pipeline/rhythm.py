"""Rhythm context of every beat: RR intervals before and after it, relative to the local rhythm,
and an interpretable rhythm score calibrated on the recording itself.

Ectopic beats are defined by their timing as much as by their shape: a premature atrial beat has a
normal QRS and stands out only because it comes early (its RR interval before is short against the
local rhythm) and is often followed by a pause (the RR interval after it is long). Beat classifiers
owe most of their supraventricular sensitivity to these normalised RR features (de Chazal et al.,
IEEE TBME 51(7), 2004). Per-beat work on the fiducials: gathers on the input's device, no kernel.

See Also
--------
pipeline.embed.embed_beats : the beats whose rhythm is described.
pipeline.score.combine_scores : puts the rhythm score beside the VAE's shape score.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline import backend


@dataclass
class Rhythm:
    """Per beat (float32 arrays on the input's device).

    rr_pre, rr_post : RR interval before / after the beat divided by the local median RR
        (1 = on time; NaN for the first beat's rr_pre and the last beat's rr_post).
    prematurity : 1 - rr_pre (0.28 = the beat came 28 % early).
    local_rr_s : the local median RR in seconds.
    score : the rhythm score, ``sqrt(z_early² + z_pause²)`` (see :func:`rhythm_score`).
    """

    rr_pre: object
    rr_post: object
    prematurity: object
    local_rr_s: object
    score: object


def rr_features(positions, fs: float, *, half_window: int = 8):
    """RR before and after each beat, relative to the median RR of the surrounding beats.

    Parameters
    ----------
    positions : int array
        The fiducial of every beat, increasing.
    half_window : int
        The local median runs over the ``2 × half_window + 1`` RR intervals centred on the beat
        (17 by default, ~15 s at 70 bpm): it follows changes in heart rate, yet one or two
        premature beats do not move it.

    Returns
    -------
    (rr_pre, rr_post, local_rr) as float32 arrays; local_rr in samples. rr_pre is NaN for the
    first beat, rr_post for the last.
    """
    xp = backend.xp_of(positions)
    count = int(positions.shape[0])
    rr = xp.diff(positions).astype(xp.float32)
    if rr.shape[0] == 0:
        empty = xp.full(count, xp.nan, dtype=xp.float32)
        return empty, empty, empty
    last = rr.shape[0] - 1
    beat = xp.arange(count)
    # The RR intervals around beat c are rr[c-1] (before it) and rr[c] (after it): centre on both.
    # The window over rr[c - half_window .. c + half_window], clipped to the intervals: a running
    # median of the intervals with the last one repeated once more (one per beat), ends repeated.
    local = backend.running_median(xp.concatenate([rr, rr[-1:]]), half_window)
    nan = xp.float32(xp.nan)
    post = xp.where(beat <= last, rr[xp.clip(beat, 0, last)], nan)
    pre = xp.where(beat >= 1, rr[xp.clip(beat - 1, 0, last)], nan)
    return (pre / local).astype(xp.float32), (post / local).astype(xp.float32), local


def robust_z(values, floor: float):
    """(values - median) / max(1.4826 × MAD, floor), ignoring NaN: a z-score that a handful of
    outliers cannot inflate. ``floor`` keeps a metronome-regular rhythm (a pacemaker) from turning
    a 1 % wobble into a large score."""
    xp = backend.xp_of(values)
    centre = xp.nanmedian(values)
    spread = 1.4826 * xp.nanmedian(xp.abs(values - centre))
    return (values - centre) / xp.maximum(spread, floor)


def rhythm_score(rr_pre, rr_post, *, floor: float = 0.04):
    """One-sided robust z-scores, combined as ``sqrt(z_early² + z_pause²)``.

    ``z_early``: how much earlier than this recording's usual beat the beat came (short RR
    before); ``z_pause``: how much longer than usual the pause after it is (long RR after). The
    other sides are normal consequences of an ectopic neighbour (the beat after a premature beat
    comes after a long interval, the beat before it is followed by a short one) and score 0.
    Calibrated on the recording: in atrial fibrillation RR varies a lot and the same interval
    scores lower than in a steady sinus rhythm.
    """
    xp = backend.xp_of(rr_pre)
    early = xp.nan_to_num(xp.maximum(-robust_z(rr_pre, floor), 0.0), nan=0.0)
    pause = xp.nan_to_num(xp.maximum(robust_z(rr_post, floor), 0.0), nan=0.0)
    return xp.sqrt(early * early + pause * pause).astype(xp.float32)


def describe_rhythm(positions, fs: float, *, half_window: int = 8, floor: float = 0.04) -> Rhythm:
    """:func:`rr_features` and :func:`rhythm_score` of every beat, in one :class:`Rhythm`."""
    rr_pre, rr_post, local = rr_features(positions, fs, half_window=half_window)
    return Rhythm(rr_pre=rr_pre, rr_post=rr_post, prematurity=(1.0 - rr_pre).astype(rr_pre.dtype),
                  local_rr_s=(local / fs).astype(local.dtype), score=rhythm_score(rr_pre, rr_post, floor=floor))


def pauses(positions, fs: float, min_pause_s: float = 2.0):
    """(start, end) fiducial samples of every RR interval of at least ``min_pause_s`` seconds: the
    pauses a Holter report lists (by 2, 2.5 and 3 s), as an (n, 2) array on the input's device."""
    xp = backend.xp_of(positions)
    long = xp.flatnonzero(xp.diff(positions) >= int(round(min_pause_s * fs)))
    return xp.stack([positions[long], positions[long + 1]], axis=1).reshape(-1, 2)
