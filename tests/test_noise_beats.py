"""Beats inside noise episodes (:mod:`pipeline.noise_beats`): a noise deflection that splits an RR
interval goes; a beat that looks like the recording's, a premature deflection followed by its
pause, and anything outside noise stay. The GPU keeps the same beats."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import backend, synth
from pipeline.config import SignalConfig
from pipeline.episodes import Episodes
from pipeline.noise_beats import keep_plausible
from tests.support.own_t_waves import spikes

FS = 360.0


@pytest.fixture(scope="module")
def recording():
    """40 s of clean sinus rhythm, then bursts of noise as large as the QRS around two points:
    one halfway between beats 12 and 13, one at 60 % of the RR after beat 20 (beat 21 missing
    from the fiducials, as a beat the noise hid would be)."""
    ecg = synth.synthesize(synth.SynthConfig(n_samples=int(40 * FS), fs=FS, seed=5, noise_bursts_per_hour=0.0))
    signal, r = ecg.signal.copy(), ecg.r_peaks
    splitting = (r[12] + r[13]) // 2
    premature = r[20] + int(0.6 * (r[21] - r[20]))
    qrs = float(np.ptp(signal[r[5] - 20:r[5] + 20]))
    rng = np.random.default_rng(0)
    for point in (splitting, premature):
        signal[point - 40:point + 40] += (qrs * rng.standard_normal(80)).astype(np.float32)
    return signal, r, splitting, premature


def _kept(xp, signal, positions, found, added=np.zeros(0, np.int64)):
    kept, left_out = keep_plausible(xp.asarray(signal), xp.asarray(positions), found, added, FS, SignalConfig())
    np.testing.assert_array_equal(np.sort(np.concatenate([backend.to_host(kept), left_out])), np.sort(positions))
    return backend.to_host(kept)


def _noise(start: float, end: float) -> Episodes:
    return Episodes(["noise"], [start], [end], [0.9])


def test_a_noise_deflection_splitting_an_rr_interval_goes_and_a_premature_one_stays(recording, xp):
    signal, r, splitting, premature = recording
    positions = np.sort(np.concatenate([np.delete(r, 21), [splitting, premature]]))
    found = _noise(r[9] / FS - 0.1, r[24] / FS + 0.1)      # beats 10..24 inside, alike the clean ones
    kept = _kept(xp, signal, positions, found)
    np.testing.assert_array_equal(kept, np.sort(np.concatenate([np.delete(r, 21), [premature]])))
    if xp is not np:
        np.testing.assert_array_equal(kept, _kept(np, signal, positions, found))


def test_outside_noise_and_from_the_other_lead_nothing_is_judged(recording, xp):
    signal, r, splitting, premature = recording
    positions = np.sort(np.concatenate([np.delete(r, 21), [splitting, premature]]))
    np.testing.assert_array_equal(_kept(xp, signal, positions, Episodes()), positions)
    np.testing.assert_array_equal(_kept(xp, signal, positions, _noise(r[30] / FS, r[35] / FS)), positions)
    found = _noise(r[9] / FS - 0.1, r[24] / FS + 0.1)
    np.testing.assert_array_equal(_kept(xp, signal, positions, found, np.array([splitting])), positions)


def test_the_rhythm_choice_is_the_best_subset_by_brute_force():
    """The dynamic programme of a noisy run keeps the subset (first and last always kept) with the
    least sum of squared log ratios of its intervals to the local RR, among those whose intervals
    that skip a point stay within the limit: checked against every subset of small runs."""
    import itertools
    import math

    from pipeline.noise_beats import _best_rhythm

    def cost(points, local, kept):
        chosen = [p for p, k in zip(points, kept) if k]
        return sum(math.log(max(b - a, 1) / local) ** 2 for a, b in zip(chosen, chosen[1:]))

    def feasible(points, kept, limit):
        at = [i for i, k in enumerate(kept) if k]
        return all(j == i + 1 or points[j] - points[i] <= limit for i, j in zip(at, at[1:]))

    rng = np.random.default_rng(7)
    for _ in range(300):                      # a rhythm near the local RR, with deflections between
        local, most = float(rng.uniform(150, 350)), 1.25
        beats = np.cumsum(local * rng.uniform(0.6, 1.4, int(rng.integers(2, 5))))
        extra = rng.uniform(beats[0], beats[-1], int(rng.integers(1, 4)))
        points = np.unique(np.round(np.concatenate([beats, extra]))).astype(int).tolist()
        m = len(points)
        kept = _best_rhythm(points, local, most)
        assert kept[0] and kept[-1] and feasible(points, kept, most * local)
        best = min(cost(points, local, (True, *middle, True))
                   for middle in itertools.product((False, True), repeat=m - 2)
                   if feasible(points, (True, *middle, True), most * local))
        assert cost(points, local, kept) == pytest.approx(best, abs=1e-12)


def test_anywhere_a_faint_wave_splitting_an_rr_interval_goes_and_a_small_beat_of_the_recordings_shape_stays(
        recording, xp):
    """Electrode motion that no noise test flags: a slow swing half the QRS complexes' height
    halfway between two beats (a fifth of their slope) is no beat; a copy of a beat at a quarter
    of its size, as faint, looks like the recording's beats and stays."""
    signal, r, _, _ = recording
    signal = signal.copy()
    qrs = float(np.ptp(signal[r[5] - 20:r[5] + 20]))
    swing, small = (r[30] + r[31]) // 2, (r[34] + r[35]) // 2
    t = np.arange(-100, 101)
    signal[swing - 100:swing + 101] += (0.5 * qrs * np.exp(-0.5 * (t / (0.04 * FS)) ** 2)).astype(np.float32)
    signal[small - 25:small + 26] += 0.25 * (signal[r[33] - 25:r[33] + 26] - signal[r[33] - 25])
    positions = np.sort(np.concatenate([r, [swing, small]]))
    kept = _kept(xp, signal, positions, Episodes())
    np.testing.assert_array_equal(kept, np.sort(np.concatenate([r, [small]])))
    if xp is not np:
        np.testing.assert_array_equal(kept, _kept(np, signal, positions, Episodes()))


def _rise(signal: np.ndarray, point: int, half: int = round(0.008 * FS), reach: int = round(0.06 * FS)) -> float:
    """The largest rise over 16 ms within ±60 ms of ``point``: a reference for the slope the rule reads."""
    at = np.arange(point - reach, point + reach + 1)
    return float(np.max(signal[at + half] - signal[at - half]))


def _assert_two_leads_keep(xp, signal, positions, other, with_other, alone):
    """keep_plausible outside noise keeps ``with_other`` when the ``other`` lead is read and
    ``alone`` when it is not; the GPU keeps what the CPU keeps."""
    def kept(xp, other):
        return backend.to_host(keep_plausible(xp.asarray(signal), xp.asarray(positions), Episodes(),
                                              np.zeros(0, np.int64), FS, SignalConfig(),
                                              None if other is None else xp.asarray(other))[0])

    np.testing.assert_array_equal(kept(xp, other), with_other)
    np.testing.assert_array_equal(kept(xp, None), alone)
    if xp is not np:
        np.testing.assert_array_equal(kept(xp, other), kept(np, other))


def test_a_swing_half_as_steep_as_its_neighbours_goes_unless_the_other_lead_shows_a_beat(recording, xp):
    """A swing between two beats, steeper than the faint line but less than half as steep as
    the beats beside it, splits an RR interval: it goes, read on one lead or on two. Where the
    other lead shows a QRS complex at that point, the swing is a beat that lead sees plainly, and
    it stays."""
    signal, r, _, _ = recording
    signal = signal.copy()
    other = (-0.6 * signal).astype(np.float32)
    beat_rise = np.median([_rise(signal, int(p)) for p in r[25:40]])
    lone, seen = (r[30] + r[31]) // 2, (r[34] + r[35]) // 2
    t = np.arange(-60, 61)
    bump = np.exp(-0.5 * (t / (0.012 * FS)) ** 2)
    bump *= 0.4 * beat_rise / _rise(np.pad(bump, 200), 260)     # 0.4 × as steep as the beats
    for point in (lone, seen):
        signal[point - 60:point + 61] += bump.astype(np.float32)
    other[seen - 25:seen + 26] += other[r[33] - 25:r[33] + 26] - other[r[33] - 25]
    assert 0.33 < _rise(signal, lone) / beat_rise < 0.47           # between the faint line and half
    positions = np.sort(np.concatenate([r, [lone, seen]]))
    _assert_two_leads_keep(xp, signal, positions, other, np.sort(np.concatenate([r, [seen]])), r)


def test_a_deflection_the_other_lead_does_not_show_is_judged_by_the_rhythm(recording, xp):
    """A biphasic deflection as steep as the beats, halfway between two of them, on the analysed
    lead alone: neither faint nor fainter than its neighbours, so on one lead it stays. The other
    lead shows nothing there (under a fifth of its beats' slope), so with that lead read the
    deflection is judged, and it splits an RR interval: it goes. Where the other lead shows a QRS
    complex at that point, it stays."""
    signal, r, _, _ = recording
    signal = signal.copy()
    other = (-0.6 * signal).astype(np.float32)
    beat_rise = np.median([_rise(signal, int(p)) for p in r[25:40]])
    lone, seen = (r[30] + r[31]) // 2, (r[34] + r[35]) // 2
    t = np.arange(-60, 61) / (0.012 * FS)
    wiggle = -t * np.exp(-0.5 * t ** 2)
    wiggle *= beat_rise / _rise(np.pad(wiggle, 200), 260)        # as steep as the beats
    for point in (lone, seen):
        signal[point - 60:point + 61] += wiggle.astype(np.float32)
    other[seen - 25:seen + 26] += other[r[33] - 25:r[33] + 26] - other[r[33] - 25]
    positions = np.sort(np.concatenate([r, [lone, seen]]))
    _assert_two_leads_keep(xp, signal, positions, other, np.sort(np.concatenate([r, [seen]])), positions)


def test_deflections_taken_out_in_a_row_make_a_noise_episode():
    """Four deflections taken out, each within 20 s of the next, make one noise episode from 2 s
    before the first to 2 s after the last (confidence 0.5); three, or four spread wider, make
    none; what an episode already covers is not covered twice."""
    from pipeline.noise_beats import left_out_noise

    cfg = SignalConfig()
    at = lambda *seconds: (np.array(seconds) * FS).astype(np.int64)
    found = left_out_noise(at(100, 110, 125, 140), Episodes(), FS, cfg)
    np.testing.assert_allclose(np.c_[found.start_s, found.end_s], [[98, 142]])
    assert found.kind.tolist() == ["noise"] and found.confidence.tolist() == [0.5]
    assert len(left_out_noise(at(100, 110, 125), Episodes(), FS, cfg)) == 0
    assert len(left_out_noise(at(100, 125, 150, 175), Episodes(), FS, cfg)) == 0
    two_runs = left_out_noise(at(10, 12, 14, 16, 60, 61, 62, 63, 64), Episodes(), FS, cfg)
    np.testing.assert_allclose(np.c_[two_runs.start_s, two_runs.end_s], [[8, 18], [58, 66]])
    known = Episodes(["flutter", "noise"], [90, 120], [105, 130], [0.9, 0.8])
    found = left_out_noise(at(100, 110, 125, 140), known, FS, cfg)
    pieces = found.confidence == np.float32(0.5)
    np.testing.assert_allclose(np.c_[found.start_s[pieces], found.end_s[pieces]], [[105, 120], [130, 142]])
    assert len(found) == 4


def test_a_lead_cleaned_up_again_and_again_is_noise_there(xp):
    """Swings half the beats' height between six beats in a row, no noise test flagging them:
    the rhythm takes them out, and the stretch becomes a noise episode whose beats are low quality;
    the beats outside keep their quality."""
    from pipeline import wavelet
    from pipeline.quality import LOW_QUALITY
    from pipeline.segmentation import heartbeats, quality_of_beats

    ecg = synth.synthesize(synth.SynthConfig(n_samples=int(40 * FS), fs=FS, seed=5, noise_bursts_per_hour=0.0))
    signal, r = ecg.signal.copy(), ecg.r_peaks
    beat_rise = np.median([_rise(signal, int(p)) for p in r[5:40]])
    t = np.arange(-60, 61)
    bump = np.exp(-0.5 * (t / (0.012 * FS)) ** 2)
    bump *= 0.4 * beat_rise / _rise(np.pad(bump, 200), 260)
    swings = (r[20:26] + r[21:27]) // 2
    for point in swings:
        signal[point - 60:point + 61] += bump.astype(np.float32)
    cfg = SignalConfig()
    on = xp.asarray(signal)
    positions, found, _, _ = heartbeats(wavelet.ricker_response(on, FS, cfg.ricker_width_s), on, FS, cfg)
    noise = found.select("noise")
    assert len(noise) == 1 and noise.start_s[0] <= swings[0] / FS and noise.end_s[0] >= swings[-1] / FS
    kept = backend.to_host(positions)
    assert not np.isin(swings, kept).any()
    quality = backend.to_host(quality_of_beats(on, positions, found, FS))
    inside = (kept / FS >= noise.start_s[0]) & (kept / FS <= noise.end_s[0])
    assert inside.sum() >= 6 and (quality[inside] < LOW_QUALITY).all() and (quality[~inside] >= LOW_QUALITY).mean() > 0.95


def test_t_waves_the_other_lead_does_not_show_go_whatever_the_rhythm(xp):
    """Beats 0.6 and 1.0 s apart in turn; on the analysed lead 45 of them have a T wave 0.3 s after
    them that passed for a beat, the other lead shows the QRS complexes and a low, broad T wave.
    Judged by the rhythm alone, the T waves before the long intervals stay (leaving one out joins
    1.0 s, over 1.25 × a local RR of 0.6 s): 24 of 45. With the other lead they all go, each
    counted among the deflections left out. Where the other lead loses contact for a while, no
    QRS complex goes with them."""
    rr = np.tile([0.6, 1.0], 30)
    beats = np.round((1.0 + np.concatenate([[0], np.cumsum(rr)])) * FS).astype(np.int64)
    n = int(beats[-1] + 2 * FS)
    t_waves = beats[5:50] + int(0.3 * FS)
    rng = np.random.default_rng(0)
    each = lambda height: np.full(beats.size, height)
    signal = (spikes(FS, n, beats, each(1.5), 0.010) + spikes(FS, n, t_waves, np.full(t_waves.size, 0.9), 0.014)
              + 0.01 * rng.standard_normal(n)).astype(np.float32)
    other = (spikes(FS, n, beats, each(-0.9), 0.010) + spikes(FS, n, beats + int(0.3 * FS), each(-0.1), 0.06)
             + 0.01 * rng.standard_normal(n)).astype(np.float32)
    positions = np.sort(np.concatenate([beats, t_waves]))

    def kept(xp, other, cfg=SignalConfig()):
        found, left_out = keep_plausible(xp.asarray(signal), xp.asarray(positions), Episodes(), np.zeros(0, np.int64),
                                         FS, cfg, None if other is None else xp.asarray(other))
        return backend.to_host(found), left_out

    by_rhythm, _ = kept(xp, None)
    assert np.isin(beats, by_rhythm).all() and np.isin(t_waves, by_rhythm).sum() == 24
    np.testing.assert_array_equal(kept(xp, other, SignalConfig(absent_other_twave_s=0.0))[0], by_rhythm)
    found, left_out = kept(xp, other)
    np.testing.assert_array_equal(found, beats)
    np.testing.assert_array_equal(left_out, t_waves)
    lost = other.copy()
    lost[beats[20] - 50:beats[26]] = 0.0                     # the other lead off for six beats
    assert np.isin(beats, kept(xp, lost)[0]).all()
    if xp is not np:
        np.testing.assert_array_equal(found, kept(np, other)[0])
