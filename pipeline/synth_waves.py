"""The waves of a synthetic recording: each beat as a sum of Gaussian waves, rendered into
samples, and the artefacts laid over them (baseline jumps, noise bursts).

A recording's wave parameters (:class:`_Morphology`: amplitudes in mV, times in s) are drawn
once; :func:`_beat_components` gives every wave of every beat by kind (sinus, premature
ventricular from one or two foci, aberrated or normally conducted premature atrial, paced), and
:func:`_render_gaussians` adds them to the signal in chunks. The names are private to the
synthesiser (:mod:`pipeline.synth`) and to the stress cases built from its parts
(:mod:`pipeline.stress`).

See Also
--------
pipeline.synth_rhythm : when the beats fall.
pipeline.synth.synthesize : puts rhythm, waves, wander and noise together.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.synth_config import SynthConfig
    from pipeline.synth_rhythm import _Rhythm

_SAMPLE_CHUNK = 2_000_000  # samples per chunk for the additive signal parts


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

