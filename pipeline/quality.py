"""How clean each beat is: a quality in [0, 1] per fiducial (1 = clean), from the noise around it
and its likeness to its neighbours.

Four measures per beat, from one Numba kernel (one thread per beat, ``beat_stats``) and the running
median of the QRS amplitudes on the input's device, and a fifth where another lead is read:

- **high-frequency noise**: the RMS of the second difference (gain peaking near 50 Hz: muscle
  noise, mains) over the beat's window outside its own QRS, over the median QRS amplitude of the
  16 beats around it (the beat's own amplitude grows with the noise on it);
- **baseline shift**: the difference between the mean levels at the two ends of the beat's
  window, over that amplitude (electrode motion, a baseline step across the beat);
- **amplitude**: the beat's QRS amplitude against that local median (an artefact that the
  detector took for a beat is much larger or much smaller);
- **steepness on every lead** (two leads read): the beat's steepest rise on each lead over the
  lower quartile of its 16 neighbours' there (the smaller beats': in bigeminy, the small normal
  beats are measured against their own kind, not the PVCs between them), the geometric mean of the
  two ratios. A QRS complex shows on every lead; a swing of electrode motion on one lead is no
  deflection on the other, and one that happens to meet a swing there is faint on both. Like
  shape, it lowers the quality by at most ``steepness_weight``: a faint beat on a clean baseline
  stays;
- **shape**: the correlation with the local template (the 8 neighbouring beats averaged sample
  by sample without their highest and lowest value: a trimmed running mean that one ectopic or
  noisy neighbour does not bend) or, if higher, with the most similar of them (NeuroKit2's
  ``templatematch``, Orphanidou et al., 2015, made local). A shape alone never makes a beat low quality: a clean premature ventricular beat
  among normal ones is what the pipeline looks for. It lowers the quality by at most
  ``shape_weight``, enough to tip a noisy beat of odd shape below :data:`LOW_QUALITY`.

Each measure becomes a factor in [0, 1] by a linear ramp between a "good" and a "bad" value;
their product is the quality, made by a second kernel (``beat_quality``, one thread per beat), which
also caps the beats inside noise episodes: on the GPU, two kernels and the running median's filter,
and no synchronisation.

Compared with NeuroKit2's ``ecg_quality`` (``averageQRS``, ``templatematch``): those correlate
each beat with the recording's average beat, so that every ventricular beat scores low; here
morphology counts little and noise much.

See Also
--------
pipeline.peaks.find_beats : the fiducials before this step.
pipeline.episodes.find_episodes : stretches (flutter, noise) rather than beats.
pipeline.embed.embed_beats : the step after.
"""
from __future__ import annotations

import math
import numbers

from pipeline import _decision_kernels, _episode_kernels, backend, mains, qrs

#: A beat whose quality is below this is "low quality". A beat in muscle noise as large as a tenth
#: of the QRS complexes scores ~0.5; clean beats, premature ones included, score 1 or ≥ 0.6.
LOW_QUALITY = 0.5


def beat_quality(signal, positions, fs: float, *, hf_ramp: tuple[float, float] = (0.15, 0.35),
                 shift_ramp: tuple[float, float] = (0.6, 1.5), amplitude_ramp: tuple[float, float] = (2.5, 5.0),
                 shape_ramp: tuple[float, float] = (0.8, 0.3), shape_weight: float = 0.4,
                 steepness_ramp: tuple[float, float] = (0.5, 0.25), steepness_weight: float = 0.5, other=None,
                 slope_options=None, noise_spans=None, hum=None, **measure_options):
    """Quality of every beat, float32 in [0, 1] on the input's device (1 = clean).

    Parameters
    ----------
    signal : CuPy or NumPy array
        The ECG lead the fiducials were found in.
    positions : int array
        The fiducials (increasing sample indices), on the signal's device.
    fs : float
        Sampling rate in Hz.
    hf_ramp, shift_ramp : (good, bad)
        High-frequency RMS and baseline shift over the local QRS amplitude: factor 1 at or below
        ``good``, 0 at or above ``bad``, linear between.
    amplitude_ramp : (good, bad)
        The beat's QRS amplitude over the local median, as a ratio either way (2.5 = 2.5 × larger
        or smaller).
    shape_ramp : (good, bad)
        Correlation with the neighbours (see the module's notes) at which the shape factor is 1
        and 0.
    shape_weight : float
        The most that shape lowers the quality (0: not at all).
    steepness_ramp : (good, bad)
        The geometric mean, over the two leads, of the beat's steepest rise over its smaller
        neighbours' (:func:`steepness`) at which the steepness factor is 1 and 0.
    steepness_weight : float
        The most that steepness lowers the quality (0: not at all).
    other : float array, optional
        Another lead of the recording, sample for sample (same device): without it, steepness
        counts for nothing.
    slope_options : dict, optional
        Passed to :func:`pipeline.qrs.qrs_shape` where steepness reads the slopes (the detector's
        ``despike_s`` and ``width_cap_s``, so that both read the same slope).
    noise_spans : (2, k) float64 array, optional
        Sorted, disjoint (start, end) seconds of noise on the signal's device
        (:func:`pipeline.episodes.episode_spans`): a beat inside scores at most half of
        :data:`LOW_QUALITY`, whatever its own measures say.
    hum : pipeline.mains.Hum, optional
        The recording's mains hum, whose share the high-frequency noise leaves out; measured here
        (:func:`pipeline.mains.hum_power`) when not given.
    **measure_options
        Passed to :func:`quality_measures`.

    Returns
    -------
    float32 array of ``len(positions)`` values; below :data:`LOW_QUALITY`, a beat is low quality.
    """
    m = _beat_stats(signal, positions, fs, hum=hum, **measure_options)
    xp = backend.xp_of(m["amp"])
    spans = xp.empty((2, 0)) if noise_spans is None else noise_spans
    quality = xp.empty(m["amp"].shape[0], dtype=xp.float32)
    # One kernel combines the measures (each the ramp of a ratio to the local amplitude).
    _decision_kernels.launch("beat_quality", quality.shape[0], m["amp"], m["hf"], m["shift"], m["corr"], m["best"],
                             m["local"], *(float(v) for v in (*hf_ramp, *shift_ramp, *amplitude_ramp, *shape_ramp)),
                             float(shape_weight), m["positions"], float(fs), spans[0], spans[1], LOW_QUALITY / 2,
                             quality)
    if other is not None and quality.shape[0]:
        good, bad = steepness_ramp
        factor = xp.clip((steepness(signal, other, m["positions"], fs, **(slope_options or {})) - bad) / (good - bad),
                         0, 1)
        quality *= (1 - steepness_weight * (1 - factor)).astype(xp.float32)
    return quality


def steepness(signal, other, positions, fs: float, neighbours: int = 8, percent: float = 25.0, **slope_options):
    """Per beat, how steep it is on both leads against the beats around it: on each of
    ``signal`` and ``other``, its steepest rise (:func:`pipeline.qrs.qrs_shape`) over the
    ``percent`` percentile of those of the ``neighbours`` beats on each side (the beat too); the
    geometric mean of the two ratios (float32, on the input's device). 1 or more for a recording's
    beats; a swing of noise on one lead that the detector took for a beat scores low on both,
    below 0.5. ``slope_options``: passed to :func:`pipeline.qrs.qrs_shape`."""
    xp = backend.xp_of(signal)
    ratios = []
    for lead in (signal, other):
        _, _, slope = qrs.qrs_shape(lead, positions, fs, **slope_options)
        usual = backend.running_percentile(slope, neighbours, percent)
        ratios.append(slope / xp.maximum(usual, xp.float32(1e-12)))
    return xp.sqrt(ratios[0] * ratios[1]).astype(xp.float32)


def quality_measures(signal, positions, fs: float, **options) -> dict:
    """The four measures behind :func:`beat_quality` (float32 arrays on the input's device).

    Parameters
    ----------
    half_qrs_s : float
        The QRS is taken as ±this around the fiducial: its peak-to-peak is the beat's amplitude,
        and high-frequency noise is measured outside it.
    before_s, after_s : float
        The beat's window, cut short ``half_qrs_s`` before the neighbouring fiducials.
    edge_s : float
        The baseline shift compares the means over this much at the window's two ends.
    template_s : (float, float)
        Offsets from the fiducial over which shapes are correlated (QRS and ST segment).
    neighbours : int
        The template is made of this many beats on each side.
    amplitude_neighbours : int
        The local QRS amplitude is the median over this many beats on each side (the beat too).

    Returns
    -------
    dict
        ``hf`` and ``shift`` (over the local QRS amplitude), ``amplitude`` (the beat's QRS
        amplitude over the local one), ``shape`` (correlation, -1..1), ``qrs_amplitude`` (signal
        units).
    """
    m = _beat_stats(signal, positions, fs, **options)
    xp = backend.xp_of(m["amp"])
    local = xp.maximum(m["local"], xp.float32(1e-12))
    return {"hf": (m["hf"] / local).astype(xp.float32), "shift": (m["shift"] / local).astype(xp.float32),
            "amplitude": (m["amp"] / local).astype(xp.float32),
            "shape": xp.maximum(m["corr"], m["best"]), "qrs_amplitude": m["amp"]}


def _beat_stats(signal, positions, fs: float, *, half_qrs_s: float = 0.06, before_s: float = 0.35,
                after_s: float = 0.5, edge_s: float = 0.04, template_s: tuple[float, float] = (-0.1, 0.15),
                neighbours: int = 4, amplitude_neighbours: int = 8, hum=None) -> dict:
    """The raw measures of the ``beat_stats`` kernel (``amp``, ``hf``, ``shift``, ``corr``,
    ``best``: see :func:`pipeline._episode_kernels._beat_stats_one`), ``local``, the running
    median of ``amp``, and ``positions`` as int64 (the options: :func:`quality_measures`); ``hf``
    less the mains ``hum``'s share (:func:`pipeline.mains.hum_power`, measured here if None)."""
    xp = backend.xp_of(signal)
    if signal.ndim != 1:
        raise ValueError(f"signal must be 1-D (one lead); got shape {signal.shape}")
    if positions.ndim != 1 or positions.dtype.kind not in "iu":
        raise ValueError(f"positions must be a 1-D integer array of sample indices; got shape {positions.shape}, "
                         f"dtype {positions.dtype}")
    if not (isinstance(fs, numbers.Real) and math.isfinite(fs) and fs > 0):
        raise ValueError(f"fs must be a positive number of Hz; got {fs!r}")
    if backend.is_cupy_array(signal) != backend.is_cupy_array(positions):
        raise ValueError("signal and positions must be on the same device (both CuPy or both NumPy)")
    count = int(positions.shape[0])
    out = {name: xp.empty(count, dtype=xp.float32) for name in ("amp", "hf", "shift", "corr", "best")}
    out["positions"] = positions = positions.astype(xp.int64, copy=False)
    if count == 0:
        out["local"] = out["amp"]
        return out

    def samples(seconds):
        return max(1, int(round(seconds * fs)))

    _episode_kernels.launch("beat_stats", count, signal, positions, samples(half_qrs_s), samples(before_s),
                            samples(after_s), mains.difference_step(fs), samples(edge_s),
                            int(round(template_s[0] * fs)), int(round(template_s[1] * fs)), max(1, int(fs // 125)),
                            int(neighbours),
                            out["amp"], out["hf"], out["shift"], out["corr"], out["best"])
    hum = (mains.hum_power(signal, fs) if hum is None else hum).at(positions)
    out["hf"] = xp.sqrt(xp.maximum(out["hf"] * out["hf"] - hum, 0)).astype(xp.float32)   # hum hides no beat
    out["local"] = backend.running_median(out["amp"], amplitude_neighbours)
    return out


def low_quality(quality, threshold: float = LOW_QUALITY):
    """Boolean mask of the low-quality beats (``quality < threshold``)."""
    return quality < threshold

