"""When the beats of a synthetic recording fall: sinus rhythm with heart-rate variability,
premature beats with their coupling and pauses, or a fixed-rate pacemaker.

The sinus RR interval follows a slow drift over hours, LF (~0.1 Hz) and HF (respiratory,
~0.25 Hz) oscillations and a little jitter; premature beats shorten the interval before them and
lengthen the one after them as each kind does (see :mod:`pipeline.synth`). Times are seconds;
kinds are 0 N, 1 V, 2 A, 3 S, 4 paced.

See Also
--------
pipeline.synth.synthesize : places the beats' waves at these times.
pipeline.synth_waves : the waves of each kind of beat.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.synth_config import SynthConfig


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

