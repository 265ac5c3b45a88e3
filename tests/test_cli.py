"""Tests of the command line (``python -m pipeline run | synth | evaluate``), in subprocesses."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_synth_writes_csv_and_sidecar(tmp_path):
    from pipeline.sidecar import annotations_path, read_annotations
    from pipeline.synth import SynthConfig, synthesize

    path = tmp_path / "rec.csv"
    result = _cli("synth", path, "--samples", 30_000, "--seed", 4, "--fs", 360, "--pvc-fraction", 0.05)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {path} (30,000 samples, ")
    expected = synthesize(SynthConfig(n_samples=30_000, seed=4, fs=360.0, pvc_fraction=0.05))
    np.testing.assert_allclose(np.loadtxt(path), expected.signal, atol=5.1e-5)  # printed with 4 decimals
    samples, symbols = read_annotations(annotations_path(path))
    np.testing.assert_array_equal(samples, expected.r_peaks)
    np.testing.assert_array_equal(symbols, expected.symbols)
    assert f"{len(expected.r_peaks):,} beats" in result.stdout


def test_synth_rejects_bad_settings(tmp_path):
    result = _cli("synth", tmp_path / "rec.csv", "--samples", 10)
    assert result.returncode == 2 and result.stderr.startswith("error: n_samples must be at least")
    assert not (tmp_path / "rec.csv").exists()


def test_run_prints_the_summary(small_csv, tmp_path):
    out = tmp_path / "runs"
    result = _cli("run", small_csv, "--device", "cpu", "--epochs", 2, "--out", out, "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # --quiet: no progress bars, and a clean input gives no warnings
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines() if not line.startswith(" "))
    assert list(lines) == ["run", "input", "lead", "device", "beats", "episodes", "lengths", "stages", "segment",
                           "memory", "outliers", "why", "reference"]
    assert re.search(r"\d+ low-quality beats? left out of the ranking$", lines["episodes"])
    assert lines["lead"] == "column 0: the only lead"
    run_dir = Path(lines["run"])
    assert run_dir.parent == out and (run_dir / "report.json").exists()
    assert lines["input"].startswith(f"{small_csv}  [column 0]  150,000 samples at 250 Hz")
    assert re.match(r"\d[\d,]* found; \d[\d,]* train / \d[\d,]* held out$", lines["beats"])
    assert re.search(r"abnormal beats; outlier AUROC (0|1)\.\d{3}$", lines["reference"])
    assert re.match(r"\d[\d,]* beats? with a calibrated score of 2 or more \(reference of 22 recordings", lines["outliers"])
    assert lines["outliers"].count("beat ") == 5
    why = [line for line in result.stdout.splitlines() if line.startswith("why") or line.startswith("           beat")]
    assert len(why) == 5 and all(re.search(r"beat \d+: .*(shape|premature|pause)", line) for line in why)

    again = _cli("run", small_csv, "--device", "cpu", "--epochs", 2, "--out", out, "--quiet")
    assert again.returncode == 0 and again.stdout.splitlines()[0] == f"run        {run_dir}  (cached)"


def test_rescore_writes_a_new_cached_run_and_says_what_changed(cpu_run, tmp_path):
    """``rescore RUN --reference REF`` scores a run folder against another reference into a new
    cached run beside it; a second time reads that run; a reference that is not there is one line."""
    import shutil

    from pipeline import reference

    out = tmp_path / "runs"
    source = out / cpu_run.run.path.name
    shutil.copytree(cpu_run.run.path, source)
    small = reference.ReferenceConfig(centroids=16, beats_per_record=200)
    mine = reference.save_reference(reference.train_reference([source, source], cfg=small), tmp_path / "mine")
    result = _cli("rescore", source, "--reference", mine)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert list(lines) == ["run", "reference", "outliers"]
    rescored = Path(lines["run"])
    assert rescored.parent == out and rescored != source and (rescored / "report.json").is_file()
    assert lines["reference"].startswith("mine.npz: reference of 2 recordings")
    assert re.fullmatch(r"\d[\d,]* \(was \d[\d,]*\)", lines["outliers"])
    again = _cli("rescore", source, "--reference", mine)
    assert again.returncode == 0 and again.stdout.splitlines()[0] == f"run        {rescored}  (cached)"
    missing = _cli("rescore", source, "--reference", tmp_path / "none.npz")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no reference at ")


def test_run_progress_bars_go_to_stderr(small_csv, tmp_path):
    result = _cli("run", small_csv, "--device", "cpu", "--epochs", 1, "--out", tmp_path / "runs")
    assert result.returncode == 0, result.stderr
    for description in ("Loading", "Ricker response", "Non-maximum suppression", "Training the VAE", "Writing results"):
        assert description in result.stderr
    assert "epoch 1/1" in result.stderr and "Loading" not in result.stdout


def _table_rows(stdout: str) -> dict:
    """The per-record table (after the protocol line, up to the next blank line): rows by record
    name, and the header."""
    protocol, table = stdout.strip().split("\n\n")[:2]
    assert protocol.startswith("detection, AAMI EC57: ") and "flutter/fibrillation episodes excluded" in protocol
    lines = table.splitlines()
    return {line.split()[0]: line.split() for line in lines[2:]}, lines[0]


@pytest.fixture(scope="module")
def evaluation(mitdb, tmp_path_factory):
    """``evaluate`` on a folder holding record 100 only, without and then with NeuroKit2 (the second
    call reuses the cached pipeline run, so it only adds NeuroKit2's time)."""
    import shutil

    folder = tmp_path_factory.mktemp("one_record")
    for ext in ("hea", "dat", "atr"):
        shutil.copy(mitdb / f"100.{ext}", folder)
    out = tmp_path_factory.mktemp("runs")
    plain = _cli("evaluate", folder, "--device", "cpu", "--epochs", 2, "--no-neurokit", "--out", out)
    started = time.perf_counter()
    with_nk = _cli("evaluate", folder, "--device", "cpu", "--epochs", 2, "--out", out)
    return plain, with_nk, time.perf_counter() - started


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_evaluate_prints_the_table(evaluation):
    result = evaluation[0]
    assert result.returncode == 0, result.stderr
    rows, header = _table_rows(result.stdout)
    assert header.split() == ["record", "beats", "found", "Se50", "P+50", "Se150", "P+150", "abnormal", "AUROC",
                              "shape"]
    assert list(rows) == ["100", "gross"]
    record, total = rows["100"], rows["gross"]
    assert record[1:] == total[1:]  # one record: the total is that record
    beats, found = int(record[1]), int(record[2])
    assert beats == 2273 and abs(found - beats) < 25  # MIT-BIH 100 has 2273 annotated beats
    se150, pp150 = float(record[5]), float(record[6])
    assert se150 >= 99.0 and pp150 >= 99.0
    assert int(record[7]) == 34  # 33 A + 1 V (README)
    assert "AUROC pooled" in result.stdout and "precision of each record's top k" in result.stdout
    classes = {line.split()[0]: line.split() for line in result.stdout.splitlines()
               if line.strip()[:1] in "NSVFQ" and len(line.split()) >= 2 and line.split()[1].isdigit()}
    # Classes count the detected beats that met a reference beat: all 33 S and the 1 V; of the 2239 N
    # beats, the few the detector misses are not among them.
    assert int(classes["S"][1]) == 33 and int(classes["V"][1]) == 1 and 2230 <= int(classes["N"][1]) <= 2239


def test_lead_and_column_must_agree(small_csv, tmp_path):
    result = _cli("run", small_csv, "--device", "cpu", "--lead", "0", "--column", "1", "--out", tmp_path, "--quiet")
    assert result.returncode == 2 and result.stderr.startswith("error: --lead '0' and --column '1' name different leads")


@pytest.mark.parametrize("command, options, message", [
    ("run", ["--epochs", "0"], "--epochs must be at least 1 (the VAE's training epochs); got 0"),
    ("run", ["--epochs", "-1"], "--epochs must be at least 1 (the VAE's training epochs); got -1"),
    ("batch", ["--epochs", "0"], "--epochs must be at least 1 (the VAE's training epochs); got 0"),
    ("run", ["--samples", "0"], "--samples must be a positive number of samples; got 0"),
    ("run", ["--samples", "-5"], "--samples must be a positive number of samples; got -5"),
    ("run", ["--fs", "nan"], "small.csv: sampling rate nan Hz is implausible for an ECG; expected 50–10000 Hz; "
                             "it came from --fs"),
    ("batch", ["--fs", "-5"], "small.csv: sampling rate -5 Hz is implausible for an ECG; expected 50–10000 Hz; "
                              "it came from --fs"),
])
def test_options_that_would_run_something_else_are_refused(small_csv, tmp_path, command, options, message):
    """--epochs 0 or -1 (an untrained model's scores), --samples 0 (the 2M-sample default instead),
    an --fs no ECG has: one line, exit 2, before anything runs or is written."""
    out = tmp_path / "runs"
    inputs = [] if "--samples" in options else [small_csv]  # --samples sizes the synthetic default
    result = _cli(command, *inputs, "--device", "cpu", "--out", out, "--quiet", *options, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"error: {message}"] and result.stdout == ""
    assert not out.exists()


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_evaluate_with_neurokit(evaluation):
    pytest.importorskip("neurokit2")
    _, result, seconds = evaluation
    assert result.returncode == 0, result.stderr
    rows, header = _table_rows(result.stdout)
    assert "NK2" in header and header.count("Se150") == 2
    record = rows["100"]
    nk_se150, nk_pp150 = float(record[10]), float(record[11])  # after the "│" column
    assert record[7] == "│" and nk_se150 > 95.0 and nk_pp150 > 95.0
    assert seconds < 120


def test_evaluate_rejects_a_folder_without_records(tmp_path):
    result = _cli("evaluate", tmp_path, "--device", "cpu", "--no-neurokit", "--out", tmp_path / "runs")
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path}: no WFDB records with .atr reference annotations"


def test_noise_without_qrs_structure_is_refused(tmp_path):
    """White noise has many values and passes the loader's checks, and the detector finds "beats" in
    it; they share no QRS shape, so the run stops with one line instead of analysing them."""
    noise = np.random.default_rng(0).standard_normal(250 * 600).astype(np.float32)
    path = tmp_path / "noise.npy"
    np.save(path, noise)
    result = _cli("run", path, "--device", "cpu", "--epochs", 1, "--out", tmp_path / "runs", "--quiet")
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(r"error: noise\.npy: the [\d,]+ beats found share no QRS shape \(median correlation with the "
                        r"median beat -?0\.\d\d; an ECG's is above 0\.9\): no QRS-like structure \(is this an ECG\? "
                        r"is --fs right\?\)\n", result.stderr)


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_reference_trains_on_run_folders_and_a_run_uses_it(cpu_run, small_csv, tmp_path):
    """``reference`` trains on annotated runs (their normal beats); ``run --reference`` scores against
    it, and the reference enters the cache key and the report; a missing or unannotated one is one line."""
    import json

    out = tmp_path / "runs"
    other = _cli("synth", tmp_path / "other.csv", "--samples", 60_000, "--seed", 5)
    assert other.returncode == 0, other.stderr
    result = _cli("reference", cpu_run.run.path, tmp_path / "other.csv", "--runs", out, "--device", "cpu",
                  "--out", tmp_path / "mine", "--quiet", "--cluster", "local", "--workers", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {tmp_path / 'mine.npz'} and mine.json: reference of 2 recordings")
    mine = json.loads((tmp_path / "mine.json").read_text())

    shipped = _cli("run", small_csv, "--device", "cpu", "--epochs", 1, "--out", out, "--quiet")
    ours = _cli("run", small_csv, "--device", "cpu", "--epochs", 1, "--out", out, "--quiet",
                "--reference", tmp_path / "mine.npz")
    assert shipped.returncode == 0 and ours.returncode == 0, shipped.stderr + ours.stderr
    first = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in shipped.stdout.splitlines() if line[:1] != " "}
    second = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in ours.stdout.splitlines() if line[:1] != " "}
    assert first["run"] != second["run"]                  # another reference, another cache entry
    report = json.loads((Path(second["run"]) / "report.json").read_text())
    assert report["reference"]["file"]["sha256"] == mine["npz_sha256"]
    assert "reference of 2 recordings" in second["outliers"]

    missing = _cli("run", small_csv, "--device", "cpu", "--out", out, "--reference", tmp_path / "none.npz")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no reference at ")
    assert len(missing.stderr.strip().splitlines()) == 1
    bare = tmp_path / "bare.npy"
    np.save(bare, np.loadtxt(small_csv, dtype=np.float32))
    unlabelled = _cli("reference", cpu_run.run.path, bare, "--runs", out, "--device", "cpu", "--out",
                      tmp_path / "x", "--quiet", "--workers", "1")
    assert unlabelled.returncode == 0, unlabelled.stderr
    assert "warning: bare.npy: no labels; every beat counts as normal in the reference" in unlabelled.stderr


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_reference_learns_the_reviewers_labels(cpu_run, tmp_path):
    """``reference --labels``: the dashboard's saved labels decide which beats are normal (an N the
    annotations call V is learnt, a V they call N is not); without --labels they are ignored."""
    import json
    import shutil

    from dashboard.labels import ReviewLabels
    from pipeline.results import load_run
    from pipeline.reference_training import NORMAL_SYMBOLS

    runs = tmp_path / "runs"
    runs.mkdir()
    copies = [load_run(shutil.copytree(cpu_run.run.path, runs / name)) for name in ("a", "b")]
    beats = copies[0].beats
    annotated_normal = np.isin(beats["label"].astype(str), list(NORMAL_SYMBOLS)) & (beats["quality"] >= 0.5)
    ventricular = beats.loc[(beats["label"] == "V") & (beats["quality"] >= 0.5), "fiducial"].to_numpy()[:3]
    normal = beats.loc[annotated_normal, "fiducial"].to_numpy()[:5]
    store = ReviewLabels.for_run(copies[0])       # both copies analysed the same recording: one database
    store.set(ventricular, "N", who="test")
    store.set(normal, "V", who="test")

    counts = {}
    for flag in ((), ("--labels",)):
        result = _cli("reference", runs / "a", runs / "b", "--out", tmp_path / f"ref{len(flag)}", "--quiet", *flag)
        assert result.returncode == 0, result.stderr
        meta = json.loads((tmp_path / f"ref{len(flag)}.json").read_text())
        counts[flag] = [record["normal_beats"] for record in meta["records"]]
    assert counts[()] == [int(annotated_normal.sum())] * 2
    assert counts[("--labels",)] == [int(annotated_normal.sum()) + len(ventricular) - len(normal)] * 2


@pytest.mark.slow   # a Dask cluster: test-all and CI
def test_reference_reports_a_run_folder_it_cannot_read_in_one_line(cpu_run, tmp_path):
    """A run folder that a worker cannot read ends the command with one line naming it, not with
    the worker's log of a failed task; fewer than two recordings, before any cluster starts."""
    import shutil

    broken = shutil.copytree(cpu_run.run.path, tmp_path / "broken")
    (broken / "beats.parquet").unlink()
    result = _cli("reference", cpu_run.run.path, broken, "--out", tmp_path / "mine", "--quiet", "--workers", "2")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {broken}: not a readable run folder (FileNotFoundError: "
                                          f"{broken / 'beats.parquet'})"]
    alone = _cli("reference", cpu_run.run.path, "--out", tmp_path / "mine", "--quiet")
    assert alone.returncode == 2 and alone.stderr.splitlines() == [
        "error: a reference needs at least 2 recordings (their normal beats are compared across recordings); got 1"]
    assert not (tmp_path / "mine.npz").exists()


def test_a_missing_input_is_one_line_even_with_progress_bars(tmp_path):
    result = _cli("run", tmp_path / "missing.csv", "--device", "cpu", "--out", tmp_path / "runs")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: no such file: {tmp_path / 'missing.csv'}"]


@pytest.mark.slow   # a pipeline run through run.sh
def test_run_sh_pipeline_with_options_alone_runs_the_synthetic_recording(tmp_path):
    """``./run.sh pipeline --no-cache`` (as the README's tables write it) is the synthetic run with
    that option; a command word still goes to ``python -m pipeline`` as it is."""
    ran = subprocess.run([str(REPO / "run.sh"), "pipeline", "--no-cache", "--samples", "30000", "--epochs", "1",
                          "--device", "cpu", "--out", str(tmp_path / "runs"), "--quiet"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"run        {tmp_path / 'runs'}")
    helped = subprocess.run([str(REPO / "run.sh"), "pipeline", "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m pipeline [-h] COMMAND")


def test_the_episodes_line_counts_doubtful_pauses():
    import pandas as pd

    from pipeline.__main__ import _episodes_line

    episodes = pd.DataFrame({"kind": ["pause", "pause", "noise", "lost"], "start_s": [3600.0, 7300.0, 7300.5, 9000.0],
                             "end_s": [3602.5, 7304.0, 7303.5, 9004.5], "confidence": np.float32([1.0, 0.5, 0.5, 1.0])})
    assert _episodes_line(episodes, 3) == ("2 pauses of 2 s or more (longest 4.0 s at 2:01:40.0; 1 doubtful, in "
                                           "noise or lost signal); noise 3 s in 1 episode; signal lost 4 s in 1 "
                                           "episode; 3 low-quality beats left out of the ranking")
    assert "doubtful" not in _episodes_line(episodes.assign(confidence=np.float32(1.0)), 0)
