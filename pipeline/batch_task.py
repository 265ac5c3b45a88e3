"""One recording of a batch, run as one Dask task: the :class:`Job`, the worker's set-up, the task
itself (exactly ``run_pipeline``: load, segment, train, score, write its run directory) and the
archive row it returns.

A recording that fails does so alone: its row says ``failed`` with the one-line error, and the
run's warnings go into its row instead of the worker's stderr.

See Also
--------
pipeline.run.run_pipeline : what one task runs.
pipeline.batch.run_batch : sends the tasks and collects their rows.
pipeline.archive : the columns of a row.
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline import PipelineWarning
from pipeline.accuracy import evaluation_figures
from pipeline.archive import ARCHIVE_COLUMNS, one_line
from pipeline.calibrate import is_outlier
from pipeline.recordings import display_name


@dataclass(frozen=True)
class Job:
    """One recording to run: its request, and optionally ``then(run) -> dict``, run on the worker
    after the pipeline (e.g. scoring against reference annotations); its result comes back in
    :attr:`pipeline.batch.BatchResult.outputs`. ``then`` must be picklable (a module-level function or a
    ``functools.partial`` of one)."""

    request: object  # pipeline.requests.RunRequest
    then: Callable | None = None

    @property
    def input(self) -> str:
        """The recording's absolute path: its identity in the archive."""
        return str(Path(self.request.input).absolute())


def configure_worker(threads: int | None, device: str, per_gpu: int = 1) -> None:
    """Set this worker's thread budget and device memory before a recording runs.

    PyTorch's intra-op pool is process-wide; Numba's thread count is per calling thread, so this
    runs in the thread that runs the task, every time (it is cheap). On a local cluster the
    worker process's environment (``OMP_NUM_THREADS`` etc.) was set to the same budget when it
    was spawned; on a remote one this is the only place the budget is applied.
    On a GPU worker, the pipeline's RMM pool is made on the worker's device (idempotent), its
    share of the memory of a GPU that ``per_gpu`` workers use.
    """
    if threads is not None:
        from pipeline import threads as thread_policy

        thread_policy.limit_threads(threads)  # stays in force for run_pipeline's own call
    if device == "gpu":
        from pipeline import backend

        backend.use_rmm_pool(sharers=per_gpu)


def process_recording(job: Job, threads: int | None = None, topic: str | None = None,
                      per_gpu: int = 1) -> tuple[dict, object]:
    """Run one job (in a Dask worker, or anywhere): ``(archive row, job.then's result or None)``.

    Never raises for a bad recording: the row says ``failed`` with the one-line error. Warnings
    of the run go into the row instead of the worker's stderr.
    """
    started = time.perf_counter()
    report = _StageEvents(topic, job.input)
    report("start")
    output = None
    with warnings.catch_warnings(record=True) as caught:  # one task per worker process at a time
        warnings.simplefilter("always")
        try:
            from pipeline import backend
            from pipeline.run import run_pipeline

            configure_worker(threads, backend.resolve_device(job.request.device), per_gpu)
            run = run_pipeline(job.request, progress=lambda stage, fraction, message: report(stage))
            row = run_row(job, run)
            if job.then is not None:
                output = job.then(run)
        except Exception as err:  # a bad recording fails alone; the batch goes on
            row = failed_row(job, err)
    row.update(wall_s=round(time.perf_counter() - started, 6), worker=_worker_name(),
               finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
               warnings=" | ".join(dict.fromkeys(str(w.message) for w in caught
                                                 if issubclass(w.category, PipelineWarning))))
    report("done")
    return row, output


class _StageEvents:
    """Tells the client which stage a recording is in, through Dask's event log (one event per
    stage change, not per progress tick)."""

    def __init__(self, topic: str | None, key: str):
        self.topic, self.key, self.stage = topic, key, None
        self.worker = None
        if topic is not None:
            with contextlib.suppress(ImportError, ValueError):
                from distributed import get_worker

                self.worker = get_worker()

    def __call__(self, stage: str) -> None:
        if self.worker is None or stage == self.stage:
            return
        self.stage = stage
        with contextlib.suppress(Exception):  # progress must never fail a recording
            self.worker.log_event(self.topic, {"input": self.key, "stage": stage})


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def run_row(job: Job, run) -> dict:
    """The archive row of a finished run (see :data:`ARCHIVE_COLUMNS`)."""
    report, beats = run.report, run.beats
    scores = beats["score"].to_numpy(dtype=np.float64)
    median = float(np.median(scores)) if len(scores) else float("nan")
    from pipeline.quality import low_quality   # its kernels' module imports Numba

    outliers = int((is_outlier(scores) & ~low_quality(beats["quality"].to_numpy())).sum())
    inp = report["input"]
    row = {
        "input": job.input, "name": display_name(job.input), "status": "cached" if run.cached else "ok", "error": "",
        "fs": float(inp["fs"]), "samples": int(inp["n_samples"]), "duration_s": float(inp["duration_s"]),
        "beats": len(beats), "outliers": outliers, "outlier_fraction": outliers / len(beats) if len(beats) else 0.0,
        "score_median": median, "score_max": float(scores.max()) if len(scores) else float("nan"),
        "heart_rate_bpm": 60.0 / float(beats["length_s"].median()) if len(beats) else float("nan"),
        "run_dir": str(Path(run.path).absolute()), "key": report["key"], "device": report["device"]["name"],
        "segmentation_s": float(report["segmentation_s"]),
        "annotated": bool(inp.get("annotated", False)),
    }
    row.update({f"time_{stage}_s": float(seconds) for stage, seconds in report["stages_s"].items()
                if f"time_{stage}_s" in ARCHIVE_COLUMNS})
    if row["annotated"]:
        row.update(evaluation_figures(job.input, run))
    return row


def failed_row(job: Job, err: BaseException) -> dict:
    return {"input": job.input, "name": display_name(job.input), "status": "failed", "error": one_line(err)}
