"""Beat detection as the beats table shows it (``segmentation.heartbeats``: fiducials with flutter taken
out, pauses read on the second lead) on the synthetic stress cases of :mod:`pipeline.stress` and on
the DS1 records of MIT-BIH, matched as AAMI EC57 does (150 ms, flutter left out). The GPU twin finds
the same beats."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from pipeline import PipelineWarning, backend, stress, wavelet
from pipeline.config import SignalConfig
from pipeline.metrics import ec57_counts, flutter_episodes
from pipeline.segmentation import heartbeats, segment

# Se and P+ each case must reach at 150 ms. Noise bursts: beats inside them count, and noise there
# can pass for a beat or hide one; electrode motion: a swing as steep as a QRS complex is taken for
# one, and a beat on a swing can be missed.
FLOOR = {"pauses": (1.0, 1.0), "flutter": (1.0, 1.0), "pvcs_into_flutter": (1.0, 1.0), "flutter_128hz": (1.0, 1.0), "flutter_1khz": (1.0, 1.0),
         "tall_t_slow": (1.0, 1.0), "bigeminy": (1.0, 1.0), "ventricular_tachycardia": (1.0, 1.0),
         "supraventricular_tachycardia": (1.0, 1.0), "supraventricular_tachycardia_128hz": (1.0, 1.0),
         "av_block": (1.0, 1.0), "av_block_128hz": (1.0, 1.0),
         "atrial_flutter": (1.0, 1.0), "atrial_flutter_128hz": (1.0, 1.0),
         "noise_bursts": (0.99, 0.99), "noise_bursts_128hz": (0.95, 0.95), "noise_bursts_1khz": (0.95, 0.95),
         "electrode_motion": (0.88, 0.9), "mains_hum": (0.99, 0.99), "mains_hum_60hz_128hz": (0.95, 0.95),
         "amplifier_recovery": (0.95, 1.0),  # beats within 0.2 s of a rail's edges are lost with it
         "lead_lost": (1.0, 1.0), "tremor_one_lead": (1.0, 1.0),
         "atrial_fibrillation": (1.0, 1.0), "atrial_fibrillation_128hz": (1.0, 1.0)}
DS1 = Path(os.environ.get("ECG_MITDB_DS1", Path(__file__).resolve().parents[2] / "shared" / "data" / "mitdb-ds1"))


def _found(signal, fs, xp, other=None):
    signal = xp.asarray(np.ascontiguousarray(signal, dtype=np.float32))
    other = None if other is None else xp.asarray(np.ascontiguousarray(other, dtype=np.float32))
    positions, _, _, _ = heartbeats(wavelet.ricker_response(signal, fs, SignalConfig().ricker_width_s), signal, fs,
                                    SignalConfig(), other)
    return backend.to_host(positions)


@pytest.mark.parametrize("name", list(FLOOR))
def test_stress_cases(name, xp):
    assert set(FLOOR) == set(stress.CASES)
    case = stress.make_case(name)
    flutter = np.array([(s * case.fs, e * case.fs) for kind, s, e in case.episodes if kind == "flutter"],
                       dtype=np.int64).reshape(-1, 2)
    found = _found(case.signal, case.fs, xp, case.second)
    counts = ec57_counts(case.beats, found, case.fs, flutter, (0.15,))
    se = counts["tp_150"] / (counts["tp_150"] + counts["fn_150"])
    ppv = counts["tp_150"] / (counts["tp_150"] + counts["fp_150"])
    assert se >= FLOOR[name][0] and ppv >= FLOOR[name][1], (name, counts)
    if xp is not np:                    # the GPU finds exactly the CPU's beats
        np.testing.assert_array_equal(found, _found(case.signal, case.fs, np, case.second))


@pytest.mark.parametrize("offset", [0.0, 0.8])
def test_no_beat_is_found_within_the_refinement_reach_of_the_ends(xp, offset):
    """A recording that starts and ends inside a QRS complex, 20 ms from its R peak, with its
    baseline at zero or off it (the Ricker response's step at the ends): neither cut beat is
    found, nor anything else within ``refine_s`` of the ends; the beats beside them are, and so
    is a beat 80 ms from an end."""
    from pipeline import synth

    fs = 360.0
    ecg = synth.synthesize(synth.SynthConfig(n_samples=int(30 * fs), fs=fs, seed=3, noise_bursts_per_hour=0.0))
    r = ecg.r_peaks
    margin = int(round(SignalConfig().refine_s * fs))
    for before, after in ((int(0.02 * fs), int(0.02 * fs)), (int(0.08 * fs), int(0.08 * fs))):
        start, stop = r[2] - before, r[-3] + after + 1
        found = _found(ecg.signal[start:stop] + np.float32(offset), fs, xp)
        truth = r[2:-2] - start
        cut = before < margin
        assert (found >= margin).all() and (found < stop - start - margin).all()
        counts = ec57_counts(truth[1:-1] if cut else truth, found, fs, None, (0.15,))
        assert counts["fn_150"] == 0 and counts["fp_150"] == 0, (before, counts)


def test_a_lead_lost_for_seconds_is_read_on_the_other_lead(xp):
    """Lead II on its rail for 6 s and flat for 4 s: alone, two pauses that never happened; with
    the second lead read in them, every beat there, and no pause."""
    case = stress.make_case("lead_lost")
    lost = np.zeros(case.beats.shape, bool)
    for _, start, end in case.episodes:
        lost |= (case.beats >= start * case.fs) & (case.beats < end * case.fs)
    assert lost.sum() >= 10
    alone = _found(case.signal, case.fs, xp)
    both = _found(case.signal, case.fs, xp, case.second)
    assert ec57_counts(case.beats[lost], alone, case.fs, None, (0.15,))["tp_150"] == 0
    assert ec57_counts(case.beats[lost], both, case.fs, None, (0.15,))["tp_150"] == lost.sum()
    assert (np.diff(both) < SignalConfig().pause_s * case.fs).all()


def test_missing_samples_are_signal_lost_not_a_pause(tmp_path, device):
    """Lead II missing for 4.5 s (empty cells, as a recorder's dropout leaves them) amid sinus
    beats: the file loads, and the gap is an episode of lost signal. Read alone, the pause
    across it is in doubt, not one anybody saw; with the second lead, its beats fill the gap."""
    from pipeline import load, results

    case = stress.make_case("pauses")
    fs, cfg = case.fs, SignalConfig()
    gap = slice(int(16.8 * fs), int(21.3 * fs))
    first = case.signal.astype(object)
    first[gap] = ""
    path = tmp_path / "dropout.csv"
    path.write_text("MLII,V1\n" + "\n".join(f"{a},{b:.5f}" for a, b in zip(first, case.second)))
    with pytest.warns(PipelineWarning, match=r"1 gap\(s\) over 1 s \(4\.5 s\) are signal lost"):
        recording = load.load_ecg(path, fs=fs, device=device)
    np.testing.assert_allclose(recording.lost_s, [[gap.start / fs, gap.stop / fs]])
    inside = case.beats[(case.beats >= gap.start) & (case.beats < gap.stop)]
    assert inside.shape[0] >= 4

    def read(other):
        seg = segment(recording.signal, fs, cfg, other=other, lost_s=recording.lost_s)
        return backend.to_host(seg.positions), results.episodes_table(seg.episodes, backend.to_host(seg.pauses), fs)

    alone, listed = read(None)
    assert not ((alone >= gap.start) & (alone < gap.stop)).any()
    lost = listed[listed["kind"] == "lost"]
    assert len(lost) == 1 and lost["confidence"].iloc[0] == 1.0
    assert lost["start_s"].iloc[0] == gap.start / fs and lost["end_s"].iloc[0] == gap.stop / fs
    pauses = listed[listed["kind"] == "pause"]
    across = pauses[(pauses["start_s"] < 16.8) & (pauses["end_s"] > 21.3)]
    assert len(across) == 1 and across["confidence"].iloc[0] < 1, listed
    assert (pauses.drop(across.index)["confidence"] == 1.0).all()   # the case's own pauses stay sure

    both, _ = read(load.load_other_lead(recording, device=device).signal)
    assert ec57_counts(inside, both, fs, None, (0.15,))["tp_150"] == inside.shape[0]


def test_the_other_lead_adds_nothing_where_it_disagrees(xp):
    """A second lead of noise alone (no heart in it) never fills a pause: it does not agree with
    the analysed lead on the beats around it."""
    case = stress.make_case("pauses")
    noise = np.random.default_rng(0).normal(0, 0.3, case.signal.shape[0]).astype(np.float32)
    np.testing.assert_array_equal(_found(case.signal, case.fs, xp, noise), _found(case.signal, case.fs, xp))


@pytest.mark.parametrize("name", ["noise_bursts", "bigeminy"])
def test_units_offset_and_polarity_change_nothing(name, xp):
    """Databases store ECG in mV, µV, V or ADC counts about an offset, and a lead may be recorded
    the other way round: the beats, the episodes and the beats' quality are the same (every
    measure is relative to the recording's own QRS amplitude, every filter blind to a constant)."""
    case = stress.make_case(name)

    def read(transform):
        signal, other = (xp.asarray(transform(lead).astype(np.float32)) for lead in (case.signal, case.second))
        seg = segment(signal, case.fs, SignalConfig(), other=other)
        return backend.to_host(seg.positions), backend.to_host(seg.quality), seg.episodes.kind.tolist()

    positions, quality, kinds = read(lambda x: x)
    assert kinds or name == "bigeminy"
    for transform in (lambda x: x * 1000, lambda x: x / 1000, lambda x: x * 200 + 1024, lambda x: -x):
        other_positions, other_quality, other_kinds = read(transform)
        np.testing.assert_array_equal(other_positions, positions)
        np.testing.assert_allclose(other_quality, quality, atol=1e-3)
        assert other_kinds == kinds


def test_blocked_p_waves_are_no_beats_and_a_high_grade_block_leaves_pauses(xp):
    """Second-degree AV block: the P waves the AV node blocks stand alone, 0.6 s after a beat in
    2:1 block, and are no beats; the 3:1 block's 2.4-s intervals are pauses, every one listed
    (a P wave counted as a beat would split each in two)."""
    case = stress.make_case("av_block")
    fs, cfg = case.fs, SignalConfig()
    s = xp.asarray(case.signal)
    positions, _, pauses, _ = heartbeats(wavelet.ricker_response(s, fs, cfg.ricker_width_s), s, fs, cfg,
                                         xp.asarray(case.second))
    np.testing.assert_array_equal(np.abs(backend.to_host(positions) - case.beats) <= 0.05 * fs, True)
    rr = np.diff(case.beats) / fs
    expected = np.flatnonzero(rr >= cfg.pause_s)
    assert 10 <= expected.size and np.all(np.abs(rr[expected] - 2.4) < 0.1)
    starts = backend.to_host(pauses)[:, 0]
    assert starts.shape == expected.shape and np.all(np.abs(starts - case.beats[expected]) <= 0.05 * fs)


def test_a_pause_the_other_lead_shows_beats_in_is_in_doubt(xp):
    """Lead II's beats shrink to 3 % under noise of 20 µV for 4.5 s, as when an electrode half comes
    off: read alone, a pause. A second lead in step fills it. One that also counts a spike 0.35 s
    after each beat in the seconds before (out of step, so not trusted with fiducials) does not,
    but the pause is listed in doubt, over a noise episode; the recording's true pauses stay sure."""
    from pipeline import tables

    case = stress.make_case("pauses")
    fs, cfg = case.fs, SignalConfig()
    lost = slice(int(16.8 * fs), int(21.3 * fs))
    signal = case.signal.copy()
    signal[lost] = signal[lost] * 0.03 + np.random.default_rng(0).normal(0, 0.02, lost.stop - lost.start)
    spiky = case.second.copy()
    time = np.arange(spiky.shape[0]) / fs
    for beat in case.beats[(case.beats > 13.3 * fs) & (case.beats < 16.0 * fs)] / fs:
        spiky -= 0.4 * np.exp(-0.5 * ((time - beat - 0.35) / 0.008) ** 2).astype(np.float32)

    def read(other):
        s = xp.asarray(signal)
        positions, found, pauses, _ = heartbeats(wavelet.ricker_response(s, fs, cfg.ricker_width_s), s, fs, cfg,
                                                 xp.asarray(other))
        return backend.to_host(positions), tables.episodes_table(found, backend.to_host(pauses), fs)

    alone = _found(signal, fs, xp)
    assert not ((alone > 16.5 * fs) & (alone < 21.4 * fs)).any()
    in_step, listed = read(case.second)
    assert ec57_counts(case.beats, in_step, fs, None, (0.15,))["fn_150"] == 0
    assert (listed["kind"] == "pause").sum() == 4 and (listed["confidence"] == 1.0).all(), listed

    _, listed = read(spiky)
    pauses = listed[listed["kind"] == "pause"]
    doubtful = pauses[pauses["confidence"] < 1]
    assert len(doubtful) == 1 and doubtful["start_s"].iloc[0] < 16.8 and doubtful["end_s"].iloc[0] > 21.3, listed
    assert doubtful["confidence"].iloc[0] == 0.5
    assert len(pauses) == 5 and (pauses["confidence"] == 1.0).sum() == 4    # the case's 2, 3, 4.5 and 6 s
    noise = listed[listed["kind"] == "noise"]
    assert len(noise) == 1 and noise["start_s"].iloc[0] > 16.3 and noise["end_s"].iloc[0] < 21.6, listed


def test_flutter_on_one_lead_only_is_noise(xp):
    """Tremor on lead II alone (the ``tremor_one_lead`` stress case) passes the flutter tests: read
    alone, the beats inside it vanish in a flutter episode. The second lead shows a steady sinus
    rhythm there, which no flutter is: the stretch is noise, and every beat in it is found."""
    case = stress.make_case("tremor_one_lead")
    (_, start, end), = case.episodes
    inside = case.beats[(case.beats > start * case.fs) & (case.beats < end * case.fs)]
    cfg = SignalConfig()
    for other, kind, found_inside in ((None, "flutter", 0), (case.second, "noise", inside.shape[0])):
        data = xp.asarray(case.signal)
        positions, episodes, _, _ = heartbeats(wavelet.ricker_response(data, case.fs, cfg.ricker_width_s), data,
                                               case.fs, cfg, None if other is None else xp.asarray(other))
        assert episodes.kind.tolist() == [kind]
        assert abs(episodes.start_s[0] - start) < 1 and abs(episodes.end_s[0] - end) < 1
        positions = backend.to_host(positions)
        within = positions[(positions > start * case.fs) & (positions < end * case.fs)]
        counts = ec57_counts(inside, within, case.fs, None, (0.15,))
        assert counts["tp_150"] == found_inside and counts["fp_150"] == 0, (kind, counts)


def test_true_flutter_stays_flutter_whatever_the_other_lead_shows(xp):
    """Flutter that the second lead shows too, or where the second lead is noise (no steady beats),
    stays flutter: only a steady rhythm slower than any flutter on the other lead contradicts it."""
    case = stress.make_case("flutter")
    noise = np.random.default_rng(0).normal(0, 0.3, case.signal.shape[0]).astype(np.float32)
    cfg = SignalConfig()
    for other in (case.second, noise):
        data = xp.asarray(case.signal)
        _, episodes, _, _ = heartbeats(wavelet.ricker_response(data, case.fs, cfg.ricker_width_s), data, case.fs,
                                       cfg, xp.asarray(other))
        assert episodes.kind.tolist() == ["flutter"]


def test_only_a_steady_rhythm_slower_than_flutter_contradicts_it():
    """The other lead contradicts flutter with at least three intervals between its beats, their
    median at least 0.45 s (slower than any flutter) and their standard deviation at most 0.35 ×
    their mean; anything less leaves the flutter as it is."""
    from pipeline.other_lead import _steady_beats

    fs, cfg = 250.0, SignalConfig()

    def beats(intervals_s):
        return np.round(np.cumsum(np.concatenate([[1.0], intervals_s])) * fs).astype(np.int64)

    assert _steady_beats(beats([0.46] * 3), fs, cfg)                 # 130 a minute, steady
    assert not _steady_beats(beats([0.46] * 2), fs, cfg)             # two intervals: too few
    assert not _steady_beats(beats([0.42] * 6), fs, cfg)             # 143 a minute: as fast as flutter
    assert _steady_beats(beats([0.7, 1.0, 0.7, 1.0]), fs, cfg)      # irregular, SD 0.18 × the mean
    assert not _steady_beats(beats([0.5, 1.5, 0.5, 1.5]), fs, cfg)  # SD 0.5 × the mean: a noisy lead's
    assert not _steady_beats(beats([]), fs, cfg)


def test_beats_only_the_other_lead_found_are_added_where_this_lead_shows_them(xp):
    """Beats every 0.8 s, shown on the analysed lead; its detector missed four of them, which the
    other lead found: they are added, on the analysed lead's own fiducial. Not added: three beats
    the other lead found where the analysed lead is flat (its T waves, say), one 0.2 s after a beat
    of the analysed lead where that lead has a steep second deflection (the same beat, its fiducial
    read far apart), and two inside a flutter episode of the analysed lead."""
    from pipeline.episodes import Episodes
    from pipeline.other_lead import add_missed
    from tests.support.own_t_waves import spikes

    fs, n = 250.0, 120 * 250
    true = np.arange(125, n - 250, 200)
    second = true[40] + 50
    signal = spikes(fs, n, true, np.ones(true.size), 0.01) + spikes(fs, n, [second], [-1.0], 0.01)
    missed, flutter = true[20:24], true[60:62]
    mine = np.setdiff1d(true, np.concatenate([missed, flutter]))
    flat = true[30:33] + 100
    theirs = np.sort(np.concatenate([true + 3, flat, [second + 2]]))
    found = Episodes(["flutter"], [flutter[0] / fs - 0.3], [flutter[-1] / fs + 0.3], [0.9])
    positions, added = add_missed(xp.asarray(mine), xp.asarray(signal.astype(np.float32)), xp.asarray(theirs),
                                  found, fs, SignalConfig())
    np.testing.assert_array_equal(added, missed)
    np.testing.assert_array_equal(backend.to_host(positions), np.sort(np.concatenate([mine, missed])))
    less_steep = dataclasses.replace(SignalConfig(), other_lead_steep=1.5)   # the missed beats as steep as the rest
    assert add_missed(xp.asarray(mine), xp.asarray(signal.astype(np.float32)), xp.asarray(theirs), found, fs,
                      less_steep)[1].size == 0


def test_a_channel_named_ecg2_is_not_read_as_lead_ii(tmp_path):
    from pipeline.load import load_ecg

    path = stress.write_case(stress.make_case("bigeminy"), tmp_path / "holter.csv")
    assert load_ecg(path, fs=360.0).channel == "ECG1"


def test_the_second_lead_is_read_beside_the_analysed_one(tmp_path):
    from pipeline.load import load_ecg, load_other_lead

    case = stress.make_case("bigeminy")
    recording = load_ecg(stress.write_case(case, tmp_path / "holter.csv"), fs=360.0)
    name, other, _ = load_other_lead(recording)
    assert name == "ECG2"
    np.testing.assert_allclose(other, case.second, atol=6e-5)       # the file's 4 decimals
    single = tmp_path / "one.csv"
    np.savetxt(single, case.signal, fmt="%.4f", header="ECG", comments="")
    assert load_other_lead(load_ecg(single, fs=360.0)).signal is None


@pytest.mark.skipif(not DS1.exists(), reason=f"MIT-BIH DS1 records not found in {DS1} (set ECG_MITDB_DS1)")
def test_ds1_records_hold_their_floor():
    """Development data (the product is judged elsewhere), both leads read as a run reads them:
    every DS1 record at >= 99.5 % Se and P+, the goal. 201 (couplets of small aberrated atrial
    beats, no steeper than the swings between beats), 208 and 203 (atrial flutter/fibrillation with
    multiform ventricular beats in noise) come closest, at 99.54, 99.56 and 99.63 % Se. 116 reaches it only
    with V1 read where its MLII lead sits on the amplifier's rail for seconds. The floor keeps
    every record from sliding back."""
    from pipeline.load import load_ecg, load_other_lead

    for header in sorted(DS1.glob("*.hea")):
        recording = load_ecg(header)
        found = _found(recording.signal, recording.fs, np, load_other_lead(recording).signal)
        counts = ec57_counts(recording.annotations[0], found, recording.fs, flutter_episodes(header), (0.15,))
        se = counts["tp_150"] / (counts["tp_150"] + counts["fn_150"])
        ppv = counts["tp_150"] / (counts["tp_150"] + counts["fp_150"])
        assert se >= 0.995 and ppv >= 0.995, (header.stem, counts)
