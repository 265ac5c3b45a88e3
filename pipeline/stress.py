"""Synthetic stress cases for beat detection, episodes and beat quality: short recordings with a
known answer (every true beat and every true episode).

Beats come from :mod:`pipeline.synth`'s generators (its wave model, rhythm and noise bursts),
drawn and assembled by :mod:`pipeline.stress_assembly`; this module only arranges them the way
hard recordings do:

=====================  ======================================================================
``pauses``             sinus rhythm with pauses of 2, 3, 4.5 s and a 6-s sinus arrest
``flutter``            sinus rhythm, 10 s of ventricular flutter at ~270 /min, sinus again
``pvcs_into_flutter``  the same, six PVCs at 150 /min leading into the flutter
``noise_bursts``       muscle noise and motion bursts (synth's), beats inside labelled ``Q``
``electrode_motion``   large slow electrode-motion swings and an electrode pop (a baseline step)
``mains_hum``          the noise bursts with 50-Hz hum for 45 s, 0.15 × the QRS amplitude, wavering
``mains_hum_60hz_128hz`` the same with 60-Hz hum at 128 Hz, next to the highest frequency the rate shows
``tall_t_slow``        45 bpm, T waves taller than the small QRS complexes (synth's stress case)
``bigeminy``           every other beat a large PVC, the normal beats small
``ventricular_tachycardia`` 10 s of PVCs at 190 /min: fast, regular, no baseline, yet beats
``supraventricular_tachycardia`` narrow complexes at 170 and 215 /min, P waves on T waves; also at 128 Hz
``av_block``           Mobitz II, 2:1 and 3:1 AV block: P waves alone where beats would be; also at 128 Hz
``amplifier_recovery`` an amplifier driven to its rail, then tiny beats on the recovering baseline
``lead_lost``          lead II on its rail for 6 s and flat for 4 s while the second lead shows every beat
``tremor_one_lead``    20 s of 4.7-Hz tremor on lead II alone, as regular as flutter; the second lead clean
``atrial_flutter``     a 300 /min sawtooth of flutter waves conducted 2:1, 3:1 or 4:1; also at 128 Hz
``atrial_fibrillation`` no P waves, irregularly irregular RR, fibrillatory waves, a few PVCs
``*_128hz``, ``*_1khz`` the flutter, noise-burst and fibrillation cases at 128 Hz and 1 kHz
=====================  ======================================================================

Every case carries a second lead, so that :func:`write_case` writes two-channel CSV and WFDB
files whose channels are named ``ECG1`` and ``ECG2``, the real lead II being ``ECG1``: a loader
that takes the name ``ECG2`` for "ECG lead II" picks the wrong one, which has smaller, inverted
QRS complexes and more noise.

Example
-------
>>> from pipeline.stress import make_case, write_case
>>> case = make_case("flutter")
>>> case.episodes
(('flutter', 12.0, 22.0),)
>>> write_case(case, "/tmp/flutter.csv")      # + /tmp/flutter.annotations.csv
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np

from pipeline import synth
from pipeline.stress_assembly import (StressCase, assemble, background, from_synth, qrs_amplitude, render_beats,
                                      second_lead, sinus, streams)

__all__ = ["StressCase", "CASES", "make_case", "write_case", "pauses", "flutter", "noise_bursts",
           "electrode_motion", "mains_hum", "tall_t_slow", "bigeminy", "ventricular_tachycardia",
           "supraventricular_tachycardia", "av_block", "atrial_flutter",
           "amplifier_recovery", "lead_lost", "tremor_one_lead", "atrial_fibrillation"]

_LEADS = ("ECG1", "ECG2")


# --------------------------------------------------------------------------- cases
def pauses(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0,
           pauses_s: tuple = (2.0, 3.0, 4.5, 6.0)) -> StressCase:
    """Sinus rhythm at 70 bpm with, at evenly spread times, an interval of each of ``pauses_s``
    before the next beat (sinus pauses; the last, 6 s, a sinus arrest). No episode: a pause is no noise, and its
    baseline, though quiet, is not flat."""
    rng_times, rng_noise, rng_lead = streams(seed + 1, 3)
    t = sinus(duration_s + sum(pauses_s), rng_times)
    rr = np.diff(t)
    targets = np.linspace(0.0, duration_s, len(pauses_s) + 2)[1:-1]
    done, now = 0, t[0]
    for k in range(rr.size):  # ~70 beats a minute: a loop over beats, not samples
        if done < len(pauses_s) and now >= targets[done]:
            rr[k] = pauses_s[done]
            done += 1
        now += rr[k]
    t = t[0] + np.concatenate([[0.0], np.cumsum(rr)])
    n = int(round(duration_s * fs))
    t = t[t < duration_s - 0.5]
    beats_signal, beats, _ = render_beats(fs, n, t, np.zeros(t.size), seed)
    signal = beats_signal + background(n, fs, rng_noise)
    return assemble("pauses", fs, signal, beats, np.full(beats.size, "N"), (), rng_lead)


def flutter(fs: float = 360.0, seed: int = 0, *, duration_s: float = 40.0, start_s: float = 12.0,
            length_s: float = 10.0, rate_hz: float = 4.5, lead_in_beats: int = 0) -> StressCase:
    """Sinus rhythm, then ``length_s`` of ventricular flutter at ``rate_hz`` (~270 /min), then a
    1-s pause and sinus rhythm again. The flutter waves are broad Gaussian waves of alternating
    sign, half a cycle apart, drawn by synth's renderer: a sine-like oscillation whose amplitude
    (about the R wave's) and rate drift a little. ``lead_in_beats`` PVCs at 150 /min may lead
    into the flutter (as ventricular beats often do): they are beats (``V``), outside the episode.
    True episode: ``('flutter', start, end)``."""
    rng_times, rng_wave, rng_noise, rng_lead = streams(seed + 2, 4)
    t = sinus(duration_s, rng_times)
    end_s = start_s + length_s
    run = start_s - 0.4 * np.arange(lead_in_beats, 0, -1)
    t = t[(t < start_s - 0.3 - 0.4 * lead_in_beats - (0.3 if lead_in_beats else 0.0)) | (t > end_s + 1.0)]
    kinds = np.concatenate([np.zeros(t.size), np.ones(run.size)]).astype(np.int8)
    t = np.concatenate([t, run])
    order = np.argsort(t, kind="stable")
    t, kinds = t[order], kinds[order]
    kinds, t = kinds[t < duration_s - 0.5], t[t < duration_s - 0.5]
    n = int(round(duration_s * fs))
    signal, beats, r_amp = render_beats(fs, n, t, kinds, seed)
    # half-cycles of a slowly wandering rate
    half = []
    now = start_s
    while now < end_s:
        rate = rate_hz * (1.0 + 0.06 * np.sin(2 * np.pi * 0.15 * (now - start_s))) * rng_wave.uniform(0.97, 1.03)
        half.append(now)
        now += 0.5 / rate
    centres = np.asarray(half)
    sign = np.where(np.arange(centres.size) % 2 == 0, 1.0, -1.0)
    envelope = np.clip(np.minimum(centres - start_s, end_s - centres) / 0.5, 0.2, 1.0)
    amplitude = r_amp * 0.8 * envelope * (1.0 + 0.2 * np.sin(2 * np.pi * 0.3 * centres)) * rng_wave.uniform(0.9, 1.1, centres.size)
    width = np.full(centres.size, 0.5 / rate_hz / 2.2)
    synth._render_gaussians(signal, centres * fs, sign * amplitude, width * fs)
    signal += background(n, fs, rng_noise)
    symbols = np.where(kinds[: beats.size] == 1, "V", "N")
    return assemble("flutter", fs, signal, beats, symbols, (("flutter", start_s, end_s),), rng_lead)


def noise_bursts(fs: float = 360.0, seed: int = 0, *, duration_s: float = 90.0,
                 bursts_per_hour: float = 240.0) -> StressCase:
    """synth's recording with frequent noise bursts (muscle noise plus motion, 0.5–3 s, as large as
    the R wave); beats inside them are labelled ``Q``. True episodes: the bursts."""
    ecg = synth.synthesize(synth.SynthConfig(n_samples=int(round(duration_s * fs)), fs=fs, seed=seed,
                                             noise_bursts_per_hour=bursts_per_hour))
    episodes = tuple(("noise", a / fs, (b + 1) / fs) for a, b in ecg.noise_bursts)
    return from_synth("noise_bursts", ecg, episodes, streams(seed + 3, 1)[0])


def mains_hum(fs: float = 360.0, seed: int = 0, *, duration_s: float = 90.0, hum_hz: float = 50.0,
              hum_share: float = 0.15, on_s: tuple = (25.0, 70.0)) -> StressCase:
    """The ``noise_bursts`` recording with mains hum on both leads from ``on_s[0]`` to ``on_s[1]``
    (rising and falling over a second, as when the patient comes near mains-powered equipment and
    leaves): ``hum_hz``, its amplitude ``hum_share`` × the QRS amplitude and wavering by a third
    over half a minute, with a weak third harmonic. The Ricker response does not pass hum, so every
    beat stays readable; the noise tests read high frequencies, where hum lies. True episodes: the
    bursts, as in ``noise_bursts``."""
    case = noise_bursts(fs, seed, duration_s=duration_s)
    rng = streams(seed + 12, 1)[0]
    t = np.arange(case.signal.shape[0]) / fs
    present = np.clip(np.minimum(t - on_s[0], on_s[1] - t), 0.0, 1.0)
    size = hum_share * qrs_amplitude(case.signal, case.beats, fs) * present * (
        1.0 + np.sin(2 * np.pi * t / 30.0 + rng.uniform(0, 6.3)) / 3.0)
    phase = 2 * np.pi * hum_hz * t + rng.uniform(0, 6.3)
    hum = (size * (np.sin(phase) + 0.1 * np.sin(3 * phase))).astype(np.float32)
    return dataclasses.replace(case, name="mains_hum", signal=case.signal + hum, second=case.second + 0.8 * hum)


def electrode_motion(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0,
                     motion_s: tuple = ((15.0, 18.0), (38.0, 42.0)), pop_s: float = 28.0) -> StressCase:
    """synth's recording with two stretches of electrode motion (slow swings of 1–5 Hz, peak to
    peak ~8 × the QRS amplitude, tapered in and out over 0.2 s) and an electrode pop at ``pop_s``:
    a baseline step of 4 × the QRS amplitude that decays over 2 s. Beats inside the swings are
    labelled ``Q``. True episodes: the swings, and ±0.5 s around the pop."""
    rng_motion, rng_lead = streams(seed + 4, 2)
    ecg = synth.synthesize(synth.SynthConfig(n_samples=int(round(duration_s * fs)), fs=fs, seed=seed,
                                             noise_bursts_per_hour=0.0))
    signal = ecg.signal.copy()
    n = signal.shape[0]
    qrs = qrs_amplitude(signal, ecg.r_peaks, fs)
    symbols = ecg.symbols.copy()
    for a, b in motion_s:
        i0, i1 = int(a * fs), int(b * fs)
        k = max(3, int(0.1 * fs))  # smoothing to ~1-5 Hz swings
        walk = np.convolve(rng_motion.standard_normal(i1 - i0 + k), np.hanning(k), mode="valid")[: i1 - i0]
        walk = np.cumsum(walk - walk.mean())
        walk -= np.linspace(walk[0], walk[-1], walk.size)  # ends at zero, so the baseline comes back
        walk *= 8.0 * qrs / max(np.ptp(walk), 1e-12)
        taper = np.clip(np.minimum(np.arange(walk.size), walk.size - 1 - np.arange(walk.size)) / (0.2 * fs), 0, 1)
        signal[i0:i1] += (walk * taper).astype(np.float32)
        symbols[(ecg.r_peaks >= i0) & (ecg.r_peaks < i1)] = "Q"
    p = int(pop_s * fs)
    signal[p:] += (4.0 * qrs * np.exp(-np.arange(n - p) / (2.0 * fs))).astype(np.float32)
    episodes = tuple(("noise", a, b) for a, b in motion_s) + (("noise", pop_s - 0.5, pop_s + 0.5),)
    return assemble("electrode_motion", fs, signal, ecg.r_peaks, symbols, sorted(episodes, key=lambda e: e[1]), rng_lead)


def tall_t_slow(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0) -> StressCase:
    """synth's ``tall_t_slow`` stress case (45 bpm, T waves 3.5 × taller, QRS halved) without
    noise bursts: every beat is clean and no stretch is an episode."""
    config = synth.stress_config("tall_t_slow", n_samples=int(round(duration_s * fs)), fs=fs, seed=seed)
    ecg = synth.synthesize(dataclasses.replace(config, noise_bursts_per_hour=0.0))
    return from_synth("tall_t_slow", ecg, (), streams(seed + 5, 1)[0])


def bigeminy(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0, qrs_scale: float = 0.35,
             coupling: float = 0.65) -> StressCase:
    """Ventricular bigeminy: every other beat a PVC (synth's ectopic focus, 1.3–1.8 mV), early
    (``coupling`` × the sinus interval) with a full compensatory pause; the sinus beats between
    them small (``qrs_scale``). No episode; every beat clean."""
    rng_times, rng_noise, rng_lead = streams(seed + 6, 3)
    t = sinus(duration_s, rng_times, heart_rate=75.0)
    rr = np.diff(t)
    kinds = (np.arange(t.size) % 2 == 1).astype(np.int8)
    v = np.flatnonzero(kinds[:-1] == 1)
    v = v[v < rr.size]
    two = rr[v - 1] + rr[v]
    rr[v - 1] = coupling * rr[v - 1]
    rr[v] = two - rr[v - 1]
    t = t[0] + np.concatenate([[0.0], np.cumsum(rr)])
    keep = t < duration_s - 0.5
    n = int(round(duration_s * fs))
    signal, beats, _ = render_beats(fs, n, t[keep], kinds[keep], seed, heart_rate=75.0, qrs_scale=qrs_scale)
    signal += background(n, fs, rng_noise)
    symbols = np.where(kinds[keep][: beats.size] == 1, "V", "N")
    return assemble("bigeminy", fs, signal, beats, symbols, (), rng_lead)


def ventricular_tachycardia(fs: float = 360.0, seed: int = 0, *, duration_s: float = 40.0, start_s: float = 12.0,
                            length_s: float = 10.0, rate_bpm: float = 190.0) -> StressCase:
    """Sinus rhythm, then a run of ``length_s`` of monomorphic ventricular tachycardia (synth's
    ectopic beats, one after the other at ``rate_bpm``), then sinus rhythm. As fast and regular
    as flutter and with as little baseline, but made of QRS complexes: every one is a beat (``V``),
    and the run is no flutter episode."""
    rng_times, rng_noise, rng_lead = streams(seed + 7, 3)
    t = sinus(duration_s, rng_times)
    end_s = start_s + length_s
    run = start_s + np.cumsum(60.0 / rate_bpm * rng_times.uniform(0.98, 1.02, int(length_s * rate_bpm / 60.0)))
    run = run[run < end_s]
    t = np.concatenate([t[t < start_s - 0.3], run, t[t > end_s + 0.8]])
    t = t[t < duration_s - 0.5]
    kinds = ((t >= start_s) & (t <= end_s)).astype(np.int8)
    n = int(round(duration_s * fs))
    signal, beats, _ = render_beats(fs, n, t, kinds, seed)
    signal += background(n, fs, rng_noise)
    return assemble("ventricular_tachycardia", fs, signal, beats, np.where(kinds == 1, "V", "N"), (), rng_lead)


def supraventricular_tachycardia(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0,
                                 runs: tuple = ((12.0, 12.0, 170.0), (36.0, 10.0, 215.0))) -> StressCase:
    """Sinus rhythm at 75 bpm with runs of paroxysmal supraventricular tachycardia, each (start s,
    length s, rate /min): narrow complexes from an atrial focus (an ectopic P wave, ``A``) that
    start and stop abruptly, at rates where each beat's P wave meets the T wave before it and the
    T wave's end meets the next QRS. Nothing here is flutter or noise: every complex is a beat."""
    rng_times, rng_noise, rng_lead = streams(seed + 13, 3)
    t = sinus(duration_s, rng_times, heart_rate=75.0)
    kinds = np.zeros(t.size, np.int8)
    for start, length, rate in runs:
        run = start + np.cumsum(60.0 / rate * rng_times.uniform(0.99, 1.01, int(length * rate / 60.0) + 1))
        run = run[run < start + length]
        keep = (t < start - 0.35) | (t > start + length + 0.9)
        t, kinds = np.concatenate([t[keep], run]), np.concatenate([kinds[keep], np.full(run.size, 3, np.int8)])
        order = np.argsort(t)
        t, kinds = t[order], kinds[order]
    keep = t < duration_s - 0.5
    t, kinds = t[keep], kinds[keep]
    n = int(round(duration_s * fs))
    signal, beats, _ = render_beats(fs, n, t, kinds, seed, heart_rate=75.0)
    signal += background(n, fs, rng_noise)
    return assemble("supraventricular_tachycardia", fs, signal, beats, np.where(kinds[:beats.size] == 3, "A", "N"), (),
                 rng_lead)


def av_block(fs: float = 360.0, seed: int = 0, *, duration_s: float = 120.0, pp_s: float = 0.8,
             p_scale: float = 1.0) -> StressCase:
    """Second-degree AV block: sinus P waves every ``pp_s`` (about 75 /min), some not conducted, so
    that a P wave stands alone where a beat would be: Mobitz II for the first quarter (every fifth
    blocked), 2:1 block for the second (every other one: RR twice the PP), 3:1 for the third (two
    in three: 2.4-s pauses, listed as pauses), every one conducted after. A blocked P wave is no
    beat. ``p_scale`` scales the P waves (synth's 0.12–0.2 mV)."""
    rng_times, rng_noise, rng_lead = streams(seed + 17, 3)
    p = np.arange(1.0, duration_s - 0.5, pp_s)
    p = p + 0.01 * rng_times.standard_normal(p.size)
    k, quarter = np.arange(p.size), duration_s / 4
    blocked = (((p < quarter) & (k % 5 == 4)) | ((p >= quarter) & (p < 2 * quarter) & (k % 2 == 1))
               | ((p >= 2 * quarter) & (p < 3 * quarter) & (k % 3 != 0)))
    n = int(round(duration_s * fs))
    signal, beats, _ = render_beats(fs, n, p[~blocked], np.zeros(int((~blocked).sum())), seed, blocked=p[blocked],
                                    p_scale=p_scale)
    signal += background(n, fs, rng_noise)
    return assemble("av_block", fs, signal, beats, np.full(beats.size, "N"), (), rng_lead)


def amplifier_recovery(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0,
                       starts_s: tuple = (15.0, 38.0), rail_s: float = 0.5, recovery_s: float = 6.0,
                       gain: float = 0.15) -> StressCase:
    """Sinus rhythm at 80 bpm with two amplifier overloads: an artefact drives the amplifier to
    its rail for ``rail_s``, then the baseline falls back exponentially (time constant 1.5 s) and
    the QRS complexes return at ``gain`` × their size for ``recovery_s`` before their size comes
    back (as on some Holter tapes after an electrode is knocked). The small beats are true beats,
    far under a threshold set by the beats around but far above the noise of their stretch. Beats
    on the rail are hidden (``Q``). True episodes: the rails (noise)."""
    rng_times, rng_noise, rng_lead = streams(seed + 8, 3)
    t = sinus(duration_s, rng_times, heart_rate=80.0)
    t = t[t < duration_s - 0.5]
    n = int(round(duration_s * fs))
    signal, beats, r_amp = render_beats(fs, n, t, np.zeros(t.size), seed, heart_rate=80.0)
    rail = 4.0 * r_amp
    size = np.ones(n, dtype=np.float32)
    offset = np.zeros(n, dtype=np.float32)
    for start in starts_s:
        i0, i1 = int(start * fs), int((start + rail_s) * fs)
        size[i1:int((start + rail_s + recovery_s) * fs)] = gain
        offset[i1:] += (rail * np.exp(-np.arange(n - i1) / (1.5 * fs))).astype(np.float32)
    signal = np.minimum(signal * size + offset + background(n, fs, rng_noise), rail)
    symbols = np.full(beats.size, "N")
    for start in starts_s:
        i0, i1 = int(start * fs), int((start + rail_s) * fs)
        signal[i0:i1] = rail
        symbols[(beats >= i0) & (beats < i1)] = "Q"
    episodes = tuple(("noise", start, start + rail_s) for start in starts_s)
    return assemble("amplifier_recovery", fs, signal, beats, symbols, episodes, rng_lead)


def atrial_fibrillation(fs: float = 360.0, seed: int = 0, *, duration_s: float = 90.0, heart_rate: float = 95.0,
                        rr_cv: float = 0.25, pvc_fraction: float = 0.05, f_wave_mv: float = 0.08) -> StressCase:
    """Atrial fibrillation: no P waves, RR intervals irregularly irregular (independent draws,
    coefficient of variation ``rr_cv``, none under 0.3 s), fibrillatory waves of 4–8 Hz and about
    ``f_wave_mv`` drifting in rate and size, and a few PVCs. Every rule that leans on a regular
    rhythm (a rival that keeps it, a search inside a "long" gap) meets the rhythm it cannot lean on."""
    rng_times, rng_noise, rng_lead, rng_f = streams(seed + 10, 4)
    mean = 60.0 / heart_rate
    shape = 1.0 / rr_cv ** 2
    rr = np.maximum(rng_times.gamma(shape, mean / shape, int(2 * duration_s / mean)), 0.3)
    t = 0.5 + np.cumsum(rr)
    t = t[t < duration_s - 0.5]
    kinds = (rng_times.random(t.size) < pvc_fraction).astype(np.int8)
    kinds[:3] = 0
    n = int(round(duration_s * fs))
    signal, beats, _ = render_beats(fs, n, t, kinds, seed, heart_rate=heart_rate, p_waves=False)
    time = np.arange(n) / fs
    rate = 6.0 + 1.5 * np.sin(2 * np.pi * 0.07 * time + rng_f.uniform(0, 6.3))     # Hz, drifting
    size = f_wave_mv * (1.0 + 0.4 * np.sin(2 * np.pi * 0.13 * time + rng_f.uniform(0, 6.3)))
    signal += (size * np.sin(2 * np.pi * np.cumsum(rate) / fs)).astype(np.float32)
    signal += background(n, fs, rng_noise)
    return assemble("atrial_fibrillation", fs, signal, beats, np.where(kinds[:beats.size] == 1, "V", "N"), (), rng_lead)


def atrial_flutter(fs: float = 360.0, seed: int = 0, *, duration_s: float = 90.0, f_rate: float = 300.0,
                   f_wave_mv: float = 0.4, delay_s: float = 0.22) -> StressCase:
    """Atrial flutter: a sawtooth of flutter waves at ``f_rate`` /min (each falling slowly and
    rising fast, ``f_wave_mv`` from trough to crest: lead II's inverted F waves) and no P waves,
    conducted to the ventricles after every second, third or fourth wave at random (2:1 half the
    time), ``delay_s`` later. The baseline is never still, and it is regular at 5 Hz, where
    ventricular flutter lies; yet it is the atria's: every QRS is a beat and nothing is an
    episode."""
    rng_times, rng_noise, rng_lead, rng_f = streams(seed + 19, 4)
    period = 60.0 / f_rate * rng_f.uniform(0.95, 1.05)
    waves = np.arange(0.5, duration_s - 0.5, period)
    steps = rng_times.choice([2, 3, 4], waves.size, p=[0.5, 0.2, 0.3])
    conducted = [0]
    while conducted[-1] + steps[conducted[-1]] < waves.size:
        conducted.append(conducted[-1] + steps[conducted[-1]])
    t = waves[conducted] + delay_s
    t = t[t < duration_s - 0.5]
    n = int(round(duration_s * fs))
    signal, beats, _ = render_beats(fs, n, t, np.zeros(t.size), seed, heart_rate=75.0, p_waves=False)
    time = np.arange(n) / fs
    phase = ((time - 0.5) / period) % 1.0
    saw = np.where(phase < 0.75, -phase / 0.75, -(1.0 - phase) / 0.25) + 0.5
    signal += (f_wave_mv * saw * (time > 0.5)).astype(np.float32)
    signal += background(n, fs, rng_noise)
    return assemble("atrial_flutter", fs, signal, beats, np.full(beats.size, "N"), (), rng_lead)


def lead_lost(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0,
              lost: tuple = ((15.0, 21.0, "rail"), (38.0, 42.0, "flat"))) -> StressCase:
    """Sinus rhythm at 75 bpm whose lead II loses the heart twice, for 6 s on the amplifier's rail
    and for 4 s flat (a loose electrode), while the second lead, unharmed, shows every beat. Read
    on lead II alone these are pauses that never happened; every beat is a true beat (``N``).
    True episodes: the lost stretches (noise)."""
    rng_times, rng_noise, rng_lead = streams(seed + 9, 3)
    t = sinus(duration_s, rng_times, heart_rate=75.0)
    t = t[t < duration_s - 0.5]
    n = int(round(duration_s * fs))
    clean, beats, r_amp = render_beats(fs, n, t, np.zeros(t.size), seed, heart_rate=75.0)
    clean = clean + background(n, fs, rng_noise)
    signal = clean.copy()
    for start, end, how in lost:
        signal[int(start * fs):int(end * fs)] = 4.0 * r_amp if how == "rail" else 0.0
    return StressCase(name="lead_lost", fs=float(fs), signal=signal.astype(np.float32),
                      second=second_lead(clean, fs, rng_lead), beats=np.asarray(beats, dtype=np.int64),
                      symbols=np.full(beats.size, "N"), episodes=tuple(("noise", s, e) for s, e, _ in lost))


def tremor_one_lead(fs: float = 360.0, seed: int = 0, *, duration_s: float = 60.0,
                    tremor: tuple = (20.0, 40.0), rate_hz: float = 4.7, height: float = 0.5) -> StressCase:
    """Sinus rhythm at 70 bpm with, on lead II alone, a tremor of ``rate_hz`` (slowly wavering)
    ``height`` × the QRS amplitude over the stretch ``tremor``: as large, fast and regular as
    flutter, which passes the flutter tests on that lead, while the second lead shows the sinus
    rhythm plainly. Every beat is a true beat (``N``); the true episode is the tremor (noise)."""
    rng_times, rng_noise, rng_lead = streams(seed + 11, 3)
    t = sinus(duration_s, rng_times)
    t = t[t < duration_s - 0.5]
    n = int(round(duration_s * fs))
    clean, beats, r_amp = render_beats(fs, n, t, np.zeros(t.size), seed)
    clean = clean + background(n, fs, rng_noise)
    seconds = np.arange(n) / fs
    inside = (seconds >= tremor[0]) & (seconds < tremor[1])
    wave = np.sin(2 * np.pi * rate_hz * seconds[inside] + 0.3 * np.sin(2 * np.pi * 0.4 * seconds[inside]))
    signal = clean.copy()
    signal[inside] += height * r_amp * wave
    return StressCase(name="tremor_one_lead", fs=float(fs), signal=signal.astype(np.float32),
                      second=second_lead(clean, fs, rng_lead), beats=np.asarray(beats, dtype=np.int64),
                      symbols=np.full(beats.size, "N"), episodes=(("noise", *tremor),))


#: Every case by name: ``CASES[name](seed=0)`` gives a :class:`StressCase`.
CASES: dict = {
    "pauses": pauses,
    "flutter": flutter,
    "noise_bursts": noise_bursts,
    "electrode_motion": electrode_motion,
    "mains_hum": mains_hum,
    "mains_hum_60hz_128hz": functools.partial(mains_hum, 128.0, hum_hz=60.0),
    "tall_t_slow": tall_t_slow,
    "bigeminy": bigeminy,
    "ventricular_tachycardia": ventricular_tachycardia,
    "supraventricular_tachycardia": supraventricular_tachycardia,
    "supraventricular_tachycardia_128hz": functools.partial(supraventricular_tachycardia, 128.0),
    "av_block": av_block,
    "av_block_128hz": functools.partial(av_block, 128.0),
    "atrial_flutter": atrial_flutter,
    "atrial_flutter_128hz": functools.partial(atrial_flutter, 128.0),
    "amplifier_recovery": amplifier_recovery,
    "lead_lost": lead_lost,
    "tremor_one_lead": tremor_one_lead,
    "atrial_fibrillation": atrial_fibrillation,
    "atrial_fibrillation_128hz": functools.partial(atrial_fibrillation, 128.0),
    "pvcs_into_flutter": functools.partial(flutter, lead_in_beats=6),
    "flutter_128hz": functools.partial(flutter, 128.0),
    "flutter_1khz": functools.partial(flutter, 1000.0),
    "noise_bursts_128hz": functools.partial(noise_bursts, 128.0),
    "noise_bursts_1khz": functools.partial(noise_bursts, 1000.0),
}


def make_case(name: str, seed: int = 0) -> StressCase:
    """The stress case ``name`` (see :data:`CASES`), its ``name`` field set to the registry's."""
    if name not in CASES:
        raise ValueError(f"unknown stress case {name!r}; known: {', '.join(CASES)}")
    case = CASES[name](seed=seed)
    case.name = name
    return case


# --------------------------------------------------------------------------- files
def write_case(case: StressCase, path) -> Path:
    """Write both leads as ``ECG1`` (lead II) and ``ECG2``, with the true beats.

    ``.csv``: a header ``ECG1,ECG2`` and one row a sample (4 decimals), beside it synth's
    annotation sidecar ``<stem>.annotations.csv`` (``sample,symbol``). ``.hea`` or no suffix: a
    WFDB record (16-bit, 200 adu/mV like MIT-BIH) with the beats as ``.atr``. Returns the path the
    pipeline reads (the CSV or the ``.hea``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    both = np.stack([case.signal, case.second], axis=1).astype(np.float64)
    if path.suffix.lower() == ".csv":
        np.savetxt(path, both, fmt="%.4f", delimiter=",", header=",".join(_LEADS), comments="")
        lines = "".join(f"{s},{c}\n" for s, c in zip(case.beats.tolist(), case.symbols.tolist()))
        synth.annotations_path(path).write_text("sample,symbol\n" + lines)
        return path
    if path.suffix.lower() not in ("", ".hea"):
        raise ValueError(f"path must end in .csv or .hea (or have no suffix, for a WFDB record); got {path.name!r}")
    import wfdb

    record = path.with_suffix("")
    wfdb.wrsamp(record.name, fs=case.fs, units=["mV", "mV"], sig_name=list(_LEADS), p_signal=both, fmt=["16", "16"],
                adc_gain=[200.0, 200.0], baseline=[0, 0], write_dir=str(record.parent))
    wfdb.wrann(record.name, "atr", case.beats, case.symbols.tolist(), write_dir=str(record.parent))
    return record.with_suffix(".hea")
