"""Pauses and episodes end to end, without a browser: a recording with sinus pauses (2–6 s) and
ventricular flutter, run through the pipeline; the run keeps both beats around every pause and no
beat inside the flutter, lists them as episodes, and the dashboard's episode list zooms the
recording view to the one clicked. (The browser's side: tests/test_events_browser.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import stress

PAUSES_S = (2.0, 3.0, 4.5, 6.0)


def write_pauses_and_flutter(folder) -> tuple:
    """One CSV: the ``pauses`` stress case followed by the ``flutter`` one (both at 360 Hz, lead II
    as ECG1); returns the path, the true pauses (start, end in s) and the flutter's (start, end)."""
    first, second = stress.make_case("pauses"), stress.make_case("flutter")
    offset = first.signal.size
    joined = stress.StressCase(name="pauses+flutter", fs=first.fs,
                               signal=np.concatenate([first.signal, second.signal]),
                               second=np.concatenate([first.second, second.second]),
                               beats=np.concatenate([first.beats, second.beats + offset]),
                               symbols=np.concatenate([first.symbols, second.symbols]), episodes=())
    rr = np.diff(first.beats) / first.fs
    pauses = [(first.beats[i] / first.fs, first.beats[i + 1] / first.fs) for i in np.flatnonzero(rr >= 1.9)]
    (_, start, end), = second.episodes
    path = stress.write_case(joined, folder / "pauses-flutter.csv")
    return path, pauses, (start + offset / first.fs, end + offset / first.fs)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from pipeline.config import VAEConfig
    from pipeline.run import RunRequest, run_pipeline

    folder = tmp_path_factory.mktemp("events")
    path, pauses, flutter = write_pauses_and_flutter(folder)
    result = run_pipeline(RunRequest(input=str(path), fs=360.0, device="cpu", out=str(folder / "runs"),
                                     vae=VAEConfig(epochs=2), warm_up=False))
    return result, pauses, flutter


def test_every_pause_is_listed_with_both_of_its_beats(run):
    result, pauses, _ = run
    assert len(pauses) == len(PAUSES_S)
    listed = result.episodes[result.episodes["kind"] == "pause"]
    assert len(listed) == len(pauses)
    time = result.beats["time_s"].to_numpy()
    for (start, end), (_, row) in zip(pauses, listed.iterrows()):
        assert row["start_s"] == pytest.approx(start, abs=0.05) and row["end_s"] == pytest.approx(end, abs=0.05)
        assert np.abs(time - start).min() < 0.05 and np.abs(time - end).min() < 0.05   # both beats kept
    durations = (listed["end_s"] - listed["start_s"]).to_numpy()
    np.testing.assert_allclose(np.sort(durations), PAUSES_S, atol=0.05)
    long = result.beats["length_s"] >= 2.0
    # the beats before the pauses are in the table, and so is the last one before the flutter
    assert long.sum() == len(pauses) + 1
    # the second lead was read in the pauses, and showed none of them to be a lost beat
    assert result.report["input"]["other_lead"] == "ECG2" and result.report["counts"]["from_other_lead"] == 0


def test_flutter_is_an_episode_and_holds_no_beats(run):
    result, _, (start, end) = run
    flutter = result.episodes[result.episodes["kind"] == "flutter"]
    assert len(flutter) == 1
    found = flutter.iloc[0]
    overlap = min(found["end_s"], end) - max(found["start_s"], start)
    assert overlap >= 0.8 * (end - start)
    time = result.beats["time_s"]
    assert not time.between(found["start_s"], found["end_s"]).any()
    # no pause is listed across the flutter: its waves were taken out, not missed
    pauses = result.episodes[result.episodes["kind"] == "pause"]
    assert not ((pauses["start_s"] < found["end_s"]) & (pauses["end_s"] > found["start_s"])).any()


def test_the_episode_list_zooms_the_recording_to_the_episode(run):
    from dashboard.charts import BokehBoard
    from dashboard.data_store import DataStore, SharedRun
    from dashboard.events import CONTEXT_S, EventList
    from dashboard.spec import VIEWS

    result, pauses, _ = run
    store = DataStore(SharedRun.from_run(result))
    signal = BokehBoard(store).chart(VIEWS["signal"])
    events = EventList(store)
    kinds = events.source.data["kind"]
    assert kinds[:len(pauses)] == ["pause"] * len(pauses) and "ventricular flutter/fibrillation" in kinds
    assert events.source.data["duration_s"][0] == pytest.approx(max(PAUSES_S), abs=0.05)   # longest first
    assert events.caption.object.startswith("4 pauses · 1 flutter/fibrillation episode · ")
    for row in (0, 0, 2):                     # the same row twice: the second click zooms again
        signal.zoom(0.0, store.shared.duration_s)
        events.source.selected.indices = [row]
        start, end = events.source.data["start_s"][row], events.source.data["end_s"][row]
        x_range = signal.figure.x_range
        assert (x_range.start, x_range.end) == pytest.approx((max(start - CONTEXT_S, 0), end + CONTEXT_S))
    track = signal.figure.select_one({"name": "ecg-episodes"})
    assert sorted(set(track.data["kind"])) == ["flutter", "pause"]


def test_the_reviewer_judges_and_adds_episodes_and_they_are_kept(run):
    """Confirm a pause, reject the flutter, add the shown window as noise; a second session of the
    same run reads every verdict back from disk; 'No verdict' takes one back."""
    from dashboard.data_store import DataStore, SharedRun
    from dashboard.episode_review import EpisodeReview
    from dashboard.events import EventList

    result, _, _ = run
    shared = SharedRun.from_run(result)
    events = EventList(DataStore(shared), who="ann")
    data = events.source.data
    assert events.confirm.disabled and data["verdict"] == [""] * len(data["kind"])
    events.source.selected.indices = [0]                    # the longest pause
    assert not events.confirm.disabled and events.status.object.startswith("Chosen: pause at ")
    events.confirm.clicks += 1
    flutter_row = data["code"].index("flutter")
    events.source.selected.indices = [flutter_row]
    events.reject.clicks += 1
    events.store.update(time_range=(100.0, 104.0))
    events.kind.value = "noise"
    events.add.clicks += 1

    again = EventList(DataStore(shared), who="bob").source.data
    verdicts = dict(zip(zip(again["code"], again["start_s"]), again["verdict"]))
    assert again["verdict"][0] == "✓ confirmed" and again["verdict"][again["code"].index("flutter")] == "✗ not an episode"
    assert ("noise", 100.0) in verdicts and verdicts[("noise", 100.0)] == "+ added"
    stored = EpisodeReview.for_run(result).verdicts()
    assert sorted(stored["verdict"]) == ["added", "confirmed", "rejected"] and set(stored["who"]) == {"ann"}

    events.source.selected.indices = [0]
    events.clear.clicks += 1
    assert events.source.data["verdict"][0] == ""
    assert sorted(EpisodeReview.for_run(result).verdicts()["verdict"]) == ["added", "rejected"]


def test_a_rejected_episode_leaves_the_bands_and_no_verdict_brings_it_back(run):
    """The bands on the recording and the tachogram follow the verdicts in place (new data in the
    same source): 'Not an episode' takes the flutter's band away, 'No verdict' brings it back,
    'Confirm' draws it stronger; an added episode is drawn; a new session starts without the
    rejected band."""
    from dashboard.charts import BokehBoard
    from dashboard.data_store import DataStore, SharedRun
    from dashboard.events import EventList
    from dashboard.spec import VIEWS

    result, _, (flutter_start, _) = run
    shared = SharedRun.from_run(result)

    def session():
        store = DataStore(shared)
        board = BokehBoard(store)
        figures = [board.chart(VIEWS[name]).figure for name in ("signal", "rhythm")]   # recording, tachogram
        return EventList(store, who="ann"), [p.select_one({"name": "ecg-episodes"}) for p in figures], figures

    def flutter_bands(track) -> list:
        return [(x0, alpha) for kind, x0, alpha in zip(track.data["kind"], track.data["x0"], track.data["fill_alpha"])
                if kind == "flutter"]

    events, tracks, figures = session()
    row = events.source.data["code"].index("flutter")
    events.source.selected.indices = [row]
    events.clear.clicks += 1                          # whatever an earlier test left: no verdict
    for track in tracks:
        (x0, alpha), = flutter_bands(track)
        assert x0 == pytest.approx(flutter_start, abs=1.0) and alpha == pytest.approx(0.18)

    events.source.selected.indices = [row]
    events.reject.clicks += 1
    assert events.source.data["verdict"][row] == "✗ not an episode"     # still listed, as rejected
    for track in tracks:
        assert flutter_bands(track) == [] and "pause" in track.data["kind"]
    assert flutter_bands(session()[1][0]) == []       # another session opens without it
    assert [p.select_one({"name": "ecg-episodes"}) for p in figures] == tracks   # the same sources, new data

    events.source.selected.indices = [row]
    events.clear.clicks += 1
    for track in tracks:
        (_, alpha), = flutter_bands(track)
        assert alpha == pytest.approx(0.18)

    events.source.selected.indices = [row]
    events.confirm.clicks += 1
    for track in tracks:
        (_, alpha), = flutter_bands(track)
        assert alpha > 0.18

    events.store.update(time_range=(60.0, 62.5))
    events.kind.value = "noise"
    events.add.clicks += 1
    for track in tracks:
        assert (60.0, 62.5) in [(x0, x1) for x0, x1 in zip(track.data["x0"], track.data["x1"])]
    events.source.selected.indices = [events.source.data["start_s"].tolist().index(60.0)]
    events.reject.clicks += 1                         # rejecting one's own addition takes it back
    for track in tracks:
        assert 60.0 not in list(track.data["x0"])
    events.source.selected.indices = [events.source.data["code"].index("flutter")]
    events.clear.clicks += 1


def test_a_doubtful_pause_says_so_in_the_list():
    """A pause the detector is unsure of (confidence under 1: across noise, or where the other lead
    shows beats) reads "pause (doubtful)", and the caption counts and explains them."""
    import pandas as pd

    from dashboard.events import EventList, event_rows

    episodes = pd.DataFrame({"kind": ["pause", "pause", "noise", "lost"], "start_s": [10.0, 40.0, 40.5, 90.0],
                             "end_s": [12.5, 44.0, 43.5, 95.0], "confidence": np.float32([1.0, 0.5, 0.5, 1.0])})
    rows = event_rows(episodes)
    assert rows["kind"] == ["pause (doubtful)", "pause", "noise", "signal lost"]   # longest pause first
    caption = EventList._caption(episodes)
    assert caption.startswith("2 pauses (1 doubtful: across noise or lost signal, or where the other lead shows beats")
    assert "1 noise episode · 1 stretch of lost signal · click a row" in caption
    added = episodes.assign(confidence=np.float32([1.0, 1.0, 1.0, 1.0]))
    assert "doubtful" not in EventList._caption(added) and "doubtful" not in " ".join(event_rows(added)["kind"])
