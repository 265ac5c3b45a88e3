"""Many recordings at once: one Dask task per recording, and the archive table of their results.

``run_batch`` sends each :class:`~pipeline.batch_task.Job` (a :class:`~pipeline.requests.RunRequest`
for one recording) to a Dask cluster as one task that runs exactly ``run_pipeline`` — load,
segment, train, score, write its run directory — so the per-recording cache works as for a single
run: a second batch over the same archive recomputes only recordings that failed or changed. A
recording that fails does so alone; its one-line error goes into its row.

The cluster (:mod:`pipeline.cluster`), the task and its row (:mod:`pipeline.batch_task`), the
archive table (:mod:`pipeline.archive`), the discovery of recordings (:mod:`pipeline.recordings`)
and the progress bar (:mod:`pipeline.batch_progress`) live in modules of their own; this module
conducts them, and names their public parts too.

Every finished recording updates ``<out>/archive.parquet``, so that an interrupted batch keeps what
it finished. :func:`~pipeline.archive.read_archive` is the reader for other programs (the
dashboard).

See Also
--------
pipeline.run.run_pipeline : what one task runs.
pipeline.evaluate.evaluate_directory : scores annotated records through this module.
"""
from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pipeline.accuracy import evaluation_figures, reference_beats  # noqa: F401
from pipeline.archive import (ARCHIVE, ARCHIVE_COLUMNS, ArchiveWriter, archive_frame, archive_path,  # noqa: F401
                              one_line, read_archive)
from pipeline.batch_progress import ProgressBar
from pipeline.batch_task import Job, configure_worker, failed_row, process_recording, run_row  # noqa: F401
from pipeline.cluster import CLUSTERS, THREAD_ENV, Cluster, open_cluster, usable_cores  # noqa: F401
from pipeline.recordings import RECORDING_SUFFIXES, display_name, find_recordings  # noqa: F401

EVENT_TOPIC = "ecg-batch"


@dataclass
class BatchResult:
    """What a batch did: one archive row per job (in job order), ``then``'s outputs, timings."""

    rows: list[dict]
    outputs: list
    archive: Path
    seconds: float            # from the first task sent to the last result (cluster start apart)
    cluster: Cluster
    counts: Counter = field(default_factory=Counter)

    @property
    def failed(self) -> list[dict]:
        return [row for row in self.rows if row["status"] == "failed"]

    @property
    def per_minute(self) -> float:
        return 60.0 * len(self.rows) / self.seconds if self.seconds > 0 else float("nan")


def run_batch(jobs: list[Job], *, cluster: str | Cluster = "auto", workers: int | None = None,
              threads: int | None = None, per_gpu: int | None = None, progress: bool = True,
              write_archive: bool = True) -> BatchResult:
    """Run every job on a Dask cluster, one task per recording; write the archive as they finish.

    Parameters
    ----------
    jobs : list of Job
        All with the same ``request.out`` (where the runs and the archive table go).
    cluster : str or Cluster
        Passed to :func:`open_cluster` with ``workers``, ``threads`` and ``per_gpu`` (started here and closed at
        the end), or a cluster already opened with it (kept open: several batches can share one).
    progress : bool
        A live bar on stderr: recordings done of all, counts by status, the stage of each
        running recording, elapsed time and ETA; and the Dask dashboard link.
    """
    if not jobs:
        raise ValueError("no recordings to run")
    outs = {str(Path(job.request.out)) for job in jobs}
    if len(outs) != 1:
        raise ValueError(f"every job of a batch writes to one --out folder; got {sorted(outs)}")
    if isinstance(cluster, Cluster):
        return _run_on(jobs, cluster, progress, write_archive)
    device = jobs[0].request.device
    with open_cluster(cluster, workers, device=device, max_workers=len(jobs), threads=threads,
                      per_gpu=per_gpu) as opened:
        return _run_on(jobs, opened, progress, write_archive)


def _run_on(jobs: list[Job], cluster: Cluster, progress: bool, write_archive: bool) -> BatchResult:
    from distributed import as_completed

    client = cluster.client
    archive = ArchiveWriter(Path(jobs[0].request.out)) if write_archive else None
    topic = f"{EVENT_TOPIC}-{uuid.uuid4().hex[:12]}"
    bar = ProgressBar(len(jobs), enabled=progress, cluster=cluster)
    client.subscribe_topic(topic, bar.event)
    # Largest recordings first: the last task to start is then a short one (less idle tail).
    order = sorted(range(len(jobs)), key=lambda i: -_size_of(jobs[i].input))
    started = time.perf_counter()
    futures = {client.submit(process_recording, jobs[i], cluster.threads, topic, cluster.per_gpu, pure=False,
                             key=f"recording-{i}-{uuid.uuid4().hex[:8]}"): i for i in order}
    rows: list[dict | None] = [None] * len(jobs)
    outputs: list = [None] * len(jobs)
    try:
        pending = as_completed(list(futures))
        while not pending.is_empty():
            done = pending.next_batch(block=False)
            if not done:
                bar.tick()
                time.sleep(0.25)
                continue
            for future in done:
                i = futures[future]
                rows[i], outputs[i] = _collect(future, jobs[i])
                if archive is not None:
                    archive.add(rows[i])
                bar.finished(rows[i])
    finally:
        with contextlib.suppress(Exception):
            client.unsubscribe_topic(topic)
        bar.close()
        if any(row is None for row in rows):  # interrupted: stop what is still queued or running
            with contextlib.suppress(Exception):
                client.cancel(list(futures))
    seconds = time.perf_counter() - started
    return BatchResult(rows, outputs, archive.path if archive else archive_path(jobs[0].request.out), seconds,
                       cluster, Counter(row["status"] for row in rows))


def _collect(future, job: Job) -> tuple[dict, object]:
    """A task's result; a task that died with its worker (crash, out of memory) fails alone too."""
    if future.status == "finished":
        return future.result()
    try:
        err = future.exception()
    except Exception as exc:  # cancelled
        err = exc
    row = failed_row(job, err)
    row.update(worker="", finished=datetime.now(timezone.utc).isoformat(timespec="seconds"), warnings="")
    return row, None


def _size_of(path: str) -> int:
    try:
        p = Path(path)
        return (p.with_suffix(".dat") if p.suffix.lower() == ".hea" else p).stat().st_size
    except OSError:
        return 0


# --------------------------------------------------------------------------- the summary
def format_summary(result: BatchResult) -> str:
    """One line per recording (failed ones with their error), then the totals and the archive."""
    header = f"{'status':<7} {'recording':<24} {'beats':>8} {'outliers':>8} {'HR bpm':>7} {'time':>8}"
    lines = [header, "─" * len(header)]
    for row in result.rows:
        name = row["name"] if len(row["name"]) <= 24 else "…" + row["name"][-23:]
        if row["status"] == "failed":
            lines.append(f"{'failed':<7} {name:<24} {row['error']}")
            continue
        lines.append(f"{row['status']:<7} {name:<24} {row['beats']:>8,} {row['outliers']:>8,} "
                     f"{row['heart_rate_bpm']:>7.0f} {_seconds(row['wall_s']):>8}")
    c = result.counts
    cluster = result.cluster
    lines.append(f"{len(result.rows)} recordings: {c['ok']} ok, {c['cached']} cached, {c['failed']} failed in "
                 f"{result.seconds:.1f} s on {cluster.workers} worker{'s' if cluster.workers != 1 else ''} "
                 f"({cluster.kind}; started in {cluster.startup_s:.1f} s): {result.per_minute:.1f} recordings/min")
    lines.append(f"archive  {result.archive}")
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"

