"""The review of a lead chosen by QRS clarity by the beats each lead finds
(:mod:`pipeline.lead_agreement`): the counting on hand-placed beats, and the choice on an MIT-BIH
record whose leads are written out as numbered channels."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import backend
from pipeline.config import SignalConfig
from pipeline.lead_agreement import WORSE_BY, WORSE_PLUS, Agreement, _betrayed, compare_leads, review_choice
from tests.support.own_t_waves import spikes

FS = 250.0
DS1 = Path(os.environ.get("ECG_MITDB_DS1", Path(__file__).resolve().parents[2] / "shared" / "data" / "mitdb-ds1"))


def test_each_lead_is_charged_with_its_false_beats_and_the_beats_it_shows_but_missed(xp):
    """Beats every 0.8 s on both leads. Lead 0's detector also 'found' 7 T waves, where lead 1 is
    flat (lead 0's false beats) and missed 4 QRS complexes it shows (lead 0's misses). Lead 1 missed
    3 beats whose QRS it does not show at all (a lead off): those read as lead 0's false beats, as
    nothing on either lead tells them from a false beat. Lead 0 also 'found' 5 beats where lead 1
    shows a bump a quarter as steep as its beats, which tells neither way, and 12 beats where lead 1
    is dead (its samples constant for 10 s: a lead off, a recorder's zeros), which tell nothing."""
    n = int(120 * FS)
    true = np.arange(int(0.5 * FS), n - int(FS), int(0.8 * FS))
    t_waves = true[10:17] + int(0.3 * FS)
    lead0 = spikes(FS, n, true, np.ones(true.size), 0.01) + spikes(FS, n, t_waves, np.full(7, 0.4), 0.04)
    hidden = true[40:43]
    dead = slice(int(100 * FS), int(110 * FS))
    lead1_beats = np.setdiff1d(true, np.concatenate([hidden, true[(true >= dead.start) & (true < dead.stop)]]))
    bumps = true[80:85] + int(0.4 * FS)
    lead1 = spikes(FS, n, lead1_beats, np.full(lead1_beats.size, 0.7), 0.012) + spikes(FS, n, bumps,
                                                                                          np.full(5, 0.175), 0.012)
    lead1 += np.random.default_rng(0).normal(0, 0.002, n)   # quiet, where it shows no QRS, but alive
    lead1[dead] = 0.3
    assert ((true >= dead.start) & (true < dead.stop)).sum() == 12
    found0 = np.sort(np.concatenate([np.setdiff1d(true, true[60:64]), t_waves, bumps]))
    found1 = lead1_beats
    leads = (xp.asarray(lead0.astype(np.float32)), xp.asarray(lead1.astype(np.float32)))
    errors = _betrayed(leads, [found0, found1], FS, SignalConfig())
    np.testing.assert_array_equal(errors, [4 + 7 + 3, 0])


def test_a_lead_without_beats_misses_every_beat_of_the_other(xp):
    leads = (xp.zeros(10_000, dtype=xp.float32), xp.zeros(10_000, dtype=xp.float32))
    beats = np.arange(100, 9000, 200)
    np.testing.assert_array_equal(_betrayed(leads, [beats, np.zeros(0, np.int64)], FS, SignalConfig()),
                                  [0, beats.size])


def test_the_chosen_lead_goes_only_when_clearly_worse():
    assert not Agreement(chosen=10, other=7, minutes=30).other_is_better
    assert not Agreement(chosen=int(WORSE_BY * 20 + WORSE_PLUS), other=20, minutes=30).other_is_better
    assert Agreement(chosen=int(WORSE_BY * 20 + WORSE_PLUS) + 1, other=20, minutes=30).other_is_better
    assert not Agreement(chosen=WORSE_PLUS, other=0, minutes=30).other_is_better


def _numbered_channels(tmp_path: Path, first: str) -> Path:
    """MIT-BIH 203 written as a CSV whose channels are named ECG1 and ECG2, ``first`` (MLII or V1)
    as ECG1."""
    import wfdb

    record = wfdb.rdrecord(str(DS1 / "203"))
    order = [first] + [name for name in record.sig_name if name != first]
    frame = pd.DataFrame({f"ECG{i + 1}": record.p_signal[:, record.sig_name.index(name)]
                          for i, name in enumerate(order)})
    path = tmp_path / f"203-{first}-first.csv"
    frame.to_csv(path, index=False, float_format="%.3f")
    return path


@pytest.mark.skipif(not DS1.exists(), reason=f"MIT-BIH DS1 records not found in {DS1} (set ECG_MITDB_DS1)")
@pytest.mark.parametrize("first", ["V1", "MLII"])
def test_numbered_leads_are_read_on_the_lead_whose_beats_hold_up(tmp_path, first, device):
    """Development data. 203 read on V1 finds T waves that MLII does not show (its P+ falls from
    99.7 % to 96.3 %), though V1's QRS clarity is not half MLII's, so clarity keeps V1 when it comes
    first. The beats overrule it; with MLII first, nothing changes."""
    from pipeline.load import load_ecg, load_other_lead

    recording = load_ecg(_numbered_channels(tmp_path, first), fs=360.0, device=device)
    assert recording.channel == "ECG1" and recording.lead_by_clarity
    other = load_other_lead(recording, device=device).signal
    reviewed, beside = review_choice(recording, load_other_lead(recording, device=device), SignalConfig())
    mlii = "ECG1" if first == "MLII" else "ECG2"
    assert reviewed.channel == mlii and beside.name == ({"ECG1", "ECG2"} - {mlii}).pop()
    assert backend.xp_of(reviewed.signal) is backend.xp_of(other)
    np.testing.assert_allclose(backend.to_host(beside.signal),
                               backend.to_host(recording.signal if first == "V1" else other))
    if first == "V1":
        assert reviewed.lead_reason.startswith("its beats agree better") and "QRS clarity alone chose ECG1" in \
            reviewed.lead_reason
        agreement = compare_leads(recording.signal, other, recording.fs, SignalConfig())
        assert agreement.other_is_better and agreement.chosen > 3 * agreement.other
    else:
        assert reviewed is recording


def test_a_lead_named_or_asked_for_is_not_reviewed(tmp_path):
    from pipeline import stress
    from pipeline.load import OtherLead, load_ecg

    path = stress.write_case(stress.make_case("bigeminy"), tmp_path / "holter.csv")
    assert load_ecg(path, fs=360.0).lead_by_clarity
    asked = load_ecg(path, fs=360.0, column="ECG2")
    assert not asked.lead_by_clarity
    assert review_choice(asked, OtherLead("ECG1", np.zeros(asked.n_samples, np.float32)), SignalConfig())[0] is asked
    frame = pd.read_csv(path).rename(columns={"ECG1": "MLII"})
    frame.to_csv(tmp_path / "named.csv", index=False)
    assert not load_ecg(tmp_path / "named.csv", fs=360.0).lead_by_clarity


def test_true_beats_the_other_lead_hides_in_its_noise_count_against_neither(tmp_path):
    """The amplifier-recovery stress case: after each overload the first lead's QRS complexes come
    back at 0.15 × their size for 6 s, and its detector finds them; the second lead (the first
    inverted at 0.35 × with its own noise) holds them under its noise and misses them. There it shows
    neither a QRS nor a flat line, so those beats tell nothing, and the first lead stays."""
    from pipeline import stress
    from pipeline.load import load_ecg, load_other_lead

    case = stress.make_case("amplifier_recovery")
    recording = load_ecg(stress.write_case(case, tmp_path / "holter.csv"), fs=case.fs)
    other = load_other_lead(recording)
    agreement = compare_leads(recording.signal, other.signal, recording.fs, SignalConfig())
    assert not agreement.other_is_better and agreement.chosen <= 2
    assert agreement.minutes == pytest.approx(case.signal.size / case.fs / 60)
    assert review_choice(recording, other, SignalConfig())[0] is recording


def test_where_the_other_lead_is_lost_its_beats_count_for_neither(tmp_path):
    """The second lead drops out for 25 s (empty cells, bridged by a straight line): there it is
    flat, and the first lead's beats would all count as false ones, enough to hand the analysis to
    the lead that lost them. The stretch where either lead's signal is lost is left out of the
    count, and the first lead stays."""
    from pipeline import stress
    from pipeline.load import load_ecg, load_other_lead

    case = stress.make_case("atrial_fibrillation")
    frame = pd.read_csv(stress.write_case(case, tmp_path / "holter.csv"))
    dropout = slice(int(20 * case.fs), int(45 * case.fs))
    frame["ECG2"] = frame["ECG2"].astype(object)
    frame.loc[dropout.start:dropout.stop - 1, "ECG2"] = ""
    frame.to_csv(tmp_path / "dropout.csv", index=False)
    recording = load_ecg(tmp_path / "dropout.csv", fs=case.fs)
    assert recording.channel == "ECG1" and recording.lead_by_clarity
    other = load_other_lead(recording)
    np.testing.assert_allclose(other.lost_s, [[dropout.start / case.fs, dropout.stop / case.fs]])
    blind = compare_leads(recording.signal, other.signal, recording.fs, SignalConfig())
    assert blind.other_is_better and blind.chosen >= 20    # the dropout's beats, all "false"
    fair = compare_leads(recording.signal, other.signal, recording.fs, SignalConfig(), other.lost_s)
    assert not fair.other_is_better and fair.chosen <= 2
    assert review_choice(recording, other, SignalConfig())[0] is recording
