"""Tests of ``python -m pipeline batch`` and ``pipeline.batch``: finding recordings, a batch over good
and bad recordings on a real Dask LocalCluster, resuming after a killed batch, the archive table,
and ``evaluate`` running through the batch. Recordings are tiny (2 minutes at 250 Hz) and the VAE
trains for 2 epochs, so that the cost is mostly starting the worker processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import batch
from pipeline.synth import SynthConfig, synthesize, write_csv

REPO = Path(__file__).resolve().parents[1]
SAMPLES = 30_000  # 2 minutes at 250 Hz
HEART_RATES = {"slow.csv": 55.0, "fast.csv": 95.0}


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _write_good(folder: Path, name: str, seed: int, heart_rate: float = 70.0) -> Path:
    ecg = synthesize(SynthConfig(n_samples=SAMPLES, seed=seed, heart_rate=heart_rate, pvc_fraction=0.03))
    return write_csv(ecg, folder / name)


def _write_wfdb(folder: Path, record: str, seed: int) -> Path:
    """A synthetic recording as a WFDB record (.hea + .dat) with its beats as .atr annotations."""
    import wfdb

    ecg = synthesize(SynthConfig(n_samples=SAMPLES, seed=seed, pvc_fraction=0.03))
    wfdb.wrsamp(record, fs=ecg.fs, units=["mV"], sig_name=["MLII"], p_signal=ecg.signal[:, None].astype(np.float64),
                fmt=["16"], write_dir=str(folder))
    wfdb.wrann(record, "atr", ecg.r_peaks, np.asarray(ecg.symbols).tolist(), write_dir=str(folder))
    return folder / f"{record}.hea"


# --------------------------------------------------------------------------- finding recordings
def test_find_recordings_in_folders_files_and_globs(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("a.csv", "b.txt", "c.npy", "d.parquet", "sub/e.csv", ".hidden.csv", "notes.md", "a.annotations.csv"):
        (data / name).write_text("0\n")
    _write_wfdb(data, "100", seed=1)  # 100.hea, 100.dat, 100.atr: one record
    out = data / "runs"
    out.mkdir()
    (out / "signal.npy").write_text("0\n")  # the output folder's files are never inputs

    found = batch.find_recordings([str(data)], exclude=out)
    assert [p.name for p in found] == ["100.hea", "a.csv", "b.txt", "c.npy", "d.parquet"]
    assert all(p.is_absolute() for p in found)

    recursive = batch.find_recordings([str(data / "**" / "*.csv")], exclude=out)
    assert [p.name for p in recursive] == ["a.csv", "e.csv"]  # no sidecar, no hidden file

    named = batch.find_recordings([str(data / "100.dat"), str(data / "a.csv"), str(data / "100.hea")])
    assert [p.name for p in named] == ["100.hea", "a.csv"]  # a .dat names its record; each once


def test_find_recordings_rejects_what_names_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no such file or folder: .*missing.csv"):
        batch.find_recordings([str(tmp_path / "missing.csv")])
    with pytest.raises(ValueError, match="no recordings match '.*\\*.parquet'"):
        batch.find_recordings([str(tmp_path / "*.parquet")])
    with pytest.raises(ValueError, match="empty holds no recordings"):
        batch.find_recordings([str(tmp_path / "empty")])


def test_cli_batch_bad_inputs_exit_2(tmp_path):
    result = _cli("batch", tmp_path / "nothing-here", "--out", tmp_path / "runs")
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: no such file or folder: {tmp_path / 'nothing-here'}"
    (tmp_path / "a.csv").write_text("1\n")
    result = _cli("batch", tmp_path / "a.csv", "--cluster", "nowhere", "--out", tmp_path / "runs")
    assert result.returncode == 2 and result.stderr.startswith("error: cluster must be one of auto, local")


# --------------------------------------------------------------------------- one task, no cluster
def test_process_recording_fails_alone_with_the_loader_message(tmp_path):
    from pipeline.load import load_ecg
    from pipeline.run import RunRequest

    bad = tmp_path / "words.csv"
    bad.write_text("0.1\n0.2\nhello\n")
    request = RunRequest(input=str(bad), device="cpu", out=str(tmp_path / "runs"))
    row, output = batch.process_recording(batch.Job(request, then=lambda run: pytest.fail("then must not run")))
    with pytest.raises(ValueError) as expected:
        load_ecg(bad)
    assert row["status"] == "failed" and row["error"] == str(expected.value) and output is None
    assert row["name"] == "words.csv" and row["wall_s"] > 0 and row["worker"]
    frame = batch.archive_frame([row])
    assert list(frame.columns) == list(batch.ARCHIVE_COLUMNS) and frame["beats"].isna().all()


def test_reading_the_archive_imports_neither_dask_nor_gpu_libraries():
    """The dashboard reads the archive table; that must not cost Dask's (or a GPU stack's) import."""
    script = ("import sys, pipeline.batch; print(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('dask', 'distributed', 'dask_cuda', 'cupy', 'cudf', 'rmm', 'torch')))")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_read_archive_without_one_says_how_to_make_it(tmp_path):
    with pytest.raises(ValueError, match=r"no archive table at .*archive.parquet; make one with: python -m pipeline"):
        batch.read_archive(tmp_path)


# --------------------------------------------------------------------------- the thread budget
def _thread_counts(threads):
    import numba
    import torch

    batch.configure_worker(threads, "cpu")
    return torch.get_num_threads(), numba.get_num_threads(), {k: os.environ.get(k) for k in batch.THREAD_ENV}


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_local_workers_get_the_thread_budget_and_leave_this_process_alone():
    before = dict(os.environ)
    with batch.open_cluster("local", workers=1, threads=3, device="cpu") as cluster:
        assert (cluster.kind, cluster.workers, cluster.threads) == ("local", 1, 3)
        torch_threads, numba_threads, env = cluster.client.submit(_thread_counts, cluster.threads).result()
    assert torch_threads == 3 and numba_threads == 3
    assert env == {name: "3" for name in batch.THREAD_ENV}  # set before the worker process started
    assert dict(os.environ) == before  # Dask's pre-spawn environment did not leak into this process


def test_workers_per_gpu_follow_cuda_mps_and_the_cores(tmp_path, monkeypatch):
    """Eight workers a GPU while an MPS daemon runs (a real process of that name here), four
    without, never under two cores each."""
    from pipeline import cluster

    monkeypatch.setattr(cluster, "usable_cores", lambda: 64)
    assert not cluster.mps_running() and cluster.default_per_gpu(4) == 4
    daemon = tmp_path / "nvidia-cuda-mps-control"
    daemon.write_bytes(Path("/bin/sleep").read_bytes())
    daemon.chmod(0o755)
    process = subprocess.Popen([str(daemon), "30"])
    try:
        time.sleep(0.2)
        assert cluster.mps_running()
        assert cluster.default_per_gpu(4) == 8 and cluster.default_per_gpu(1) == 8
        monkeypatch.setattr(cluster, "usable_cores", lambda: 16)
        assert cluster.default_per_gpu(4) == 2 and cluster.default_per_gpu(1) == 8
    finally:
        process.kill()
        process.wait()
    monkeypatch.setattr(cluster, "usable_cores", lambda: 1)
    assert cluster.default_per_gpu(1) == 1


# --------------------------------------------------------------------------- a batch on a LocalCluster
@pytest.fixture(scope="module")
def mixed_batch(tmp_path_factory):
    """``batch`` over a folder of 2 good recordings (different heart rates) and 2 bad ones, on 2 workers."""
    folder = tmp_path_factory.mktemp("archive")
    for seed, (name, rate) in enumerate(HEART_RATES.items(), start=1):
        _write_good(folder, name, seed=seed, heart_rate=rate)
    (folder / "flat.csv").write_text("0.5\n" * SAMPLES)
    (folder / "words.csv").write_text("0.1\n0.2\nhello\n" + "0.3\n" * 100)
    out = tmp_path_factory.mktemp("runs")
    result = _cli("batch", folder, "--device", "cpu", "--epochs", 2, "--workers", 2, "--out", out)
    return folder, out, result


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_batch_finishes_the_good_recordings_and_reports_the_bad(mixed_batch):
    from pipeline.load import load_ecg

    folder, out, result = mixed_batch
    assert result.returncode == 1, result.stderr  # some recordings failed
    lines = result.stdout.splitlines()
    rows = {line.split()[1]: line for line in lines[2:-2]}
    assert sorted(rows) == ["fast.csv", "flat.csv", "slow.csv", "words.csv"]
    for name in ("flat.csv", "words.csv"):
        with pytest.raises(ValueError) as expected:
            load_ecg(folder / name)
        assert rows[name].split(None, 2) == ["failed", name, str(expected.value)]
    assert rows["slow.csv"].startswith("ok") and rows["fast.csv"].startswith("ok")
    assert lines[-2].startswith("4 recordings: 2 ok, 0 cached, 2 failed in ")
    assert "on 2 workers (local;" in lines[-2] and lines[-1] == f"archive  {out / 'archive.parquet'}"
    # progress on stderr: the bar over recordings, the cluster and its dashboard
    assert "batch: 4 recordings on 2 workers (local)" in result.stderr
    assert "recordings 4/4" in result.stderr and "failed 2" in result.stderr


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_archive_rows_and_columns(mixed_batch):
    from pipeline.results import load_run

    folder, out, _ = mixed_batch
    archive = batch.read_archive(out)
    assert list(archive.columns) == list(batch.ARCHIVE_COLUMNS)
    assert archive["input"].tolist() == sorted(str(p.absolute()) for p in folder.glob("*.csv")
                                               if not p.name.endswith(".annotations.csv"))
    by_name = archive.set_index("name")
    assert by_name.loc[["flat.csv", "words.csv"], "status"].tolist() == ["failed", "failed"]
    assert by_name.loc[["flat.csv", "words.csv"], "run_dir"].isna().all()
    for name, rate in HEART_RATES.items():
        row = by_name.loc[name]
        run = load_run(row["run_dir"])  # the run directory the row points to, read independently
        ecg = synthesize(SynthConfig(n_samples=SAMPLES, seed=list(HEART_RATES).index(name) + 1, heart_rate=rate,
                                     pvc_fraction=0.03))
        assert row["status"] == "ok" and row["error"] == "" and row["device"] == "cpu"
        assert row["samples"] == SAMPLES and row["fs"] == 250.0 and row["duration_s"] == pytest.approx(120.0)
        assert row["beats"] == len(run.beats) and row["key"] == run.report["key"]
        assert row["heart_rate_bpm"] == pytest.approx(rate, rel=0.12)  # the synthesiser's mean rate, with HRV
        # the one meaning of an outlier: a calibrated score of 2 or more, beats of good quality only
        flagged = (run.beats["score"] >= 2.0) & (run.beats["quality"] >= 0.5)
        assert row["outliers"] == int(flagged.sum())
        assert row["time_train_s"] == run.report["stages_s"]["train"] and row["wall_s"] > row["time_train_s"]
        # annotated input (the synthesiser's sidecar): detection against its beats
        assert row["annotated"] and row["reference_beats"] == len(ecg.r_peaks)
        assert row["se_150"] >= 97.0 and row["ppv_150"] >= 97.0
        assert row["tp_150"] + row["fn_150"] == len(ecg.r_peaks)
        assert row["abnormal_beats"] > 0 and row["auroc"] > 0.8
    assert archive.loc[archive["status"] == "ok", "worker"].nunique() >= 1


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_a_second_batch_reuses_every_run_and_keeps_other_rows(mixed_batch, tmp_path):
    folder, out, _ = mixed_batch
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_dir()}
    other = _write_good(tmp_path, "other.csv", seed=9)
    result = _cli("batch", folder / "slow.csv", folder / "fast.csv", other, "--device", "cpu", "--epochs", 2,
                  "--workers", 1, "--threads", 1, "--out", out, "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # --quiet: no bar; clean inputs: no warnings
    archive = batch.read_archive(out).set_index("name")
    assert archive.loc[["slow.csv", "fast.csv", "other.csv"], "status"].tolist() == ["cached", "cached", "ok"]
    assert archive.loc[["flat.csv", "words.csv"], "status"].tolist() == ["failed", "failed"]  # earlier rows stay
    after = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_dir()}
    assert {k: after[k] for k in before} == before and len(after) == len(before) + 1


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_a_batch_run_equals_a_single_process_run(mixed_batch, tmp_path):
    from pipeline.config import VAEConfig
    from pipeline.run import RunRequest, run_pipeline

    folder, out, _ = mixed_batch
    row = batch.read_archive(out).set_index("name").loc["slow.csv"]
    single = run_pipeline(RunRequest(input=str(folder / "slow.csv"), device="cpu", out=str(tmp_path),
                                     vae=VAEConfig(epochs=2)))
    _assert_same_results(Path(row["run_dir"]), single)


def _assert_same_results(run_dir: Path, single) -> None:
    """The same beats (exactly) and nearly the same scores: training on a GPU is not bit-for-bit
    repeatable (cuDNN's backward passes sum with atomics), so a few scores move by a few percent."""
    from pipeline.results import load_run

    run = load_run(run_dir)
    assert run.report["key"] == single.report["key"]  # same input, same parameters
    np.testing.assert_array_equal(run.fiducials, single.fiducials)
    fixed = ["beat_id", "start", "fiducial", "length", "split"]
    pd.testing.assert_frame_equal(run.beats[fixed], single.beats[fixed])
    ours, theirs = run.beats["score_recording"].to_numpy(), single.beats["score_recording"].to_numpy()
    assert np.median(np.abs(ours - theirs) / np.abs(theirs)) < 0.01
    assert np.corrcoef(ours, theirs)[0, 1] > 0.995
    calibrated, single_calibrated = run.beats["score"].to_numpy(), single.beats["score"].to_numpy()
    assert np.median(np.abs(calibrated - single_calibrated)) < 0.05   # a score of 2 is an outlier


# --------------------------------------------------------------------------- resuming after a crash
@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_resume_after_a_killed_batch_recomputes_nothing_finished(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for seed in range(3):
        _write_good(folder, f"rec{seed}.csv", seed=seed + 20)
    out = tmp_path / "runs"
    args = [sys.executable, "-m", "pipeline", "batch", folder, "--device", "cpu", "--epochs", 2, "--workers", 1,
            "--threads", 1, "--out", out, "--quiet"]
    first = subprocess.Popen(list(map(str, args)), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # its own process group: the worker processes die with it
    try:
        deadline = time.monotonic() + 240
        while not _finished_runs(out) and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # a crash: no clean-up of any kind
        first.wait()
    finished = _finished_runs(out)
    assert 1 <= len(finished) < 3, "the batch should have been killed part-way"
    if batch.archive_path(out).exists():  # the kill may come between a run's rename and its archive row
        assert (batch.read_archive(out)["status"] == "ok").sum() <= len(finished)
    mtimes = {p: p.stat().st_mtime_ns for p in finished}

    second = _cli(*args[3:], timeout=300)
    assert second.returncode == 0, second.stderr
    archive = batch.read_archive(out)
    assert len(archive) == 3 and set(archive["status"]) <= {"ok", "cached"}
    cached = {Path(p) for p in archive.loc[archive["status"] == "cached", "run_dir"]}
    assert cached == set(finished)  # every run finished before the crash is reused...
    assert {p: p.stat().st_mtime_ns for p in finished} == mtimes  # ...untouched
    assert (archive["status"] == "ok").sum() == 3 - len(finished)  # and only the others are computed


def _finished_runs(out: Path) -> list[Path]:
    """Run directories renamed into place (complete by construction: see results.write_run)."""
    if not out.exists():
        return []
    return sorted(p for p in out.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and (p / "report.json").exists())


# --------------------------------------------------------------------------- evaluate through the batch
@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_evaluate_runs_through_the_batch_and_prints_the_table(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    for seed, record in enumerate(("r1", "r2")):
        _write_wfdb(folder, record, seed=seed + 30)
    (folder / "bad.hea").write_text("bad 1 250 30000\nbad.dat 16 200 16 0 0 0 0 MLII\n")  # its .dat is missing
    (folder / "bad.atr").write_bytes((folder / "r1.atr").read_bytes())
    out = tmp_path / "runs"
    result = _cli("evaluate", folder, "--device", "cpu", "--epochs", 2, "--workers", 2, "--no-neurokit", "--out", out)
    assert result.returncode == 1  # one record failed
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("detection, AAMI EC57: ") and lines[1] == ""   # the protocol is named
    assert lines[2].split() == ["record", "beats", "found", "Se50", "P+50", "Se150", "P+150", "abnormal", "AUROC",
                                 "shape"]
    table_lines = lines[4:lines.index("", 2)]  # the summary follows the table after a blank line
    rows = {line.split()[0]: line.split() for line in table_lines}
    assert list(rows) == ["r1", "r2", "gross"]
    for record, seed in (("r1", 30), ("r2", 31)):
        reference = synthesize(SynthConfig(n_samples=SAMPLES, seed=seed, pvc_fraction=0.03)).r_peaks
        assert int(rows[record][1]) == len(reference) and float(rows[record][5]) >= 97.0
    assert int(rows["gross"][1]) == int(rows["r1"][1]) + int(rows["r2"][1])
    assert "recordings 3/3" in result.stderr and "error: bad: " in result.stderr
    archive = batch.read_archive(out).set_index("name")  # evaluate writes the archive table too
    assert archive.loc[["bad", "r1", "r2"], "status"].tolist() == ["failed", "ok", "ok"]
    assert archive.loc["r1", "reference_beats"] == int(rows["r1"][1])


# --------------------------------------------------------------------------- GPUs (dask-cuda)
@pytest.mark.gpu
def test_local_cuda_starts_one_worker_per_gpu():
    pytest.importorskip("dask_cuda")
    import cupy

    n_gpus = cupy.cuda.runtime.getDeviceCount()
    with batch.open_cluster("local-cuda", device="gpu", per_gpu=1) as cluster:
        assert cluster.kind == "local-cuda" and cluster.workers == n_gpus
        visible = cluster.client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0])
        assert len(visible) == n_gpus and len(set(visible.values())) == n_gpus  # a different GPU each
        uuids = cluster.client.run(lambda: __import__("cupy").cuda.Device(0).pci_bus_id)
        assert len(set(uuids.values())) == n_gpus


@pytest.mark.gpu
def test_local_cuda_batch_is_zero_copy_and_equals_a_single_process_run(small_csv, tmp_path):
    pytest.importorskip("dask_cuda")
    import json
    from dataclasses import replace

    import cupy

    from pipeline.config import VAEConfig
    from pipeline.run import RunRequest, run_pipeline

    inputs = [small_csv] + [_write_good(tmp_path, f"extra{seed}.csv", seed=seed) for seed in range(3)]
    template = RunRequest(device="gpu", out=str(tmp_path / "runs"), vae=VAEConfig(epochs=2))
    jobs = [batch.Job(replace(template, input=str(path))) for path in inputs]
    result = batch.run_batch(jobs, cluster="local-cuda", progress=False)
    assert [row["status"] for row in result.rows] == ["ok"] * len(inputs), [row["error"] for row in result.rows]
    assert result.cluster.workers == cupy.cuda.runtime.getDeviceCount() * result.cluster.per_gpu
    for row in result.rows:
        report = json.loads((Path(row["run_dir"]) / "report.json").read_text())
        assert report["device"]["name"] == "gpu" and report["memory"]["gpu_peak_bytes"] > 0
        pairs = {(h["source"], h["target"]) for h in report["handoffs"]}
        assert {("cudf", "cupy"), ("cupy", "numba.cuda"), ("cupy", "torch"), ("torch", "cupy")} <= pairs
        copies = [h for h in report["handoffs"] if not h["same_pointer"]]
        assert not copies, copies
    single = run_pipeline(replace(template, input=str(small_csv), out=str(tmp_path / "single")))
    _assert_same_results(Path(result.rows[0]["run_dir"]), single)


@pytest.mark.gpu
def test_workers_sharing_a_gpu_each_get_the_results_of_a_single_run(small_csv, tmp_path):
    """--per-gpu 2: two worker processes on each GPU, each seeing only its GPU, and recordings
    that trained side by side on one GPU give what each gives alone."""
    pytest.importorskip("dask_cuda")
    from collections import Counter
    from dataclasses import replace

    import cupy

    from pipeline.config import VAEConfig
    from pipeline.run import RunRequest, run_pipeline

    n_gpus = cupy.cuda.runtime.getDeviceCount()
    with batch.open_cluster("local-cuda", device="gpu", per_gpu=2) as cluster:
        assert cluster.workers == 2 * n_gpus and cluster.per_gpu == 2
        buses = cluster.client.run(lambda: __import__("cupy").cuda.Device(0).pci_bus_id)  # its own GPU first
        assert len(set(buses.values())) == n_gpus and set(Counter(buses.values()).values()) == {2}
        inputs = [small_csv] + [_write_good(tmp_path, f"extra{seed}.csv", seed=seed) for seed in range(3)]
        template = RunRequest(device="gpu", out=str(tmp_path / "runs"), vae=VAEConfig(epochs=2))
        jobs = [batch.Job(replace(template, input=str(path))) for path in inputs]
        result = batch.run_batch(jobs, cluster=cluster, progress=False)
    assert [row["status"] for row in result.rows] == ["ok"] * len(inputs), [row["error"] for row in result.rows]
    for path, row in zip(inputs, result.rows):
        single = run_pipeline(replace(template, input=str(path), out=str(tmp_path / "single")))
        _assert_same_results(Path(row["run_dir"]), single)
