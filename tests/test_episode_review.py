"""The reviewer's verdicts on episodes: kept on disk, shared by processes, applied to detected episodes."""
from __future__ import annotations

import multiprocessing

import pandas as pd
import pytest

from dashboard.episode_review import EpisodeReview

DETECTED = pd.DataFrame({"kind": ["pause", "noise", "flutter"], "start_s": [10.0, 100.0, 500.0],
                         "end_s": [12.5, 130.0, 520.0], "confidence": [1.0, 0.8, 0.9]})


def test_verdicts_apply_to_the_detected_episodes_and_added_ones_follow(tmp_path):
    review = EpisodeReview(tmp_path / "rec.sqlite")
    review.judge("noise", 100.0, 130.0, "rejected", who="ann")
    review.judge("pause", 10.02, 12.49, "confirmed")        # another run's edges, a few ms apart
    review.judge("flutter", 700.0, 710.0, "added")
    got = review.reviewed(DETECTED)
    assert got["verdict"].tolist() == ["confirmed", "rejected", "", "added"]
    assert got.iloc[-1][["kind", "start_s", "end_s"]].tolist() == ["flutter", 700.0, 710.0]
    # a verdict on one kind never lands on another kind's episode, nor on one it barely overlaps
    review.judge("noise", 10.0, 12.5, "rejected")
    review.judge("flutter", 515.0, 560.0, "rejected")       # overlaps 5 of the detected 20 s
    assert review.reviewed(DETECTED)["verdict"].tolist()[:3] == ["confirmed", "rejected", ""]


def test_a_later_verdict_replaces_and_forget_takes_it_back(tmp_path):
    review = EpisodeReview(tmp_path / "rec.sqlite")
    review.judge("noise", 100.0, 130.0, "rejected")
    review.judge("noise", 100.0, 130.0, "confirmed", who="bob")
    assert review.verdicts()[["verdict", "who"]].values.tolist() == [["confirmed", "bob"]]
    review.forget("noise", 100.0, 130.0)
    assert review.verdicts().empty and review.reviewed(DETECTED)["verdict"].tolist() == ["", "", ""]
    assert review.reviewed(None).empty


@pytest.mark.parametrize("args, message", [
    (("seizure", 1, 2, "confirmed"), "kind must be one of"),
    (("noise", 1, 2, "maybe"), "verdict must be one of"),
    (("noise", 5, 2, "confirmed"), "end after it starts"),
    (("noise", float("nan"), 2, "confirmed"), "end after it starts"),
    (("noise", -1, 2, "confirmed"), "start at 0 s or later"),
    (("noise", "x", 2, "confirmed"), "numbers of seconds"),
])
def test_bad_verdicts_are_refused_in_one_line(tmp_path, args, message):
    review = EpisodeReview(tmp_path / "rec.sqlite")
    with pytest.raises(ValueError, match=message):
        review.judge(*args)
    assert review.verdicts().empty


def _judge(path, k):
    EpisodeReview(path).judge("pause", 10.0 * k, 10.0 * k + 3, "confirmed", who=f"p{k}")


def test_several_processes_keep_every_verdict(tmp_path):
    path = tmp_path / "rec.sqlite"
    EpisodeReview(path)
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_judge, args=(path, k)) for k in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
    assert sorted(EpisodeReview(path).verdicts()["who"]) == ["p0", "p1", "p2", "p3"]
