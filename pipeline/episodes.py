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

Per-sample work is one decimation and one Numba kernel (``block_stats``), then one kernel over
the 0.1-s blocks (``tick_measures``) and vectorised per-window measures, all on the input's
device; only the bounds of the runs of flagged windows come to the host, where the episodes are
made (:class:`Episodes` holds NumPy arrays).

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

import numpy as np

from pipeline import _episode_kernels, backend
from pipeline.flutter import flutter_features

KINDS = ("flutter", "noise")


@dataclass
class Episodes:
    """Episodes of one recording, sorted by start (host NumPy arrays of equal length).

    kind : str array, ``'flutter'`` (ventricular flutter or fibrillation) or ``'noise'``.
    start_s, end_s : float64 arrays, seconds from the recording's first sample.
    confidence : float32 array in [0, 1]. Flutter: the share of the episode's 2-s windows that pass
        every test (at least ``min_sine_share``). Noise: ``1 - 0.5 / severity``, severity being the
        mean over the episode of the largest measure / threshold ratio, capped at 10 (0.5 at the
        threshold, 0.95 for a flat or clipped stretch).
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
                  min_noise_s: float = 0.3, max_noise_gap_s: float = 0.5) -> Episodes:
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

    Returns
    -------
    Episodes
        Host NumPy arrays (the copies to the host are the runs' bounds and sums: a few numbers an
        episode, and three scalars). Noise is not called inside flutter: the large, fast waves of
        flutter would pass the range test.

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
    duration = signal.shape[0] / fs
    found = []
    if flutter:
        features = flutter_features(signal, fs, window_s=window_s, hop_s=hop_s)
        found.append(_flutter_episodes(features, duration, window_s=window_s, hop_s=hop_s, flutter_hz=flutter_hz,
                                       min_concentration=min_concentration, min_off_baseline=min_off_baseline,
                                       max_sine_ratio=max_sine_ratio, max_subharmonic=max_subharmonic,
                                       min_sine_share=min_sine_share,
                                       min_s=min_flutter_s, max_gap_s=max_flutter_gap_s))
    if noise:
        severity, tick = noise_severity(signal, fs, positions, hf_ratio=hf_ratio, range_ratio=range_ratio,
                                        step_ratio=step_ratio, flat_ratio=flat_ratio, rail_share=rail_share)
        if flutter and len(found[0]):
            xp = backend.xp_of(severity)
            centres = (xp.arange(severity.shape[0]) + 0.5) * (tick / fs)
            severity = xp.where(_inside(centres, found[0].start_s, found[0].end_s), 0.0, severity)
        found.append(_noise_episodes(severity, tick / fs, duration, min_s=min_noise_s, max_gap_s=max_noise_gap_s))
    return Episodes.concat(found)


def in_episodes(positions, episodes: Episodes, fs: float, kinds=KINDS, *, margin_s: float = 0.0):
    """Boolean mask (on the positions' device): which fiducials lie inside an episode of ``kinds``,
    widened by ``margin_s`` on both sides. The run keeps these out of the beats it models."""
    xp = backend.xp_of(positions)
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"kinds must be among {', '.join(KINDS)}; got {unknown}")
    keep = np.isin(episodes.kind, kinds)
    start, end = episodes.start_s[keep] - margin_s, episodes.end_s[keep] + margin_s
    return _inside(positions / fs, start, end)


# --------------------------------------------------------------------------- flutter
def _flutter_episodes(features: dict, duration: float, *, window_s, hop_s, flutter_hz, min_concentration,
                      min_off_baseline, max_sine_ratio, max_subharmonic, min_sine_share, min_s,
                      max_gap_s) -> Episodes:
    dominant = features["dominant_hz"]
    candidate = ((features["concentration"] >= min_concentration) & (features["off_baseline"] >= min_off_baseline)
                 & (dominant >= flutter_hz[0]) & (dominant <= flutter_hz[1]))
    # A subharmonic in the flutter band means complexes at half the rate; below it (VF at 3 Hz,
    # 1.5 Hz) it is baseline wander and does not count.
    halving = (features["subharmonic"] > max_subharmonic) & (dominant >= 2 * flutter_hz[0])
    sine = candidate & (features["sine_ratio"] <= max_sine_ratio) & ~halving
    first, last = _runs(candidate, max(0, int(round(max_gap_s / hop_s))))
    if first.shape[0] == 0:
        return Episodes()
    share = _run_sums(sine, first, last) / (last - first + 1)
    # The episode runs from the run's first sine-like window to its last: at its edges a run of
    # wide complexes (the ventricular beats that often lead into flutter) passes the first tests
    # but not the sine test, and its beats are beats.
    sine_first, sine_last = _runs(sine, 0)
    if sine_first.shape[0]:
        after = np.minimum(np.searchsorted(sine_last, first), sine_first.shape[0] - 1)
        before = np.maximum(np.searchsorted(sine_first, last, side="right") - 1, 0)
        inside_first = (sine_last[after] >= first) & (sine_first[after] <= last)
        inside_last = (sine_first[before] <= last) & (sine_last[before] >= first)
        first, last = (np.where(inside_first, np.maximum(sine_first[after], first), first),
                       np.where(inside_last, np.minimum(sine_last[before], last), last))
    centre = features["centre_s"]
    reach = (window_s - hop_s) / 2.0
    start = np.clip(centre[first] - reach, 0.0, duration)
    end = np.clip(centre[last] + reach, 0.0, duration)
    keep = (share >= min_sine_share) & (end - start >= min_s)
    return Episodes(np.full(int(keep.sum()), "flutter"), start[keep], end[keep], share[keep])


# --------------------------------------------------------------------------- noise
def noise_severity(signal, fs: float, positions=None, *, tick_s: float = 0.1, hf_ratio: float = 0.2,
                   range_ratio: float = 4.0, step_ratio: float = 2.5, flat_ratio: float = 0.005,
                   rail_share: float = 0.1):
    """Noise severity every ``tick_s`` (float32, on the input's device) and the tick in samples.

    Two kernels: ``block_stats`` over the samples (one block a tick), then ``tick_measures`` over
    the blocks: each tick's 1-s neighbourhood gives its range, rail samples and the step between
    the median levels of its two halves; the five ticks around it (half a second) give the
    high-frequency floor (the second-lowest of five: the block a QRS complex falls in does not
    count, yet a burst of 0.5 s is seen) and the range that tells a flat lead. Each is measured
    against the typical QRS amplitude (see :func:`find_episodes` for the tests); the severity is
    the largest measure / threshold ratio, 1 at the threshold of the first test crossed.
    """
    xp = backend.xp_of(signal)
    tick = max(1, int(round(tick_s * fs)))
    count = signal.shape[0] // tick
    if count == 0:
        return xp.zeros(0, dtype=xp.float32), tick
    low, high = float(signal.min()), float(signal.max())  # two syncs: the rails of a clipped amplifier
    margin = 1e-3 * (high - low)
    stats = xp.empty((count, 5), dtype=xp.float32)
    _episode_kernels.launch("block_stats", count, signal, tick, max(1, int(round(fs / 100.0))), low + margin,
                          high - margin, stats)
    half = max(1, int(round(0.5 / tick_s)))
    few = max(3, int(round(0.5 / tick_s)) | 1)
    measures = xp.empty((count, 6), dtype=xp.float32)
    means = xp.ascontiguousarray(stats[:, 3])          # the kernels' one median reads a 1-D array
    _episode_kernels.launch("tick_measures", count, stats, means, half, few, measures)
    ranges, short_ranges = measures[:, 0], measures[:, 1]
    amplitude = _typical_amplitude(signal, positions, fs, ranges)
    severity = xp.maximum(xp.sqrt(measures[:, 2]) / (hf_ratio * amplitude), ranges / (range_ratio * amplitude))
    severity = xp.maximum(severity, xp.abs(measures[:, 4] - measures[:, 3]) / (step_ratio * amplitude))
    severity = xp.maximum(severity, measures[:, 5] / (2 * half * tick * rail_share))
    severity = xp.maximum(severity, flat_ratio * amplitude / xp.maximum(short_ranges, xp.float32(1e-30)))
    return severity.astype(xp.float32), tick


def _typical_amplitude(signal, positions, fs: float, ranges, half_s: float = 0.05) -> float:
    """The median peak-to-peak within ±``half_s`` of the fiducials (of 4096 of them at most,
    evenly spread), else the median 1-s range."""
    xp = backend.xp_of(signal)
    if positions is not None and positions.shape[0] >= 3:
        half = max(1, int(round(half_s * fs)))
        # Beats spread evenly over the recording are enough for a median (a day holds 100,000).
        sample = positions[:: max(1, positions.shape[0] // 4096)]
        around = xp.clip(sample[:, None] + xp.arange(-half, half + 1)[None, :], 0, signal.shape[0] - 1)
        window = signal[around]
        value = float(xp.median(window.max(axis=1) - window.min(axis=1)))  # sync: a scalar
    else:
        value = float(xp.median(ranges))
    return value if value > 0 else 1.0  # a flat recording: every range test divides by 1


def _noise_episodes(severity, tick_s: float, duration: float, *, min_s, max_gap_s) -> Episodes:
    flagged = severity >= 1.0
    first, last = _runs(flagged, max(0, int(round(max_gap_s / tick_s))))
    if first.shape[0] == 0:
        return Episodes()
    start = first * tick_s
    end = np.minimum((last + 1) * tick_s, duration)
    keep = end - start >= min_s
    # The mean severity of the flagged ticks of each run (capped, so that a flat stretch's
    # enormous ratio does not stand for the whole run).
    xp = backend.xp_of(severity)
    capped = xp.where(flagged, xp.minimum(severity, 10.0), 0.0)
    sums = _run_sums(xp.stack([capped, flagged.astype(capped.dtype)]), first, last)
    level = sums[0] / np.maximum(sums[1], 1)
    confidence = np.clip(1.0 - 0.5 / np.maximum(level, 1.0), 0.0, 1.0)
    return Episodes(np.full(int(keep.sum()), "noise"), start[keep], end[keep], confidence[keep])


# --------------------------------------------------------------------------- helpers
# Flags and values stay on their device; only the runs' bounds and sums (a few numbers an
# episode) come to the host.
def _runs(flags, max_gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Host arrays: first and last index of each run of True in ``flags`` (on its device), runs
    less than ``max_gap`` + 1 apart joined."""
    xp = backend.xp_of(flags)
    edges = xp.diff(flags.astype(xp.int8), prepend=0, append=0)
    changes = xp.flatnonzero(edges)
    changes, rising = backend.to_host(changes), backend.to_host(edges[changes] > 0)  # two numbers a run
    first, last = changes[rising], changes[~rising] - 1
    if first.shape[0] > 1:
        joined = first[1:] - last[:-1] - 1 <= max_gap
        first = first[np.concatenate([[True], ~joined])]
        last = last[np.concatenate([~joined, [True]])]
    return first, last


def _run_sums(values, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Host float64 array: the sums of ``values`` (on its device; 1-D, or 2-D for several rows at
    once) over each run first..last."""
    xp = backend.xp_of(values)
    rows = values.reshape(-1, values.shape[-1])
    bounds = xp.asarray(np.concatenate([first, last + 1]))
    # One 1-D scan a row: CuPy scans a long 1-D array in parallel, the rows of a 2-D one slowly.
    ends = xp.stack([xp.concatenate([xp.zeros(1), xp.cumsum(row, dtype=xp.float64)])[bounds] for row in rows])
    ends = backend.to_host(ends)  # two numbers a run
    sums = ends[:, first.shape[0]:] - ends[:, :first.shape[0]]
    return sums.reshape(values.shape[:-1] + (first.shape[0],))


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping intervals (host arrays) as one: sorted, disjoint."""
    if start.shape[0] == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    new = np.concatenate([[True], start[1:] > end[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [start.shape[0] - 1]])
    return start[new], end[last]


def _inside(t, start: np.ndarray, end: np.ndarray):
    """Boolean mask on ``t``'s device: which times (s) lie in one of the intervals (host arrays)."""
    xp = backend.xp_of(t)
    start, end = _merged(np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64))
    if start.shape[0] == 0:
        return xp.zeros(t.shape[0], dtype=bool)
    start, end = xp.asarray(start), xp.asarray(end)  # small host → device copies
    slot = xp.searchsorted(start, t, side="right") - 1
    return (slot >= 0) & (t <= end[xp.clip(slot, 0, None)])
