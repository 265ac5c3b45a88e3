"""How every benchmark measures: device-synchronised clocks, a cell's first run and repeats, peak
memory, summaries of repeated times, the time budget, and the machine it ran on (the method:
docs/benchmarking.md, "How benchmarks.run measures").
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import math
import os
import platform
import re
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from pipeline import backend
from tests.support.served import process_rss_bytes


def synchronize(device: str) -> None:
    """Wait for CuPy's stream and, since PyTorch and Numba may queue on other streams, the whole device."""
    backend.synchronize(device)
    if device == "gpu":
        import cupy

        cupy.cuda.runtime.deviceSynchronize()


def clocked(fn: Callable[[], object], device: str, repeats: int) -> tuple[list[float], object]:
    """Seconds of each of ``repeats`` calls of ``fn``, the device synchronised before and after each; the last
    call's result."""
    times, result = [], None
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        result = fn()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return times, result


# --------------------------------------------------------------------------- summaries
def summary(values, digits: int = 1) -> dict:
    """``{n, median, p95, max, min, values}`` of ``values`` (any unit; NaN where there are none)."""
    values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not values:
        return {"n": 0, "median": math.nan, "p95": math.nan, "max": math.nan, "min": math.nan, "values": []}
    return {"n": len(values), "median": round(float(np.median(values)), digits),
            "p95": round(float(np.percentile(values, 95)), digits), "max": round(max(values), digits),
            "min": round(min(values), digits), "values": [round(v, digits) for v in values]}


def summaries(samples: dict[str, list], groups: dict[str, Callable[[str], bool]]) -> dict:
    """:func:`summary` of each kind's values in ``samples``, then of each group's: the values of the
    kinds its function accepts (``{"all brushes": lambda kind: kind.startswith("brush")}``)."""
    out = {kind: summary(values) for kind, values in samples.items()}
    for name, member in groups.items():
        out[name] = summary([x for kind, values in samples.items() if member(kind) for x in values])
    return out


def p95_ratio(loaded: dict, reference: dict | None) -> float | None:
    """``loaded``'s p95 over ``reference``'s (two :func:`summary` results); None where either is empty."""
    if not reference or not reference["n"] or not loaded["n"]:
        return None
    return loaded["p95"] / reference["p95"]


# --------------------------------------------------------------------------- the budget
class StepTimeout(Exception):
    pass


class Budget:
    """The time a whole benchmark may take (``None``: no limit), and each step's share of it."""

    def __init__(self, seconds: float | None):
        self.started = time.perf_counter()
        self.end = math.inf if seconds is None else self.started + seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return self.end - time.perf_counter()

    @contextlib.contextmanager
    def deadline(self, seconds: float):
        """Raise :class:`StepTimeout` in the main thread after ``seconds`` (SIGALRM)."""
        def expire(signum, frame):
            raise StepTimeout(f"step took longer than {seconds:.0f} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, max(min(seconds, 1e6), 1))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- one cell
@dataclass
class Prepared:
    """A contender made ready for one size: ``run()`` is timed and returns metrics; ``after()``
    cleans up after each run, off the clock; ``workload`` names work that does not grow with the
    size (a capped beat count), so that the same work is not timed twice."""

    run: Callable[[], dict]
    after: Callable[[], None] | None = None
    workload: str | None = None
    info: dict = field(default_factory=dict)


@dataclass
class Measurement:
    first_s: float
    times_s: list[float]
    metrics: list[dict]               # one per timed run
    first_metrics: dict
    gpu_peak_bytes: int | None        # max over all runs, first included
    host_peak_extra_bytes: int | None
    stopped_by_budget: bool


def measure(prepared: Prepared, device: str, *, repeats: int, budget_s: float, gpu_memory: bool) -> Measurement:
    """The first run (JIT compilation, FFT plans, pool growth: reported apart), then timed repeats
    until ``repeats`` are in or they have spent ``budget_s``. Host memory is the resident peak above
    the run's start (None where ``/proc/self/clear_refs`` cannot reset the peak)."""

    def once():
        with backend.PeakMemory("gpu" if gpu_memory else "cpu") as peak:
            start_rss = process_rss_bytes(os.getpid())
            (seconds,), metrics = clocked(prepared.run, device, 1)
            read = peak.read()
        if prepared.after:
            prepared.after()
        host = max(read["host_peak_rss_bytes"] - start_rss, 0) if read["host_peak_scope"] == "run" else None
        return seconds, metrics or {}, read.get("gpu_peak_bytes"), host

    first_s, first_metrics, gpu, host = once()
    times, metrics, peaks, stopped = [], [], [(gpu, host)], False
    while len(times) < repeats:
        if times and sum(times) + statistics.median(times) > budget_s:
            stopped = True
            break
        seconds, m, gpu, host = once()
        times.append(seconds)
        metrics.append(m)
        peaks.append((gpu, host))
    most = [max((p[k] for p in peaks if p[k] is not None), default=None) for k in (0, 1)]
    return Measurement(first_s, times, metrics, first_metrics, most[0], most[1], stopped)


# --------------------------------------------------------------------------- the machine
def describe_machine(gpu: bool) -> dict:
    """CPU model and cores, memory, GPU, library versions, load average, the cores' speed."""
    cpu_model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, AttributeError), open("/proc/cpuinfo") as f:
        cpu_model = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.MULTILINE).group(1).strip()
    memory = None
    with contextlib.suppress(OSError, AttributeError), open("/proc/meminfo") as f:
        memory = int(re.search(r"^MemTotal:\s+(\d+) kB", f.read(), re.MULTILINE).group(1)) * 1024
    names = ["numpy", "scipy", "pandas", "pyarrow", "numba", "torch", "neurokit2", "matplotlib", "panel", "bokeh",
             "holoviews", "datashader", "playwright", "tornado"]
    if gpu:
        names += ["cupy-cuda13x", "cupy-cuda12x", "cudf-cu13", "cudf-cu12", "rmm-cu13", "rmm-cu12", "numba-cuda",
                  "cuxfilter-cu13", "cuxfilter-cu12"]
    versions = {}
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    import pipeline
    import torch

    versions["pipeline"] = pipeline.__version__
    info = {"cpu": cpu_model, "cpu_cores": os.cpu_count(), "cpu_cores_usable": len(os.sched_getaffinity(0)),
            "memory_bytes": memory, "platform": platform.platform(), "python": platform.python_version(),
            "versions": versions, "load_average_start": load_average(), "python_loop_ms": python_loop_ms(),
            "torch_threads": torch.get_num_threads()}
    if gpu:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        info.update(gpu=props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
                    gpu_memory_bytes=int(props["totalGlobalMem"]), gpu_count=cupy.cuda.runtime.getDeviceCount(),
                    cuda_driver=cupy.cuda.runtime.driverGetVersion(), cuda_runtime=cupy.cuda.runtime.runtimeGetVersion())
    info["name"] = machine_name(info)
    return info


def machine_name(info: dict) -> str:
    """``h200`` for an 'NVIDIA H200', ``cpu-2core`` without a GPU."""
    if "gpu" in info:
        name = re.sub(r"^(nvidia|amd)\s+", "", info["gpu"].strip(), flags=re.IGNORECASE)
        return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
    return f"cpu-{info['cpu_cores_usable']}core"


def python_loop_ms() -> float:
    """Milliseconds for a fixed pure-Python workload (the median of three sums of ten million
    integers): how fast the cores ran at that moment (a shared machine's changes hour to hour)."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        sum(range(10_000_000))
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 1)


def load_average() -> list[float] | None:
    """1-, 5- and 15-minute load averages: how busy the machine was with other work too."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


class LoadWatch:
    """The 1-minute load average every few seconds while a benchmark runs."""

    def __init__(self, every_s: float = 5.0):
        self.samples: list[tuple[float, float]] = []
        self._stop, self._started = threading.Event(), time.perf_counter()
        threading.Thread(target=self._run, args=(every_s,), daemon=True).start()

    def _run(self, every_s):
        while not self._stop.is_set():
            self.samples.append((round(time.perf_counter() - self._started, 1), round(os.getloadavg()[0], 2)))
            self._stop.wait(every_s)

    def stop(self) -> dict:
        self._stop.set()
        return self.snapshot()

    def snapshot(self, since: int = 0) -> dict:
        """Samples from index ``since`` (``len(self.samples)`` at a part's start) on, their mean and max."""
        samples = self.samples[since:] or self.samples[-1:]
        loads = [x for _, x in samples]
        return {"one_minute_samples": samples, "mean": round(float(np.mean(loads)), 2) if loads else None,
                "max": max(loads) if loads else None}
