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
"""

from __future__ import annotations

import math
import numbers
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Tuple, Union

import numpy as np

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

PathLike = Union[str, "os.PathLike[str]"]

#: Beat labels the generator produces (MIT-BIH style).
SYMBOLS: Tuple[str, ...] = ("N", "V", "A", "S", "/", "Q")

_MAINS_HZ = 50.0
_SAMPLE_CHUNK = 2_000_000  # samples per chunk for the additive signal parts
_CSV_CHUNK = 2_000_000  # lines per chunk when formatting the CSV
_ANNOTATION_SUFFIX = ".annotations.csv"


# --------------------------------------------------------------------------- #
# Public data classes
# --------------------------------------------------------------------------- #
def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class SynthConfig:
    """Settings of one synthetic recording.

    Parameters
    ----------
    n_samples : int
        Length of the recording in samples; at least one second (``fs`` samples).
    fs : float
        Sampling rate in Hz, 100 to 10000.
    seed : int
        Non-negative random seed; the same configuration always gives the same
        recording.
    heart_rate : float
        Mean sinus heart rate in beats per minute, 30 to 180.  The instantaneous
        rate varies around it (HRV and a slow drift of up to about +-7 %).
    pvc_fraction : float
        Fraction of beats that are premature ventricular contractions (``"V"``).
    aberrant_fraction : float
        Fraction of beats that are aberrated premature atrial beats (``"A"``).
    premature_atrial_fraction : float
        Fraction of beats that are premature atrial beats with a normal QRS
        (``"S"``).  The three fractions together must not exceed 0.2 (every
        abnormal beat is surrounded by normal beats).
    noise_bursts_per_hour : float
        Mean number of noise bursts per hour (Poisson), 0 to 600.  Beats inside
        a burst are labelled ``"Q"``.
    noise_mv : float
        Standard deviation of the white measurement noise in millivolts, 0 to 1.
    t_wave_scale, qrs_scale : float
        Multiply the T-wave and the QRS amplitudes of sinus beats (0.1 to 5):
        ``t_wave_scale=3, qrs_scale=0.5`` gives T waves taller than the R wave.
    invert : bool
        Record the lead upside down (every value negated).
    paced : bool
        Every beat is ventricular paced (``"/"``): fixed rate, pacing spike, wide
        QRS; no premature beats are injected.
    baseline_jumps_per_hour : float
        Mean number of baseline jumps per hour (Poisson), 0 to 3600.

    Raises
    ------
    ValueError
        When a value is out of range or of the wrong type; the message names the
        field, the rule and the value received.
    """

    n_samples: int = 1_000_000
    fs: float = 250.0
    seed: int = 0
    heart_rate: float = 70.0  # bpm
    pvc_fraction: float = 0.015
    aberrant_fraction: float = 0.01
    noise_bursts_per_hour: float = 2.0
    noise_mv: float = 0.025
    premature_atrial_fraction: float = 0.01
    t_wave_scale: float = 1.0
    qrs_scale: float = 1.0
    invert: bool = False
    paced: bool = False
    baseline_jumps_per_hour: float = 0.0

    def __post_init__(self) -> None:
        fs = self.fs
        if not _is_real(fs) or not math.isfinite(fs) or not 100.0 <= fs <= 10_000.0:
            raise ValueError(f"fs must be a finite number of Hz between 100 and 10000; got {fs!r}")
        if not _is_int(self.n_samples):
            raise ValueError(f"n_samples must be an integer; got {self.n_samples!r}")
        min_samples = int(math.ceil(fs))
        if self.n_samples < min_samples:
            raise ValueError(
                f"n_samples must be at least {min_samples} (one second at fs={fs:g} Hz); "
                f"got {self.n_samples}"
            )
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer; got {self.seed!r}")
        hr = self.heart_rate
        if not _is_real(hr) or not math.isfinite(hr) or not 30.0 <= hr <= 180.0:
            raise ValueError(f"heart_rate must be between 30 and 180 bpm; got {hr!r}")
        for name in ("pvc_fraction", "aberrant_fraction", "premature_atrial_fraction"):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value) or not 0.0 <= value <= 0.2:
                raise ValueError(f"{name} must be between 0 and 0.2; got {value!r}")
        total = self.pvc_fraction + self.aberrant_fraction + self.premature_atrial_fraction
        if total > 0.2:
            raise ValueError(
                "pvc_fraction + aberrant_fraction + premature_atrial_fraction must be at most 0.2 "
                f"(each abnormal beat needs normal neighbours); got {self.pvc_fraction!r} + "
                f"{self.aberrant_fraction!r} + {self.premature_atrial_fraction!r} = {total:g}"
            )
        for name in ("t_wave_scale", "qrs_scale"):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value) or not 0.1 <= value <= 5.0:
                raise ValueError(f"{name} must be between 0.1 and 5; got {value!r}")
        for name in ("invert", "paced"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False; got {getattr(self, name)!r}")
        jumps = self.baseline_jumps_per_hour
        if not _is_real(jumps) or not math.isfinite(jumps) or not 0.0 <= jumps <= 3600.0:
            raise ValueError(f"baseline_jumps_per_hour must be between 0 and 3600; got {jumps!r}")
        rate = self.noise_bursts_per_hour
        if not _is_real(rate) or not math.isfinite(rate) or not 0.0 <= rate <= 600.0:
            raise ValueError(f"noise_bursts_per_hour must be between 0 and 600; got {rate!r}")
        nmv = self.noise_mv
        if not _is_real(nmv) or not math.isfinite(nmv) or not 0.0 <= nmv <= 1.0:
            raise ValueError(f"noise_mv must be between 0 and 1 mV; got {nmv!r}")

    @property
    def duration_s(self) -> float:
        """Length of the recording in seconds."""
        return self.n_samples / float(self.fs)


@dataclass
class SyntheticECG:
    """A synthetic recording and its ground truth.

    Attributes
    ----------
    signal : numpy.ndarray
        float32 array of shape ``(n_samples,)``, millivolts.
    fs : float
        Sampling rate in Hz.
    r_peaks : numpy.ndarray
        int64 sample index of every beat's fiducial (main QRS peak), strictly
        increasing.
    symbols : numpy.ndarray
        One-character str array (``"N"``, ``"V"``, ``"A"`` or ``"Q"``), one per beat.
    noise_bursts : numpy.ndarray
        int64 array of shape ``(k, 2)``: first and last sample (inclusive) of every
        noise burst, sorted by start.  Empty for recordings not made by
        :func:`synthesize`.
    """

    signal: np.ndarray
    fs: float
    r_peaks: np.ndarray
    symbols: np.ndarray
    noise_bursts: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))

    def __post_init__(self) -> None:
        self.signal = np.asarray(self.signal)
        self.r_peaks = np.asarray(self.r_peaks, dtype=np.int64)
        self.symbols = np.asarray(self.symbols, dtype="<U1")
        self.noise_bursts = np.asarray(self.noise_bursts, dtype=np.int64).reshape(-1, 2)
        if self.signal.ndim != 1:
            raise ValueError(f"signal must be one-dimensional; got shape {self.signal.shape}")
        if self.r_peaks.shape != self.symbols.shape or self.r_peaks.ndim != 1:
            raise ValueError(
                "r_peaks and symbols must be 1-D arrays of the same length; got shapes "
                f"{self.r_peaks.shape} and {self.symbols.shape}"
            )

    @property
    def duration_s(self) -> float:
        """Length of the recording in seconds."""
        return self.signal.shape[0] / float(self.fs)


# --------------------------------------------------------------------------- #
# Rhythm
# --------------------------------------------------------------------------- #
class _Rhythm:
    """Heart-rate drift, LF and HF (respiratory) oscillations of one recording."""

    def __init__(self, rng: np.random.Generator, heart_rate: float):
        u = rng.uniform
        self.rr_mean = 60.0 / heart_rate
        # slow drift of heart rate over hours (multiplies the rate)
        self.d1, self.T1, self.p1 = u(0.03, 0.05), u(4.0, 8.0) * 3600.0, u(0, 2 * np.pi)
        self.d2, self.T2, self.p2 = u(0.01, 0.025), u(0.5, 1.5) * 3600.0, u(0, 2 * np.pi)
        # LF (~0.1 Hz, baroreflex) with slowly varying amplitude and frequency
        self.a_lf, self.f_lf, self.p_lf = u(0.025, 0.045), u(0.085, 0.115), u(0, 2 * np.pi)
        self.lf_mod_T, self.lf_mod_p = u(200.0, 600.0), u(0, 2 * np.pi)
        self.lf_fm_T, self.lf_fm_p = u(150.0, 400.0), u(0, 2 * np.pi)
        # HF = respiration (~0.25 Hz); respiratory rate wanders by ~+-0.03 Hz
        self.a_hf, self.f_resp, self.p_resp = u(0.015, 0.035), u(0.2, 0.3), u(0, 2 * np.pi)
        self.resp_fm_T, self.resp_fm_p = u(60.0, 240.0), u(0, 2 * np.pi)
        self.resp_fm_dev = u(0.01, 0.03)  # Hz
        self.jitter = 0.008  # relative RR jitter (std)

    def resp_phase(self, t: np.ndarray) -> np.ndarray:
        m = self.resp_fm_dev * self.resp_fm_T
        return 2 * np.pi * self.f_resp * t + self.p_resp + m * np.sin(
            2 * np.pi * t / self.resp_fm_T + self.resp_fm_p
        )

    def hr_factor(self, t: np.ndarray) -> np.ndarray:
        return (
            1.0
            + self.d1 * np.sin(2 * np.pi * t / self.T1 + self.p1)
            + self.d2 * np.sin(2 * np.pi * t / self.T2 + self.p2)
        )

    def rr(self, t: np.ndarray) -> np.ndarray:
        """Sinus RR interval (s) starting at beat time(s) ``t`` (without jitter)."""
        lf_amp = self.a_lf * (1.0 + 0.4 * np.sin(2 * np.pi * t / self.lf_mod_T + self.lf_mod_p))
        lf_phase = 2 * np.pi * self.f_lf * t + self.p_lf + 0.02 * self.lf_fm_T * np.sin(
            2 * np.pi * t / self.lf_fm_T + self.lf_fm_p
        )
        lf = lf_amp * np.sin(lf_phase)
        hf = -self.a_hf * np.sin(self.resp_phase(t))  # inspiration shortens RR (RSA)
        return self.rr_mean / self.hr_factor(t) * (1.0 + lf + hf)


def _sinus_times(rhythm: _Rhythm, rng: np.random.Generator, duration: float) -> np.ndarray:
    """Beat times (s) of an undisturbed sinus rhythm covering ``duration``."""
    n_est = int(duration / rhythm.rr_mean * 1.25) + 16
    jitter = 1.0 + rhythm.jitter * rng.standard_normal(n_est)
    t_first = rng.uniform(0.45, 0.9) * rhythm.rr_mean
    t = t_first + np.arange(n_est) * rhythm.rr_mean
    for _ in range(4):  # fixed point of t[k+1] = t[k] + RR(t[k])
        rr = np.clip(rhythm.rr(t) * jitter, 0.25, 2.5)
        t = t_first + np.concatenate(([0.0], np.cumsum(rr[:-1])))
    return t


def _sinus_with_premature_beats(rhythm: _Rhythm, rng_rhythm, rng_ectopic, rng_atrial, cfg: SynthConfig,
                                duration: float) -> tuple[np.ndarray, np.ndarray]:
    """Beat times (s) and kinds (0 N, 1 V, 2 A, 3 S) of a sinus rhythm with premature beats."""
    fs, n = float(cfg.fs), int(cfg.n_samples)
    t = _sinus_times(rhythm, rng_rhythm, duration)
    n_sinus = int(np.count_nonzero(np.rint(t * fs) <= n - 1))
    n_v = int(round(cfg.pvc_fraction * n_sinus))
    n_a = int(round(cfg.aberrant_fraction * n_sinus))
    n_s = int(round(cfg.premature_atrial_fraction * n_sinus))
    # one draw for all kinds, V and A first: adding S beats leaves the V and A beats where they were
    picks = _pick_abnormal(rng_ectopic, n_sinus, n_v + n_a + n_s)
    kind = np.zeros(t.size, dtype=np.int8)
    kind[picks[:n_v]] = 1
    kind[picks[n_v:n_v + n_a]] = 2
    kind[picks[n_v + n_a:]] = 3

    rr = np.diff(t)  # rr[k]: beat k -> k + 1
    v_idx = np.flatnonzero(kind == 1)
    if v_idx.size:
        # early beat, sinus node undisturbed: full compensatory pause
        coupling = rng_ectopic.uniform(0.6, 0.75, v_idx.size)
        two = rr[v_idx - 1] + rr[v_idx]
        rr[v_idx - 1] = coupling * rr[v_idx - 1]
        rr[v_idx] = two - rr[v_idx - 1]
    a_idx = np.flatnonzero(kind == 2)
    if a_idx.size:
        # early atrial beat resets the sinus node: non-compensatory pause
        coupling = rng_ectopic.uniform(0.7, 0.85, a_idx.size)
        rr[a_idx - 1] = coupling * rr[a_idx - 1]
        rr[a_idx] = rr[a_idx] * rng_ectopic.uniform(1.0, 1.12, a_idx.size)
    s_idx = np.flatnonzero(kind == 3)
    if s_idx.size:
        # early atrial beat, normal conduction; the reset sinus node fires a little late
        rr[s_idx - 1] = rng_atrial.uniform(0.65, 0.85, s_idx.size) * rr[s_idx - 1]
        rr[s_idx] = rr[s_idx] * rng_atrial.uniform(1.05, 1.3, s_idx.size)
    return t[0] + np.concatenate(([0.0], np.cumsum(rr))), kind


def _paced_times(rhythm: _Rhythm, rng: np.random.Generator, duration: float) -> tuple[np.ndarray, np.ndarray]:
    """Beat times (s) and kinds (4 = paced) of a fixed-rate ventricular pacemaker (tiny jitter)."""
    count = int(duration / rhythm.rr_mean) + 2
    rr = rhythm.rr_mean * (1.0 + 0.002 * rng.standard_normal(count))
    t = rng.uniform(0.3, 0.9) * rhythm.rr_mean + np.concatenate(([0.0], np.cumsum(rr[:-1])))
    return t, np.full(t.size, 4, dtype=np.int8)


def _pick_abnormal(rng: np.random.Generator, n_beats: int, n_wanted: int) -> np.ndarray:
    """Random beat indices in [2, n_beats - 3] at least 3 apart (normal neighbours)."""
    if n_wanted <= 0 or n_beats < 6:
        return np.zeros(0, dtype=np.int64)
    candidates = rng.permutation(np.arange(2, n_beats - 2))
    taken = np.zeros(n_beats + 4, dtype=bool)
    picked = []
    # a loop over candidate abnormal beats only (a few thousand), not over samples
    for i in candidates.tolist():
        if not taken[i - 2 : i + 3].any():
            taken[i] = True
            picked.append(i)
            if len(picked) == n_wanted:
                break
    return np.asarray(picked, dtype=np.int64)


# --------------------------------------------------------------------------- #
# Morphology
# --------------------------------------------------------------------------- #
def _qrs_extremum(offsets, amps, sigmas, sign: float) -> float:
    """Time (s) of the extremum of a sum of Gaussians near 0 (fine grid search)."""
    tt = np.linspace(-0.02, 0.02, 4001)[:, None]
    y = (np.asarray(amps)[None, :] * np.exp(
        -0.5 * ((tt - np.asarray(offsets)[None, :]) / np.asarray(sigmas)[None, :]) ** 2
    )).sum(axis=1)
    return float(tt[np.argmax(sign * y), 0])


class _Morphology:
    """Per-recording wave parameters (amplitudes in mV, times in s)."""

    def __init__(self, rng: np.random.Generator):
        u = rng.uniform
        # --- normal beat, amplitudes in the usual ranges for lead II ---------
        self.P = u(0.12, 0.2)
        self.Q = -u(0.1, 0.2)
        self.R = u(1.0, 1.3)
        self.S = -u(0.2, 0.35)
        self.T = u(0.25, 0.4)
        self.p_off = u(0.17, 0.2)  # P peak before R at RR = 1 s
        self.p_sig = u(0.022, 0.028)
        self.q_off, self.q_sig = -u(0.026, 0.032), u(0.008, 0.010)
        self.r_sig = u(0.0095, 0.0115)
        self.s_off, self.s_sig = u(0.026, 0.032), u(0.008, 0.010)
        self.t_off = u(0.26, 0.3)  # T peak after R at RR = 1 s (scales with sqrt(RR))
        self.resp_mod = u(0.03, 0.08)  # respiratory QRS amplitude modulation
        self.t_drift, self.t_drift_T, self.t_drift_p = u(0.05, 0.12), u(2.0, 6.0) * 3600, u(0, 6.3)
        # fine-tune so that the R maximum sits exactly on the fiducial
        self.n_shift = _qrs_extremum(
            [self.q_off, 0.0, self.s_off], [self.Q, self.R, self.S],
            [self.q_sig, self.r_sig, self.s_sig], 1.0,
        )

        # --- ventricular ectopic foci (one, sometimes two) --------------------
        n_foci = 2 if rng.random() < 0.3 else 1
        first_sign = 1.0 if rng.random() < 0.5 else -1.0
        self.foci = []
        for k in range(n_foci):
            sign = first_sign if k == 0 else -first_sign
            main = sign * u(1.3, 1.8)
            comps = {
                # initial opposite notch, main deflection, slurred shoulder, terminal
                # overshoot, sloping ST, discordant T; offsets (s), amplitudes (mV),
                # widths (s)
                "off": np.array([-u(0.036, 0.042), 0.0, u(0.036, 0.042), u(0.07, 0.078),
                                 u(0.16, 0.2), u(0.3, 0.36)]),
                "amp": np.array([
                    -sign * u(0.1, 0.25), main, main * u(0.45, 0.7), -sign * u(0.15, 0.35),
                    -sign * u(0.1, 0.2), -sign * u(0.45, 0.7),
                ]),
                "sig": np.array([u(0.011, 0.014), u(0.016, 0.02), u(0.014, 0.017),
                                 u(0.014, 0.017), u(0.05, 0.07), u(0.06, 0.08)]),
                "sign": sign,
            }
            comps["off"] -= _qrs_extremum(comps["off"][:4], comps["amp"][:4], comps["sig"][:4], sign)
            self.foci.append(comps)
        self.focus_p = np.array([1.0] if n_foci == 1 else [0.75, 0.25])

        # --- aberrated premature atrial beat (RBBB-like rsR') -----------------
        r_a = self.R * u(0.8, 0.95)
        self.aber = {
            # P' (inverted ectopic), r, S, R', ST/T (inverted)
            "off": np.array([-u(0.12, 0.15), 0.0, u(0.038, 0.046), u(0.078, 0.09), 0.0]),
            "amp": np.array([-u(0.08, 0.15), r_a, -u(0.35, 0.5), r_a * u(0.5, 0.65), -u(0.12, 0.22)]),
            "sig": np.array([u(0.02, 0.026), u(0.011, 0.013), u(0.011, 0.014), u(0.014, 0.018),
                             u(0.05, 0.065)]),
        }
        a = self.aber
        a["off"][1:4] -= _qrs_extremum(a["off"][1:4], a["amp"][1:4], a["sig"][1:4], 1.0)
        self.aber_t_off = u(0.26, 0.3)

    def scale_sinus(self, qrs: float, t_wave: float) -> None:
        """Stress settings: scale the QRS and T amplitudes of sinus-conducted beats."""
        self.Q, self.R, self.S = self.Q * qrs, self.R * qrs, self.S * qrs
        self.T *= t_wave


def _beat_components(
    morph: _Morphology,
    rhythm: _Rhythm,
    rng: np.random.Generator,
    t_r: np.ndarray,
    rr_prev: np.ndarray,
    kind: np.ndarray,
    fs: float,
    rng_extra: np.random.Generator,
):
    """Flat arrays (centre time s, amplitude mV, width s) of every Gaussian wave.
    ``rng_extra`` draws what the newer beat kinds (S, paced) need, so that the other
    streams stay as they were."""
    mu, amp, sig = [], [], []

    def add(centre, a, s):
        mu.append(np.asarray(centre, dtype=np.float64))
        amp.append(np.asarray(a, dtype=np.float64))
        sig.append(np.broadcast_to(np.asarray(s, dtype=np.float64), np.shape(centre)))

    resp = 1.0 + morph.resp_mod * np.sin(rhythm.resp_phase(t_r))

    # normal sinus beats ("N"; the kind of a beat later hidden by a noise burst
    # stays what it was underneath) and normally conducted premature atrial beats
    # ("S"), whose only difference is the ectopic P wave
    sel = (kind == 0) | (kind == 3)
    if sel.any():
        t, rr, rs = t_r[sel], np.clip(rr_prev[sel], 0.3, 2.0), resp[sel]
        n = t.size

        def jit(scale=0.03):
            return 1.0 + scale * rng.standard_normal(n)

        sq = np.sqrt(rr)
        t0 = t - morph.n_shift
        p_amp = np.full(n, morph.P)
        p_early = np.zeros(n)
        ectopic = kind[sel] == 3
        if ectopic.any():  # a low-atrial focus: inverted or flattened P', a little earlier
            p_amp[ectopic] *= rng_extra.choice([-0.7, 0.4]) * rng_extra.uniform(0.8, 1.2, int(ectopic.sum()))
            p_early[ectopic] = rng_extra.uniform(0.0, 0.02, int(ectopic.sum()))
        add(t0 - morph.p_off * rr ** 0.3 - p_early + 0.003 * rng.standard_normal(n), p_amp * jit(0.05), morph.p_sig)
        add(t0 + morph.q_off, morph.Q * rs * jit(), morph.q_sig)
        add(t0, morph.R * rs * jit(0.02), morph.r_sig)
        add(t0 + morph.s_off, morph.S * rs * jit(), morph.s_sig)
        t_amp = morph.T * jit(0.04) * (
            1.0 + morph.t_drift * np.sin(2 * np.pi * t / morph.t_drift_T + morph.t_drift_p)
        )
        t_pk = t0 + morph.t_off * sq + 0.004 * rng.standard_normal(n)
        # asymmetric T wave: slow ascending limb, faster descent
        add(t_pk - 0.045 * sq, 0.45 * t_amp, 0.055 * sq)
        add(t_pk, 0.75 * t_amp, 0.036 * sq)

    # premature ventricular contractions
    sel = kind == 1
    if sel.any():
        t = t_r[sel]
        focus = rng.choice(len(morph.foci), size=t.size, p=morph.focus_p)
        for k, comps in enumerate(morph.foci):
            tf = t[focus == k]
            if tf.size == 0:
                continue
            for off, a, s in zip(comps["off"], comps["amp"], comps["sig"]):
                add(tf + off, a * (1.0 + 0.03 * rng.standard_normal(tf.size)), s)

    # aberrated premature atrial beats
    sel = kind == 2
    if sel.any():
        t, rr, rs = t_r[sel], np.clip(rr_prev[sel], 0.3, 2.0), resp[sel]
        a = morph.aber
        for j in range(4):
            scale = rs if j in (1, 2, 3) else 1.0
            add(t + a["off"][j], a["amp"][j] * scale * (1.0 + 0.03 * rng.standard_normal(t.size)),
                a["sig"][j])
        add(t + morph.aber_t_off * np.sqrt(rr), a["amp"][4] * (1.0 + 0.05 * rng.standard_normal(t.size)),
            a["sig"][4])

    # ventricular paced beats: spike, then a wide QRS shaped like the first ectopic focus
    sel = kind == 4
    if sel.any():
        t = t_r[sel]
        comps = morph.foci[0]
        lead = rng_extra.uniform(0.02, 0.045)  # spike to main deflection
        spike_amp = rng_extra.choice([-1.0, 1.0]) * rng_extra.uniform(2.0, 4.0)
        spike_sig = max(0.0015, 0.6 / fs)  # one or two samples once recorded
        add(t - lead, spike_amp * (1.0 + 0.05 * rng_extra.standard_normal(t.size)), spike_sig)
        add(t - lead + 3 * spike_sig, -0.2 * spike_amp * np.ones(t.size), 3 * spike_sig)  # recharge overshoot
        for off, a, s in zip(comps["off"], comps["amp"], comps["sig"]):
            add(t + off, 0.8 * a * (1.0 + 0.03 * rng_extra.standard_normal(t.size)), s)

    return np.concatenate(mu), np.concatenate(amp), np.concatenate(sig)


def _add_baseline_jumps(signal: np.ndarray, rng: np.random.Generator, cfg: SynthConfig) -> None:
    """Electrode motion through an AC-coupled amplifier: a step of 0.5-2 mV at a random
    sample that decays back exponentially (time constant 0.5-3 s)."""
    fs, n = float(cfg.fs), signal.shape[0]
    count = int(rng.poisson(cfg.baseline_jumps_per_hour * cfg.duration_s / 3600.0))
    for _ in range(count):  # a few per hour: a loop over jumps, not samples
        start = int(rng.integers(0, n))
        height = rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 2.0)
        tau = rng.uniform(0.5, 3.0) * fs
        length = min(n - start, int(6 * tau))
        signal[start:start + length] += (height * np.exp(-np.arange(length) / tau)).astype(np.float32)


def _render_gaussians(out: np.ndarray, mu: np.ndarray, amp: np.ndarray, sig: np.ndarray) -> None:
    """Add ``amp * exp(-(n - mu)^2 / (2 sig^2))`` to ``out`` (all in samples).

    Each wave is evaluated (float32) only on a window of +-4.5 sigma around its
    centre.  The waves are sorted by centre and handled in chunks of
    ``_SAMPLE_CHUNK`` output samples; inside a chunk they are grouped by window
    width (a few distinct widths), evaluated as 2-D grids, and accumulated with a
    single ``np.bincount`` over the chunk's span, so the cost is about one pass
    over the output plus one evaluation per grid cell.
    """
    n_out = out.shape[0]
    if mu.size == 0:
        return
    order = np.argsort(mu, kind="stable")
    mu, amp, sig = mu[order], amp[order], sig[order]
    half = np.ceil(4.5 * sig).astype(np.int64)
    half = ((half + 3) // 4) * 4  # few distinct widths -> few groups
    margin = int(half.max()) + 2
    inv_sig = (1.0 / sig).astype(np.float32)
    amp32 = amp.astype(np.float32)
    centre_all = np.rint(mu).astype(np.int64)
    frac_all = (mu - centre_all).astype(np.float32)
    bounds = np.searchsorted(centre_all, np.arange(0, n_out + _SAMPLE_CHUNK, _SAMPLE_CHUNK))
    bounds[0] = 0  # waves centred before sample 0 go with the first chunk
    bounds[-1] = mu.size  # ... and those after the end with the last one
    for k, lo in enumerate(range(0, n_out, _SAMPLE_CHUNK)):
        i0, i1 = int(bounds[k]), int(bounds[k + 1])
        if i1 <= i0:
            continue
        c_lo = min(lo, int(centre_all[i0]))
        c_hi = max(min(n_out, lo + _SAMPLE_CHUNK), int(centre_all[i1 - 1]) + 1)
        base = c_lo - margin
        idx_parts, val_parts = [], []
        h = half[i0:i1]
        for w in np.unique(h):
            sel = np.flatnonzero(h == w) + i0
            offsets = np.arange(-w, w + 1, dtype=np.int64)
            d = offsets.astype(np.float32)[None, :] - frac_all[sel][:, None]
            d *= inv_sig[sel][:, None]
            d *= d
            d *= np.float32(-0.5)
            np.exp(d, out=d)
            d *= amp32[sel][:, None]
            idx_parts.append(((centre_all[sel] - base)[:, None] + offsets[None, :]).ravel())
            val_parts.append(d.ravel())
        idx = np.concatenate(idx_parts)
        val = np.concatenate(val_parts)
        acc = np.bincount(idx, weights=val, minlength=c_hi - c_lo + 2 * margin)
        a0, a1 = max(base, 0), min(c_hi + margin, n_out)
        if a1 > a0:
            out[a0:a1] += acc[a0 - base : a1 - base].astype(np.float32)


# --------------------------------------------------------------------------- #
# Noise bursts
# --------------------------------------------------------------------------- #
def _noise_bursts(rng: np.random.Generator, cfg: SynthConfig, r_amp: float):
    """Burst spans (inclusive sample ranges) and their waveforms."""
    fs, n = float(cfg.fs), cfg.n_samples
    count = int(rng.poisson(cfg.noise_bursts_per_hour * cfg.duration_s / 3600.0))
    spans, waves = [], []
    for _ in range(count):  # a handful per hour
        dur = rng.uniform(0.5, 3.0)
        length = min(n, int(round(dur * fs)))
        start = int(rng.integers(0, n - length + 1))
        # muscle (EMG-like) noise: white noise with its low frequencies removed
        emg = rng.standard_normal(length + 1)
        emg = np.diff(emg) / np.sqrt(2.0)
        # motion artefact: smoothed random walk-ish swings of a few Hz
        k = max(3, int(0.06 * fs))
        motion = np.convolve(rng.standard_normal(length + k), np.hanning(k), mode="valid")[:length]
        motion /= motion.std() + 1e-12
        level = r_amp * rng.uniform(0.6, 1.0)
        wave = level * (rng.uniform(0.35, 0.55) * emg + rng.uniform(0.25, 0.5) * motion)
        taper = max(1, min(length // 2, int(0.1 * fs)))
        env = np.ones(length)
        ramp = 0.5 - 0.5 * np.cos(np.pi * (np.arange(taper) + 0.5) / taper)
        env[:taper] = ramp
        env[length - taper :] = ramp[::-1]
        spans.append((start, start + length - 1))
        waves.append((wave * env).astype(np.float32))
    order = np.argsort([s for s, _ in spans], kind="stable")
    spans_arr = np.asarray([spans[i] for i in order], dtype=np.int64).reshape(-1, 2)
    return spans_arr, [waves[i] for i in order]


# --------------------------------------------------------------------------- #
# Main entry point
# --------------------------------------------------------------------------- #
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


# --------------------------------------------------------------------------- #
# Stress cases
# --------------------------------------------------------------------------- #
#: Named recordings that make beat detection or outlier scoring hard, each as the
#: settings that differ from :class:`SynthConfig`'s defaults.
STRESS_CASES: dict = {
    "default": {},
    "tall_t_slow": {"heart_rate": 45.0, "t_wave_scale": 3.5, "qrs_scale": 0.5},
    "bradycardia": {"heart_rate": 36.0, "t_wave_scale": 1.8},
    "tachycardia": {"heart_rate": 150.0},
    "inverted": {"invert": True},
    "paced": {"paced": True, "heart_rate": 70.0},
    "noise_bursts": {"noise_bursts_per_hour": 60.0},
    "baseline_jumps": {"baseline_jumps_per_hour": 240.0},
    "premature_atrial": {"premature_atrial_fraction": 0.06, "pvc_fraction": 0.0, "aberrant_fraction": 0.0},
}


def stress_config(name: str, *, n_samples: int = 450_000, fs: float = 360.0, seed: int = 0) -> SynthConfig:
    """The :class:`SynthConfig` of stress case ``name`` (see :data:`STRESS_CASES`).

    Defaults: 20.8 minutes at 360 Hz, MIT-BIH's rate, so that the stress set is
    read like the real records.
    """
    if name not in STRESS_CASES:
        raise ValueError(f"unknown stress case {name!r}; known: {', '.join(STRESS_CASES)}")
    return SynthConfig(n_samples=n_samples, fs=fs, seed=seed, **STRESS_CASES[name])


def write_wfdb(ecg: SyntheticECG, record: PathLike, lead: str = "MLII") -> Path:
    """Write the recording as a WFDB record (``.hea`` + ``.dat``, 16-bit, 200 adu/mV like
    MIT-BIH) with its beats as ``.atr``, so that ``python -m pipeline evaluate`` and any
    WFDB tool read it like a PhysioNet record. Returns the ``.hea`` path."""
    import wfdb

    record = Path(record)
    record.parent.mkdir(parents=True, exist_ok=True)
    signal = np.asarray(ecg.signal, dtype=np.float64)[:, None]
    wfdb.wrsamp(record.name, fs=float(ecg.fs), units=["mV"], sig_name=[lead], p_signal=signal, fmt=["16"],
                adc_gain=[200.0], baseline=[0], write_dir=str(record.parent))
    wfdb.wrann(record.name, "atr", np.asarray(ecg.r_peaks, dtype=np.int64), np.asarray(ecg.symbols).tolist(),
               write_dir=str(record.parent))
    return record.with_suffix(".hea")


# --------------------------------------------------------------------------- #
# CSV output
# --------------------------------------------------------------------------- #
def annotations_path(csv_path: PathLike) -> Path:
    """Path of the annotation sidecar of a recording CSV.

    Parameters
    ----------
    csv_path : str or os.PathLike
        The recording, e.g. ``"data/rec.csv"``.

    Returns
    -------
    pathlib.Path
        ``"<dir>/<stem>.annotations.csv"``, e.g. ``"data/rec.annotations.csv"``.
    """
    p = Path(csv_path)
    return p.with_name(p.stem + _ANNOTATION_SUFFIX)


def _format_fixed4(x: np.ndarray) -> bytes:
    """``"%.4f\\n"`` of every value, vectorised (digits built as a byte matrix)."""
    v = np.rint(np.asarray(x, dtype=np.float64) * 10_000.0).astype(np.int64)
    n = v.size
    if n == 0:
        return b""
    neg = v < 0
    a = np.abs(v)
    ip = a // 10_000
    fp = a - ip * 10_000
    max_ip = int(ip.max())
    nd_max = len(str(max_ip))
    width = 1 + nd_max + 1 + 4 + 1  # sign, integer digits, '.', 4 decimals, '\n'
    mat = np.empty((n, width), dtype=np.uint8)
    mat[:, 0] = ord(" ")
    nd = np.ones(n, dtype=np.int64)
    tmp = ip.copy()
    for j in range(nd_max):
        col = nd_max - j  # integer digits right-aligned in columns 1..nd_max
        mat[:, col] = 48 + (tmp % 10)
        tmp //= 10
        if j:
            nd += ip >= 10**j
    mat[:, nd_max + 1] = ord(".")
    tmp = fp.copy()
    for j in range(4):
        mat[:, nd_max + 5 - j] = 48 + (tmp % 10)
        tmp //= 10
    mat[:, -1] = ord("\n")
    first = nd_max + 1 - nd  # first column of the number's integer part
    rows = np.flatnonzero(neg)
    first_sign = first - neg  # include the sign column for negative values
    mat[rows, first_sign[rows]] = ord("-")
    keep = np.arange(width)[None, :] >= first_sign[:, None]
    return mat[keep].tobytes()


def _open_temp_beside(path: Path):
    """Create a new hidden temporary file in ``path``'s folder; return (fd, temp path)."""
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"folder for {path} does not exist: {folder}")
    for _ in range(100):
        tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        return fd, tmp
    raise FileExistsError(f"could not create a temporary file beside {path}")


def _write_temp(path: Path, chunks) -> Path:
    """Write ``chunks`` (bytes) to a new temporary file beside ``path``; return its path."""
    fd, tmp = _open_temp_beside(path)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as fh:
            for chunk in chunks:
                fh.write(chunk)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_csv(ecg: SyntheticECG, path: PathLike) -> Path:
    """Write the recording as a one-column CSV plus an annotation sidecar.

    The recording file has ONE value per line, no header, printed with 4
    decimals (``"%.4f"``) — the format ``pipeline run`` reads.  The sidecar
    ``<stem>.annotations.csv`` beside it has the header ``sample,symbol`` and one
    row per beat.  Both files are written atomically: each to a temporary file
    in the same folder, then moved into place with ``os.replace`` once both are
    complete (sidecar first, so a recording never appears without its
    annotations; a failure leaves any previous pair untouched).

    Parameters
    ----------
    ecg : SyntheticECG
        The recording.
    path : str or os.PathLike
        Destination of the recording CSV; its folder must exist.  An existing
        file is replaced.

    Returns
    -------
    pathlib.Path
        The path of the recording CSV.

    Raises
    ------
    TypeError
        If ``ecg`` is not a :class:`SyntheticECG`.
    ValueError
        If the signal is not 1-D, contains NaN/inf or values of 1e12 or more, or
        ``path`` names the sidecar itself.
    FileNotFoundError
        If the destination folder does not exist.
    """
    if not isinstance(ecg, SyntheticECG):
        raise TypeError(f"ecg must be a SyntheticECG; got {type(ecg).__name__}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path must be a file path, not a folder; got {str(path)!r}")
    side = annotations_path(path)
    if side == path:
        raise ValueError(f"path must not end in {_ANNOTATION_SUFFIX!r}; got {str(path)!r}")
    signal = np.asarray(ecg.signal)
    if signal.ndim != 1:
        raise ValueError(f"ecg.signal must be one-dimensional; got shape {signal.shape}")
    if not np.isfinite(signal).all():
        bad = int(np.count_nonzero(~np.isfinite(signal)))
        raise ValueError(f"ecg.signal must be finite to be written; got {bad} NaN/inf values")

    if signal.size and float(np.abs(signal).max()) >= 1e12:
        raise ValueError(
            "ecg.signal values must be below 1e12 in magnitude to be printed with 4 decimals; "
            f"got {float(np.abs(signal).max()):g}"
        )

    samples = np.asarray(ecg.r_peaks, dtype=np.int64)
    symbols = np.asarray(ecg.symbols).astype(str)
    lines = "".join(f"{s},{c}\n" for s, c in zip(samples.tolist(), symbols.tolist()))

    def chunks():
        for lo in range(0, signal.size, _CSV_CHUNK):
            yield _format_fixed4(signal[lo : lo + _CSV_CHUNK])

    # Both files go to temporaries first; only when both are complete are they
    # moved into place (sidecar first), so a failure leaves the old pair intact.
    tmp_csv = _write_temp(path, chunks())
    tmp_side = None
    try:
        tmp_side = _write_temp(side, [b"sample,symbol\n", lines.encode("utf-8")])
        os.replace(tmp_side, side)
        tmp_side = None
        os.replace(tmp_csv, path)
    except BaseException:
        for tmp in (tmp_side, tmp_csv):
            if tmp is not None:
                _unlink_quietly(tmp)
        raise
    return path


def read_annotations(path: PathLike) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """Read the ``sample,symbol`` annotation sidecar of a recording.

    Parameters
    ----------
    path : str or os.PathLike
        Either the recording CSV (its sidecar ``<stem>.annotations.csv`` is read)
        or the sidecar itself (a name ending in ``.annotations.csv``).

    Returns
    -------
    (samples, symbols) or None
        ``samples`` int64 and ``symbols`` str arrays, one entry per beat, or
        ``None`` when the sidecar does not exist.

    Raises
    ------
    ValueError
        If the sidecar lacks the ``sample`` and ``symbol`` columns or cannot be
        parsed.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    p = Path(path)
    side = p if p.name.endswith(_ANNOTATION_SUFFIX) else annotations_path(p)
    if not side.is_file():
        return None
    try:
        table = pacsv.read_csv(
            side,
            convert_options=pacsv.ConvertOptions(
                column_types={"sample": pa.int64(), "symbol": pa.string()}
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"annotation file {side} could not be parsed: {exc}") from exc
    missing = {"sample", "symbol"} - set(table.column_names)
    if missing:
        raise ValueError(
            f"annotation file {side} must have columns 'sample,symbol'; got {table.column_names}"
        )
    samples = table.column("sample").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    symbols = np.asarray(table.column("symbol").to_pylist(), dtype=str)
    if symbols.size == 0:
        symbols = symbols.astype("<U1")
    return samples, symbols
