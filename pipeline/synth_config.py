"""The settings of a synthetic recording, the recording it gives, and the named stress cases.

:class:`SynthConfig` checks every setting where it is made (a ValueError names the field, the
rule and the value); :class:`SyntheticECG` is the signal with its ground truth (fiducials,
MIT-BIH symbols, noise bursts); :data:`STRESS_CASES` names settings that make detection or
scoring hard.

See Also
--------
pipeline.synth.synthesize : makes a :class:`SyntheticECG` from a :class:`SynthConfig`.
pipeline.synth_files.write_csv : writes it where the pipeline reads it.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Tuple

import numpy as np

#: Beat labels the generator produces (MIT-BIH style).
SYMBOLS: Tuple[str, ...] = ("N", "V", "A", "S", "/", "Q")


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
