"""Tests of pipeline.reference and pipeline.calibrate: the shipped reference loads and scores (on
the CPU, and on the GPU where there is one), a beat's calibrated score does not depend on how
common beats like it are in its recording, a reference trains from run directories and arrays,
and the tail tables, files and explanations behave."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from pipeline import calibrate, embed, peaks, reference, wavelet
from pipeline.config import SignalConfig
from pipeline.synth import SynthConfig, synthesize

DS2 = {"100", "103", "105", "111", "113", "117", "121", "123", "200", "202", "210", "212", "213", "214", "219",
       "221", "222", "228", "231", "232", "233", "234"}
# The same abnormal beat, injected at the same place with normal timing, into recordings where 1 %,
# 40 % and 60 % of the beats are like it: its calibrated scores differ by at most this much (they
# fell from 2.43 to 2.32 and 2.25 with the shipped reference: the recording's normal beats are fewer,
# its typical distance a little larger).
PREVALENCE_TOLERANCE = 0.25


def _beats(ecg, cfg: SignalConfig = SignalConfig()):
    """The product's rows, fiducials and fiducial column for a synthetic recording."""
    signal = ecg.signal.astype(np.float32)
    positions = peaks.find_beats(wavelet.ricker_response(signal, ecg.fs, cfg.ricker_width_s), signal, ecg.fs, cfg)
    width = cfg.window(ecg.fs)
    rows = embed.embed_beats(signal, positions, ecg.fs, width=width, pre_fiducial=cfg.pre_fiducial).rows
    return rows, positions, int(round(cfg.pre_fiducial * width))


@pytest.fixture(scope="module")
def clean():
    """Sinus rhythm only (~730 beats at 250 Hz)."""
    ecg = synthesize(SynthConfig(n_samples=150_000, seed=3, pvc_fraction=0.0, aberrant_fraction=0.0,
                                 premature_atrial_fraction=0.0, noise_bursts_per_hour=0.0))
    return ecg, *_beats(ecg)


@pytest.fixture(scope="module")
def pvc_row(clean):
    """One premature ventricular beat's row, from a recording with 20 % of them."""
    ecg = synthesize(SynthConfig(n_samples=150_000, seed=4, pvc_fraction=0.2, aberrant_fraction=0.0,
                                 premature_atrial_fraction=0.0, noise_bursts_per_hour=0.0))
    rows, positions, _ = _beats(ecg)
    v = ecg.r_peaks[np.asarray(ecg.symbols) == "V"][5]
    return rows[np.argmin(np.abs(positions - v))]


# --------------------------------------------------------------------------- the shipped reference
def test_shipped_reference_is_small_versioned_and_from_ds1_only():
    path = reference.DEFAULT_REFERENCE
    assert path.stat().st_size < 2 * 2**20
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["format"] == "ecg-reference" and sidecar["version"] == 1
    assert len(sidecar["training_data_sha256"]) == 64
    names = {record["name"].split(".")[0] for record in sidecar["records"]}
    assert len(names) == 22 and not names & DS2
    ref = reference.load_reference()
    assert ref.meta["file"] == {"name": "reference-v1.npz", "sha256": sidecar["npz_sha256"]}
    assert ref.centroids.shape == (ref.config.centroids, ref.config.width)
    assert set(ref.tables) == {*reference.COMPONENTS, "combined"}


def _with_a_premature_pvc(rows, positions, at: int = 100):
    """The fiducials with beat ``at`` 30 % early (its row is then replaced by a PVC's)."""
    rows, positions = rows.copy(), positions.copy()
    positions[at] = positions[at - 1] + int(0.7 * (positions[at] - positions[at - 1]))
    return rows, positions


def test_shipped_reference_scores_a_recording_on_the_cpu(clean, pvc_row):
    ecg, rows, positions, pre = clean
    rows, positions = _with_a_premature_pvc(rows, positions)
    rows[100] = pvc_row
    scored = reference.score_reference(rows, positions, ecg.fs, pre)
    assert scored.score.shape == (len(rows),) and scored.score.dtype == np.float32
    assert np.isfinite(scored.score).all()
    for name in reference.COMPONENTS:
        assert ((scored.p[name] > 0) & (scored.p[name] <= 1)).all()
    assert set(scored.columns()) == set(calibrate.COLUMNS)
    assert scored.score[100] >= calibrate.OUTLIER_SCORE
    assert int(np.argmax(scored.score)) == 100
    # sinus beats of a clean recording are mostly not outliers: at most a few times the expected rate
    normal = np.delete(scored.score, 100)
    assert calibrate.is_outlier(normal).mean() <= 5 * calibrate.expected_false_positive_rate()


def test_score_reference_backends(xp, clean, pvc_row):
    """The same scores from NumPy and CuPy input (the GPU twin runs where there is a GPU)."""
    ecg, rows, positions, pre = clean
    rows, positions = _with_a_premature_pvc(rows, positions)
    rows[100] = pvc_row
    expected = reference.score_reference(rows, positions, ecg.fs, pre).score
    scored = reference.score_reference(xp.asarray(rows), xp.asarray(positions), ecg.fs, pre)
    assert type(scored.score) is type(xp.asarray(rows))
    got = scored.score.get() if hasattr(scored.score, "get") else scored.score
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-3)


def test_prevalence_does_not_change_a_beats_score(clean, pvc_row):
    """The same abnormal beat in recordings where 1 %, 40 % and 60 % of the beats are like it:
    the recording's normal template comes from the beats nearest the population's normal beats,
    so a common abnormal shape does not become the recording's normal, even as its majority."""
    ecg, rows, positions, pre = clean
    n = len(rows)
    target = n // 2
    rng = np.random.default_rng(0)
    others = np.setdiff1d(np.arange(2, n - 2), [target])
    scores = {}
    for fraction in (0.01, 0.40, 0.60):
        injected = rows.copy()
        chosen = rng.choice(others, int(round(fraction * n)) - 1, replace=False)
        # each copy with its own measurement noise, as beats of one focus are never identical
        injected[chosen] = pvc_row + 0.01 * rng.standard_normal((len(chosen), rows.shape[1])).astype(np.float32)
        injected[target] = pvc_row
        scores[fraction] = float(reference.score_reference(injected, positions, ecg.fs, pre).score[target])
    assert scores[0.01] >= calibrate.OUTLIER_SCORE
    assert max(scores.values()) - min(scores.values()) <= PREVALENCE_TOLERANCE, scores


def _template_distance_one_block_at_a_time(rows, near, cfg):
    """template_distance's definition, read from its docstring and done block by block."""
    edges = reference.block_edges(len(rows), cfg.block_beats)
    distance, is_core, templates = np.zeros(len(rows), np.float32), np.zeros(len(rows), bool), []
    for start, stop in zip(edges[:-1], edges[1:]):
        x, d_pop = rows[start:stop], near[start:stop]
        core = d_pop <= np.quantile(d_pop, cfg.core_fraction)
        d = ((x - np.median(x[core], axis=0)) ** 2).sum(axis=1)
        core &= d <= np.median(d[core])
        templates.append(np.median(x[core], axis=0))
        distance[start:stop], is_core[start:stop] = ((x - templates[-1]) ** 2).sum(axis=1), core
    return distance / np.median(distance[is_core]), is_core, np.stack(templates)


def test_template_distance_follows_its_definition_in_every_block(xp):
    """Blocks of two sizes (293 beats in blocks of 41 and 42), ties in the population distance and
    repeated rows: the same statistic, core and templates as block-by-block medians give."""
    cfg = reference.ReferenceConfig(block_beats=40)
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((293, 24)).astype(np.float32)
    rows[::9] += 3.0
    rows[50:60] = rows[50]
    near = np.round(rng.random(293), 1).astype(np.float32)
    assert len(set(np.diff(reference.block_edges(293, 40)).tolist())) == 2
    want = _template_distance_one_block_at_a_time(rows, near, cfg)
    got = reference.template_distance(xp.asarray(rows), xp.asarray(near), cfg)
    got = [a.get() if hasattr(a, "get") else a for a in got]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)
    np.testing.assert_array_equal(got[3], np.repeat(np.arange(7), np.diff(reference.block_edges(293, 40))))


# --------------------------------------------------------------------------- resampling
@pytest.mark.parametrize("fs", [128.0, 360.0, 1000.0])
def test_rows_at_any_rate_resample_to_the_same_reference_rows(fs):
    """A beat recorded at 128, 360 or 1000 Hz gives (nearly) the row it gives at 250 Hz."""
    cfg = reference.ReferenceConfig()

    def row_at(rate):
        width = SignalConfig().window(rate)
        pre = int(round(0.25 * width))
        t = (np.arange(width) - pre) / rate
        beat = (np.exp(-(t / 0.012) ** 2) - 0.2 * np.exp(-((t - 0.03) / 0.01) ** 2)
                + 0.3 * np.exp(-((t - 0.25) / 0.05) ** 2))
        return beat[None, :].astype(np.float32), pre

    ref_rows = reference.resample_rows(*row_at(250.0)[:1], 250.0, row_at(250.0)[1], cfg)
    rows, pre = row_at(fs)
    got = reference.resample_rows(rows, fs, pre, cfg)
    assert got.shape == (1, cfg.width)
    # 128 Hz cannot carry what is above 64 Hz; the QRS here has little there
    assert np.abs(got - ref_rows).max() < (0.08 if fs < 250 else 0.03)


def test_resample_rows_refuses_what_it_cannot_use():
    with pytest.raises(ValueError, match="rows must be a 2-D float32 array"):
        reference.resample_rows(np.zeros(10, np.float32), 250.0, 2)
    with pytest.raises(ValueError, match="pre must be a column"):
        reference.resample_rows(np.zeros((3, 10), np.float32), 250.0, 12)
    with pytest.raises(ValueError, match="fs must be a positive"):
        reference.resample_rows(np.zeros((3, 10), np.float32), 0.0, 2)


# --------------------------------------------------------------------------- training
SMALL = reference.ReferenceConfig(centroids=16, beats_per_record=200)


def test_train_reference_from_a_run_directory_and_arrays(cpu_run, clean, tmp_path):
    """A run directory (its labels choose the normal beats) and an array input (every beat normal,
    with a warning) train a reference that saves, loads and scores."""
    from pipeline import PipelineWarning

    ecg, rows, positions, pre = clean
    with pytest.warns(PipelineWarning, match="no labels"):
        ref = reference.train_reference([cpu_run.run.path, (rows, positions, ecg.fs, pre)], cfg=SMALL)
    assert ref.centroids.shape == (16, SMALL.width)
    run_record, array_record = ref.meta["records"]
    labels = cpu_run.run.beats["label"].to_numpy()
    assert run_record["normal_beats"] == int(np.isin(labels, list(reference.NORMAL_SYMBOLS)).sum())
    assert run_record["sha256"] == cpu_run.run.report["input"]["sha256"]
    assert array_record["normal_beats"] == len(rows)
    path = reference.save_reference(ref, tmp_path / "mine")
    loaded = reference.load_reference(path)
    assert loaded.config == SMALL and loaded.meta["training_data_sha256"] == ref.meta["training_data_sha256"]
    run = cpu_run.run
    got = reference.score_reference(np.asarray(run.embeddings), run.beats["fiducial"].to_numpy(), run.fs,
                                    int(round(0.25 * run.embeddings.shape[1])), loaded)
    assert np.isfinite(got.score).all() and len(got.score) == len(run.beats)


def test_train_reference_refuses_too_little():
    rows = np.zeros((5, 64), np.float32)
    with pytest.raises(ValueError, match="at least 2 recordings"):
        reference.train_reference([(rows, np.arange(5) * 200, 250.0, 16)])
    with pytest.raises(ValueError, match="one entry per input"):
        reference.train_reference([(rows, np.arange(5) * 200, 250.0, 16)] * 2, labels=[np.ones(5, bool)])
    with pytest.raises(ValueError, match="run directories, RunResults or"):
        reference.train_reference([1, 2], labels=[[True], [True]])


def test_a_damaged_reference_is_refused(tmp_path):
    for suffix in (".npz", ".json"):
        shutil.copy(reference.DEFAULT_REFERENCE.with_suffix(suffix), tmp_path / f"copy{suffix}")
    payload = bytearray((tmp_path / "copy.npz").read_bytes())
    payload[-100] ^= 0xFF
    (tmp_path / "copy.npz").write_bytes(bytes(payload))
    with pytest.raises(ValueError, match="does not match the SHA-256"):
        reference.load_reference(tmp_path / "copy.npz")


def test_a_reference_is_described_from_its_json_and_read_again_once_rewritten(tmp_path):
    """describe_file gives describe's line without loading the reference; a reference trained
    again under the same name (what a server listing <runs>/references/ sees) is read again, its
    digest too, not served from the cache of the earlier file."""
    import os

    shipped = reference.load_reference()
    assert reference.describe_file() == reference.describe(shipped)
    path = reference.save_reference(shipped, tmp_path / "mine")
    assert reference.describe_file(path) == reference.describe(shipped)
    first = reference.reference_digest(path)
    assert reference.load_reference(path).meta["file"]["sha256"] == first
    reference.save_reference(replace(shipped, centroids=shipped.centroids * 1.01), path)
    for part in (path, path.with_suffix(".json")):         # as a retraining seconds later would stamp them
        os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 10**9))
    assert reference.reference_digest(path) != first
    np.testing.assert_allclose(reference.load_reference(path).centroids, shipped.centroids * 1.01)
    path.with_suffix(".json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="mine.json is not a reference's description"):
        reference.describe_file(path)
    with pytest.raises(ValueError, match="none.json cannot be read"):
        reference.describe_file(tmp_path / "none.npz")


# --------------------------------------------------------------------------- calibration
def test_tail_table_follows_the_empirical_tail_and_extends_it():
    rng = np.random.default_rng(0)
    values = rng.exponential(1.0, 100_000)
    table = calibrate.fit_tail(values, "identity")
    for x in (0.5, 2.0, 4.0):
        assert calibrate.tail_p(np.array([x]), table)[0] == pytest.approx((values >= x).mean(), rel=0.05)
    far = calibrate.tail_p(np.array([10.0, 12.0, 14.0]), table)
    assert (np.diff(far) < 0).all()                                   # no ties beyond the data
    assert far[0] == pytest.approx(np.exp(-10.0), rel=0.3)            # the exponential tail, extended
    assert calibrate.tail_p(np.array([-1.0, np.nan]), table).tolist() == [1.0, 1.0]


def test_tail_table_gives_ties_the_fraction_at_least_as_high():
    values = np.concatenate([np.zeros(600), np.linspace(0.1, 5, 400)])
    table = calibrate.fit_tail(values)
    assert calibrate.tail_p(np.array([0.0]), table)[0] == 1.0
    assert calibrate.tail_p(np.array([0.1]), table)[0] == pytest.approx(0.4, rel=0.02)


def test_fit_tail_and_fisher_refuse_bad_input():
    with pytest.raises(ValueError, match="at least 200 entries"):
        calibrate.fit_tail(np.ones(10))
    with pytest.raises(ValueError, match="non-zero weight"):
        calibrate.fisher_statistic({"shape": np.zeros(3)}, {"shape": 0.0})
    with pytest.raises(ValueError, match="no tail probabilities for component"):
        calibrate.fisher_statistic({"shape": np.zeros(3)}, {"shape": 1.0, "rhythm": 1.0})


def test_outlier_threshold_is_one_number_with_its_false_positive_rate():
    assert calibrate.expected_false_positive_rate() == pytest.approx(10 ** -calibrate.OUTLIER_SCORE)
    scores = np.array([calibrate.OUTLIER_SCORE - 0.01, calibrate.OUTLIER_SCORE, 9.0])
    assert calibrate.is_outlier(scores).tolist() == [False, True, True]


def test_explain_calibrated_names_the_rarest_component_first():
    premature = {"score": 4.2, "p_ref_shape": 0.3, "p_ref_rhythm": 2e-5, "p_ref_population": 0.2,
                 "rr_pre": 0.72, "rr_post": 1.31}
    text = calibrate.explain_calibrated(premature)
    assert text.startswith("outlier (score 4.2")
    assert "premature by 28 %, pause after it (1.31 × the local RR); shape typical of this recording" in text
    wide = {"score": 5.0, "p_ref_shape": 1e-5, "p_ref_rhythm": 0.5, "p_ref_population": 1e-4,
            "rr_pre": 1.0, "rr_post": 1.0}
    text = calibrate.explain_calibrated(wide)
    assert "unlike this recording's normal beats (1 in 100,000) and unlike the population's normal beats" in text
    assert text.endswith("timing regular")
    usual_here = dict(wide, p_ref_shape=0.3)   # an uncommon person's normal beat: no word about the population
    assert "population" not in calibrate.explain_calibrated(usual_here)
    quiet = dict(wide, score=0.2, p_ref_shape=0.4, p_ref_population=0.5)
    assert calibrate.explain_calibrated(quiet).startswith("not an outlier")


def test_the_server_takes_a_reference_and_refuses_a_missing_one(tmp_path):
    """``serve … --args --reference PATH`` (or ECG_REFERENCE) reaches the run's request; a path with no
    reference is refused in one line before any run."""
    from dashboard import startup

    for suffix in (".npz", ".json"):
        shutil.copy(reference.DEFAULT_REFERENCE.with_suffix(suffix), tmp_path / f"mine{suffix}")
    settings = startup.settings_from(["--reference", str(tmp_path / "mine.npz")], {})
    assert settings.request.reference == str(tmp_path / "mine.npz")
    assert startup.settings_from([], {"ECG_REFERENCE": str(tmp_path / "mine.npz")}).request == settings.request
    assert startup.settings_from([], {}).request.reference is None
    with pytest.raises(ValueError, match=r"no reference at .*none\.npz: none\.npz is missing"):
        startup.settings_from(["--reference", str(tmp_path / "none.npz")], {})


def test_evaluate_names_the_records_the_shipped_reference_learnt_from():
    """DS1 records scored by the shipped reference are not held out; evaluate says which they are."""
    from pipeline.evaluate import _seen_by_reference

    note = _seen_by_reference(["100", "101", "106"])
    assert "learnt from 2 of these 3 records (101, 106); their outlier figures are not held-out" in note
    assert _seen_by_reference(["100", "233"]) == ""          # DS2: held out
