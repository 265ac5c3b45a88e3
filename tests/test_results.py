"""Tests of pipeline.results: label matching, the beats table, hashing, and the run directory
(atomic write, verification, round trip) on small hand-made runs."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline import PipelineWarning, digests, results
from pipeline.config import VAEConfig
from pipeline.model import VAE


# --------------------------------------------------------------------------- labels and table
def _brute_force_labels(fiducial, ref_samples, ref_symbols, tolerance):
    labels = []
    for f in fiducial if len(ref_samples) else []:
        distance = np.abs(np.asarray(ref_samples) - f)
        best = int(np.argmin(distance))  # first of equals: the earlier reference beat
        labels.append(ref_symbols[best] if distance[best] <= tolerance else "")
    return np.array(labels or [""] * len(fiducial), dtype=object)


@pytest.mark.parametrize("n_ref", [0, 1, 2, 500])
def test_match_labels_equals_brute_force(n_ref):
    rng = np.random.default_rng(n_ref)
    ref = np.sort(rng.choice(100_000, n_ref, replace=False))
    symbols = rng.choice(list("NVAQ"), n_ref)
    order = rng.permutation(n_ref)  # the reference need not be sorted
    fiducial = np.sort(rng.integers(0, 100_000, 400))
    got = results.match_labels(fiducial, ref[order], symbols[order], 54)
    np.testing.assert_array_equal(got, _brute_force_labels(fiducial, ref, symbols, 54))
    if n_ref == 500:
        assert 0 < (got != "").sum() < len(got)


def test_match_labels_tolerance_is_inclusive():
    got = results.match_labels(np.array([100, 154, 155, 1000]), np.array([100, 100 + 54 + 54]), np.array(["N", "V"]), 54)
    assert got.tolist() == ["N", "N", "V", ""]


def _table(annotations=None, n=6):
    return results.beats_table(fiducial=np.arange(1, n + 1) * 300, length=np.full(n, 300), start=np.arange(1, n + 1) * 300 - 64,
                               fs=250.0, is_train=np.arange(n) % 2 == 0, z=np.ones((n, 2)), score=np.arange(n, dtype=float),
                               annotations=annotations)


def test_beats_table_without_annotations_has_no_label():
    table = _table()
    assert "label" not in table and "abnormal" not in table
    assert table["split"].tolist() == ["train", "test"] * 3
    np.testing.assert_allclose(table["time_s"], np.arange(1, 7) * 300 / 250.0)


def test_beats_table_labels_and_abnormal():
    ref = (np.array([300, 600, 905, 1200, 1800]), np.array(["N", "V", "L", "A", "Q"]))
    table = _table(ref)
    assert table["label"].tolist() == ["N", "V", "L", "A", "", "Q"]
    assert table["abnormal"].tolist() == [False, True, False, True, False, True]  # L is normal; '' is unknown


# --------------------------------------------------------------------------- hashing
def test_input_sha256_covers_every_wfdb_file(mitdb_copy):
    record = mitdb_copy / "100"
    first = results.input_sha256(record.with_suffix(".hea"))
    assert results.input_sha256(record) == first == results.input_sha256(record.with_suffix(".dat"))
    atr = record.with_suffix(".atr")
    atr.write_bytes(atr.read_bytes() + b"\0")
    assert results.input_sha256(record.with_suffix(".hea")) != first  # new annotations: a new run


def test_file_sha256_matches_hashlib(tmp_path):
    import hashlib

    path = tmp_path / "blob"
    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 17)
    path.write_bytes(data)
    assert results.file_sha256(path, chunk=1 << 20) == hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- run directory
@pytest.fixture
def parts():
    """Everything write_run needs, small."""
    from pipeline.families import find_families

    torch.manual_seed(0)
    model = VAE(64, VAEConfig(epochs=1))
    rng = np.random.default_rng(1)
    embeddings = rng.standard_normal((6, 64)).astype(np.float32)
    return dict(report={"key": "k", "counts": {"beats": np.int64(6)}, "value": np.float32(0.5), "array": np.arange(3)},
                beats=_table(), fiducials=np.arange(7) * 300, signal=rng.standard_normal(3000).astype(np.float32),
                embeddings=embeddings, decoded_z=np.zeros((9, 2)), decoded=np.zeros((9, 64)),
                checkpoint={"config": asdict(model.cfg), "width": 64, "model": model.state_dict()},
                families=find_families(embeddings), episodes=_episodes())


def _episodes():
    from pipeline.episodes import Episodes

    found = Episodes(kind=["noise", "flutter"], start_s=[1.0, 4.0], end_s=[1.5, 6.0], confidence=[0.8, 0.9])
    # pauses: one before the flutter episode, across the noise (in doubt), one across the flutter
    # (left out: its beats were taken out)
    return results.episodes_table(found, np.array([[100, 700], [750, 1900]]), fs=250.0)


def test_episodes_table_lists_pauses_but_not_across_flutter():
    table = _episodes()
    assert list(table.columns) == list(results.EPISODE_COLUMNS)
    assert table["kind"].tolist() == ["pause", "noise", "flutter"]
    assert table.iloc[0][["start_s", "end_s"]].tolist() == [0.4, 2.8]
    assert table["confidence"].tolist() == pytest.approx([0.5, 0.8, 0.9])


def test_a_pause_across_noise_is_in_doubt():
    """Beats in noise may be hidden rather than missing: a pause that a noise episode overlaps, even
    in part, is listed with confidence 0.5; one beside it, with 1."""
    from pipeline.episodes import Episodes

    found = Episodes(kind=["noise"], start_s=[3.0], end_s=[3.5], confidence=[0.9])
    table = results.episodes_table(found, np.array([[100, 700], [750, 1000], [1200, 1800]]), fs=250.0)
    pauses = table[table["kind"] == "pause"]
    assert pauses["start_s"].tolist() == [0.4, 3.0, 4.8]
    assert pauses["confidence"].tolist() == [1.0, 0.5, 1.0]


def test_write_and_load_round_trip(tmp_path, parts):
    path = results.write_run(tmp_path, "key1", **parts)
    pd.testing.assert_frame_equal(results.load_run(path).episodes, parts["episodes"], check_dtype=False)  # text: object or str
    assert path == tmp_path / "key1" and [p.name for p in tmp_path.iterdir()] == ["key1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert results.find_cached(tmp_path, "key1") == path
    run = results.load_run(path)
    assert run.cached
    pd.testing.assert_frame_equal(run.beats, parts["beats"])
    np.testing.assert_array_equal(run.signal, parts["signal"])
    np.testing.assert_array_equal(run.embeddings, parts["embeddings"])
    np.testing.assert_array_equal(run.fiducials, parts["fiducials"])
    assert run.report["counts"] == {"beats": 6} and run.report["value"] == 0.5 and run.report["array"] == [0, 1, 2]
    assert set(run.report["files"]) == set(results.FILES)
    x = torch.from_numpy(parts["embeddings"])
    with torch.no_grad():
        original = VAE(64, VAEConfig(epochs=1))
        original.load_state_dict(parts["checkpoint"]["model"])
        torch.testing.assert_close(run.model().encode(x)[0], original.eval().encode(x)[0])


def test_find_cached_missing_is_quiet(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert results.find_cached(tmp_path, "absent") is None


def test_write_run_replaces_a_damaged_run(tmp_path, parts):
    path = results.write_run(tmp_path, "key1", **parts)
    (path / "signal.npy").unlink()
    with pytest.warns(PipelineWarning, match=r"signal\.npy missing"):
        assert results.find_cached(tmp_path, "key1") is None
    path = results.write_run(tmp_path, "key1", **parts)
    assert results.find_cached(tmp_path, "key1") == path
    assert [p.name for p in tmp_path.iterdir()] == ["key1"]  # no trash folder left


@pytest.mark.parametrize("failing", ["beats", "checkpoint", "report"])
def test_write_run_failure_is_atomic(tmp_path, parts, failing):
    original = results.write_run(tmp_path, "key1", **parts)
    shutil.copytree(original, tmp_path / "backup")
    bad = dict(parts)
    if failing == "beats":
        bad["beats"] = parts["beats"].assign(bad=[object()] * 6)  # parquet cannot store it
    elif failing == "checkpoint":
        bad["checkpoint"] = {"model": lambda: None}  # torch.save cannot pickle a lambda
    else:
        bad["report"] = {"cycle": None}
        bad["report"]["cycle"] = bad["report"]  # json cannot encode a cycle
    for key in ("key1", "key2"):  # over an existing run, and as a new one
        with pytest.raises(Exception):
            results.write_run(tmp_path, key, **bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "key1"]  # no key2, no temporary folder
    for p in (tmp_path / "backup").iterdir():
        assert (original / p.name).read_bytes() == p.read_bytes()


# --------------------------------------------------------------------------- helpers of the checks below
def _refuse_to_hash(*args, **kwargs):
    raise AssertionError("a file was read and hashed")


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


@pytest.fixture
def deadline():
    """Fail a test that blocks (opening a FIFO for reading waits for a writer) instead of hanging
    the suite: SIGALRM interrupts the wait and raises."""
    import signal

    if not hasattr(signal, "SIGALRM"):
        pytest.skip("needs SIGALRM")

    def expire(signum, frame):
        raise TimeoutError("blocked: waited 20 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- content checks
def _flip_a_byte_keeping_size_and_time(path: Path):
    """Damage ``path`` in place as a failing disk or a stray write might: same size, and its
    modification time set back to what it was."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_write_run_records_the_xxh3_of_each_file(tmp_path, parts):
    import xxhash

    path = results.write_run(tmp_path, "key1", **parts)
    report = results.load_run(path).report
    assert report["file_hash"] == "xxh3_128" and set(report["files"]) == set(results.FILES)
    for name, digest in report["files"].items():
        assert digest == xxhash.xxh3_128_hexdigest((path / name).read_bytes())


def test_file_xxh3_of_an_empty_file(tmp_path):
    import xxhash

    (tmp_path / "empty").write_bytes(b"")
    assert results.file_xxh3(tmp_path / "empty") == xxhash.xxh3_128_hexdigest(b"")


def test_every_file_is_verified_by_content(tmp_path, parts, monkeypatch):
    path = results.write_run(tmp_path, "key1", **parts)
    hashed = []
    original = results.file_xxh3
    monkeypatch.setattr(results, "file_xxh3", lambda p: hashed.append(Path(p).name) or original(p))
    monkeypatch.setitem(results.HASHES, "xxh3_128", results.file_xxh3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert results.find_cached(tmp_path, "key1") == path
    assert sorted(hashed) == sorted(results.FILES)


@pytest.mark.parametrize("name", results.FILES)
def test_damage_in_place_with_size_and_time_kept_is_detected(tmp_path, parts, name):
    """The stat of a file cannot vouch for its bytes: size and modification time can both be those
    recorded while the content is not."""
    path = results.write_run(tmp_path, "key1", **parts)
    _flip_a_byte_keeping_size_and_time(path / name)
    problem = rf"damaged \({re.escape(name)} does not match its checksum\); recomputing"
    with pytest.warns(PipelineWarning, match=problem):
        assert results.find_cached(tmp_path, "key1") is None


def test_run_written_with_sha256_digests_is_still_verified(tmp_path, parts):
    """Runs written before the XXH3 digests list SHA-256 ones (and no file_hash): checked with those."""
    path = results.write_run(tmp_path, "key1", **parts)
    report = json.loads((path / results.REPORT).read_text())
    del report["file_hash"]
    report["files"] = {name: results.file_sha256(path / name) for name in results.FILES}
    (path / results.REPORT).write_text(json.dumps(report))
    assert results.find_cached(tmp_path, "key1") == path
    _flip_a_byte_keeping_size_and_time(path / "signal.npy")
    with pytest.warns(PipelineWarning, match=r"signal\.npy does not match its checksum"):
        assert results.find_cached(tmp_path, "key1") is None


def test_unknown_hash_name_is_damage(tmp_path, parts):
    path = results.write_run(tmp_path, "key1", **parts)
    report = json.loads((path / results.REPORT).read_text())
    report["file_hash"] = "md4\nsecond line"
    (path / results.REPORT).write_text(json.dumps(report))
    with pytest.warns(PipelineWarning, match="unknown hash") as caught:
        assert results.find_cached(tmp_path, "key1") is None
    assert "\n" not in str(caught[0].message)


@needs_fifo
def test_fifo_in_a_run_is_damage_not_a_hang(tmp_path, parts, deadline):
    path = results.write_run(tmp_path, "key1", **parts)
    (path / "signal.npy").unlink()
    os.mkfifo(path / "signal.npy")
    with pytest.warns(PipelineWarning, match=r"signal\.npy unreadable"):
        assert results.find_cached(tmp_path, "key1") is None


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_run_files_follow_the_umask(tmp_path, parts, umask):
    """Every file of a run (and the input-hash cache beside the runs) gets 0o666 less the umask,
    the run's folder 0o777 less it: no file more private or more open than its neighbours."""
    previous = os.umask(umask)
    try:
        path = results.write_run(tmp_path / "runs", "key1", **parts)
        (tmp_path / "ecg.csv").write_text("1.0\n")
        results.remember_input_digest(tmp_path / "ecg.csv", tmp_path / "runs", [], {"sha256": "x", "annotations": None})
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask
    for file in [*path.iterdir(), tmp_path / "runs" / results.HASH_CACHE]:
        assert stat.S_IMODE(file.stat().st_mode) == 0o666 & ~umask, file.name


# --------------------------------------------------------------------------- inputs that are not files
def test_folder_input_is_refused_in_plain_words(tmp_path):
    folder = tmp_path / "recordings"
    folder.mkdir()
    message = rf"^{re.escape(str(folder))} is a folder; give a recording file \(\.csv, .*WFDB \.hea record\)$"
    for call in (results.input_files, results.input_signature, results.input_digest):
        with pytest.raises(ValueError, match=message):
            call(folder)


@needs_fifo
def test_fifo_input_is_refused_without_reading_it(tmp_path, deadline):
    fifo = tmp_path / "ecg.csv"
    os.mkfifo(fifo)
    for call in (results.input_files, results.input_digest, results.file_sha256, results.file_xxh3,
                 lambda p: results.remembered_input_digest(p, tmp_path)):
        with pytest.raises(ValueError, match=rf"^{re.escape(str(fifo))} is a FIFO \(named pipe\), not a regular file"):
            call(fifo)


@needs_fifo
def test_fifo_in_a_wfdb_record_is_refused(mitdb_copy, deadline):
    (mitdb_copy / "100.dat").unlink()
    os.mkfifo(mitdb_copy / "100.dat")
    with pytest.raises(ValueError, match=r"100\.dat is a FIFO"):
        results.input_digest(mitdb_copy / "100.hea")


def test_device_input_is_refused(deadline):
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    with pytest.raises(ValueError, match=r"^/dev/zero is a character device, not a regular file"):
        results.input_digest(Path("/dev/zero"))


@needs_fifo
def test_refusal_is_one_line_whatever_the_name(tmp_path, deadline):
    fifo = tmp_path / "two\nlines.csv"
    os.mkfifo(fifo)
    with pytest.raises(ValueError) as caught:
        results.input_files(fifo)
    assert "\n" not in str(caught.value) and repr(str(fifo)) in str(caught.value)


# --------------------------------------------------------------------------- the sidecar of reference labels
def test_sidecar_is_part_of_the_input_digest(tmp_path):
    import hashlib

    from pipeline.sidecar import annotations_path

    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n2.0\n3.0\n")
    side = annotations_path(path)
    bare, bare_signature = results.input_digest(path), results.input_signature(path)
    assert bare == {"sha256": results.file_sha256(path), "annotations": None}

    side.write_text("sample,symbol\n1,N\n")
    labelled = results.input_digest(path)
    assert labelled == {"sha256": bare["sha256"], "annotations": hashlib.sha256(side.read_bytes()).hexdigest()}
    assert results.input_signature(path) != bare_signature
    assert results.input_files(path) == [path, side]

    side.write_text("sample,symbol\n1,V\n")  # same size
    assert results.input_digest(path)["annotations"] not in (None, labelled["annotations"])
    side.unlink()
    assert results.input_digest(path) == bare and results.input_signature(path) == bare_signature


def test_remembered_digest_follows_the_sidecar(tmp_path, monkeypatch):
    from pipeline.sidecar import annotations_path

    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n2.0\n3.0\n")
    digest, signature = results.remembered_input_digest(path, tmp_path)
    results.remember_input_digest(path, tmp_path, signature, digest)
    annotations_path(path).write_text("sample,symbol\n1,N\n")  # added later: the remembered digest is stale
    assert results.remembered_input_digest(path, tmp_path)[0]["annotations"] is not None


@needs_fifo
def test_sidecar_that_is_not_a_file_is_ignored_like_load_does(tmp_path, deadline):
    from pipeline.sidecar import annotations_path

    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n2.0\n3.0\n")
    os.mkfifo(annotations_path(path))
    assert results.input_digest(path)["annotations"] is None and results.input_files(path) == [path]


def test_wfdb_record_has_no_sidecar(mitdb_copy):
    (mitdb_copy / "100.annotations.csv").write_text("sample,symbol\n1,N\n")  # a WFDB record's labels are its .atr
    assert results.input_digest(mitdb_copy / "100.hea")["annotations"] is None


# --------------------------------------------------------------------------- remembered input hashes
def test_input_hash_is_remembered_while_the_file_is_unchanged(tmp_path, monkeypatch):
    import hashlib

    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n2.0\n3.0\n")
    digest, signature = results.remembered_input_digest(path, tmp_path)
    assert digest == {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "annotations": None}
    results.remember_input_digest(path, tmp_path, signature, digest)
    assert (tmp_path / results.HASH_CACHE).exists()
    with monkeypatch.context() as m:
        m.setattr(digests, "file_sha256", _refuse_to_hash)
        assert results.remembered_input_digest(path, tmp_path) == (digest, signature)

    st = path.stat()
    path.write_text("1.0\n2.0\n4.0\n")                          # same size...
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))        # ...and the old modification time
    changed, new_signature = results.remembered_input_digest(path, tmp_path)
    assert new_signature != signature                          # the change time gives it away
    assert changed["sha256"] == hashlib.sha256(b"1.0\n2.0\n4.0\n").hexdigest() != digest["sha256"]


def test_remembered_wfdb_hash_covers_every_file(mitdb_copy, monkeypatch):
    record = mitdb_copy / "100.hea"
    digest, signature = results.remembered_input_digest(record, mitdb_copy)
    assert digest["sha256"] == results.input_sha256(record)
    assert [s[0] for s in signature] == ["100.atr", "100.dat", "100.hea"]
    results.remember_input_digest(record, mitdb_copy, signature, digest)
    atr = mitdb_copy / "100.atr"
    atr.write_bytes(atr.read_bytes() + b"\0")
    assert results.remembered_input_digest(record, mitdb_copy)[0] != digest


def test_old_remembered_entries_are_hashed_again(tmp_path):
    """An entry remembered before the sidecar counted holds a bare SHA-256: not reused."""
    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n")
    signature = results.input_signature(path)
    old_entry = {str(path.resolve()): {"signature": signature, "sha256": "old"}}
    (tmp_path / results.HASH_CACHE).write_text(json.dumps(old_entry))
    assert results.remembered_input_digest(path, tmp_path)[0]["sha256"] == results.file_sha256(path)


def test_remembering_is_best_effort_and_bounded(tmp_path, monkeypatch):
    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n")
    results.remember_input_digest(path, tmp_path / "missing", [], {"sha256": "x"})  # no folder: nothing, no error
    assert not (tmp_path / "missing").exists()
    monkeypatch.setattr(results, "HASH_CACHE_ENTRIES", 3)
    for i in range(5):
        results.remember_input_digest(tmp_path / f"f{i}.csv", tmp_path, [], {"sha256": str(i)})
    entries = json.loads((tmp_path / results.HASH_CACHE).read_text())
    assert [e["digest"]["sha256"] for e in entries.values()] == ["2", "3", "4"]  # the most recent ones
    (tmp_path / results.HASH_CACHE).write_text("not json")
    assert results.remembered_input_digest(path, tmp_path)[0]["sha256"] == results.file_sha256(path)  # broken: hash


# --------------------------------------------------------------------------- leftovers of killed processes
def _old(path: Path, seconds: float = 3600) -> Path:
    """Set ``path`` (and what a folder holds) ``seconds`` into the past."""
    import time

    past = time.time() - seconds
    for p in [*(path.iterdir() if path.is_dir() else []), path]:
        os.utime(p, (past, past))
    return path


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def live_pid():
    """The id of a process that lives for the test."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield child.pid
    child.kill()
    child.wait()


def _made(path: Path, *, folder: bool = False, age: float = 3600) -> Path:
    """A file (or a folder holding one) at ``path``, last changed ``age`` seconds ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        path.mkdir()
        (path / "signal.npy").write_bytes(b"partial")
    else:
        path.write_bytes(b"partial")
    return _old(path, age)


def test_leftovers_of_killed_processes_are_cleaned(tmp_path, parts, live_pid):
    root = tmp_path / "runs"
    run = results.write_run(root, "0123456789abcdef", **parts)
    _old(run)  # a run's own files are never leftovers, however old
    dead = _dead_pid()
    gone = [
        _made(root / f".0123456789abcdef.tmp-{dead}", folder=True),     # a run being written
        _made(root / f".fedcba9876543210.trash-{dead}", folder=True),   # a damaged run being replaced
        _made(root / f".input-hashes.json.tmp-{dead}-140234"),          # the input-hash cache
        _made(root / "inputs" / ".synthetic-2000-seed0.csv.1a2b3c4d5e6f.tmp"),  # a synthetic input
        _made(root / "labels" / ".0123abcd.parquet.k2j3h4g5.tmp"),      # a labels file
    ]
    kept = [
        _made(root / f".aaaaaaaaaaaaaaaa.tmp-{live_pid}", folder=True),  # another process is writing it
        _made(root / f".bbbbbbbbbbbbbbbb.tmp-{os.getpid()}", folder=True),  # this one is
        _made(root / f".cccccccccccccccc.tmp-{dead}", folder=True, age=0),  # changed a moment ago
        _made(root / "labels" / ".0123abcd.parquet.a1b2c3d4.tmp", age=0),
        _made(root / ".cache", folder=True),                             # no temporary name
        _made(root / "notes.tmp"),                                       # not hidden
        _made(root / "labels" / "0123abcd.parquet"),
    ]
    removed = results.clean_leftovers(root)
    assert sorted(removed) == sorted(gone)
    assert not any(p.exists() for p in gone)
    assert all(p.exists() for p in kept)
    assert results.find_cached(root, "0123456789abcdef") == run


def test_cleaning_a_missing_or_empty_folder_is_quiet(tmp_path):
    assert results.clean_leftovers(tmp_path / "absent") == []
    assert results.clean_leftovers(tmp_path) == []


def test_a_leftover_link_is_removed_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("keep")
    root = tmp_path / "runs"
    root.mkdir()
    link = root / f".0123456789abcdef.tmp-{_dead_pid()}"
    link.symlink_to(target, target_is_directory=True)
    os.utime(link, (0, 0), follow_symlinks=False)
    assert results.clean_leftovers(root) == [link]
    assert not os.path.lexists(link) and (target / "precious").read_text() == "keep"
