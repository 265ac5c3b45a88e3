"""Which of two unnamed leads detects better, by the beats each finds that the other contradicts.

A recording whose channels carry no lead names (``ECG1``, ``ECG2``) is read on its first lead
unless another's QRS complexes are much clearer (:func:`pipeline.leads.choose_lead`). Clarity
cannot tell a lead that detects well from one that is merely steep: a precordial lead can score
clearer than lead II yet show its T waves as beats, and a lead whose QRS is lost in noise can score
as clear as a clean one. The beats themselves can tell. Both leads show the same heartbeats, so
the detector run on each lead, the other beside it, betrays each lead's errors:

* a beat one lead finds and the other does not, where the other lead is flat, is a false beat of
  the first (a T wave, a swing of noise);
* a beat one lead finds and the other does not, where the other lead is about as steep as its
  smaller beats, is a beat the other lead missed;
* where the other lead shows a wave of its own or noise, the beat tells nothing.

The lead chosen by clarity is kept unless its count of such errors is clearly the larger
(:data:`WORSE_BY`, :data:`WORSE_PLUS`): either lead is a fair choice when they come close, and
the first lead is the recording's reference.

See Also
--------
pipeline.leads.choose_lead : the choice by name and clarity this one reviews.
pipeline.run : calls :func:`review_choice` after loading, before the segmentation.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pipeline import backend, episodes, qrs, wavelet
from pipeline.other_lead import SAME_BEAT_S, SMALL_BEATS, unmatched
from pipeline.segmentation import heartbeats

# Three stretches read on both leads (start, middle, end of the recording): long enough for dozens
# of errors where a lead has them, short enough to cost little beside the run on a day-long Holter.
STRETCH_S = 600.0
STRETCHES = 3
# Against its smaller beats (other_lead.SMALL_BEATS), a lead shows a QRS at SHOWN × or more, and
# nothing, flat, under FLAT ×. In between it shows a wave of its own or its noise, which tells
# neither way: a lead in noise then does not make the true beats the other lead finds there count
# as false.
SHOWN = 0.6
FLAT = 0.15
# The chosen lead is replaced when its errors exceed WORSE_BY × the other's + WORSE_PLUS.
WORSE_BY = 1.5
WORSE_PLUS = 5


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Errors each lead's beats betray against the other's over the stretches read."""

    chosen: int   # errors of the lead chosen by clarity
    other: int    # errors of the other lead
    minutes: float  # how much of the recording was read

    @property
    def other_is_better(self) -> bool:
        return self.chosen > WORSE_BY * self.other + WORSE_PLUS


def compare_leads(signal, other, fs: float, cfg, lost_s=np.zeros((0, 2))) -> Agreement:
    """:class:`Agreement` of ``signal`` and ``other`` (same length, same device), each read with
    the other beside it as the run reads them, over three stretches of :data:`STRETCH_S` (start,
    middle, end), or over the whole recording when it is no longer than those together. Beats
    inside ``lost_s`` ((start, end) seconds where either lead's signal is lost) are left out: a
    lead bridged over a gap is flat there, and the other lead's beats are then no false ones."""
    n = int(signal.shape[0])
    length = int(STRETCH_S * fs)
    if n <= STRETCHES * length:  # the whole recording, once: stretches that overlap would count beats twice
        starts, length = [0], n
    else:
        starts = [0, (n - length) // 2, n - length]
    errors = np.zeros(2, dtype=np.int64)
    read = 0
    for start in starts:
        leads = (signal[start:start + length], other[start:start + length])
        found = [_detect(leads[k], leads[1 - k], fs, cfg) for k in (0, 1)]
        errors += _betrayed(leads, _comparable(*found, fs, np.asarray(lost_s) - start / fs), fs, cfg)
        read += length
    return Agreement(int(errors[0]), int(errors[1]), read / fs / 60.0)


def review_choice(recording, other, cfg):
    """``(recording, other)`` (a :class:`pipeline.load.Recording` and the
    :class:`pipeline.load.OtherLead` beside it) with the two leads exchanged where the lead chosen
    by clarity (``recording.lead_by_clarity``) betrays clearly more errors than the other
    (:func:`compare_leads`); unchanged otherwise, or when there is no other lead. The lead taken
    instead is read again from the recording's file, so that its gaps are repaired and reported
    as the analysed lead's are."""
    from pipeline import load

    if other.signal is None or not recording.lead_by_clarity:
        return recording, other
    lost = np.concatenate([recording.lost_s, other.lost_s])
    agreement = compare_leads(recording.signal, other.signal, recording.fs, cfg, lost)
    if not agreement.other_is_better:
        return recording, other
    device = "cpu" if backend.xp_of(other.signal) is np else "gpu"
    chosen = load.load_ecg(recording.source, fs=recording.fs, column=other.name, device=device,
                           max_gap_s=cfg.max_gap_s)
    reason = (f"its beats agree better with the other lead's ({agreement.other} against {agreement.chosen} beats "
              f"that one lead finds and the other contradicts, in {agreement.minutes:.0f} min); QRS clarity alone "
              f"chose {recording.channel}: {recording.lead_reason}")
    chosen = dataclasses.replace(chosen, lead_reason=reason)
    return chosen, load.OtherLead(recording.channel, recording.signal, recording.lost_s)


def _detect(signal, other, fs: float, cfg):
    """The beats and episodes of ``signal`` as the run finds them, ``other`` beside it, less the
    beats only ``other`` found: each lead is judged on its own beats."""
    response = wavelet.ricker_response(signal, fs, cfg.ricker_width_s)
    positions, found, _, _ = heartbeats(response, signal, fs, cfg, other, add_other_beats=False)
    return positions, found


def _comparable(first, second, fs: float, lost_s: np.ndarray) -> list[np.ndarray]:
    """Each lead's beats (host) outside the flutter episodes of either lead and outside ``lost_s``
    (seconds). Flutter is the whole heart's rhythm: where one lead reads flutter and the other
    beats, their beats say nothing of which lead detects better."""
    left_out = episodes.Episodes.concat([first[1].select("flutter"), second[1].select("flutter")]).with_lost_signal(
        lost_s[:, 0], lost_s[:, 1])
    return [backend.to_host(positions[~episodes.in_episodes(positions, left_out, fs)])
            for positions, _ in (first, second)]


def _betrayed(leads, beats, fs: float, cfg) -> np.ndarray:
    """Errors of each lead: its beats the other lead does not show, and the other lead's beats
    it shows but missed."""
    if min(len(b) for b in beats) < 2:
        return np.array([len(beats[1]), len(beats[0])], dtype=np.int64)  # a lead without beats misses them all
    steep = [qrs.steepest_rises(leads[k], beats[k], fs, cfg) for k in (0, 1)]
    small = [float(np.percentile(s, SMALL_BEATS)) for s in steep]
    errors = np.zeros(2, dtype=np.int64)
    for k in (0, 1):
        alone = beats[k][unmatched(beats[k], beats[1 - k], int(SAME_BEAT_S * fs))]
        there = qrs.steepest_rises(leads[1 - k], alone, fs, cfg) / small[1 - k]
        # k's beats where the other lead is flat are k's false beats, unless it does not move at
        # all there: a lead off, on its rail or written as zeros shows nothing, beat or no beat.
        errors[k] += int(((there < FLAT) & (there > 0)).sum())
        errors[1 - k] += int((there >= SHOWN).sum())  # beats the other lead shows and missed
    return errors
