"""Tests of pipeline.reference_training and pipeline.reference_prepare: a reference trained from run
directories on a local Dask cluster is bit for bit the one trained in this process, and the one
``fit_reference`` makes from every recording held at once; the cluster keeps at most ``window``
recordings in flight; the workers' warnings and errors reach the caller as one line."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin

from pipeline import PipelineWarning, reference
from pipeline.reference_prepare import draw_sample, reference_beats

SMALL = reference.ReferenceConfig(centroids=16, beats_per_record=200)


@pytest.fixture(scope="module")
def runs(cpu_run, tmp_path_factory):
    """Three annotated run directories of different lengths (the longest first, so that later
    recordings tend to finish before it), made by ``run_pipeline`` on the CPU."""
    from pipeline.config import VAEConfig
    from pipeline.run import RunRequest, run_pipeline
    from pipeline.synth import SynthConfig, synthesize
    from pipeline.synth_files import write_csv

    folder = tmp_path_factory.mktemp("reference-runs")
    made = [cpu_run.run.path]
    for seed, samples in ((21, 90_000), (22, 60_000)):
        ecg = synthesize(SynthConfig(n_samples=samples, seed=seed, pvc_fraction=0.05, aberrant_fraction=0.02))
        path = write_csv(ecg, folder / f"rec{seed}.csv")
        made.append(run_pipeline(RunRequest(input=str(path), device="cpu", out=str(folder / "runs"),
                                            vae=VAEConfig(epochs=1))).path)
    return made


@pytest.fixture(scope="module")
def local_cluster():
    """The project's local cluster: two worker processes of one thread each."""
    from pipeline.cluster import open_cluster

    with open_cluster("local", workers=2, device="cpu") as cluster:
        yield cluster


def _assert_same(got: reference.Reference, expected: reference.Reference) -> None:
    """Bit for bit: the centroids' bytes, every table's knots and tail, the meta (the digest too)."""
    assert got.config == expected.config
    assert got.centroids.dtype == expected.centroids.dtype
    assert got.centroids.tobytes() == expected.centroids.tobytes()
    assert set(got.tables) == set(expected.tables)
    for name, table in expected.tables.items():
        mine = got.tables[name]
        assert mine.u.tobytes() == table.u.tobytes() and mine.log_p.tobytes() == table.log_p.tobytes(), name
        assert (mine.theta, mine.transform, mine.count) == (table.theta, table.transform, table.count), name
    assert got.meta == expected.meta


def test_the_training_digest_is_the_digest_of_each_records_digest(expected):
    """Against hashlib directly: each record's SHA-256 over its rows, positions and normal flags,
    then the SHA-256 of those hex digests in input order."""
    import hashlib

    inputs, fitted = expected
    own = []
    for path in inputs:
        beats = reference_beats(path, None, SMALL)
        own.append(hashlib.sha256(beats.rows.tobytes() + beats.positions.tobytes() + beats.normal.tobytes()).hexdigest())
    assert [record["data_sha256"] for record in fitted.meta["records"]] == own
    assert fitted.meta["training_data_sha256"] == hashlib.sha256("".join(own).encode()).hexdigest()


@pytest.fixture(scope="module")
def expected(runs):
    """``fit_reference`` on every recording's beats held at once (the independent path), over the
    runs and the second one again (its digest comes twice too)."""
    inputs = [*runs, runs[1]]
    return inputs, reference.fit_reference([reference_beats(path, None, SMALL) for path in inputs], SMALL)


def test_training_here_one_recording_at_a_time_is_what_fit_reference_makes(expected):
    inputs, fitted = expected
    _assert_same(reference.train_reference(inputs, cfg=SMALL), fitted)
    assert [record["run"] for record in fitted.meta["records"]] == [path.name for path in inputs]


@pytest.mark.parametrize("population", [1, 7, 399, 400, 401, 5000, 60_000])
def test_the_driver_draws_the_sample_that_choice_among_the_normal_beats_draws(population):
    """``rng.choice(n, …)`` picks the positions among the normal beats that ``rng.choice(normal, …)``
    picks, and leaves the generator as that call does (Floyd's method above 10,000 too)."""
    normal = np.sort(np.random.default_rng(population).choice(10 * population, population, replace=False))
    theirs, mine = np.random.default_rng(3), np.random.default_rng(3)
    for _ in range(3):          # recordings one after another, from one generator
        expected = theirs.choice(normal, min(SMALL.beats_per_record, population), replace=False)
        np.testing.assert_array_equal(normal[draw_sample(mine, population, SMALL)], expected)
    assert theirs.integers(2**62) == mine.integers(2**62)
    assert draw_sample(mine, 0, SMALL) is None


@pytest.mark.slow   # a Dask cluster: test-all and CI
def test_a_cluster_trains_what_fit_reference_makes(expected, local_cluster):
    """On two workers, with the default window and with a window of one (recordings finish in
    other orders), the reference is the one ``fit_reference`` makes, bit for bit."""
    inputs, fitted = expected
    for window in (None, 1):
        _assert_same(reference.train_reference(inputs, cfg=SMALL, cluster=local_cluster, window=window), fitted)


@pytest.mark.slow   # a Dask cluster: test-all and CI
def test_the_reviewers_labels_are_read_on_the_workers(runs, local_cluster, tmp_path):
    """``reviewer_labels``: the dashboard's labels choose a run's normal beats where the run is read,
    as ``reviewed.normal_beats`` does in this process."""
    from dashboard.labels import ReviewLabels
    from pipeline.results import load_run
    from pipeline.reviewed import normal_beats

    copied = [shutil.copytree(path, tmp_path / "runs" / path.name) for path in runs[:2]]
    run = load_run(copied[0])
    ventricular = run.beats.loc[run.beats["label"] == "V", "fiducial"].to_numpy()[:4]
    ReviewLabels.for_run(run).set(ventricular, "N", who="test")
    labels = [normal_beats(load_run(path), True) for path in copied]
    expected = reference.fit_reference([reference_beats(path, labels[i], SMALL) for i, path in enumerate(copied)],
                                       SMALL)
    got = reference.train_reference(copied, cfg=SMALL, reviewer_labels=True, cluster=local_cluster)
    _assert_same(got, expected)
    annotated = reference.train_reference(copied, cfg=SMALL, cluster=local_cluster)
    assert got.meta["records"][0]["normal_beats"] > annotated.meta["records"][0]["normal_beats"]


class _InFlight(SchedulerPlugin):
    """On the scheduler: the most tasks of each kind (``reference-<kind>-…`` keys) alive at once,
    from the time they are sent until they are done; a prepared recording (its rows) until its
    result is released."""

    name = "reference-in-flight"
    RUNNING = ("waiting", "queued", "processing", "no-worker")

    def __init__(self):
        self.alive, self.peak = {}, {}

    def transition(self, key, start, finish, *args, **kwargs):
        parts = str(key).split("-")
        if parts[0] != "reference":
            return
        alive = self.alive.setdefault(parts[1], set())
        held = finish in self.RUNNING or (finish == "memory" and parts[1] == "prepare")
        (alive.add if held else alive.discard)(key)
        self.peak[parts[1]] = max(self.peak.get(parts[1], 0), len(alive))


@pytest.mark.slow   # a Dask cluster: test-all and CI
def test_the_window_bounds_the_recordings_in_flight(runs, local_cluster):
    """With a window of 2, never more than 2 recordings' prepared rows live on the cluster, nor 2
    statistics tasks run; the progress advances once per recording in each pass."""
    client = local_cluster.client
    client.register_plugin(_InFlight())
    inputs = [*runs, *runs]
    progress = []
    try:
        reference.train_reference(inputs, cfg=SMALL, cluster=local_cluster, window=2,
                                  progress=lambda fraction, message: progress.append((fraction, message)))
        peak = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins[_InFlight.name].peak)
    finally:
        client.unregister_scheduler_plugin(_InFlight.name)
    assert peak["prepare"] == 2 and peak["statistics"] == 2, peak
    assert peak["sample"] <= 2 and "digest" not in peak, peak
    fractions = [fraction for fraction, _ in progress]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert sum("prepared" in message for _, message in progress) == len(inputs)
    assert sum("scored" in message for _, message in progress) == len(inputs)


@pytest.mark.slow   # a Dask cluster: test-all and CI
def test_the_workers_warnings_and_errors_reach_the_caller(runs, local_cluster, tmp_path):
    """A run without labels warns here (once, by its name); a run folder that cannot be read, and
    too few normal beats for the centroids, are one-line errors."""
    import pandas as pd

    bare = shutil.copytree(runs[2], tmp_path / "bare")
    beats = pd.read_parquet(bare / "beats.parquet")
    beats.drop(columns="label").to_parquet(bare / "beats.parquet", index=False)
    with pytest.warns(PipelineWarning, match="no labels; every beat counts as normal") as caught:
        got = reference.train_reference([runs[0], bare], cfg=SMALL, cluster=local_cluster)
    assert len([w for w in caught if "no labels" in str(w.message)]) == 1
    assert got.meta["records"][1]["normal_beats"] == int((beats["quality"] >= 0.5).sum())

    broken = shutil.copytree(runs[1], tmp_path / "broken")
    (broken / "embeddings.npy").unlink()
    with pytest.raises(ValueError, match=r"broken: not a readable run folder \(FileNotFoundError: .*embeddings"):
        reference.train_reference([runs[0], broken], cfg=SMALL, cluster=local_cluster)
    with pytest.raises(ValueError, match="need at least 8192 normal beats to place 4096 centroids"):
        reference.train_reference(runs, cfg=reference.ReferenceConfig(centroids=4096), cluster=local_cluster)


def test_the_combined_table_is_cross_fitted_by_recording_then_by_fold():
    """Up to 25 recordings each is left out alone (the DS1 reference's 22 were); beyond, 25 folds
    of consecutive recordings. Against a plain loop over the folds."""
    from pipeline import calibrate
    from pipeline.reference_training import CROSS_FIT_FOLDS, _fit_tables, cross_fit_folds

    np.testing.assert_array_equal(cross_fit_folds(22), np.arange(22))
    folds = cross_fit_folds(500)
    assert folds.max() + 1 == CROSS_FIT_FOLDS == 25 and (np.diff(folds) >= 0).all()
    assert set(np.bincount(folds)) == {20}
    rng = np.random.default_rng(3)
    stats = [{name: rng.gamma(2.0, 1.0, 200).astype(np.float32) for name in reference.COMPONENTS} for _ in range(30)]
    cfg = reference.ReferenceConfig()
    fitted = _fit_tables(stats, cfg, lambda fraction, message: None)["combined"]
    folds = np.arange(30) * 25 // 30
    combined = []
    for fold in range(25):
        others = {name: calibrate.fit_tail(np.concatenate([s[name] for s, f in zip(stats, folds) if f != fold]))
                  for name in reference.COMPONENTS}
        combined += [calibrate.fisher_statistic({name: calibrate.log_tail_p(s[name], others[name])
                                                 for name in reference.COMPONENTS}, cfg.weights)
                     for s, f in zip(stats, folds) if f == fold]
    expected = calibrate.fit_tail(np.concatenate(combined), "identity")
    assert fitted.u.tobytes() == expected.u.tobytes() and fitted.theta == expected.theta
