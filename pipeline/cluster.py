"""The Dask cluster a batch runs on, started or connected to, and closed again.

- ``local``: ``distributed.LocalCluster`` with one process per worker, one task at a time per
  worker, and a thread budget per worker (PyTorch, Numba, OpenMP) of ``cores // workers``, so
  that the workers together never ask for more threads than there are cores;
- ``local-cuda``: dask-cuda's workers, ``per_gpu`` of them on each visible GPU (each sees its own
  GPU as device 0 and makes the pipeline's RMM pool there, see
  :func:`pipeline.backend.use_rmm_pool`), with the same thread budget. One recording's small VAE
  leaves most of a GPU idle, and a worker runs its stages one after another (read, segment,
  train, score, write): with two or more workers on a GPU one trains while another reads or
  writes (and under CUDA MPS their kernels also run side by side);
- a scheduler address (``tcp://host:8786``): an existing cluster, on one machine or many; the
  code is the same, only the address changes.

Dask is imported only where a cluster is opened: reading a batch's archive needs none of it.

See Also
--------
pipeline.batch.run_batch : sends one task per recording to the cluster.
pipeline.batch_task.configure_worker : applies the thread budget on each worker.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

CLUSTERS = ("auto", "local", "local-cuda")  # or a scheduler address such as tcp://host:8786
# Worker processes per GPU on local-cuda: four nearly doubled a GPU's recordings a minute; under
# CUDA MPS, whose workers' kernels run side by side, eight kept an H200 busiest (figures in
# docs/user-guide.md). Never fewer than 2 cores each: reading, segmentation and writing are host work.
PER_GPU = 4
PER_GPU_MPS = 8
CORES_PER_WORKER = 2
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


@dataclass
class Cluster:
    """A connected Dask client and what the batch needs to know about its workers."""

    client: object
    kind: str                 # local | local-cuda | the scheduler address
    workers: int
    threads: int | None       # thread budget per worker (None: the cluster's own settings)
    dashboard: str | None
    startup_s: float
    per_gpu: int = 1          # local-cuda: workers sharing each GPU


@contextlib.contextmanager
def open_cluster(cluster: str = "auto", workers: int | None = None, device: str = "auto",
                 max_workers: int | None = None, threads: int | None = None, per_gpu: int | None = None):
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
    per_gpu : int, optional
        ``local-cuda``: worker processes on each GPU (default: :func:`default_per_gpu`). Ignored
        otherwise.
    """
    from pipeline import backend

    for name, value in (("workers", workers), ("threads", threads), ("per_gpu", per_gpu)):
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
        gpus = _gpu_count()
        if workers is not None and workers > gpus:
            raise ValueError(f"--workers {workers} asks for more GPUs than the {gpus} visible ones")
        gpus = min(workers or gpus, max_workers or gpus)
        per_gpu = per_gpu or default_per_gpu(gpus)
        if max_workers:  # no idle workers: their start costs time
            per_gpu = min(per_gpu, -(-max_workers // gpus))
        n = gpus * per_gpu
        threads = threads or max(1, usable_cores() // n)
        client = _local_cuda_cluster(gpus, per_gpu, threads)
    elif "://" in cluster or ":" in cluster:
        client = _connect(cluster)
        n = len(client.scheduler_info()["workers"])
    else:
        raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)} or a scheduler address such as "
                         f"tcp://host:8786; got {cluster!r}")
    handle = Cluster(client, cluster, n, threads, _dashboard_link(client), time.perf_counter() - started,
                     per_gpu if cluster == "local-cuda" else 1)
    try:
        yield handle
    finally:
        _close(client, owned=cluster in ("local", "local-cuda"))


def default_per_gpu(gpus: int) -> int:
    """Workers per GPU when ``--per-gpu`` is not given: :data:`PER_GPU_MPS` while a CUDA MPS daemon
    runs, else :data:`PER_GPU`; fewer where the host has under :data:`CORES_PER_WORKER` cores each."""
    wanted = PER_GPU_MPS if mps_running() else PER_GPU
    return max(1, min(wanted, usable_cores() // (CORES_PER_WORKER * max(1, gpus))))


def mps_running() -> bool:
    """Whether a CUDA MPS daemon (``nvidia-cuda-mps-control -d``) runs on this machine: its
    process names, as ``/proc`` shows them, begin ``nvidia-cuda-mps``."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().startswith("nvidia-cuda-mps"):
                return True
    return False


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


# A local cluster's processes log nothing to the user's terminal below CRITICAL: the commands
# report every failed task in one line themselves, and a worker that outlives the scheduler at
# shutdown logs a failed heartbeat (ERROR) after that line.
QUIET = logging.CRITICAL


def _local_cluster(n: int, threads: int):
    from distributed import Client, LocalCluster

    with _starting_workers(threads):
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=_dashboard_address(), silence_logs=QUIET)
    return Client(cluster)


def _local_cuda_cluster(gpus: int, per_gpu: int, threads: int):
    """dask-cuda's worker recipe (its own GPU first in ``CUDA_VISIBLE_DEVICES``, pinned to the cores
    near that GPU, a CUDA context made at start), ``per_gpu`` workers of it for each of the first
    ``gpus`` visible GPUs, sharing that GPU's part of the host memory."""
    import copy

    from distributed import Client, Scheduler, SpecCluster

    try:
        from dask_cuda.worker_spec import worker_spec
    except ImportError:
        raise ValueError("--cluster local-cuda needs dask-cuda (pip install '.[gpu]')") from None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",")[:gpus] if visible else list(range(gpus))
    with _starting_workers(threads):
        recipe = worker_spec(CUDA_VISIBLE_DEVICES=devices, threads_per_worker=1, silence_logs=QUIET,
                             dashboard_address=None)
        specs = {}
        for device, spec in recipe.items():
            for k in range(per_gpu):
                one = copy.deepcopy(spec)
                # its preload's argument as a list: a SpecCluster would pass a string's characters
                one["options"].update(memory_limit=int(spec["options"]["memory_limit"]) // per_gpu, host="127.0.0.1",
                                      preload=["dask_cuda.initialize"], preload_argv=["--create-cuda-context"])
                specs[f"gpu{device}-{k}"] = one
        scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": _dashboard_address()}}
        cluster = SpecCluster(workers=specs, scheduler=scheduler, silence_logs=QUIET)
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

