"""Realistic synthetic ECG with labelled abnormal beats (pure NumPy, CPU).

The beat model follows McSharry et al. (2003), *A dynamical model for generating
synthetic electrocardiogram signals* (ECGSYN): every beat is a sum of Gaussian
waves (P, Q, R, S, T) placed relative to the R peak.  ECGSYN places them at phase
angles P -70 deg, Q -15 deg, R 0, S +15 deg, T +100 deg of a 1 s cycle; here the
same positions are written in seconds and scaled with the RR interval the way a
real heart does: the QRS keeps its ~90 ms width at any rate, the T wave moves with
``sqrt(RR)`` (like the QT interval) and the PR interval changes only a little.

On top of the beats the generator adds heart-rate variability (LF ~0.1 Hz, HF
respiratory ~0.25 Hz, jitter and a slow drift over hours), baseline wander,
respiratory amplitude modulation, white noise and a little 50 Hz mains hum, and
injects abnormal beats labelled with MIT-BIH symbols:

``"N"``
    normal sinus beat.
``"V"``
    premature ventricular contraction: early (coupling 0.60-0.75 x RR), no P wave,
    wide (~120-160 ms) tall QRS from one or two ectopic foci (either polarity),
    large discordant T wave, full compensatory pause.
``"A"``
    premature atrial beat with aberrant conduction: early (0.70-0.85 x RR),
    inverted ectopic P wave, wide notched right-bundle-branch-like rsR' QRS,
    inverted T wave; non-compensatory pause (the sinus node is reset).
``"S"``
    premature atrial beat with normal conduction: early (0.65-0.85 x RR), a
    changed (inverted or flattened) ectopic P wave and an otherwise *normal* QRS
    and T: only its timing sets it apart.  The pause after it is longer than a
    sinus interval (1.05-1.3 x RR): the sinus node is reset late.
``"/"``
    paced beat (``paced=True``, every beat): a very narrow, steep pacing spike
    20-45 ms before the main deflection of a wide QRS, at a fixed pacing rate.
``"Q"``
    any beat whose R peak lies inside a noise burst (0.5-3 s of large
    high-frequency muscle noise plus motion artefact, amplitude comparable to the
    R wave).  This overrides the beat's own type.

Stress settings make detection harder the way real recordings do: tall T waves
and small QRS complexes (``t_wave_scale``, ``qrs_scale``), an inverted lead
(``invert``), pacing (``paced``), baseline jumps (``baseline_jumps_per_hour``:
electrode motion through an AC-coupled amplifier, a step that decays back over
seconds) and noise bursts.  :data:`STRESS_CASES` names a set of them.

The recorded fiducial of every beat is the sample of its main QRS deflection:
the R peak maximum for ``"N"`` and ``"A"`` beats, the extremum of the main
deflection for ``"V"`` beats (a minimum when the ectopic focus gives a negative
QRS).  The generator is deterministic for a given :class:`SynthConfig`, and each
ingredient (rhythm, morphology, noise, ...) uses its own random stream, so e.g.
changing ``pvc_fraction`` does not change the white noise.

Example
-------
>>> from pipeline.synth import SynthConfig, synthesize, write_csv
>>> ecg = synthesize(SynthConfig(n_samples=250_000, seed=1))
>>> path = write_csv(ecg, "/tmp/rec.csv")     # + /tmp/rec.annotations.csv

See Also
--------
pipeline.synth_config : the settings, the recording and its ground truth, the stress cases.
pipeline.synth_rhythm : when the beats fall.
pipeline.synth_waves : each beat's waves, their rendering, baseline jumps and noise bursts.
pipeline.synth_files : writes a recording as CSV (with its annotation sidecar) or WFDB.
"""
from __future__ import annotations

import numpy as np

from pipeline.sidecar import annotations_path, read_annotations
from pipeline.synth_config import STRESS_CASES, SYMBOLS, SynthConfig, SyntheticECG, stress_config
from pipeline.synth_files import write_csv, write_wfdb
from pipeline.synth_rhythm import _paced_times, _Rhythm, _sinus_times, _sinus_with_premature_beats  # noqa: F401
from pipeline.synth_waves import (_SAMPLE_CHUNK, _add_baseline_jumps, _beat_components, _Morphology, _noise_bursts,
                                  _render_gaussians)

# The settings, the writers and the sidecar's format live in modules of their own (see their
# docstrings) and are named here too, where callers have always found them; pipeline.stress
# builds its cases from the rhythm's and the waves' parts (_Rhythm, _sinus_times, ...).
__all__ = [
    "SynthConfig",
    "SyntheticECG",
    "SYMBOLS",
    "STRESS_CASES",
    "stress_config",
    "synthesize",
    "write_wfdb",
    "write_csv",
    "annotations_path",
    "read_annotations",
]

_MAINS_HZ = 50.0


def synthesize(config: SynthConfig = SynthConfig()) -> SyntheticECG:
    """Generate a synthetic ECG recording with labelled abnormal beats.

    Parameters
    ----------
    config : SynthConfig
        Length, sampling rate, seed, heart rate, abnormal-beat fractions and noise.

    Returns
    -------
    SyntheticECG
        ``signal`` (float32 mV), ``fs``, ``r_peaks`` (int64, increasing),
        ``symbols`` (``"N"``/``"V"``/``"A"``/``"Q"``) and ``noise_bursts``.

    Raises
    ------
    TypeError
        If ``config`` is not a :class:`SynthConfig`.

    Notes
    -----
    Deterministic for a given configuration.  Fully vectorised: about 30 million
    Gaussian evaluations and a few passes over the samples for a 22-hour
    recording.  The number of ``"V"`` / ``"A"`` beats is
    ``round(fraction * number of sinus beats)`` (fewer only when the fractions are
    so high that no room with normal neighbours is left), minus those later
    hidden in a noise burst.
    """
    if not isinstance(config, SynthConfig):
        raise TypeError(f"config must be a SynthConfig; got {type(config).__name__}")
    cfg = config
    fs, n = float(cfg.fs), int(cfg.n_samples)
    duration = n / fs
    ss = np.random.SeedSequence([cfg.seed, 0x5EC6])
    # Streams 7-9 are new: appending them leaves the first seven (and so every recording made
    # without the newer settings) as they were.
    (rng_rhythm, rng_ectopic, rng_morph, rng_beat, rng_noise, rng_base, rng_burst,
     rng_atrial, rng_pace, rng_jump) = [np.random.default_rng(s) for s in ss.spawn(10)]

    # ---- rhythm: sinus (or paced) times, then premature beats ---------------
    rhythm = _Rhythm(rng_rhythm, float(cfg.heart_rate))
    if cfg.paced:
        t, kind = _paced_times(rhythm, rng_pace, duration)
    else:
        t, kind = _sinus_with_premature_beats(rhythm, rng_rhythm, rng_ectopic, rng_atrial, cfg, duration)
    r_peaks = np.rint(t * fs).astype(np.int64)
    keep = r_peaks <= n - 1
    r_peaks, kind = r_peaks[keep], kind[keep]
    t_r = r_peaks / fs  # R peak exactly on a sample
    rr_prev = np.empty_like(t_r)
    if t_r.size:
        rr_prev[1:] = np.diff(t_r)
        rr_prev[0] = rhythm.rr_mean
    # the T wave of a beat follows the sinus cycle length, not a short coupling
    rr_prev_sinus = rr_prev.copy()
    ab = np.flatnonzero(kind != 0)
    rr_prev_sinus[ab] = np.where(ab >= 2, rr_prev[np.maximum(ab - 1, 0)], rhythm.rr_mean)

    # ---- beats --------------------------------------------------------------
    morph = _Morphology(rng_morph)
    morph.scale_sinus(cfg.qrs_scale, cfg.t_wave_scale)
    signal = np.zeros(n, dtype=np.float32)
    if t_r.size:
        mu, amp, sig = _beat_components(morph, rhythm, rng_beat, t_r, rr_prev_sinus, kind, fs, rng_pace)
        _render_gaussians(signal, mu * fs, amp, sig * fs)
    _add_baseline_jumps(signal, rng_jump, cfg)

    # ---- baseline wander, mains hum, white noise (chunked) ------------------
    u = rng_base.uniform
    n_wander = 3
    w_total = u(0.1, 0.3)
    w_share = rng_base.dirichlet(np.full(n_wander, 2.0))
    w_amp = w_total * w_share
    w_freq = np.exp(u(np.log(0.05), np.log(0.5), n_wander))
    w_phase = u(0, 2 * np.pi, n_wander)
    w_mod_T, w_mod_p = u(600.0, 7200.0, n_wander), u(0, 2 * np.pi, n_wander)
    resp_base = u(0.02, 0.06)
    mains_amp, mains_phase = u(0.005, 0.015), u(0, 2 * np.pi)
    step = max(1, int(round(fs / 25.0)))  # wander is < 1 Hz: compute it at ~25 Hz
    coarse_t = np.arange(0, n + 2 * step, step, dtype=np.float64) / fs
    coarse = resp_base * np.sin(rhythm.resp_phase(coarse_t) + 0.5)
    for a, f, p, mt, mp in zip(w_amp, w_freq, w_phase, w_mod_T, w_mod_p):
        coarse += a * (1.0 + 0.5 * np.sin(2 * np.pi * coarse_t / mt + mp)) * np.sin(
            2 * np.pi * f * coarse_t + p
        )
    mains_ratio = _MAINS_HZ / fs
    for lo in range(0, n, _SAMPLE_CHUNK):
        hi = min(n, lo + _SAMPLE_CHUNK)
        idx = np.arange(lo, hi, dtype=np.int64)
        i0 = idx // step
        frac = ((idx - i0 * step) / step).astype(np.float32)
        c0 = coarse[i0].astype(np.float32)
        c1 = coarse[i0 + 1].astype(np.float32)
        part = c0 + (c1 - c0) * frac
        phase = (np.mod(idx * mains_ratio, 1.0) * (2 * np.pi) + mains_phase).astype(np.float32)
        part += np.float32(mains_amp) * np.sin(phase)
        if cfg.noise_mv > 0:
            part += np.float32(cfg.noise_mv) * rng_noise.standard_normal(hi - lo, dtype=np.float32)
        signal[lo:hi] += part

    # ---- noise bursts and labels ---------------------------------------------
    spans, waves = _noise_bursts(rng_burst, cfg, morph.R)
    symbols = np.array(["N", "V", "A", "S", "/"], dtype="<U1")[kind]
    for (s0, s1), wave in zip(spans, waves):
        signal[s0 : s1 + 1] += wave
        b0 = np.searchsorted(r_peaks, s0, side="left")
        b1 = np.searchsorted(r_peaks, s1, side="right")
        symbols[b0:b1] = "Q"
    if cfg.invert:
        np.negative(signal, out=signal)

    return SyntheticECG(signal=signal, fs=fs, r_peaks=r_peaks, symbols=symbols, noise_bursts=spans)

