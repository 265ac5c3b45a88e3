"""The reviewer's labels: saved at once and atomically, found again after a restart and by another
server's sessions, undone, matched to beats within 50 ms, exported as WFDB (read back with
wfdb.rdann), CSV and Parquet."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import wfdb

from dashboard.labels import ReviewLabels


@pytest.fixture
def path(tmp_path):
    return tmp_path / "labels" / "rec.parquet"


def test_labels_are_saved_at_once_and_found_again_after_a_restart(path):
    labels = ReviewLabels(path, fs=250.0)
    seen = []
    labels.subscribe(seen.append)
    previous = labels.set([1000, 2000], "V")
    assert previous == {1000: None, 2000: None} and seen == [1]
    assert path.exists() and not [p for p in path.parent.iterdir() if p.name != path.name], "no temporary files left"
    restarted = ReviewLabels(path, fs=250.0)                   # a new server process reads the file
    assert restarted.frame()["label"].tolist() == ["V", "V"]
    again = labels.set([2000], "artefact")
    labels.restore(again)                                      # undo
    assert ReviewLabels(path, fs=250.0).frame().set_index("sample")["label"].to_dict() == {1000: "V", 2000: "V"}
    labels.set([1000], None)                                   # remove a label
    assert ReviewLabels(path, fs=250.0).frame()["sample"].tolist() == [2000]


def test_labels_meet_beats_within_50_ms(path):
    labels = ReviewLabels(path, fs=250.0)
    labels.set([1000], "S")
    got = labels.labels_of(np.array([500, 1010, 1013, 2000]))   # 10 samples = 40 ms away; 13 = 52 ms
    assert got.tolist() == ["", "S", "", ""]


@pytest.mark.parametrize("bad", ["", "   ", "x" * 41, "two\nlines", 3])
def test_bad_labels_are_refused_with_one_line(path, bad):
    with pytest.raises(ValueError, match="label must be"):
        ReviewLabels(path, fs=250.0).set([10], bad)
    assert not path.exists()


def test_exports_read_back_with_wfdb_pandas_and_pyarrow(path, tmp_path):
    labels = ReviewLabels(path, fs=360.0)
    labels.set([3600, 7200], "V")
    labels.set([900], "N")
    labels.set([5000], "artefact")
    labels.set([6000], "check with Dr Lee")
    record = tmp_path / "export" / "208"
    record.parent.mkdir()
    (record.parent / "208.rev").write_bytes(labels.wfdb_bytes("208"))
    ann = wfdb.rdann(str(record), "rev")
    assert ann.sample.tolist() == [900, 3600, 5000, 6000, 7200]
    assert ann.symbol == ["N", "V", "|", '"', "V"]
    assert ann.aux_note[3] == "check with Dr Lee" and ann.fs == 360
    frame = pd.read_csv(io.BytesIO(labels.csv_bytes()))
    assert frame["sample"].tolist() == [900, 3600, 5000, 6000, 7200]
    assert frame["label"].tolist() == ["N", "V", "artefact", "check with Dr Lee", "V"]
    pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(labels.parquet_bytes())), labels.frame())


def test_exporting_nothing_says_so(path):
    with pytest.raises(ValueError, match="no beats are labelled"):
        ReviewLabels(path, fs=250.0).wfdb_bytes("rec")
