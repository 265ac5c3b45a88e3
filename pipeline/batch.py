"""Many recordings at once: one Dask task per recording, and the archive table of their results.

``run_batch`` sends each :class:`Job` (a :class:`~pipeline.run.RunRequest` for one recording) to a
Dask cluster as one task that runs exactly ``run_pipeline`` — load, segment, train, score, write
its run directory — so the per-recording cache works as for a single run: a second batch over
the same archive recomputes only recordings that failed or changed. A recording that fails does
so alone; its one-line error goes into its row. The cluster is

- ``local``: ``distributed.LocalCluster`` with one process per worker, one task at a time per
  worker, and a thread budget per worker (PyTorch, Numba, OpenMP) of ``cores // workers``, so
  that the workers together never ask for more threads than there are cores;
- ``local-cuda``: ``dask_cuda.LocalCUDACluster``, one worker per visible GPU (each sees its own
  GPU as device 0 and makes the pipeline's RMM pool there, see
  :func:`pipeline.backend.use_rmm_pool`), with the same thread budget;
- a scheduler address (``tcp://host:8786``): an existing cluster, on one machine or many; the
  code is the same, only the address changes.

Every finished recording updates ``<out>/archive.parquet`` (written by this process only, to a
temporary file that is then renamed over the old one), so that an interrupted batch keeps what it
finished. :func:`read_archive` is the reader for other programs (the dashboard).

See Also
--------
pipeline.run.run_pipeline : what one task runs.
pipeline.evaluate.evaluate_directory : scores annotated records through this module.
"""
from __future__ import annotations

import contextlib
import glob
import os
import socket
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from pipeline import PipelineWarning
from pipeline import one_line as _one_line
from pipeline.calibrate import OUTLIER_SCORE, is_outlier

ARCHIVE = "archive.parquet"
CLUSTERS = ("auto", "local", "local-cuda")  # or a scheduler address such as tcp://host:8786
# A folder (or a glob) contributes the files with these endings; a WFDB record counts once, by its .hea.
RECORDING_SUFFIXES = (".csv", ".txt", ".tsv", ".csv.gz", ".txt.gz", ".npy", ".parquet", ".pq", ".hea", ".edf", ".bdf")
ANNOTATION_SIDECAR = ".annotations.csv"
EVENT_TOPIC = "ecg-batch"
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


# --------------------------------------------------------------------------- the jobs
@dataclass(frozen=True)
class Job:
    """One recording to run: its request, and optionally ``then(run) -> dict``, run on the worker
    after the pipeline (e.g. scoring against reference annotations); its result comes back in
    :attr:`BatchResult.outputs`. ``then`` must be picklable (a module-level function or a
    ``functools.partial`` of one)."""

    request: object  # pipeline.run.RunRequest
    then: Callable | None = None

    @property
    def input(self) -> str:
        """The recording's absolute path: its identity in the archive."""
        return str(Path(self.request.input).absolute())


def find_recordings(inputs: Iterable[str], exclude: str | Path | None = None) -> list[Path]:
    """The recordings named by ``inputs``: files, folders (their recordings, not recursively) or
    glob patterns (``**`` recurses), in order, each once.

    A folder or a glob contributes files ending in one of :data:`RECORDING_SUFFIXES`, except
    annotation sidecars (``*.annotations.csv``) and hidden files; a WFDB record counts once, by
    its ``.hea``. A file named explicitly is taken as it is (a ``.dat`` stands for its ``.hea``),
    so that a bad one fails in the batch with its own error. Anything under ``exclude`` (the
    batch's output folder, whose ``.npy`` files are not recordings) is left out.

    Raises
    ------
    ValueError
        When an input does not exist, a pattern matches nothing, or nothing is left.
    """
    excluded = Path(exclude).absolute() if exclude is not None else None
    found: dict[Path, None] = {}
    for text in inputs:
        for path in _expand(str(text)):
            path = path.absolute()
            if excluded is not None and (path == excluded or excluded in path.parents):
                continue
            found.setdefault(path, None)
    if not found:
        raise ValueError(f"no recordings in {' '.join(map(str, inputs)) or '(no inputs)'}; expected files ending in "
                         f"{', '.join(RECORDING_SUFFIXES)}")
    return list(found)


def _expand(text: str) -> list[Path]:
    if any(ch in text for ch in "*?["):
        matches = sorted(Path(m) for m in glob.glob(text, recursive=True))
        picked = [r for m in matches
                  for r in (_folder_recordings(m) if m.is_dir() else [m] if _is_recording(m) else [])]
        if not picked:
            raise ValueError(f"no recordings match {text!r}")
        return picked
    path = Path(text)
    if path.is_dir():
        picked = _folder_recordings(path)
        if not picked:
            raise ValueError(f"{path} holds no recordings (files ending in {', '.join(RECORDING_SUFFIXES)})")
        return picked
    if path.suffix.lower() == ".dat" and path.with_suffix(".hea").exists():
        return [path.with_suffix(".hea")]
    if not path.exists():
        raise ValueError(f"no such file or folder: {path}")
    return [path]


def _folder_recordings(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and _is_recording(p))


def _is_recording(path: Path) -> bool:
    name = path.name.lower()
    return (not name.startswith(".") and name.endswith(RECORDING_SUFFIXES)
            and not name.endswith(ANNOTATION_SIDECAR))


def display_name(path: str | Path) -> str:
    """How a recording is named in summaries: the WFDB record name, else the file name."""
    path = Path(path)
    return path.stem if path.suffix.lower() == ".hea" else path.name


# --------------------------------------------------------------------------- the cluster
@dataclass
class Cluster:
    """A connected Dask client and what the batch needs to know about its workers."""

    client: object
    kind: str                 # local | local-cuda | the scheduler address
    workers: int
    threads: int | None       # thread budget per worker (None: the cluster's own settings)
    dashboard: str | None
    startup_s: float


@contextlib.contextmanager
def open_cluster(cluster: str = "auto", workers: int | None = None, device: str = "auto",
                 max_workers: int | None = None, threads: int | None = None):
    """Start (or connect to) the cluster for a batch; close what was started on exit.

    Parameters
    ----------
    cluster : str
        ``auto`` (``local-cuda`` when a GPU is usable and ``device`` is not ``cpu``, else
        ``local``), ``local``, ``local-cuda``, or a scheduler address (``tcp://host:8786``).
    workers : int, optional
        ``local``: worker processes (default: one per core, at most ``max_workers``);
        ``local-cuda``: GPUs to use (default: every visible one). Ignored for an address.
    max_workers : int, optional
        No more local workers than this (the number of recordings): idle ones cost start-up.
    threads : int, optional
        Thread budget of each worker (PyTorch, Numba, OpenMP). Default on a local cluster:
        ``cores // workers``; on a cluster given by address: the workers' own settings.
    """
    from pipeline import backend

    for name, value in (("workers", workers), ("threads", threads)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1; got {value}")
    if cluster == "auto":
        cluster = "local-cuda" if device != "cpu" and backend.has_gpu() else "local"
    started = time.perf_counter()
    if cluster == "local":
        cores = usable_cores()
        n = workers or cores
        if max_workers:
            n = min(n, max_workers)
        threads = threads or max(1, cores // n)
        client = _local_cluster(n, threads)
    elif cluster == "local-cuda":
        if device == "cpu":
            raise ValueError("--cluster local-cuda runs one worker per GPU; it cannot run --device cpu "
                             "(use --cluster local)")
        n = _gpu_count()
        if workers is not None and workers > n:
            raise ValueError(f"--workers {workers} asks for more GPUs than the {n} visible ones")
        n = min(workers or n, max_workers or n)
        threads = threads or max(1, usable_cores() // n)
        client = _local_cuda_cluster(n, threads)
    elif "://" in cluster or ":" in cluster:
        client = _connect(cluster)
        n = len(client.scheduler_info()["workers"])
    else:
        raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)} or a scheduler address such as "
                         f"tcp://host:8786; got {cluster!r}")
    handle = Cluster(client, cluster, n, threads, _dashboard_link(client), time.perf_counter() - started)
    try:
        yield handle
    finally:
        _close(client, owned=cluster in ("local", "local-cuda"))


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _thread_budget_config(threads: int) -> dict:
    """Environment of new worker processes: OpenMP/MKL/OpenBLAS/Numba pools sized to the budget
    before any of them starts (Dask's own default is 1 thread). ``distributed.nanny.environ`` is
    applied in the worker process only and overrides Dask's ``pre-spawn-environ`` defaults."""
    return {f"distributed.nanny.environ.{name}": str(threads) for name in THREAD_ENV}


@contextlib.contextmanager
def _starting_workers(threads: int):
    """Around a local cluster's start: the workers' thread budget, and this process's environment
    as it was afterwards (Dask's nanny writes its ``pre-spawn-environ``, e.g. ``OMP_NUM_THREADS=1``,
    into the spawning process's ``os.environ``, which would then reach every later subprocess).
    The budget also goes into this process's environment while the workers start, because the
    nanny prefers a variable already set here (e.g. by ``pipeline.threads``) to its configuration."""
    import dask

    saved = dict(os.environ)
    try:
        os.environ.update({name: str(threads) for name in THREAD_ENV})
        with dask.config.set(_thread_budget_config(threads)):
            yield
    finally:
        for name in set(os.environ) - set(saved):
            del os.environ[name]
        os.environ.update(saved)


def _local_cluster(n: int, threads: int):
    import logging

    from distributed import Client, LocalCluster

    with _starting_workers(threads):
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=_dashboard_address(), silence_logs=logging.ERROR)
    return Client(cluster)


def _local_cuda_cluster(n: int, threads: int):
    import logging

    from distributed import Client

    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        raise ValueError("--cluster local-cuda needs dask-cuda (pip install '.[gpu]')") from None
    with _starting_workers(threads):
        cluster = LocalCUDACluster(n_workers=n, threads_per_worker=1, dashboard_address=_dashboard_address(),
                                   silence_logs=logging.ERROR)
    return Client(cluster)


def _gpu_count() -> int:
    from pipeline import backend

    if not backend.has_gpu():
        raise ValueError("--cluster local-cuda needs a CUDA GPU with CuPy and cuDF; none was found "
                         "(use --cluster local)")
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def _connect(address: str):
    from distributed import Client

    try:
        return Client(address, timeout="20s")
    except (OSError, TimeoutError) as err:
        raise ValueError(f"cannot reach the Dask scheduler at {address} ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else 'no answer'})") from None


def _dashboard_address() -> str:
    """Dask's usual dashboard port when it is free, else any free port (the link is printed)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 8787))
            return ":8787"
        except OSError:
            return ":0"


def _dashboard_link(client) -> str | None:
    try:
        return client.dashboard_link
    except Exception:  # no dashboard (bokeh missing) or a scheduler without one
        return None


def _close(client, owned: bool) -> None:
    cluster = client.cluster if owned else None
    with contextlib.suppress(Exception):
        client.close()
    if cluster is not None:
        with contextlib.suppress(Exception):
            cluster.close()


# --------------------------------------------------------------------------- on the worker
def configure_worker(threads: int | None, device: str) -> None:
    """Set this worker's thread budget and device memory before a recording runs.

    PyTorch's intra-op pool is process-wide; Numba's thread count is per calling thread, so this
    runs in the thread that runs the task, every time (it is cheap). On a local cluster the
    worker process's environment (``OMP_NUM_THREADS`` etc.) was set to the same budget when it
    was spawned; on a remote one this is the only place the budget is applied.
    On a GPU worker, the pipeline's RMM pool is made on the worker's device (idempotent).
    """
    if threads is not None:
        from pipeline import threads as thread_policy

        thread_policy.limit_threads(threads)  # stays in force for run_pipeline's own call
    if device == "gpu":
        from pipeline import backend

        backend.use_rmm_pool()


def process_recording(job: Job, threads: int | None = None, topic: str | None = None) -> tuple[dict, object]:
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

            configure_worker(threads, backend.resolve_device(job.request.device))
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


def one_line(err: BaseException) -> str:
    """A recording's or a table's error as one line of the archive (a missing file's OSError says
    what it needs to without its type)."""
    return _one_line(err, bare=(ValueError, OSError))


def evaluation_figures(input_path: str, run) -> dict:
    """Detection (TP/FN/FP, sensitivity and positive predictivity at 50 and 150 ms, AAMI EC57's
    matching, ventricular flutter/fibrillation left out) of the beats table against the
    recording's reference beats, and the outlier AUROC of abnormal versus normal beats, as in
    ``python -m pipeline evaluate``."""
    from pipeline.metrics import auroc, ec57_counts, flutter_episodes, sensitivity_ppv

    path = Path(input_path)
    reference = reference_beats(path)
    figures: dict = {}
    if reference is None:
        return figures
    figures["reference_beats"] = len(reference)
    flutter = flutter_episodes(path) if path.suffix.lower() == ".hea" else None
    counts = ec57_counts(reference, run.beats["fiducial"].to_numpy(), run.fs, flutter)
    figures.update(counts)
    for ms in sorted({int(name.split("_")[1]) for name in counts}):
        figures[f"se_{ms}"], figures[f"ppv_{ms}"] = sensitivity_ppv(counts[f"tp_{ms}"], counts[f"fn_{ms}"],
                                                                    counts[f"fp_{ms}"])
    beats = run.beats
    if "label" in beats:
        labelled = beats[beats["label"] != ""]
        figures["abnormal_beats"] = int(labelled["abnormal"].sum())
        figures["auroc"] = auroc(labelled["score"], labelled["abnormal"])
    return figures


def reference_beats(path: Path) -> np.ndarray | None:
    """Sample indices of the reference beats: a WFDB record's ``.atr`` (beat symbols only, as
    the loader keeps them) or a recording's ``<stem>.annotations.csv``; None without either."""
    if path.suffix.lower() == ".hea":
        if not path.with_suffix(".atr").exists():
            return None
        import wfdb

        from pipeline.readers import BEAT_SYMBOLS

        ann = wfdb.rdann(str(path.with_suffix("")), "atr")
        is_beat = np.isin(np.asarray(ann.symbol), list(BEAT_SYMBOLS))
        return np.asarray(ann.sample, dtype=np.int64)[is_beat]
    from pipeline.sidecar import read_annotations

    annotations = read_annotations(path)
    return None if annotations is None else annotations[0]


# --------------------------------------------------------------------------- the archive table
# name -> (dtype, meaning). Rows of failed recordings hold only input, name, status, error and
# the worker columns; the rest is missing (NaN / <NA>).
ARCHIVE_COLUMNS: dict[str, tuple[str, str]] = {
    "input": ("string", "absolute path of the recording (a WFDB record: its .hea)"),
    "name": ("string", "WFDB record name or file name, for display"),
    "status": ("string", "ok (computed now) | cached (an earlier run was reused) | failed"),
    "error": ("string", "one-line error of a failed recording, else ''"),
    "fs": ("float64", "sampling rate, Hz"),
    "samples": ("Int64", "samples in the analysed lead"),
    "duration_s": ("float64", "recording length, s"),
    "beats": ("Int64", "beats kept (scored)"),
    "outliers": ("Int64", f"beats of good quality with a calibrated score of {OUTLIER_SCORE:g} or more"),
    "outlier_fraction": ("float64", "outliers / beats"),
    "score_median": ("float64", "median outlier score of the recording"),
    "score_max": ("float64", "highest outlier score of the recording"),
    "heart_rate_bpm": ("float64", "60 / median beat length"),
    "run_dir": ("string", "the run directory (pipeline.results.load_run reads it)"),
    "key": ("string", "cache key of the run (hash of the input and every parameter)"),
    "device": ("string", "gpu | cpu"),
    "segmentation_s": ("float64", "Ricker + NMS + lengths + embedding time, s"),
    **{f"time_{stage}_s": ("float64", f"stage time of the computation that made the run: {stage}, s")
       for stage in ("hash", "setup", "warmup", "load", "wavelet", "peaks", "lengths", "embed", "train", "score",
                     "results")},
    "wall_s": ("float64", "time of this recording's task on its worker in this batch (a cached run: the cache check)"),
    "worker": ("string", "Dask worker that ran it"),
    "finished": ("string", "UTC time the task ended (ISO 8601)"),
    "warnings": ("string", "warnings of the run (e.g. interpolated gaps), ' | '-separated"),
    "annotated": ("boolean", "the input carries reference beat annotations (.atr or .annotations.csv)"),
    "reference_beats": ("Int64", "reference beats (annotated inputs)"),
    **{f"{what}_{ms}": ("Int64", f"{label} at {ms} ms tolerance")
       for ms in (50, 150) for what, label in (("tp", "true positives"), ("fn", "missed beats"),
                                               ("fp", "false detections"))},
    **{f"{what}_{ms}": ("float64", f"{label} at {ms} ms, %")
       for ms in (50, 150) for what, label in (("se", "sensitivity"), ("ppv", "positive predictivity"))},
    "abnormal_beats": ("Int64", "beats labelled abnormal (not N, L, R, e, j) among those matched to a reference beat"),
    "auroc": ("float64", "outlier-score AUROC of abnormal versus normal beats"),
}


def archive_path(out: str | Path) -> Path:
    return Path(out) / ARCHIVE


def archive_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """Rows → the archive's DataFrame: every column of :data:`ARCHIVE_COLUMNS` with its dtype,
    sorted by input path."""
    frame = pd.DataFrame(list(rows), columns=list(ARCHIVE_COLUMNS))
    frame = frame.astype({name: dtype for name, (dtype, _) in ARCHIVE_COLUMNS.items()})
    return frame.sort_values("input", ignore_index=True)


def read_archive(out: str | Path = "runs") -> pd.DataFrame:
    """The archive table of the batches written to ``out``: one row per recording.

    Columns and their meaning: :data:`ARCHIVE_COLUMNS`. ``run_dir`` of an ``ok``/``cached`` row
    is a finished run directory for :func:`pipeline.results.load_run`. Sorting by ``outliers``
    (descending) puts the recordings with the most outstanding beats first.

    Raises
    ------
    ValueError
        When ``out`` holds no archive, or it cannot be read.
    """
    path = archive_path(out)
    if not path.exists():
        raise ValueError(f"no archive table at {path}; make one with: python -m pipeline batch INPUTS… --out {out}")
    try:
        frame = pd.read_parquet(path)
    except Exception as err:
        raise ValueError(f"{path}: not a readable archive table ({one_line(err)})") from None
    return archive_frame(frame.to_dict("records"))  # columns a newer writer added are kept out


class _ArchiveWriter:
    """Keeps ``<out>/archive.parquet`` up to date: earlier rows of other recordings stay; a
    recording's new row replaces its old one; each write goes to a temporary file first."""

    def __init__(self, out: Path):
        self.path = archive_path(out)
        self.rows: dict[str, dict] = {}
        if self.path.exists():
            try:
                self.rows = {row["input"]: row for row in read_archive(out).to_dict("records")}
            except ValueError as err:
                warnings.warn(f"{err}; starting a new archive table", PipelineWarning, stacklevel=2)

    def add(self, row: dict) -> None:
        self.rows[row["input"]] = row
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            archive_frame(self.rows.values()).to_parquet(tmp, index=False)
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


# --------------------------------------------------------------------------- the batch
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
              threads: int | None = None, progress: bool = True, write_archive: bool = True) -> BatchResult:
    """Run every job on a Dask cluster, one task per recording; write the archive as they finish.

    Parameters
    ----------
    jobs : list of Job
        All with the same ``request.out`` (where the runs and the archive table go).
    cluster : str or Cluster
        Passed to :func:`open_cluster` with ``workers`` and ``threads`` (started here and closed at
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
    with open_cluster(cluster, workers, device=device, max_workers=len(jobs), threads=threads) as opened:
        return _run_on(jobs, opened, progress, write_archive)


def _run_on(jobs: list[Job], cluster: Cluster, progress: bool, write_archive: bool) -> BatchResult:
    from distributed import as_completed

    client = cluster.client
    archive = _ArchiveWriter(Path(jobs[0].request.out)) if write_archive else None
    topic = f"{EVENT_TOPIC}-{uuid.uuid4().hex[:12]}"
    bar = _ProgressBar(len(jobs), enabled=progress, cluster=cluster)
    client.subscribe_topic(topic, bar.event)
    # Largest recordings first: the last task to start is then a short one (less idle tail).
    order = sorted(range(len(jobs)), key=lambda i: -_size_of(jobs[i].input))
    started = time.perf_counter()
    futures = {client.submit(process_recording, jobs[i], cluster.threads, topic, pure=False,
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


class _ProgressBar:
    """One tqdm bar over recordings on stderr; stage events arrive on Dask's event thread."""

    def __init__(self, total: int, enabled: bool, cluster: Cluster):
        self.enabled, self.total = enabled, total
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.running: dict[str, str] = {}
        self.done: set[str] = set()
        self.bar = None
        if not enabled:
            return
        from tqdm import tqdm

        where = f"{cluster.workers} worker{'s' if cluster.workers != 1 else ''} ({cluster.kind})"
        print(f"batch: {total} recording{'s' if total != 1 else ''} on {where}"
              + (f"; Dask dashboard {cluster.dashboard}" if cluster.dashboard else ""), file=sys.stderr)
        self.bar = tqdm(total=total, desc="recordings", unit="rec", file=sys.stderr, dynamic_ncols=True,
                        bar_format="{desc} {n}/{total} |{bar:20}| {elapsed}<{remaining}{postfix}")

    def event(self, event) -> None:
        _, msg = event
        with self.lock:
            if msg["stage"] == "done":  # sent as the task returns, before its result is collected
                self.running.pop(msg["input"], None)
            elif msg["input"] not in self.done:
                self.running[msg["input"]] = msg["stage"]
            self._postfix()

    def finished(self, row: dict) -> None:
        with self.lock:
            self.done.add(row["input"])
            self.running.pop(row["input"], None)
            self.counts[row["status"]] += 1
            if self.bar is not None:
                self._postfix()
                self.bar.update(1)

    def tick(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.refresh()

    def _postfix(self) -> None:
        if self.bar is None:
            return
        from pipeline.run import STAGES

        counts = " ".join(f"{status} {self.counts[status]}" for status in ("ok", "cached", "failed")
                          if self.counts[status])
        stages = ", ".join(f"{display_name(path)}: {STAGES.get(stage, 'starting').lower()}"
                           for path, stage in list(self.running.items())[:3])
        more = f" +{len(self.running) - 3}" if len(self.running) > 3 else ""
        self.bar.set_postfix_str(f"{counts}{' · ' if counts else ''}running {len(self.running)}"
                                 + (f" [{stages}{more}]" if stages else ""), refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


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

