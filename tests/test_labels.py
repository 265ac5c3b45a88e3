"""The reviewer's labels: saved at once in a database shared by every session and every process of
a runs folder (two processes labelling at once lose nothing; an undo puts back only its own
change; another process's change is seen), found again after a restart, matched to beats within
50 ms, refused when they hold control characters, exported as WFDB (read back with wfdb.rdann,
UTF-8 aux notes, any record name), CSV (no formulas) and Parquet; an earlier Parquet file is
imported, a damaged database moved aside, files made as the umask says."""
from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import wfdb

from dashboard.labels import ReviewLabels

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "labels" / "rec.sqlite"


def stored(path) -> dict:
    """What a new process finds in the labels at ``path``."""
    return ReviewLabels(path, fs=250.0).frame().set_index("sample")["label"].to_dict()


def test_labels_are_saved_at_once_and_found_again_after_a_restart(path):
    labels = ReviewLabels(path, fs=250.0)
    seen = []
    labels.subscribe(seen.append)
    previous = labels.set([1000, 2000], "V")
    assert previous == {1000: None, 2000: None} and seen == [labels.version]
    assert {p.name for p in path.parent.iterdir()} <= {path.name, f"{path.name}-wal", f"{path.name}-shm"}, \
        "no temporary files left"
    assert stored(path) == {1000: "V", 2000: "V"}              # a new server process reads the database
    again = labels.set([2000], "artefact")
    labels.restore(again)                                      # undo
    assert stored(path) == {1000: "V", 2000: "V"}
    labels.set([1000], None)                                   # remove a label
    assert list(stored(path)) == [2000]


def test_labels_meet_beats_within_50_ms(path):
    labels = ReviewLabels(path, fs=250.0)
    labels.set([1000], "S")
    got = labels.labels_of(np.array([500, 1010, 1013, 2000]))   # 10 samples = 40 ms away; 13 = 52 ms
    assert got.tolist() == ["", "S", "", ""]


@pytest.mark.parametrize("bad", ["", "   ", "x" * 41, "two\nlines", 3, "\x00", "V\x00", "a\x00b", "tab\there",
                                 "\x1b[31mred", "line\u2028separator", "half \ud800 pair"])
def test_bad_labels_are_refused_with_one_line(path, bad):
    labels = ReviewLabels(path, fs=250.0)
    with pytest.raises(ValueError, match="label must be") as refused:
        labels.set([10], bad)
    assert "\n" not in str(refused.value)
    assert len(labels) == 0 and stored(path) == {}


def test_exports_read_back_with_wfdb_pandas_and_pyarrow(path, tmp_path):
    labels = ReviewLabels(path, fs=360.0)
    labels.set([3600, 7200], "V")
    labels.set([900], "N")
    labels.set([5000], "artefact")
    labels.set([6000], "check with Dr Lee", who="dr.lee", source="family")
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
    assert frame["who"].iloc[3] == "dr.lee" and frame["source"].tolist() == ["beat", "selection", "beat", "family",
                                                                             "selection"]
    parquet = pd.read_parquet(io.BytesIO(labels.parquet_bytes()))
    pd.testing.assert_frame_equal(parquet[["sample", "time_s", "label"]], labels.frame(), check_dtype=False)
    assert pd.to_datetime(parquet["labelled_at"]).notna().all()


def test_exporting_nothing_says_so(path):
    with pytest.raises(ValueError, match="no beats are labelled"):
        ReviewLabels(path, fs=250.0).wfdb_bytes("rec")


# --------------------------------------------------------------------------- exports of any text
def test_non_ascii_labels_reach_wfdb_as_utf8(path, tmp_path):
    """wfdb-python reads an aux note one character per byte: the UTF-8 bytes come back as their
    Latin-1 reading, from which the text is recovered exactly."""
    texts = ["Läsion", "心室性期外収縮", "bigeminy 🫀", "naïve ñ"]
    labels = ReviewLabels(path, fs=250.0)
    for k, text in enumerate(texts):
        labels.set([1000 * (k + 1)], text)
    data = labels.wfdb_bytes("rec")
    assert all(text.encode("utf-8") in data for text in texts)
    (tmp_path / "rec.rev").write_bytes(data)
    ann = wfdb.rdann(str(tmp_path / "rec"), "rev")
    assert ann.symbol == ['"'] * 4 and ann.sample.tolist() == [1000, 2000, 3000, 4000]
    assert [note.encode("latin-1").decode("utf-8") for note in ann.aux_note] == texts


def test_a_record_name_with_a_space_exports_to_wfdb(path, tmp_path):
    from dashboard.labels import wfdb_record_name

    labels = ReviewLabels(path, fs=250.0)
    labels.set([500, 900], "V")
    data = labels.wfdb_bytes("rec 1")
    assert wfdb_record_name("rec 1") == "rec_1" and wfdb_record_name("") == "record"
    (tmp_path / "rec_1.rev").write_bytes(data)
    assert wfdb.rdann(str(tmp_path / "rec_1"), "rev").sample.tolist() == [500, 900]


def test_csv_cells_that_start_a_formula_are_text(path):
    texts = ["=1+1", "+SUM(A1:A9)", "-2+3", "@cmd", "\uff1dHYPERLINK(1)", "plain", "a=b"]
    labels = ReviewLabels(path, fs=250.0)
    for k, text in enumerate(texts):
        labels.set([100 * (k + 1)], text)
    frame = pd.read_csv(io.BytesIO(labels.csv_bytes()), dtype={"label": str})
    assert frame["label"].tolist() == ["'=1+1", "'+SUM(A1:A9)", "'-2+3", "'@cmd", "'\uff1dHYPERLINK(1)", "plain", "a=b"]
    assert labels.frame()["label"].tolist() == texts, "the labels themselves are kept as given"
    labels.set([100], "N", who="=evil()")            # a reviewer's name is text from outside too
    assert pd.read_csv(io.BytesIO(labels.csv_bytes()), dtype={"who": str})["who"].iloc[0] == "'=evil()"


# --------------------------------------------------------------------------- several processes
TWO_PROCESSES = r"""
import json, sys, time
from pathlib import Path
from dashboard.labels import ReviewLabels

path, k = sys.argv[1], int(sys.argv[2])
labels = ReviewLabels(path, fs=250.0)
ready = Path(path).parent.parent
(ready / f"ready-{k}").touch()
deadline = time.time() + 120
while not all((ready / f"ready-{j}").exists() for j in (1, 2)) and time.time() < deadline:
    time.sleep(0.001)            # both processes begin together
began = time.time()
confirmed, undone = [], []
for i in range(80):
    sample = 100_000 * k + 10 * i
    if i % 7 == 3:               # a label given and undone: must be gone at the end
        labels.restore(labels.set([sample], f"tmp{k}"))
        undone.append(sample)
    else:
        labels.set([sample], f"P{k}")
        confirmed.append(sample)
print(json.dumps({"confirmed": confirmed, "undone": undone, "span": [began, time.time()]}))
"""


def test_two_processes_labelling_at_once_lose_no_confirmed_label(path):
    path.parent.mkdir(parents=True)
    procs = [subprocess.Popen([sys.executable, "-c", TWO_PROCESSES, str(path), str(k)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in (1, 2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    (a0, a1), (b0, b1) = results[0]["span"], results[1]["span"]
    assert max(a0, b0) < min(a1, b1), "the two processes labelled at the same time"
    found = stored(path)
    for k, result in zip((1, 2), results):
        lost = [s for s in result["confirmed"] if found.get(s) != f"P{k}"]
        assert not lost, f"process {k} lost {len(lost)} of {len(result['confirmed'])} confirmed labels: {lost[:10]}"
        assert not [s for s in result["undone"] if s in found], "an undone label came back"
    assert len(found) == sum(len(r["confirmed"]) for r in results)


def test_sessions_labelling_from_many_threads_lose_nothing(path):
    from concurrent.futures import ThreadPoolExecutor

    shared, other = ReviewLabels(path, fs=250.0), ReviewLabels(path, fs=250.0)   # one process's, another's

    def session(k: int) -> list[int]:
        labels = other if k == 0 else shared
        for i in range(40):
            labels.set([10_000 * k + i], f"T{k}")
        return [10_000 * k + i for i in range(40)]

    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(session, range(4)))
    assert stored(path) == {s: f"T{k}" for k, samples in enumerate(done) for s in samples}
    assert len(shared) == len(other) == 160


def test_another_processs_change_is_seen_and_told(path):
    """Two objects on one database are two connections, as two server processes are."""
    mine, theirs = ReviewLabels(path, fs=250.0), ReviewLabels(path, fs=250.0)
    told = []
    mine.subscribe(told.append)
    before = mine.version
    theirs.set([1000, 2000], "V")
    assert mine.version > before and mine.labels_of(np.array([1000, 2000, 3000])).tolist() == ["V", "V", ""]
    assert len(mine) == 2
    theirs.set([3000], "N")
    deadline = time.time() + 10
    while not told and time.time() < deadline:    # told by the watcher thread, without a read here
        time.sleep(0.05)
    assert told and told[-1] == mine.version and mine.frame()["label"].tolist() == ["V", "V", "N"]


def test_a_listener_unsubscribed_twice_leaves_the_next_one_subscribed(path):
    """A session's store is closed when it opens another recording and again when the session
    ends; the second time must not take away a listener subscribed since (by another session)."""
    labels = ReviewLabels(path, fs=250.0)
    told = []

    def follow(into: list) -> int:
        return labels.subscribe(lambda version: into.append(version))

    first = follow([])
    labels.unsubscribe(first)
    follow(told)                      # its listener may sit where the first one was
    labels.unsubscribe(first)
    labels.set([1000], "V")
    assert told == [labels.version]


def test_undo_puts_back_only_what_its_own_change_wrote(path):
    mine, theirs = ReviewLabels(path, fs=250.0), ReviewLabels(path, fs=250.0)
    theirs.set([4000], "S")
    undo = mine.set([1000, 2000, 3000, 4000], "V")
    assert undo == {1000: None, 2000: None, 3000: None, 4000: "S"}
    theirs.set([2000], "N")              # changed by someone else since
    theirs.set([3000], None)             # removed by someone else since
    left = mine.restore(undo)
    assert left == [2000, 3000]
    assert stored(path) == {2000: "N", 4000: "S"}
    removal = mine.set([2000], None)
    theirs.set([2000], "F")              # labelled again by someone else: the undone removal leaves it
    assert mine.restore(removal) == [2000] and stored(path)[2000] == "F"


def test_labels_record_who_when_and_where_from(path):
    labels = ReviewLabels(path, fs=250.0)
    labels.restore(labels.set([10, 20], "V", who="ann", source="family"), who="bob")
    labels.set([30], "Q")
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT sample, label, who, source FROM labels ORDER BY sample").fetchall()
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert len(rows) == 1 and rows[0][:2] == (30, "Q") and rows[0][3] == "beat" and rows[0][2]
    with pytest.raises(ValueError, match="source must be one of"):
        labels.set([40], "V", source="elsewhere")


# --------------------------------------------------------------------------- files on disk
def test_labels_of_earlier_versions_are_imported_once(tmp_path):
    folder = tmp_path / "runs" / "labels"
    folder.mkdir(parents=True)
    sha = "ab" * 32
    legacy = folder / f"{sha[:24]}.parquet"
    pd.DataFrame({"sample": np.array([900, 100], np.int64), "time_s": [3.6, 0.4],
                  "label": pd.Series(["V", "bad\x00note"], dtype=object)}).to_parquet(legacy, index=False)
    run = SimpleNamespace(report={"input": {"sha256": sha}}, path=tmp_path / "runs" / "run-1", fs=250.0)
    labels = ReviewLabels.for_run(run)
    assert labels.path == folder / f"{sha[:24]}.sqlite"
    assert labels.frame()["label"].tolist() == ["bad\ufffdnote", "V"], "a NUL of an old label made harmless"
    assert not legacy.exists() and (folder / f"{legacy.name}.migrated").exists()
    assert pd.read_csv(io.BytesIO(labels.csv_bytes()))["source"].tolist() == ["migrated", "migrated"]
    labels.set([900], "N")
    assert stored(labels.path) == {100: "bad\ufffdnote", 900: "N"}
    # The same file back (a copy restored by hand): its import is recorded, it is not imported twice.
    (folder / f"{legacy.name}.migrated").rename(legacy)
    assert stored(labels.path) == {100: "bad\ufffdnote", 900: "N"} and not legacy.exists()
    assert ReviewLabels(legacy, fs=250.0).path == labels.path, "a .parquet path names its database"


def test_a_damaged_database_is_moved_aside_and_a_fresh_one_started(path, caplog):
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database\x00" * 100)
    with caplog.at_level(logging.WARNING, logger="dashboard.labels"):
        labels = ReviewLabels(path, fs=250.0)
    aside = [p for p in path.parent.iterdir() if ".unreadable-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == b"this is not a database\x00" * 100
    assert "moved aside" in caplog.text and aside[0].name in caplog.text
    assert len(labels) == 0 and not labels.problem
    labels.set([10], "V")
    assert stored(path) == {10: "V"}


def test_the_readable_rows_of_a_damaged_database_are_kept(path, caplog):
    labels = ReviewLabels(path, fs=250.0)
    labels.set(np.arange(2000) * 100, "a label to fill several pages of rows")
    labels.close()
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    data[-3 * page:] = b"\xff" * (3 * page)          # the table's last pages ruined
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="dashboard.labels"):
        again = ReviewLabels(path, fs=250.0)
    assert "moved aside" in caplog.text
    kept = again.frame()
    assert 0 < len(kept) < 2000 and (kept["sample"] % 100 == 0).all()
    assert pd.read_csv(io.BytesIO(again.csv_bytes()))["source"].eq("selection").all()


def test_an_unreadable_earlier_labels_file_is_moved_aside(tmp_path, caplog):
    legacy = tmp_path / "labels" / "rec.parquet"
    legacy.parent.mkdir()
    legacy.write_bytes(b"PAR1 broken")
    with caplog.at_level(logging.WARNING, logger="dashboard.labels"):
        labels = ReviewLabels(legacy, fs=250.0)
    assert len(labels) == 0 and "moved aside" in caplog.text and not legacy.exists()
    assert [p.read_bytes() for p in legacy.parent.glob("rec.parquet.unreadable-*")] == [b"PAR1 broken"]


def test_labels_that_cannot_be_saved_say_so_and_do_not_stop_the_page(tmp_path, caplog):
    blocker = tmp_path / "labels"
    blocker.write_text("a file where the labels folder should be")
    with caplog.at_level(logging.ERROR, logger="dashboard.labels"):
        labels = ReviewLabels(blocker / "rec.sqlite", fs=250.0)
    assert len(labels) == 0 and labels.frame().empty and "cannot be used" in caplog.text
    with pytest.raises(ValueError, match="labels cannot be saved"):
        labels.set([10], "V")


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_label_files_follow_the_umask_like_other_outputs(tmp_path, umask):
    old = os.umask(umask)
    try:
        labels = ReviewLabels(tmp_path / "labels" / "rec.sqlite", fs=250.0)
        labels.set([10], "V")
        (tmp_path / "other.json").write_text("{}")     # how the run's other files are written
    finally:
        os.umask(old)
    expected = stat.S_IMODE((tmp_path / "other.json").stat().st_mode)
    assert expected == 0o666 & ~umask
    assert oct(stat.S_IMODE((tmp_path / "labels" / "rec.sqlite").stat().st_mode)) == oct(expected)
    files = [p for p in (tmp_path / "labels").iterdir()]
    assert {p.name for p in files} >= {"rec.sqlite", "rec.sqlite-wal"}, "the write-ahead log too"
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: oct(expected) for p in files}
