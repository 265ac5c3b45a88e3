"""Tests of pipeline.results: label matching, the beats table, hashing, and the run directory
(atomic write, verification, round trip) on small hand-made runs."""
from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline import PipelineWarning, results
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
                families=find_families(embeddings))


def test_write_and_load_round_trip(tmp_path, parts):
    path = results.write_run(tmp_path, "key1", **parts)
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


# --------------------------------------------------------------------------- stat-based checks
def _refuse_to_hash(*args, **kwargs):
    raise AssertionError("a file was read and hashed")


def test_write_run_records_each_files_size_and_mtime(tmp_path, parts):
    path = results.write_run(tmp_path, "key1", **parts)
    report = results.load_run(path).report
    assert set(report["file_stats"]) == set(results.FILES)
    for name, (size, mtime_ns) in report["file_stats"].items():
        assert [(path / name).stat().st_size, (path / name).stat().st_mtime_ns] == [size, mtime_ns]


def test_unchanged_run_is_verified_without_reading_it(tmp_path, parts, monkeypatch):
    path = results.write_run(tmp_path, "key1", **parts)
    monkeypatch.setattr(results, "file_sha256", _refuse_to_hash)
    assert results.find_cached(tmp_path, "key1") == path


def test_touched_file_is_hashed_again_and_accepted(tmp_path, parts, monkeypatch):
    path = results.write_run(tmp_path, "key1", **parts)
    st = (path / "signal.npy").stat()
    os.utime(path / "signal.npy", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same bytes, new time
    hashed = []
    original = results.file_sha256
    monkeypatch.setattr(results, "file_sha256", lambda p, *a: hashed.append(Path(p).name) or original(p, *a))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert results.find_cached(tmp_path, "key1") == path
    assert hashed == ["signal.npy"]  # only the file whose stat changed


def test_same_size_rewrite_is_detected(tmp_path, parts):
    path = results.write_run(tmp_path, "key1", **parts)
    data = bytearray((path / "embeddings.npy").read_bytes())
    data[-1] ^= 0x01
    (path / "embeddings.npy").write_bytes(bytes(data))
    st = (path / "embeddings.npy").stat()
    os.utime(path / "embeddings.npy", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # however coarse the clock
    with pytest.warns(PipelineWarning, match=r"embeddings\.npy does not match its checksum"):
        assert results.find_cached(tmp_path, "key1") is None


def test_run_without_recorded_stats_is_fully_verified(tmp_path, parts, monkeypatch):
    """Runs written before stats were recorded are hashed, as before."""
    import json

    path = results.write_run(tmp_path, "key1", **parts)
    report = json.loads((path / results.REPORT).read_text())
    del report["file_stats"]
    (path / results.REPORT).write_text(json.dumps(report))
    assert results.find_cached(tmp_path, "key1") == path
    monkeypatch.setattr(results, "file_sha256", _refuse_to_hash)
    with pytest.raises(AssertionError, match="hashed"):
        results.find_cached(tmp_path, "key1")


# --------------------------------------------------------------------------- remembered input hashes
def test_input_hash_is_remembered_while_the_file_is_unchanged(tmp_path, monkeypatch):
    import hashlib

    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n2.0\n3.0\n")
    digest, signature = results.remembered_input_sha256(path, tmp_path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    results.remember_input_sha256(path, tmp_path, signature, digest)
    assert (tmp_path / results.HASH_CACHE).exists()
    with monkeypatch.context() as m:
        m.setattr(results, "file_sha256", _refuse_to_hash)
        assert results.remembered_input_sha256(path, tmp_path) == (digest, signature)

    st = path.stat()
    path.write_text("1.0\n2.0\n4.0\n")                          # same size...
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))        # ...and the old modification time
    changed, new_signature = results.remembered_input_sha256(path, tmp_path)
    assert new_signature != signature                          # the change time gives it away
    assert changed == hashlib.sha256(b"1.0\n2.0\n4.0\n").hexdigest() != digest


def test_remembered_wfdb_hash_covers_every_file(mitdb_copy, monkeypatch):
    record = mitdb_copy / "100.hea"
    digest, signature = results.remembered_input_sha256(record, mitdb_copy)
    assert digest == results.input_sha256(record) and [s[0] for s in signature] == ["100.atr", "100.dat", "100.hea"]
    results.remember_input_sha256(record, mitdb_copy, signature, digest)
    atr = mitdb_copy / "100.atr"
    atr.write_bytes(atr.read_bytes() + b"\0")
    assert results.remembered_input_sha256(record, mitdb_copy)[0] != digest


def test_remembering_is_best_effort_and_bounded(tmp_path, monkeypatch):
    path = tmp_path / "ecg.csv"
    path.write_text("1.0\n")
    results.remember_input_sha256(path, tmp_path / "missing", [], "x")  # no folder: nothing, no error
    assert not (tmp_path / "missing").exists()
    monkeypatch.setattr(results, "HASH_CACHE_ENTRIES", 3)
    for i in range(5):
        results.remember_input_sha256(tmp_path / f"f{i}.csv", tmp_path, [], str(i))
    import json

    entries = json.loads((tmp_path / results.HASH_CACHE).read_text())
    assert [e["sha256"] for e in entries.values()] == ["2", "3", "4"]  # the most recent ones
    (tmp_path / results.HASH_CACHE).write_text("not json")
    assert results.remembered_input_sha256(path, tmp_path)[0] == results.file_sha256(path)  # a broken cache: hash
