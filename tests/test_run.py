"""Tests of pipeline.run: one end-to-end run on a small synthetic CSV (CPU, few epochs), its run
directory and report, the cache (reuse, damage, parameters), and atomic writing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import PipelineWarning, reference, results
from pipeline.config import SignalConfig, VAEConfig
from pipeline.run import SEGMENTATION, STAGES, RunRequest, run_pipeline
from pipeline.sidecar import annotations_path

EXPECTED_STAGES = [s for s in STAGES if s != "synth"]  # an input was given: nothing is synthesised


def _relocated(cpu_run, tmp_path) -> tuple[Path, object]:
    """A copy of the session's run in a fresh runs folder, and the request that finds it there."""
    out = tmp_path / "runs"
    shutil.copytree(cpu_run.run.path, out / cpu_run.run.path.name)
    return out, replace(cpu_run.request, out=str(out))


def _hidden(out: Path) -> list[str]:
    """Hidden leftovers in a runs folder: temporary or trash folders (the input-hash cache is no leftover)."""
    return [p.name for p in Path(out).iterdir() if p.name.startswith(".") and p.name != results.HASH_CACHE]


def _entries(out: Path) -> list[str]:
    """What a runs folder holds besides the input-hash cache, sorted."""
    return sorted(p.name for p in Path(out).iterdir() if p.name != results.HASH_CACHE)


# --------------------------------------------------------------------------- the run directory
def test_run_directory_contents(cpu_run):
    run = cpu_run.run
    assert not run.cached
    assert run.path.parent == Path(cpu_run.request.out) and run.path.name == run.report["key"]
    assert sorted(p.name for p in run.path.iterdir()) == sorted([*results.FILES, results.REPORT])
    assert _hidden(cpu_run.request.out) == []  # no temporary folder left behind
    assert run.report["file_hash"] == "xxh3_128"
    for name, digest in run.report["files"].items():
        assert results.file_xxh3(run.path / name) == digest


def test_beats_table_columns_and_dtypes(cpu_run):
    beats = cpu_run.run.beats
    expected = {"beat_id": "int32", "start": "int64", "fiducial": "int64", "time_s": "float64", "length": "int32",
                "length_s": "float32", "rr_before_s": "float32", "split": "category", "z1": "float32",
                "z2": "float32", "score": "float32", **{name: "float32" for name in results.SCORE_COMPONENTS},
                "label": "object", "abnormal": "bool", "family": "int16", "quality": "float32"}
    dtypes = {c: str(t) for c, t in beats.dtypes.items()}
    assert dtypes.pop("label") in ("object", "str")     # pandas 3 infers its string dtype for text
    assert dtypes == {c: t for c, t in expected.items() if c != "label"}
    assert list(beats["split"].cat.categories) == ["train", "test"]
    np.testing.assert_array_equal(beats["beat_id"], np.arange(len(beats)))
    fs = cpu_run.run.fs
    pre = round(SignalConfig().pre_fiducial * SignalConfig().window(fs))
    np.testing.assert_array_equal(beats["start"], beats["fiducial"] - pre)
    np.testing.assert_allclose(beats["time_s"], beats["fiducial"] / fs)
    # length_s is the RR interval after each beat, rr_before_s the one before; the ends have none
    np.testing.assert_allclose(beats["length_s"][:-1], beats["length"][:-1] / fs, rtol=1e-6)
    assert beats["length"].iloc[-1] == -1 and np.isnan(beats["length_s"].iloc[-1])
    np.testing.assert_allclose(beats["rr_before_s"][1:], beats["length_s"][:-1], rtol=1e-6)
    assert np.isnan(beats["rr_before_s"].iloc[0])
    assert beats[["z1", "z2", "score"]].notna().all().all() and np.isfinite(beats["score"]).all()
    assert np.isfinite(beats[["score_shape", "score_rhythm", "p_shape", "p_rhythm"]]).all().all()
    assert np.isnan(beats["rr_pre"]).sum() == 1 and np.isnan(beats["rr_pre"].iloc[0])   # the first beat's
    assert np.isnan(beats["rr_post"]).sum() == 1 and np.isnan(beats["rr_post"].iloc[-1])  # the last beat's
    np.testing.assert_allclose(beats["prematurity"], 1 - beats["rr_pre"], rtol=1e-6)
    # rr_post is the beat's own length over the local RR
    np.testing.assert_allclose(beats["rr_post"] * beats["local_rr_s"], beats["length_s"], rtol=1e-4)
    assert (np.diff(beats["fiducial"]) > 0).all()


def test_arrays_agree_with_the_table(cpu_run):
    run = cpu_run.run
    beats, width = run.beats, SignalConfig().window(run.fs)
    assert run.embeddings.shape == (len(beats), width) and run.embeddings.dtype == np.float32
    assert run.decoded.shape == (VAEConfig().grid ** 2, width) and run.decoded_z.shape == (VAEConfig().grid ** 2, 2)
    assert run.signal.dtype == np.float32 and len(run.signal) == run.report["input"]["n_samples"]
    np.testing.assert_array_equal(beats["fiducial"], run.fiducials)  # every detected beat is in the table
    np.testing.assert_array_equal(beats["length"], np.append(np.diff(run.fiducials), -1))


def test_families_are_those_of_the_stored_beats(cpu_run):
    """The table's families are find_families of the stored embeddings, and so are those found in the
    thread a GPU run starts beside training (the thread needs no GPU); its errors reach the caller."""
    from pipeline.families import find_families
    from pipeline.run import _families_beside_training

    run = cpu_run.run
    direct = find_families(run.embeddings, seed=cpu_run.request.vae.seed)
    np.testing.assert_array_equal(run.beats["family"], direct.family)
    beside = _families_beside_training(np.asarray(run.embeddings), cpu_run.request.vae.seed, "gpu")()
    np.testing.assert_array_equal(beside.family, direct.family)
    np.testing.assert_array_equal(beside.median, direct.median)
    with pytest.raises(ValueError, match="at least 2 rows"):
        _families_beside_training(np.zeros((1, 8), np.float32), 0, "gpu")()


def test_report_fields(cpu_run):
    run, request = cpu_run.run, cpu_run.request
    report, beats = run.report, run.beats
    assert list(report["stages_s"]) == EXPECTED_STAGES
    assert all(isinstance(v, float) and v >= 0 for v in report["stages_s"].values())
    assert report["segmentation_s"] == pytest.approx(sum(report["stages_s"][s] for s in SEGMENTATION), abs=1e-5)
    counts = report["counts"]
    assert counts["beats"] == len(beats) and counts["fiducials"] == len(run.fiducials)
    assert counts["beats"] == counts["fiducials"]      # every detected beat is in the table
    assert counts["train"] == int((beats["split"] == "train").sum()) == round(0.75 * len(beats))
    assert counts["test"] == int((beats["split"] == "test").sum()) == len(beats) - counts["train"]
    assert report["input"]["fs"] == 250.0 and report["input"]["annotated"] is True
    assert report["input"]["channel"] == "column 0" and report["input"]["repaired_samples"] == 0
    assert report["input"]["n_samples"] == 150_000 and report["input"]["duration_s"] == 600.0
    assert report["input"]["sha256"] == results.file_sha256(Path(request.input))
    assert report["input"]["annotations_sha256"] == results.file_sha256(annotations_path(request.input))
    assert report["device"]["name"] == "cpu"
    assert report["config"]["vae"]["epochs"] == 3 and report["config"]["signal"] == asdict(SignalConfig())
    assert len(report["training"]["loss_history"]) == 3 and np.isfinite(report["training"]["loss_history"]).all()
    assert report["memory"]["host_peak_rss_bytes"] > 50 * 2 ** 20
    shipped = json.loads(reference.DEFAULT_REFERENCE.with_suffix(".json").read_text())
    assert report["reference"]["file"] == {"name": "reference-v1.npz", "sha256": shipped["npz_sha256"]}
    assert report["reference"]["training_data_sha256"] == shipped["training_data_sha256"]
    assert report["reference"]["outlier_score"] == 2.0
    histogram = report["length_histogram"]
    assert len(histogram["edges_s"]) == len(histogram["counts"]) + 1
    assert sum(histogram["counts"]) == counts["fiducials"] - 1  # every beat length (all under 2.5 s here)


def test_report_records_the_handoffs(cpu_run):
    handoffs = cpu_run.run.report["handoffs"]
    assert handoffs, "no hand-offs recorded"
    pairs = {(h["source"], h["target"]) for h in handoffs}
    assert {("numpy", "numba"), ("numpy", "torch"), ("torch", "numpy")} <= pairs
    assert all(h["same_pointer"] for h in handoffs)  # on the CPU every hand-off shares memory
    assert all(h["nbytes"] > 0 for h in handoffs if h["target"] == "torch")


def test_progress_reports_every_stage(cpu_run):
    stages = [stage for stage, _, _ in cpu_run.progress]
    assert list(dict.fromkeys(stages)) == EXPECTED_STAGES
    for stage in EXPECTED_STAGES:
        fractions = [f for s, f, _ in cpu_run.progress if s == stage]
        assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert any(m.startswith("epoch 3/3") for s, _, m in cpu_run.progress if s == "train")


def test_detected_beats_match_the_injected_ones(cpu_run, small_ecg):
    beats = cpu_run.run.beats
    assert (beats["label"] != "").mean() >= 0.99
    # the labels are those of the nearest injected beat (independent nearest-neighbour search)
    distance = np.abs(beats["fiducial"].to_numpy()[:, None] - small_ecg.r_peaks[None, :])
    close = distance.min(axis=1) <= 0.15 * 250
    np.testing.assert_array_equal(beats["label"].to_numpy()[close], small_ecg.symbols[distance.argmin(axis=1)][close])
    np.testing.assert_array_equal(beats["abnormal"], np.isin(beats["label"], ["V", "A", "S", "Q"]))
    # and nearly every injected beat is among the kept ones
    assert len(beats) >= 0.97 * len(small_ecg.r_peaks)
    injected_v = (small_ecg.symbols == "V").sum()
    assert (beats["label"] == "V").sum() >= 0.9 * injected_v


def test_premature_beats_of_normal_shape_rank_high(cpu_run):
    """The synthesizer's normally conducted premature atrial beats ('S') have a normal QRS: the shape
    score alone barely sees them; the combined score puts them in the top of the recording."""
    from pipeline.evaluate import auroc

    beats = cpu_run.run.beats
    s_or_n = beats[beats["label"].isin(["S", "N"])]
    is_s = s_or_n["label"] == "S"
    assert is_s.sum() >= 5
    for name in ("score", "score_recording"):   # calibrated against the reference, and within the recording
        assert auroc(s_or_n[name], is_s) >= 0.97, name
        assert auroc(s_or_n[name], is_s) > auroc(s_or_n["score_shape"], is_s) + 0.05, name
    top = beats.nlargest(int(0.1 * len(beats)), "score")
    assert (top["label"] == "S").sum() >= 0.8 * is_s.sum()  # nearly all of them in the top 10 %


def test_saved_model_reproduces_the_scores(cpu_run):
    import torch

    from pipeline.score import score_beats

    run = cpu_run.run
    model = run.model("cpu")
    assert model.width == run.embeddings.shape[1] and not model.training
    scores, z = score_beats(model, torch.from_numpy(np.array(run.embeddings)))
    np.testing.assert_allclose(scores.numpy(), run.beats["score_shape"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(z.numpy(), run.beats[["z1", "z2"]].to_numpy(), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- cache
def test_cache_reuse(cpu_run, tmp_path):
    out, request = _relocated(cpu_run, tmp_path)
    started = time.perf_counter()
    again = run_pipeline(request)
    seconds = time.perf_counter() - started
    assert again.cached and again.path == out / cpu_run.run.path.name
    assert seconds < max(0.3 * cpu_run.seconds, 0.5), (seconds, cpu_run.seconds)
    pd.testing.assert_frame_equal(again.beats, cpu_run.run.beats)
    np.testing.assert_array_equal(again.embeddings, cpu_run.run.embeddings)
    assert again.report == json.loads((cpu_run.run.path / results.REPORT).read_text())


def _truncate(path: Path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_byte(path: Path):
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def _flip_a_byte_keeping_size_and_time(path: Path):
    """Damage in place that a stat does not show: same size, modification time set back."""
    st = path.stat()
    _flip_a_byte(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _rewrite_report(path: Path, change):
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))


DAMAGE = {
    "truncated table": ("beats.parquet", _truncate, "beats.parquet does not match its checksum"),
    "altered embeddings": ("embeddings.npy", _flip_a_byte, "embeddings.npy does not match its checksum"),
    "altered model": ("model.pt", _flip_a_byte, "model.pt does not match its checksum"),
    "altered signal, size and time kept": ("signal.npy", _flip_a_byte_keeping_size_and_time,
                                           "signal.npy does not match its checksum"),
    "deleted signal": ("signal.npy", Path.unlink, "signal.npy missing"),
    "deleted report": ("report.json", Path.unlink, "report.json unreadable"),
    "truncated report": ("report.json", _truncate, "report.json unreadable"),
    "report lists too few files": ("report.json", lambda p: _rewrite_report(p, lambda r: r["files"].pop("decoded.npz")),
                                   "report lists the wrong files"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_cache_is_detected(cpu_run, tmp_path, damage):
    name, spoil, problem = DAMAGE[damage]
    out, _ = _relocated(cpu_run, tmp_path)
    key = cpu_run.run.path.name
    assert results.find_cached(out, key) == out / key
    spoil(out / key / name)
    with pytest.warns(PipelineWarning, match=rf"cached run .* is damaged \({problem}"):
        assert results.find_cached(out, key) is None


def test_damaged_cache_is_rebuilt(cpu_run, tmp_path):
    """Damage that keeps a file's size and modification time is found, said in one line, and the run
    rebuilt rather than served."""
    out, request = _relocated(cpu_run, tmp_path)
    key = cpu_run.run.path.name
    _flip_a_byte_keeping_size_and_time(out / key / "embeddings.npy")
    (out / key / "stray.txt").write_text("left by someone")
    with pytest.warns(PipelineWarning, match="is damaged") as caught:
        rebuilt = run_pipeline(request)
    damaged = [str(w.message) for w in caught if "is damaged" in str(w.message)]
    assert damaged == [f"cached run {out / key} is damaged (embeddings.npy does not match its checksum); "
                       "recomputing it"]
    assert not rebuilt.cached and rebuilt.path == out / key
    assert results.find_cached(out, key) == out / key  # verifies cleanly now
    assert not (out / key / "stray.txt").exists()       # the damaged directory was replaced whole
    assert _hidden(out) == []                           # no temporary or trash folder left behind
    pd.testing.assert_frame_equal(rebuilt.beats, cpu_run.run.beats)  # same seed, same input: same result


def test_different_parameters_different_key(cpu_run, tmp_path):
    out, request = _relocated(cpu_run, tmp_path)
    other = run_pipeline(replace(request, vae=VAEConfig(epochs=1)))
    assert not other.cached and other.path != out / cpu_run.run.path.name
    assert _entries(out) == sorted([cpu_run.run.path.name, other.path.name])
    assert other.report["training"]["epochs"] == 1
    assert results.find_cached(out, cpu_run.run.path.name) is not None  # the first run is still there


def test_use_cache_false_recomputes_and_replaces(cpu_run, tmp_path, monkeypatch):
    out, request = _relocated(cpu_run, tmp_path)
    key = cpu_run.run.path.name
    (out / key / "stray.txt").write_text("marks the old directory")
    monkeypatch.setattr(results, "find_cached", lambda *a: pytest.fail("the cache was consulted"))
    run = run_pipeline(replace(request, use_cache=False))
    assert not run.cached and run.path == out / key
    assert not (out / key / "stray.txt").exists() and _hidden(out) == []
    monkeypatch.undo()
    assert results.find_cached(out, key) == out / key


def test_run_key_depends_on_every_parameter(cpu_run):
    from pipeline.config import config_hash

    base = config_hash("abc", "cpu", None, None, SignalConfig(), VAEConfig())
    variants = [("abd", "cpu", None, None, SignalConfig(), VAEConfig()),
                ("abc", "gpu", None, None, SignalConfig(), VAEConfig()),
                ("abc", "cpu", 360.0, None, SignalConfig(), VAEConfig()),
                ("abc", "cpu", None, 1, SignalConfig(), VAEConfig()),
                ("abc", "cpu", None, None, SignalConfig(threshold=0.3), VAEConfig()),
                ("abc", "cpu", None, None, SignalConfig(), VAEConfig(seed=1))]
    keys = {config_hash(*v) for v in variants}
    assert base not in keys and len(keys) == len(variants)
    assert config_hash("abc", "cpu", None, None, SignalConfig(), VAEConfig()) == base  # stable


def test_the_t_wave_settings_reach_the_t_wave_filter(cpu_run, tmp_path, monkeypatch):
    from pipeline import peaks

    seen = {}
    real = peaks.drop_non_qrs

    def recording(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(peaks, "drop_non_qrs", recording)
    _, request = _relocated(cpu_run, tmp_path)
    cfg = replace(SignalConfig(), twave_window_s=0.36, twave_width_ratio=2.2, twave_slope_ratio=0.7,
                  twave_rr_fraction=0.55, max_qrs_width_s=0.14, early_beat_height=1.1, early_beat_gap_rr=1.6)
    run_pipeline(replace(request, signal=cfg, vae=VAEConfig(epochs=1), warm_up=False))
    assert seen == dict(window_s=0.36, width_ratio=2.2, slope_ratio=0.7, window_rr_fraction=0.55,
                        max_width_s=0.14, despike_s=cfg.despike_s, flat_slope_ratio=cfg.twave_flat_slope_ratio,
                        step_slope_ratio=cfg.step_slope_ratio, early_beat_height=1.1, early_beat_gap_rr=1.6)


# --------------------------------------------------------------------------- failures
def _broken_save(*args, **kwargs):
    raise OSError("disk full")


def test_failure_while_writing_leaves_nothing_behind(cpu_run, tmp_path, monkeypatch):
    import torch

    out, request = _relocated(cpu_run, tmp_path)
    monkeypatch.setattr(torch, "save", _broken_save)  # fails half-way through write_run
    with pytest.raises(OSError, match="disk full"):
        run_pipeline(replace(request, vae=VAEConfig(epochs=1)))  # a new key: computed, then written
    assert _entries(out) == [cpu_run.run.path.name]  # no partial run, no temp folder


def test_failure_while_rewriting_leaves_the_old_run_untouched(cpu_run, tmp_path, monkeypatch):
    import torch

    out, request = _relocated(cpu_run, tmp_path)
    key = cpu_run.run.path.name
    _truncate(out / key / "embeddings.npy")  # damaged, so the run is recomputed and rewritten
    before = {p.name: p.read_bytes() for p in (out / key).iterdir()}
    monkeypatch.setattr(torch, "save", _broken_save)
    with pytest.warns(PipelineWarning, match="is damaged"), pytest.raises(OSError, match="disk full"):
        run_pipeline(request)
    assert _entries(out) == [key]
    assert {p.name: p.read_bytes() for p in (out / key).iterdir()} == before


def test_too_few_beats_is_an_error(tmp_path):
    from pipeline.run import RunRequest

    t = np.arange(2000) / 250.0
    path = tmp_path / "two_beats.npy"
    signal = np.sin(2 * np.pi * 0.3 * t).astype(np.float32)  # slow waves, not heartbeats
    signal[[600, 1400]] += 5.0
    np.save(path, signal)
    with pytest.raises(ValueError, match=r"two_beats\.npy: found \d+ heartbeat\(s\); too few"):
        run_pipeline(RunRequest(input=str(path), device="cpu", out=str(tmp_path / "runs"), vae=VAEConfig(epochs=1)))
    assert not (tmp_path / "runs").exists() or _hidden(tmp_path / "runs") == []


def test_missing_input_is_an_error(tmp_path):
    from pipeline.run import RunRequest

    with pytest.raises(ValueError, match="no such file"):
        run_pipeline(RunRequest(input=str(tmp_path / "nope.csv"), device="cpu", out=str(tmp_path / "runs")))


# --------------------------------------------------------------------------- cold start
CACHED_SCRIPT = """
import json, sys
from pipeline import digests, results
from pipeline.config import VAEConfig
from pipeline.run import RunRequest, run_pipeline
read, verified = [], []
original, verify = digests.file_sha256, results.HASHES["xxh3_128"]
digests.file_sha256 = lambda path, *a: read.append(str(path)) or original(path, *a)
results.HASHES["xxh3_128"] = lambda path: verified.append(path.name) or verify(path)
run = run_pipeline(RunRequest(input=sys.argv[1], device="cpu", out=sys.argv[2], vae=VAEConfig(epochs=3)))
print(json.dumps({"cached": run.cached, "read": read, "verified": sorted(verified), "beats": len(run.beats),
                  "loaded": sorted(m for m in ("torch", "numba", "scipy.fft", "pyarrow.csv") if m in sys.modules)}))
"""


def test_cached_run_in_a_fresh_process_reads_and_imports_little(cpu_run, tmp_path):
    """A restart with the same input: the input is not hashed again (its stat is unchanged), each of
    the run's files is checked once by content (XXH3), and neither PyTorch nor Numba is imported."""
    import subprocess
    import sys

    out, request = _relocated(cpu_run, tmp_path)
    run_pipeline(request)  # cached: remembers the input's hash in this runs folder
    assert (out / results.HASH_CACHE).exists()
    result = subprocess.run([sys.executable, "-c", CACHED_SCRIPT, request.input, str(out)], capture_output=True,
                            text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["cached"] and report["beats"] == len(cpu_run.run.beats)
    assert report["read"] == [] and report["loaded"] == []
    assert report["verified"] == sorted(results.FILES)


def test_report_records_the_thread_budget(cpu_run):
    from pipeline import threads

    used = cpu_run.run.report["device"]["cpu_threads"]
    assert used["available"] == threads.available_cpus()
    assert used["torch"] == used["numba"] == threads.resolve_threads()


# --------------------------------------------------------------------------- the sidecar of reference labels
def test_sidecar_added_later_gives_a_run_with_reference_labels(tmp_path):
    """The reference labels are part of the input: adding, changing or removing the sidecar gives
    the run of that input, never a cached one made without them (or with others)."""
    from pipeline.synth import SynthConfig, synthesize, write_csv

    path = write_csv(synthesize(SynthConfig(n_samples=30_000, seed=3)), tmp_path / "rec.csv")
    side = annotations_path(path)
    labels = side.read_bytes()
    side.unlink()
    request = RunRequest(input=str(path), device="cpu", out=str(tmp_path / "runs"), vae=VAEConfig(epochs=1),
                         warm_up=False)

    bare = run_pipeline(request)
    assert "label" not in bare.beats and bare.report["input"]["annotated"] is False

    side.write_bytes(labels)
    labelled = run_pipeline(request)
    assert not labelled.cached and labelled.path != bare.path
    assert labelled.report["input"]["annotated"] is True and (labelled.beats["label"] != "").mean() > 0.9
    assert labelled.report["input"]["sha256"] == bare.report["input"]["sha256"]  # the recording is the same
    assert bare.report["input"]["annotations_sha256"] is None
    assert labelled.report["input"]["annotations_sha256"] == results.file_sha256(side)
    assert run_pipeline(request).path == labelled.path  # and now it is cached

    rows = labels.decode().splitlines(keepends=True)
    middle = next(i for i in range(len(rows) // 2, len(rows)) if rows[i].endswith(",N\n"))
    rows[middle] = rows[middle].replace(",N\n", ",V\n")  # one beat relabelled: same size
    side.write_text("".join(rows))
    relabelled = run_pipeline(request)
    assert not relabelled.cached and relabelled.path not in (bare.path, labelled.path)
    assert (relabelled.beats["label"] == "V").sum() == (labelled.beats["label"] == "V").sum() + 1

    side.unlink()
    again = run_pipeline(request)
    assert again.cached and again.path == bare.path and "label" not in again.beats


def test_missing_samples_are_listed_as_lost_signal(tmp_path):
    """A recording with 4 s of empty cells: the run says how much signal was lost, lists the gap
    as an episode of lost signal, and reports it among the episodes' counts."""
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=60_000, seed=4))
    cells = np.char.mod("%.4f", ecg.signal).astype(object)
    gap = slice(int(100 * ecg.fs), int(104 * ecg.fs))
    cells[gap] = ""
    path = tmp_path / "dropout.csv"
    path.write_text("\n".join(cells) + "\n")
    request = RunRequest(input=str(path), fs=ecg.fs, device="cpu", out=str(tmp_path / "runs"), vae=VAEConfig(epochs=1),
                         warm_up=False)
    with pytest.warns(PipelineWarning, match="are signal lost"):
        run = run_pipeline(request)
    assert run.report["input"]["signal_lost_s"] == pytest.approx(4.0, abs=0.01)
    lost = run.episodes[run.episodes["kind"] == "lost"]
    assert run.report["counts"]["lost_episodes"] == len(lost) == 1
    assert (lost["start_s"].iloc[0], lost["end_s"].iloc[0]) == pytest.approx((100.0, 104.0), abs=0.01)
    assert not ((run.beats["fiducial"] > 100.2 * ecg.fs) & (run.beats["fiducial"] < 103.8 * ecg.fs)).any()


# --------------------------------------------------------------------------- leftovers of killed runs
def test_leftovers_of_a_killed_run_are_cleaned_at_the_next_start(cpu_run, tmp_path):
    """A run killed while writing leaves ``.<key>.tmp-<pid>``; the next start removes it, but not
    the temporary folder of a process that is still writing."""
    out, request = _relocated(cpu_run, tmp_path)
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    writing = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        killed.kill()
        killed.wait()
        leftovers = {}
        for name, pid in (("dead", killed.pid), ("alive", writing.pid)):
            folder = out / f".{cpu_run.run.path.name}.tmp-{pid}"
            shutil.copytree(cpu_run.run.path, folder)
            past = time.time() - 3600
            for p in [*folder.iterdir(), folder]:
                os.utime(p, (past, past))
            leftovers[name] = folder
        assert run_pipeline(request).cached
        assert not leftovers["dead"].exists() and leftovers["alive"].exists()
    finally:
        writing.kill()
        writing.wait()


# --------------------------------------------------------------------------- inputs that are not files
def _cli(*args, timeout=120):
    """``python -m pipeline`` in a subprocess; a timeout ends it, so a test that would block fails."""
    return subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=Path(__file__).resolve().parents[1], stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_fifo_input_is_refused_at_once_in_one_line(tmp_path):
    """A FIFO given as input is refused before anything opens it (opening waits for a writer)."""
    fifo = tmp_path / "ecg.csv"
    os.mkfifo(fifo)
    result = _cli("run", fifo, "--device", "cpu", "--out", tmp_path / "runs", "--quiet")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"error: {fifo} is a FIFO (named pipe), not a regular file; give a "
                                          "recording file (.csv, .txt, .npy, .parquet, .edf, .bdf or a WFDB .hea record)"]


def test_folder_input_is_refused_in_plain_words(tmp_path):
    folder = tmp_path / "recordings"
    folder.mkdir()
    result = _cli("run", folder, "--device", "cpu", "--out", tmp_path / "runs", "--quiet")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"error: {folder} is a folder; give a recording file "
                                          "(.csv, .txt, .npy, .parquet, .edf, .bdf or a WFDB .hea record)"]
    with pytest.raises(ValueError, match=r"is a folder; give a recording file"):
        run_pipeline(RunRequest(input=str(folder), device="cpu", out=str(tmp_path / "runs")))


# --------------------------------------------------------------------------- rescoring
def _second_reference(run_dir: Path, path: Path) -> Path:
    """A tiny reference trained on the run's normal beats (twice: a reference needs two recordings),
    written to ``path``: another reference than the shipped one, in seconds."""
    small = reference.ReferenceConfig(centroids=16, beats_per_record=200)
    path.parent.mkdir(parents=True, exist_ok=True)
    return reference.save_reference(reference.train_reference([run_dir, run_dir], cfg=small), path)


def test_rescore_run_recomputes_only_the_reference_part(cpu_run, tmp_path):
    """A run rescored against another reference has exactly the scores score_reference gives its
    beats with that reference, every other column unchanged; it is written under the key a run of
    that reference has (so `run --reference` finds it), and the run it came from is not touched."""
    from pipeline.calibrate import COLUMNS
    from pipeline.rescore import rescore_run
    from pipeline.run import run_key

    out, request = _relocated(cpu_run, tmp_path)
    source = out / cpu_run.run.path.name
    mine = _second_reference(source, tmp_path / "refs" / "mine")
    files_before = {p.name: p.read_bytes() for p in source.iterdir()}

    rescored = rescore_run(source, mine)
    run = cpu_run.run
    expected = reference.score_reference(np.asarray(run.embeddings), run.beats["fiducial"].to_numpy(), run.fs,
                                         int(round(0.25 * run.embeddings.shape[1])), reference.load_reference(mine))
    np.testing.assert_array_equal(rescored.beats["score"].to_numpy(), expected.score)
    for name, values in expected.columns().items():
        np.testing.assert_array_equal(rescored.beats[name].to_numpy(), values)
    assert not np.array_equal(rescored.beats["score"], run.beats["score"])
    changed = ["score", *COLUMNS]
    pd.testing.assert_frame_equal(rescored.beats.drop(columns=changed), run.beats.drop(columns=changed))
    np.testing.assert_array_equal(rescored.embeddings, run.embeddings)

    assert rescored.report["reference"]["file"] == {"name": "mine.npz", "sha256": reference.reference_digest(mine)}
    assert rescored.report["rescored"]["from_key"] == source.name and rescored.report["rescored"]["saved"]
    assert rescored.report["rescored"]["from_reference"] == run.report["reference"]
    digest = {"sha256": run.report["input"]["sha256"], "annotations": run.report["input"]["annotations_sha256"]}
    key = run_key(digest, "cpu", replace(request, reference=str(mine)))
    assert rescored.path == out / key and rescored.report["key"] == key and not rescored.cached
    assert results.find_cached(out, key) == rescored.path and _hidden(out) == []
    assert {p.name: p.read_bytes() for p in source.iterdir()} == files_before       # the run it came from

    again = rescore_run(source, mine)                     # read from the cache, not computed again
    assert again.cached and again.path == rescored.path
    assert rescore_run(source).path == source             # the shipped reference scored it: the run itself
    assert run_pipeline(replace(request, reference=str(mine))).path == rescored.path   # no training: cached


def test_rescore_run_refuses_a_damaged_reference_or_run(cpu_run, tmp_path):
    from pipeline.rescore import rescore_run

    out, _ = _relocated(cpu_run, tmp_path)
    source = out / cpu_run.run.path.name
    mine = _second_reference(source, tmp_path / "mine")
    payload = bytearray(mine.read_bytes())
    payload[-100] ^= 0xFF
    mine.write_bytes(bytes(payload))
    with pytest.raises(ValueError, match="mine.npz does not match the SHA-256"):
        rescore_run(source, mine)
    with pytest.raises(ValueError, match="no reference at .*none.npz"):
        rescore_run(source, tmp_path / "none.npz")
    _flip_a_byte(source / "beats.parquet")
    with pytest.raises(ValueError, match="is not a finished run .beats.parquet does not match its checksum"):
        rescore_run(source)
    assert _entries(out) == [source.name]                 # nothing written


def test_a_rescored_run_that_cannot_be_written_is_kept_in_memory_and_said_so(cpu_run, tmp_path, monkeypatch):
    from pipeline.rescore import rescore_run

    out, _ = _relocated(cpu_run, tmp_path)
    source = out / cpu_run.run.path.name
    mine = _second_reference(source, tmp_path / "mine")

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(results, "write_rescored", read_only)
    with pytest.warns(PipelineWarning, match="could not be written .*Permission denied.*kept in memory only"):
        rescored = rescore_run(source, mine)
    assert rescored.report["rescored"]["saved"] is False and rescored.path == source and not rescored.cached
    assert rescored.report["reference"]["file"]["name"] == "mine.npz"
    run = cpu_run.run
    expected = reference.score_reference(np.asarray(run.embeddings), run.beats["fiducial"].to_numpy(), run.fs,
                                         int(round(0.25 * run.embeddings.shape[1])), reference.load_reference(mine))
    np.testing.assert_array_equal(rescored.beats["score"].to_numpy(), expected.score)
    assert _entries(out) == [source.name] and results.run_problem(source) is None


def test_the_segmentation_compiles_no_cpu_kernel_the_warm_up_did_not(tmp_path):
    """After the warm-up, segmenting a recording of thousands of beats (where the typical QRS width
    is measured on every n-th beat, a strided view), with a second lead or without, needs no new
    Numba signature: a new one is a compilation of seconds inside the run's first process."""
    import numba

    from pipeline import _decision_kernels, _episode_kernels, _hum_kernels, _kernels, _rhythm_kernels, _shape_kernels
    from pipeline import segmentation, warmup
    from pipeline.synth import SynthConfig, synthesize, write_csv

    def signatures() -> dict:
        return {f"{module.__name__}.{name}": set(map(str, kernel.signatures))
                for module in (_kernels, _shape_kernels, _episode_kernels, _decision_kernels, _rhythm_kernels,
                               _hum_kernels)
                for name, kernel in vars(module).items()
                if isinstance(kernel, numba.core.registry.CPUDispatcher)}

    path = tmp_path / "long.csv"
    ecg = synthesize(SynthConfig(n_samples=600_000, seed=2))      # 40 min, ~2,800 beats
    write_csv(ecg, path)
    warmup.warm_up("cpu", RunRequest(device="cpu", out=str(tmp_path / "runs")), path)
    before = signatures()
    signal = ecg.signal.astype(np.float32)
    segmentation.segment(signal, ecg.fs, SignalConfig())
    segmentation.segment(signal, ecg.fs, SignalConfig(), other=np.ascontiguousarray(signal[::-1]))
    after = signatures()
    new = {name: after[name] - before.get(name, set()) for name in after if after[name] - before.get(name, set())}
    assert not new, new
