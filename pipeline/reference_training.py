"""Training a reference from annotated runs: the normal beats of many recordings, their k-means
centroids, and the tail tables that calibrate each statistic (the combined one cross-fitted).

Two passes over the recordings, one recording per task (:mod:`pipeline.reference_prepare`), so
that a recording's rows are read and resampled where the task runs and only small arrays reach
the driver:

1. every recording is prepared (its normal beats chosen, its rows resampled); the driver learns its
   counts and its data's SHA-256, draws its k-means sample (one generator, recording after
   recording, in input order) and gets back those rows alone. The driver places the centroids
   (k-means of the samples); the training data's digest is the SHA-256 of the recordings' own.
2. every recording's normal beats are scored against the centroids; their statistics come back
   (three 1-D float32 arrays, 12 bytes a normal beat, all kept: each recording's combined
   statistic is calibrated against tables fitted on all the others) and the driver fits the tail
   tables from them.

With a Dask cluster (``cluster=``) the tasks run on its workers, at most ``window`` recordings at a
time (the prepared rows wait on the workers, not here), and results are taken as they finish;
without one the same functions run here, one recording at a time. Either way, and in whatever order
tasks finish, the reference is bit for bit the one :func:`fit_reference` makes from every
recording's :class:`ReferenceBeats` held at once.

See Also
--------
pipeline.reference_prepare : what each task does to one recording.
pipeline.reference_score.reference_statistics : the statistics whose tails are fitted here.
pipeline.reference_store.save_reference : writes the trained reference.
"""
from __future__ import annotations

import uuid
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from pipeline import PipelineWarning, calibrate
from pipeline.reference_prepare import (NORMAL_SYMBOLS, ReferenceBeats, RecordFacts, TaskError,  # noqa: F401
                                        draw_sample, guarded, prepare_record, record_digest, record_entry,
                                        record_facts, record_statistics, reference_beats, sample_rows, training_digest)
from pipeline.reference_score import reference_statistics
from pipeline.reference_store import COMPONENTS, Reference, ReferenceConfig

WHAT_IT_SAW = ("reference-rate beat rows and fiducials of every beat; labels only to choose the normal (AAMI N) "
               "beats whose statistics and rows define the population")
PREPARED, PLACED, SCORED = 0.45, 0.5, 0.85   # progress: first pass, k-means, second pass done
CROSS_FIT_FOLDS = 25   # up to this many recordings, the combined table is cross-fitted leaving each one out


def train_reference(inputs: Sequence, labels: Sequence | None = None, cfg: ReferenceConfig = ReferenceConfig(),
                    progress=None, *, reviewer_labels: bool = False, cluster=None,
                    window: int | None = None) -> Reference:
    """Train a reference from run directories or arrays.

    Parameters
    ----------
    inputs : sequence
        Each a run directory written by ``python -m pipeline run``/``batch`` (its
        ``embeddings.npy``, ``beats.parquet`` and ``report.json``, read by
        :func:`pipeline.results.load_run`), a :class:`~pipeline.results.RunResult`, or a
        ``(rows, positions, fs, pre)`` tuple of the product's native-rate rows.
    labels : sequence, optional
        Per input, the beats that are normal: a boolean array, or beat symbols (MIT-BIH; AAMI
        class N = ``N L R e j`` counts as normal). Default: a run's ``label`` column (the reference
        annotations matched to its beats) where it has one; an input with neither counts every
        beat as normal (with a warning: its abnormal beats will count as normal variation).
        Labels only choose the normal beats; nothing else here reads them.
    progress : callable, optional
        ``progress(fraction, message)``, advanced as each recording is done in each pass.
    reviewer_labels : bool
        Where ``labels`` gives none, a run's normal beats are those of
        :func:`pipeline.reviewed.normal_beats` (the reviewer's labels saved by the dashboard win
        over its annotations), read where the run is read.
    cluster : pipeline.cluster.Cluster, optional
        Run the tasks on this cluster's workers (which must see the run directories) when every
        input is a run directory; arrays and RunResults, already in this process, are trained on
        here.
    window : int, optional
        On a cluster, the most recordings in flight at once (default: twice the workers).

    Returns
    -------
    Reference
        Centroids: k-means of up to ``beats_per_record`` normal beats of each input. Tail tables
        of each statistic over every input's normal beats; the combined statistic's table is
        cross-fitted (each input's normal beats scored against component tables fitted without
        it; beyond :data:`CROSS_FIT_FOLDS` inputs, without its fold), so that scoring a new
        recording and fitting the table see the same uncertainty.
    """
    inputs = list(inputs)
    check_recordings(len(inputs))
    if labels is not None and len(labels) != len(inputs):
        raise ValueError(f"labels must give one entry per input; got {len(labels)} for {len(inputs)} inputs")
    if window is not None and window < 1:
        raise ValueError(f"window must be at least 1 recording; got {window}")
    say = progress or (lambda fraction, message: None)
    tasks = [(item, None if labels is None else labels[i], reviewer_labels) for i, item in enumerate(inputs)]
    if cluster is not None and all(isinstance(item, (str, Path)) for item in inputs):
        passes = _OnCluster(cluster, window or 2 * max(1, cluster.workers))
    else:
        passes = _Here()
    samples, records, digest = passes.prepare(tasks, cfg, say)
    centroids = _place_centroids(samples, cfg, say)
    stats = passes.statistics(tasks, centroids, cfg, say)
    tables = _fit_tables(stats, cfg, say)
    say(1.0, "done")
    return Reference(cfg, centroids, tables, _meta(digest, records))


def check_recordings(count: int) -> None:
    """Refuse to train on fewer than two recordings (before any is read or run)."""
    if count < 2:
        raise ValueError(f"a reference needs at least 2 recordings (their normal beats are compared across "
                         f"recordings); got {count}")


def fit_reference(recordings: Sequence[ReferenceBeats], cfg: ReferenceConfig = ReferenceConfig(),
                  progress=None) -> Reference:
    """:func:`train_reference` on prepared :class:`ReferenceBeats` (host arrays), all held at once."""
    say = progress or (lambda fraction, message: None)
    rng = np.random.default_rng(cfg.seed)
    sample = []
    for rec in recordings:
        normal = np.flatnonzero(rec.normal)
        if len(normal):
            sample.append(rec.rows[rng.choice(normal, min(cfg.beats_per_record, len(normal)), replace=False)])
    centroids = _place_centroids(sample, cfg, say)
    stats = []
    for rec in recordings:
        values, _ = reference_statistics(rec.rows, rec.positions, rec.fs, centroids, cfg)
        stats.append({name: values[name][rec.normal] for name in COMPONENTS})
    tables = _fit_tables(stats, cfg, say)
    digests = [record_digest(rec) for rec in recordings]
    records = [record_entry(rec.source, int(len(rec.rows)), int(rec.normal.sum()), digest)
               for rec, digest in zip(recordings, digests)]
    say(1.0, "done")
    return Reference(cfg, centroids, tables, _meta(training_digest(digests), records))


# --------------------------------------------------------------------------- the driver's part
def _place_centroids(samples: list, cfg: ReferenceConfig, say) -> np.ndarray:
    """k-means centres of the recordings' sample rows (None: a recording without normal beats)."""
    from sklearn.cluster import KMeans

    samples = [s for s in samples if s is not None]
    sample = np.concatenate(samples) if samples else np.zeros((0, cfg.width), np.float32)
    if len(sample) < 2 * cfg.centroids:
        raise ValueError(f"need at least {2 * cfg.centroids} normal beats to place {cfg.centroids} centroids; "
                         f"got {len(sample)}")
    say(PREPARED, f"k-means of {len(sample):,} normal beats")
    centroids = KMeans(cfg.centroids, n_init=1, max_iter=100, random_state=cfg.seed).fit(sample).cluster_centers_
    say(PLACED, "statistics of every recording")
    return centroids.astype(np.float32)


def _fit_tables(stats: list[dict], cfg: ReferenceConfig, say) -> dict:
    """Each component's tail table over every recording's normal beats (``stats``, in input order),
    and the combined statistic's, cross-fitted: each recording's beats scored against component
    tables fitted without its fold (:func:`cross_fit_folds`)."""
    tables = {name: calibrate.fit_tail(np.concatenate([s[name] for s in stats])) for name in COMPONENTS}
    say(SCORED, "cross-fitted calibration of the combined score")
    folds = cross_fit_folds(len(stats))
    combined = []
    for fold in range(int(folds.max()) + 1):
        held_out = [i for i in np.flatnonzero(folds == fold) if len(stats[i]["shape"])]
        if not held_out:
            continue
        others = {name: calibrate.fit_tail(np.concatenate([s[name] for j, s in enumerate(stats) if folds[j] != fold]))
                  for name in COMPONENTS}
        for i in held_out:
            combined.append(calibrate.fisher_statistic(
                {name: calibrate.log_tail_p(stats[i][name], others[name]) for name in COMPONENTS}, cfg.weights))
    tables["combined"] = calibrate.fit_tail(np.concatenate(combined), "identity")
    return tables


def cross_fit_folds(count: int) -> np.ndarray:
    """Each recording's fold for the cross-fitted table: its own (leave one recording out) up to
    :data:`CROSS_FIT_FOLDS` recordings, beyond that that many folds of consecutive recordings. The
    tables are fitted again once a fold, so an archive of 500 recordings costs 25 fits of every
    beat's statistics, not 500."""
    return np.arange(count) * min(count, CROSS_FIT_FOLDS) // max(count, 1)


def _meta(digest: str, records: list[dict]) -> dict:
    return {"training_data_sha256": digest, "training_data_sha256_over": "each record's data_sha256, in order",
            "records": records,
            "normal_beats": int(sum(record["normal_beats"] for record in records)), "what_it_saw": WHAT_IT_SAW}


def _show(facts: RecordFacts) -> None:
    """The warnings a recording's preparation gave, shown here (in input order)."""
    for message in facts.warnings:
        warnings.warn(message, PipelineWarning, stacklevel=4)


class _Here:
    """Both passes in this process, one recording at a time: only one recording's rows are held."""

    def prepare(self, tasks: list, cfg: ReferenceConfig, say) -> tuple[list, list, str]:
        rng = np.random.default_rng(cfg.seed)
        samples, records, digests = [], [], []
        for i, task in enumerate(tasks):
            prepared = prepare_record(*task, cfg)
            facts = record_facts(prepared)
            _show(facts)
            samples.append(sample_rows(prepared, draw_sample(rng, facts.normal_beats, cfg)))
            records.append(facts.record())
            digests.append(facts.sha256)
            del prepared     # before the next recording is read, not after
            say(PREPARED * (i + 1) / len(tasks), f"prepared {i + 1} of {len(tasks)} recordings")
        return samples, records, training_digest(digests)

    def statistics(self, tasks: list, centroids: np.ndarray, cfg: ReferenceConfig, say) -> list[dict]:
        stats = []
        for i, task in enumerate(tasks):
            stats.append(record_statistics(*task, centroids, cfg))
            say(PLACED + (SCORED - PLACED) * (i + 1) / len(tasks), f"scored {i + 1} of {len(tasks)} recordings")
        return stats


class _OnCluster:
    """Both passes on a Dask cluster's workers, at most ``window`` recordings in flight: a recording
    is sent when one finishes, and its results are taken as they come, in any order."""

    def __init__(self, cluster, window: int):
        self.client, self.window, self.tag = cluster.client, window, uuid.uuid4().hex[:8]

    def prepare(self, tasks: list, cfg: ReferenceConfig, say) -> tuple[list, list, str]:
        """Per recording, a task prepares it (its rows stay on the worker), a second returns its
        facts (counts, source, digest); once the facts of it and of every recording before it are
        in, the driver draws its sample positions and sends a task that returns those rows. When
        they are back the recording is done, its rows released, and the next recording is sent."""
        from distributed import as_completed

        n, client = len(tasks), self.client
        rng = np.random.default_rng(cfg.seed)
        prepared, facts = {}, {}   # by recording: its prepared future (until its sample is sent), its facts
        samples, records = [None] * n, [None] * n
        roles, queue = {}, as_completed()
        opened = drawn = closed = 0

        def submit(role: str, i: int, function, *args, wait: bool = True):
            future = client.submit(guarded, function, *args, key=f"reference-{role}-{self.tag}-{i}")
            if wait:
                roles[future] = (role, i)
                queue.add(future)
            return future

        def open_next():
            nonlocal opened
            prepared[opened] = submit("prepare", opened, prepare_record, *tasks[opened], cfg, wait=False)
            submit("facts", opened, record_facts, prepared[opened])
            opened += 1

        try:
            while opened < min(self.window, n):
                open_next()
            for future in queue:
                role, i = roles.pop(future)
                value = _result(future, tasks[i][0])
                if role == "facts":
                    facts[i] = value
                    while drawn in facts:       # in input order: the generator is sequential
                        _show(facts[drawn])
                        records[drawn] = facts[drawn].record()
                        submit("sample", drawn, sample_rows, prepared[drawn],
                               draw_sample(rng, facts[drawn].normal_beats, cfg))
                        # Dropped now, the scheduler releases the rows as soon as the sample task is
                        # done, before its result reaches us: dropped later, the release would go
                        # out after the next recording is sent, and the window would briefly hold one more.
                        del prepared[drawn]
                        drawn += 1
                    continue
                samples[i] = value
                # the sample is back, and so the recording's rows are gone from the worker
                closed += 1
                say(PREPARED * closed / n, f"prepared {closed} of {n} recordings")
                if opened < n:
                    open_next()
        finally:
            _cancel(client, [*prepared.values(), *roles])
        return samples, records, training_digest(facts[i].sha256 for i in range(n))

    def statistics(self, tasks: list, centroids: np.ndarray, cfg: ReferenceConfig, say) -> list[dict]:
        from distributed import as_completed

        n, client = len(tasks), self.client
        centroids = client.scatter(centroids, broadcast=True)
        stats, running, queue = [None] * n, {}, as_completed()
        sent = done = 0

        def send_next():
            nonlocal sent
            future = client.submit(guarded, record_statistics, *tasks[sent], centroids, cfg,
                                   key=f"reference-statistics-{self.tag}-{sent}")
            running[future] = sent
            queue.add(future)
            sent += 1

        try:
            while sent < min(self.window, n):
                send_next()
            for future in queue:
                i = running.pop(future)
                stats[i] = _result(future, tasks[i][0])
                done += 1
                say(PLACED + (SCORED - PLACED) * done / n, f"scored {done} of {n} recordings")
                if sent < n:
                    send_next()
        finally:
            _cancel(client, [*running, centroids])
        return stats


def _result(future, item):
    """A task's result; the input's error (:class:`TaskError`) raised here as the task met it (one
    line for the command line); any other failure in one line naming the recording."""
    try:
        value = future.result()
    except Exception as err:  # the worker died (crash, out of memory), or the task was cancelled
        detail = str(err).splitlines()[0] if str(err) else "no detail"
        raise ValueError(f"{Path(str(item)).name}: its reference task failed ({type(err).__name__}: {detail})") \
            from None
    if isinstance(value, TaskError):
        raise value.error
    return value


def _cancel(client, futures: list) -> None:
    """Stop what is still queued or running after an error (nothing is left after a success)."""
    pending = [f for f in futures if not f.done()]
    if pending:
        client.cancel(pending)
