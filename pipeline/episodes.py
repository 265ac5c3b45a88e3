"""Stretches of a recording in which beats cannot be told one by one: ventricular flutter or
fibrillation, and noise.

A flutter wave looks like a wide QRS complex to a beat detector, and muscle noise or electrode
motion makes QRS-like deflections of its own; the fiducials found in such stretches are not
heartbeats. :func:`find_episodes` finds them so that the run can keep those fiducials apart
(:func:`in_episodes`) and the dashboard can show the stretches.

Flutter (VFL) and coarse fibrillation: a sustained, quasi-sinusoidal oscillation at 3–7 Hz
(180–420 /min) with no isoelectric baseline between its waves. Each 2-s window of the ECG
(every 0.5 s), decimated to about 50 Hz, is described by measures from the VF-detection
literature:

- the dominant frequency and the share of the spectral power within ±1 Hz of it (the spectral
  algorithms of Barro et al., 1989);
- the share of samples beyond 20 % of the window's largest deflection: a QRS complex leaves the
  baseline for a tenth of a cycle, a flutter wave for most of it (the threshold-crossing sample
  count, TCSC, of Arafat et al., 2009);
- how sine-like the window is: its spectral mean frequency over the dominant one (1 for a sine,
  more for a train of sharp complexes), and the power at half the dominant frequency (a train of
  complexes whose second harmonic outgrows its fundamental looks like a sine at twice its rate).
  This sets flutter apart from a fast ventricular tachycardia, whose rate, regularity and missing
  baseline are the same (MIT-BIH 205 and 203: runs of VT at 200 /min with ratios of 1.4–1.5;
  the flutter of 207 at 1.1–1.3).

Noise, every 0.1 s: the high-frequency floor of the half-second around (the second-lowest of five
0.1-s RMS values of the second difference, so that the block a QRS complex falls in does not
count) over the recording's typical QRS amplitude; the range of the surrounding second, and the
step between the median levels of its two halves, over the same amplitude; a flat half-second (a
lead off); samples at the recording's extremes (a clipped amplifier).

All of it runs on the input's device as Numba kernels (of :mod:`pipeline._episode_kernels` and
:mod:`pipeline._decision_kernels`), a dozen launches: the flutter measures (:mod:`pipeline.flutter`)
and one kernel that flags the windows; one kernel over the samples (``block_stats``), one over the
0.1-s blocks (``tick_measures``), the typical QRS amplitude and one kernel that weighs the
measures against it and flags the ticks; then a table of the runs of flagged windows and ticks,
copied to the host at once (one synchronisation), where the episodes are made (:class:`Episodes`
holds NumPy arrays). A recording with flutter takes a second copy: noise is not called inside it.

See Also
--------
pipeline.peaks.find_beats : the fiducials before this step.
pipeline.quality.beat_quality : the per-beat measure of the same concern.
pipeline.embed.embed_beats : the step after; beats inside episodes need not reach it.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from pipeline import _decision_kernels, _episode_kernels, backend, mains
from pipeline._decision_kernels import CANDIDATE, NOISY, SINE
from pipeline.flutter import flutter_features

KINDS = ("flutter", "noise", "lost")
# Where the ECG cannot be read: a beat found there is judged before it is kept, and is of low
# quality; a pause across it is in doubt.
UNREADABLE = ("noise", "lost")
# The confidence of a noise episode at the noise threshold, and of those the rest of the detector
# adds (pipeline.other_lead, pipeline.noise_beats): noise, though no measure of it passes.
AT_THRESHOLD = 0.5


@dataclass
class Episodes:
    """Episodes of one recording, sorted by start (host NumPy arrays of equal length).

    kind : str array, ``'flutter'`` (ventricular flutter or fibrillation), ``'noise'`` or ``'lost'``
        (the signal missing: a gap of NaN/inf the loader bridged).
    start_s, end_s : float64 arrays, seconds from the recording's first sample.
    confidence : float32 array in [0, 1]. Flutter: the share of the episode's 2-s windows that pass
        every test (at least ``min_sine_share``). Noise: ``1 - 0.5 / severity``, severity being the
        mean over the episode of the largest measure / threshold ratio, capped at 10 (0.5 at the
        threshold, 0.95 for a flat or clipped stretch). Lost: 1.
    """

    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype="<U7"))
    start_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    confidence: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    def __post_init__(self):
        self.kind = np.asarray(self.kind, dtype="<U7")
        self.start_s = np.asarray(self.start_s, dtype=np.float64)
        self.end_s = np.asarray(self.end_s, dtype=np.float64)
        self.confidence = np.asarray(self.confidence, dtype=np.float32)
        shapes = {a.shape for a in (self.kind, self.start_s, self.end_s, self.confidence)}
        if len(shapes) != 1 or self.kind.ndim != 1:
            raise ValueError(f"Episodes fields must be 1-D arrays of one length; got shapes {sorted(shapes)}")
        unknown = sorted(set(self.kind.tolist()) - set(KINDS))
        if unknown:
            raise ValueError(f"Episodes kind must be one of {', '.join(KINDS)}; got {unknown}")

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @property
    def duration_s(self) -> np.ndarray:
        return self.end_s - self.start_s

    def select(self, kind: str) -> "Episodes":
        """The episodes of one kind."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
        keep = self.kind == kind
        return Episodes(self.kind[keep], self.start_s[keep], self.end_s[keep], self.confidence[keep])

    def to_frame(self):
        """A pandas DataFrame with columns kind, start_s, end_s, confidence (for results and views)."""
        import pandas as pd

        return pd.DataFrame({"kind": self.kind, "start_s": self.start_s, "end_s": self.end_s,
                             "confidence": self.confidence})

    def with_noise(self, start_s, end_s) -> "Episodes":
        """These episodes and noise episodes over ``start_s`` to ``end_s`` (seconds), of confidence
        :data:`AT_THRESHOLD`."""
        count = np.asarray(start_s).shape[0]
        return Episodes.concat([self, Episodes(np.full(count, "noise"), start_s, end_s,
                                               np.full(count, AT_THRESHOLD, np.float32))])

    def with_lost_signal(self, start_s, end_s, min_noise_s: float = 0.3) -> "Episodes":
        """These episodes (flutter and noise, as found) and 'lost' episodes of confidence 1 where
        the signal is lost, ``start_s`` to ``end_s`` (seconds: the gaps of NaN/inf the loader
        bridged), less what flutter covers. A noise episode keeps its parts outside them that last
        ``min_noise_s`` or more: the line bridging a gap is flat, which the noise measures flag
        too, and that is no noise."""
        gaps = _merged(np.asarray(start_s, np.float64), np.asarray(end_s, np.float64))
        flutter = episode_spans(self, "flutter", np)
        lost = [piece for a, b in zip(*(part.tolist() for part in gaps)) for piece in uncovered(a, b, *flutter)]
        if not lost:
            return self
        lost_start, lost_end = np.array(lost).T
        noise = self.select("noise")
        pieces = [(a, b, confidence) for start, end, confidence in zip(*(part.tolist() for part in (
                      noise.start_s, noise.end_s, noise.confidence)))
                  for a, b in uncovered(start, end, lost_start, lost_end) if b - a >= min_noise_s]
        noise_start, noise_end, noise_confidence = np.array(pieces).T if pieces else (np.zeros(0),) * 3
        return Episodes.concat([self.select("flutter"),
                                Episodes(np.full(lost_start.shape[0], "lost"), lost_start, lost_end,
                                         np.ones(lost_start.shape[0], np.float32)),
                                Episodes(np.full(noise_start.shape[0], "noise"), noise_start, noise_end,
                                         noise_confidence)])

    @staticmethod
    def concat(parts) -> "Episodes":
        """Several Episodes as one, sorted by start."""
        parts = list(parts)
        if not parts:
            return Episodes()
        kind = np.concatenate([p.kind for p in parts])
        start = np.concatenate([p.start_s for p in parts])
        order = np.argsort(start, kind="stable")
        return Episodes(kind[order], start[order], np.concatenate([p.end_s for p in parts])[order],
                        np.concatenate([p.confidence for p in parts])[order])


# --------------------------------------------------------------------------- the step
def find_episodes(signal, fs: float, positions=None, *, flutter: bool = True, noise: bool = True,
                  window_s: float = 2.0, hop_s: float = 0.5, flutter_hz: tuple[float, float] = (2.2, 8.0),
                  min_concentration: float = 0.5, min_off_baseline: float = 0.45, max_sine_ratio: float = 1.35,
                  max_subharmonic: float = 0.35, min_sine_share: float = 1 / 3, min_flutter_s: float = 3.0,
                  max_flutter_gap_s: float = 2.0, hf_ratio: float = 0.2, range_ratio: float = 4.0,
                  step_ratio: float = 2.5, flat_ratio: float = 0.005, rail_share: float = 0.1,
                  min_noise_s: float = 0.3, max_noise_gap_s: float = 0.5, hum=None) -> Episodes:
    """Flutter/fibrillation and noise episodes of one lead.

    Parameters
    ----------
    signal : CuPy or NumPy array
        The ECG (1-D, float32, any unit).
    fs : float
        Sampling rate in Hz (the measures are defined in Hz and seconds: 128 Hz to 1 kHz alike).
    positions : int array, optional
        The fiducials found (:func:`pipeline.peaks.find_beats`): the median peak-to-peak of the
        signal within ±50 ms of them is the typical QRS amplitude that noise is measured against.
        Without them, the median range of the recording's 1-s blocks stands in.
    flutter, noise : bool
        Which kinds to look for.
    window_s, hop_s : float
        Flutter windows: length and hop. An episode runs from the centre of its first sine-like
        window (see ``min_sine_share``) − (``window_s`` − ``hop_s``) / 2 to the last one's centre
        + as much: a window is flagged when flutter fills most of it.
    flutter_hz : (float, float)
        Dominant frequency band of flutter windows (the 3–7 Hz of VFL with the margin of a 2-s
        window's resolution).
    min_concentration : float
        Least share of the 1–20 Hz power within ±1 Hz of the dominant frequency.
    min_off_baseline : float
        Least share of samples beyond 20 % of the window's largest deflection (TCSC).
    max_sine_ratio, max_subharmonic : float
        A sine-like window has a spectral mean frequency at most ``max_sine_ratio`` × its
        dominant frequency, and, where half the dominant frequency lies in ``flutter_hz``, at
        most ``max_subharmonic`` of the dominant power there (else it is a train of complexes at
        half the rate whose second harmonic is the stronger: a fast VT).
    min_sine_share : float
        Windows passing the first three tests form candidate runs (gaps up to
        ``max_flutter_gap_s`` bridged); a run is flutter when at least this share of its windows
        also passes the sine test and it lasts ``min_flutter_s`` or more.
    hf_ratio : float
        Noise when the high-frequency floor exceeds this × the typical QRS amplitude: the RMS of
        the second difference, whose gain peaks at ~50 Hz (white noise of RMS σ gives ~2.4 σ).
    range_ratio, step_ratio : float
        Noise when a 1-s range, or the step between the median levels of the half-seconds before
        and after, exceeds this × the typical QRS amplitude (motion artefact, electrode pops).
    flat_ratio, rail_share : float
        Noise when the range over half a second is below ``flat_ratio`` × the QRS amplitude (a
        lead off), or when ``rail_share`` of a second's samples sit at the recording's extremes
        (a clipped amplifier).
    min_noise_s, max_noise_gap_s : float
        Noise runs shorter than this are dropped, after gaps up to ``max_noise_gap_s`` are bridged.
    hum : pipeline.mains.Hum, optional
        The recording's mains hum, whose share the high-frequency floor leaves out; measured here
        (:func:`pipeline.mains.hum_power`) when not given.

    Returns
    -------
    Episodes
        Host NumPy arrays (the copies to the host are tables of the runs of flagged windows and
        ticks: a few numbers an episode). Noise is not called inside flutter: the large, fast waves
        of flutter would pass the range test.

    Raises
    ------
    ValueError
        For a signal that is not 1-D, a sampling rate that is not positive, or positions that are
        not a 1-D integer array.
    """
    if signal.ndim != 1:
        raise ValueError(f"signal must be 1-D (one lead); got shape {signal.shape}")
    if not (isinstance(fs, numbers.Real) and math.isfinite(fs) and fs > 0):
        raise ValueError(f"fs must be a positive number of Hz; got {fs!r}")
    if positions is not None and (positions.ndim != 1 or positions.dtype.kind not in "iu"):
        raise ValueError(f"positions must be a 1-D integer array of sample indices; got shape "
                         f"{positions.shape}, dtype {positions.dtype}")
    xp = backend.xp_of(signal)
    duration = signal.shape[0] / fs
    runs, found = [], []
    if flutter:
        features = flutter_features(signal, fs, window_s=window_s, hop_s=hop_s)
        runs.append(_flutter_runs(features, max(0, int(round(max_flutter_gap_s / hop_s))), flutter_hz=flutter_hz,
                                  min_concentration=min_concentration, min_off_baseline=min_off_baseline,
                                  max_sine_ratio=max_sine_ratio, max_subharmonic=max_subharmonic))
    if noise:
        ticks = _noise_ticks(signal, fs, positions, hf_ratio=hf_ratio, range_ratio=range_ratio, step_ratio=step_ratio,
                             flat_ratio=flat_ratio, rail_share=rail_share, hum=hum)
        noise_gap = max(0, int(round(max_noise_gap_s / ticks.seconds)))
        runs.append(ticks.runs(noise_gap))
    tables = _run_tables(runs, xp) if runs else []
    if flutter:
        found.append(_flutter_episodes(tables[0], features["centre_s"], duration, window_s=window_s, hop_s=hop_s,
                                       min_sine_share=min_sine_share, min_s=min_flutter_s))
    if noise:
        noisy = tables[-1]
        if flutter and len(found[0]):
            # The noise runs were counted before the flutter was known: again, with the ticks inside
            # it masked (a second copy, on the recordings that have flutter).
            noisy = _run_tables([ticks.runs(noise_gap, masked=episode_spans(found[0], "flutter", xp))], xp)[0]
        found.append(_noise_episodes(noisy, ticks.seconds, duration, min_s=min_noise_s))
    return Episodes.concat(found)


def in_episodes(positions, episodes: Episodes, fs: float, kinds=KINDS, *, margin_s: float = 0.0):
    """Boolean mask (on the positions' device): which fiducials lie inside an episode of ``kinds``,
    widened by ``margin_s`` on both sides. The run keeps these out of the beats it models."""
    xp = backend.xp_of(positions)
    spans = episode_spans(episodes, kinds, xp, margin_s=margin_s)
    inside = xp.empty(positions.shape[0], dtype=bool)
    _decision_kernels.launch("in_spans", positions.shape[0], positions, float(fs), spans[0], spans[1], inside)
    return inside


def uncovered(start: float, end: float, cover_start, cover_end) -> list:
    """The pieces of [start, end] that the sorted, disjoint intervals (cover_start, cover_end)
    leave uncovered."""
    pieces = []
    for a, b in zip(cover_start.tolist(), cover_end.tolist()):
        if b <= start or a >= end:
            continue
        if a > start:
            pieces.append((start, a))
        start = max(start, b)
    if end > start:
        pieces.append((start, end))
    return pieces


def episode_spans(episodes: Episodes, kinds, xp, *, margin_s: float = 0.0):
    """The episodes of ``kinds``, widened by ``margin_s`` on both sides and merged where they
    overlap: sorted, disjoint (start, end) seconds as one (2, k) float64 array on ``xp``'s device
    (one small copy there), which kernels test times against."""
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"kinds must be among {', '.join(KINDS)}; got {unknown}")
    keep = np.isin(episodes.kind, kinds)
    return xp.asarray(np.stack(_merged(episodes.start_s[keep] - margin_s, episodes.end_s[keep] + margin_s)))


# --------------------------------------------------------------------------- flutter
def _flutter_runs(features: dict, gap: int, *, flutter_hz, min_concentration, min_off_baseline, max_sine_ratio,
                  max_subharmonic) -> _Runs:
    """The runs of candidate windows (the spectral tests passed; runs ``gap`` windows apart or
    less are one), their sine-like windows marked: one kernel flags the windows."""
    xp = backend.xp_of(features["dominant_hz"])
    flags = xp.empty(features["dominant_hz"].shape[0], dtype=xp.int8)
    _decision_kernels.launch("flutter_flags", flags.shape[0], features["dominant_hz"], features["concentration"],
                             features["off_baseline"], features["sine_ratio"], features["subharmonic"],
                             float(flutter_hz[0]), float(flutter_hz[1]), float(min_concentration),
                             float(min_off_baseline), float(max_sine_ratio), float(max_subharmonic), flags)
    return _Runs(flags, CANDIDATE, SINE, gap, xp.empty(0, dtype=xp.float64))


def _flutter_episodes(table: np.ndarray, centre, duration: float, *, window_s, hop_s, min_sine_share,
                      min_s) -> Episodes:
    """Flutter episodes from the run table of the candidate windows (see :func:`_flutter_runs`)
    and the windows' centres (:class:`pipeline.flutter.WindowCentres`)."""
    first, last = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
    share = (table[:, 3] - table[:, 2]) / (last - first + 1)
    # The episode runs from the run's first sine-like window to its last: at its edges a run of
    # wide complexes (the ventricular beats that often lead into flutter) passes the first tests
    # but not the sine test, and its beats are beats.
    sine_first, sine_last = table[:, 6].astype(np.int64), table[:, 7].astype(np.int64)
    first, last = np.where(sine_first >= 0, sine_first, first), np.where(sine_last >= 0, sine_last, last)
    reach = (window_s - hop_s) / 2.0
    start = np.clip(centre.at(first) - reach, 0.0, duration)
    end = np.clip(centre.at(last) + reach, 0.0, duration)
    keep = (share >= min_sine_share) & (end - start >= min_s)
    return Episodes(np.full(int(keep.sum()), "flutter"), start[keep], end[keep], share[keep])


# --------------------------------------------------------------------------- noise
def noise_severity(signal, fs: float, positions=None, *, tick_s: float = 0.1, hf_ratio: float = 0.2,
                   range_ratio: float = 4.0, step_ratio: float = 2.5, flat_ratio: float = 0.005,
                   rail_share: float = 0.1):
    """Noise severity every ``tick_s`` (float32, on the input's device) and the tick in samples.

    Kernels: ``block_stats`` over the samples (one block a tick), then ``tick_measures`` over the
    blocks: each tick's 1-s neighbourhood gives its range, rail samples and the step between the
    median levels of its two halves; the five ticks around it (half a second) give the
    high-frequency floor (the second-lowest of five: the block a QRS complex falls in does not
    count, yet a burst of 0.5 s is seen) and the range that tells a flat lead. Each is measured
    against the typical QRS amplitude (see :func:`find_episodes` for the tests) by
    ``tick_severity``: the largest measure / threshold ratio, 1 at the threshold of the first test
    crossed.
    """
    ticks = _noise_ticks(signal, fs, positions, tick_s=tick_s, hf_ratio=hf_ratio, range_ratio=range_ratio,
                         step_ratio=step_ratio, flat_ratio=flat_ratio, rail_share=rail_share)
    return ticks.severity()[0], ticks.tick


class _NoiseTicks(NamedTuple):
    """A recording's noise measures every tick (on its device) and what weighs them."""

    measures: Any    # (6, ticks) float32: the rows of the tick_measures kernel
    ranked: Any      # QRS amplitudes whose median is the typical one (see _typical_amplitude)
    tick: int        # samples a tick
    seconds: float   # a tick's length (s)
    limits: tuple    # the thresholds' ratios and the rail samples of a second (see tick_severity)

    def severity(self, masked=None):
        """Severity (float32), flags (int8, NOISY at or above 1) and the severity capped at 10 where
        NOISY, else 0 (float32), of every tick, from one kernel; 0 at the ticks whose centre lies in
        ``masked``, sorted, disjoint (start, end) seconds (see :func:`episode_spans`)."""
        xp = backend.xp_of(self.measures)
        count = self.measures.shape[1]
        masked = xp.empty((2, 0)) if masked is None else masked
        severity, capped = xp.empty((2, count), dtype=xp.float32)
        flags = xp.empty(count, dtype=xp.int8)
        _decision_kernels.launch("tick_severity", count, self.measures, self.ranked, *self.limits, self.seconds,
                                 masked[0], masked[1], severity, flags, capped)
        return severity, flags, capped

    def runs(self, gap: int, masked=None) -> _Runs:
        """The runs of NOISY ticks (runs ``gap`` ticks apart or less are one) and the running sum of
        the capped severity, whose values at a run's bounds give its mean severity."""
        _, flags, capped = self.severity(masked)
        xp = backend.xp_of(capped)
        return _Runs(flags, NOISY, NOISY, gap, xp.cumsum(capped, dtype=xp.float64))


def _noise_ticks(signal, fs: float, positions, *, tick_s: float = 0.1, hf_ratio, range_ratio, step_ratio, flat_ratio,
                 rail_share, hum=None) -> _NoiseTicks:
    """The measures of :func:`noise_severity`: two kernels, and the typical amplitude; the
    high-frequency floor less ``hum`` (:func:`pipeline.mains.hum_power`, measured here if None)."""
    xp = backend.xp_of(signal)
    tick = max(1, int(round(tick_s * fs)))
    count = signal.shape[0] // tick
    half = max(1, int(round(0.5 / tick_s)))
    few = max(3, int(round(0.5 / tick_s)) | 1)
    limits = (float(hf_ratio), float(range_ratio), float(step_ratio), float(2 * half * tick * rail_share),
              float(flat_ratio))
    measures = xp.empty((6, count), dtype=xp.float32)
    if count == 0:
        return _NoiseTicks(measures, measures[0], tick, tick / fs, limits)  # no tick reads them
    stats = xp.empty((5, count), dtype=xp.float32)
    # The recording's extremes (the rails of a clipped amplifier) stay on the device.
    _episode_kernels.launch("block_stats", count, signal, tick, mains.difference_step(fs), signal.min(keepdims=True),
                            signal.max(keepdims=True), stats)
    _episode_kernels.launch("tick_measures", count, stats, stats[3], half, few, measures)
    hum = mains.hum_power(signal, fs) if hum is None else hum
    centres = xp.arange(count, dtype=xp.float64) * tick + tick / 2
    measures[2] = xp.maximum(measures[2] - hum.at(centres), 0)   # hum hides no beat
    return _NoiseTicks(measures, _typical_amplitude(signal, positions, fs, measures[0]), tick, tick / fs, limits)


def _typical_amplitude(signal, positions, fs: float, ranges, half_s: float = 0.05):
    """The peak-to-peak within ±``half_s`` of the fiducials (of 4096 of them at most, evenly
    spread), else the 1-s ``ranges``, partitioned around their middle: ``tick_severity`` reads
    their median (NumPy's) as the typical QRS amplitude, which thus stays on the device."""
    xp = backend.xp_of(signal)
    if positions is not None and positions.shape[0] >= 3:
        # Beats spread evenly over the recording are enough for a median (a day holds 100,000).
        every = max(1, positions.shape[0] // 4096)
        ranges = xp.empty(-(-positions.shape[0] // every), dtype=signal.dtype)
        _episode_kernels.launch("beat_range", ranges.shape[0], signal, positions, every,
                                max(1, int(round(half_s * fs))), ranges)
    m = ranges.shape[0]
    return xp.partition(ranges, sorted({(m - 1) // 2, m // 2, m - 1}))


def _noise_episodes(table: np.ndarray, tick_s: float, duration: float, *, min_s) -> Episodes:
    """Noise episodes from the run table of the noisy ticks (see :meth:`_NoiseTicks.runs`)."""
    first, last = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
    start = first * tick_s
    end = np.minimum((last + 1) * tick_s, duration)
    keep = end - start >= min_s
    # The mean severity of the flagged ticks of each run (capped, so that a flat stretch's
    # enormous ratio does not stand for the whole run).
    level = (table[:, 5] - table[:, 4]) / np.maximum(table[:, 3] - table[:, 2], 1)
    confidence = np.clip(1.0 - 0.5 / np.maximum(level, 1.0), 0.0, 1.0)
    return Episodes(np.full(int(keep.sum()), "noise"), start[keep], end[keep], confidence[keep])


# --------------------------------------------------------------------------- runs
# Flags and values stay on their device; only a table of the runs (a few numbers an episode)
# comes to the host, in one copy for the flutter and the noise together.
class _Runs(NamedTuple):
    """What one run table is made from (see the ``runs`` kernel of :mod:`pipeline._decision_kernels`)."""

    flags: Any    # int8 flags on the device
    bit: int      # the runs are those of this bit...
    mark: int     # ...within which this one is counted and found
    gap: int      # runs this many indices apart or less are one
    prefix: Any   # float64 running sum read at the runs' bounds (empty: none)


# Rows of each run table in the first copy to the host; a recording with more runs takes a second.
_HEAD_ROWS = 512
# Indices of the flags one thread of the run-table kernel walks.
_RUN_CHUNK = 64


def _run_tables(runs: list[_Runs], xp) -> list[np.ndarray]:
    """The run tables (host float64, a row a run: the columns of the ``runs`` kernel) of several
    flag arrays, made on the device in one buffer, two launches a table, and copied to the host
    together: the one synchronisation of :func:`find_episodes` on most recordings. A thread walks
    a chunk of ``_RUN_CHUNK`` indices in order, so that the walks are short and the threads many;
    the chunks' counts are summed between the kernel's two passes."""
    rows = 1 + max((r.flags.shape[0] + r.gap + 1) // (r.gap + 2) for r in runs)  # the most runs there can be
    tables = xp.empty((rows, len(runs), _decision_kernels.RUN_COLUMNS), dtype=xp.float64)
    for t, r in enumerate(runs):
        chunks = max(1, -(-r.flags.shape[0] // _RUN_CHUNK))
        counts = xp.empty((chunks, 2), dtype=xp.int64)
        _decision_kernels.launch("runs", chunks, r.flags, r.bit, r.mark, r.gap, _RUN_CHUNK, r.prefix, counts,
                                 tables, t, 0)
        _decision_kernels.launch("runs", chunks, r.flags, r.bit, r.mark, r.gap, _RUN_CHUNK, r.prefix,
                                 xp.cumsum(counts, axis=0), tables, t, 1)
    head = backend.to_host(tables[:_HEAD_ROWS + 1])
    total = head[0, :, 0].astype(np.int64)
    if total.max() > _HEAD_ROWS:
        head = np.concatenate([head, backend.to_host(tables[_HEAD_ROWS + 1:total.max() + 1])])
    return [head[1:1 + total[t], t] for t in range(len(runs))]


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping intervals (host arrays) as one: sorted, disjoint."""
    if start.shape[0] == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    new = np.concatenate([[True], start[1:] > end[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [start.shape[0] - 1]])
    return start[new], end[last]
