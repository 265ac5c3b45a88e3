"""How one contender is timed at one size, and what machine it ran on.

A cell (contender × size) runs once untimed-in-the-statistics (the *first run*: JIT compilation,
FFT plans, pool growth, oneDNN primitives; its time is reported on its own, since a server start
pays it), then repeats until ``repeats`` runs are in or the timed runs have spent ``budget_s``
(at least one timed run). Every run reads the clock after synchronising the device.

Peak memory, per run, counts what the run allocates on top of what the process already held
(its input included in that):

- GPU: RMM statistics (``backend.PeakMemory`` pushes a fresh counter frame for the run and
  reads its peak). cuFFT plan work areas are allocated through RMM
  while a plan is made, so they count in the first run at each size (the plan cache is cleared
  before it) and not in the repeats that reuse the plan.
- Host: the kernel's high-water mark of resident memory (``VmHWM``), reset before each run by
  writing 5 to ``/proc/self/clear_refs``, minus the resident size at the start of the run. Where
  the kernel refuses the reset, a thread samples ``VmRSS`` every 2 ms instead (short spikes can
  be missed); the JSON says which method was used.

See Also
--------
benchmarks.contenders : the runs being timed.
benchmarks.report : what is made of the measurements.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pipeline import backend


def synchronize(device: str) -> None:
    """Wait for all queued device work: CuPy's stream (``backend.synchronize``) and, since
    PyTorch and Numba may queue on other streams, the whole device."""
    backend.synchronize(device)
    if device == "gpu":
        import cupy

        cupy.cuda.runtime.deviceSynchronize()


# --------------------------------------------------------------------------- host memory
def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field_name}:\s+(\d+) kB", f.read(), re.MULTILINE)
    return int(match.group(1)) if match else 0


class HostPeak:
    """Peak resident memory of this process during a run, above its resident size at the start."""

    def __init__(self):
        self.method = self._pick_method()
        self._start = 0
        self._sampled = 0
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def _pick_method() -> str:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            if _status_kib("VmHWM") > 0:
                return "VmHWM reset through /proc/self/clear_refs"
        except OSError:
            pass
        if os.path.exists("/proc/self/status"):
            return "VmRSS sampled every 2 ms"
        return "none"

    def start(self) -> None:
        if self.method == "none":
            return
        self._start = _status_kib("VmRSS")
        if self.method.startswith("VmHWM"):
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return
        self._sampled = self._start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self._sampled = max(self._sampled, _status_kib("VmRSS"))

    def stop(self) -> int | None:
        """Bytes above the start's resident size at the peak (None when not measurable here)."""
        if self.method == "none":
            return None
        if self.method.startswith("VmHWM"):
            peak = _status_kib("VmHWM")
        else:
            self._stop.set()
            self._thread.join()
            peak = max(self._sampled, _status_kib("VmRSS"))
        return max(peak - self._start, 0) * 1024


# --------------------------------------------------------------------------- one cell
@dataclass
class Prepared:
    """A contender made ready for one size: ``run()`` is timed and returns metrics; ``after()``
    (optional) cleans up after each run, off the clock; ``workload`` names the work when it does not
    grow with the size (a capped beat count), so that the same work is not timed twice."""

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

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)


def measure(prepared: Prepared, device: str, *, repeats: int, budget_s: float, host_peak: HostPeak,
            gpu_memory: bool) -> Measurement:
    """First run, then timed repeats (see the module docstring)."""

    def once():
        with backend.PeakMemory("gpu" if gpu_memory else "cpu") as gpu_peak:
            synchronize(device)
            host_peak.start()
            started = time.perf_counter()
            metrics = prepared.run()
            synchronize(device)
            seconds = time.perf_counter() - started
            host = host_peak.stop()
            gpu = gpu_peak.read().get("gpu_peak_bytes")
        if prepared.after:
            prepared.after()
        return seconds, metrics or {}, gpu, host

    first_s, first_metrics, gpu_peak, host_peak_bytes = once()
    times, metrics, stopped = [], [], False
    gpu_peaks, host_peaks = [gpu_peak], [host_peak_bytes]
    while len(times) < repeats:
        if times and sum(times) + statistics.median(times) > budget_s:
            stopped = True
            break
        seconds, m, gpu, host = once()
        times.append(seconds)
        metrics.append(m)
        gpu_peaks.append(gpu)
        host_peaks.append(host)
    return Measurement(first_s, times, metrics, first_metrics, _max(gpu_peaks), _max(host_peaks), stopped)


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


# --------------------------------------------------------------------------- the machine
def describe_machine(gpu: bool) -> dict:
    """CPU model and cores, memory, GPU, library versions, load average (other processes)."""
    cpu_model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.MULTILINE).group(1).strip()
    except (OSError, AttributeError):
        pass
    info = {
        "cpu": cpu_model,
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_bytes": _meminfo_bytes("MemTotal"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": _versions(gpu),
        "load_average_start": load_average(),
        "python_loop_ms": python_loop_ms(),
    }
    import torch

    info["torch_threads"] = torch.get_num_threads()
    if gpu:
        import cupy

        device = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(device.id)
        info["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        info["gpu_memory_bytes"] = int(props["totalGlobalMem"])
        info["gpu_count"] = cupy.cuda.runtime.getDeviceCount()
        info["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
        info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    return info


def machine_name(info: dict) -> str:
    """``h200`` for an 'NVIDIA H200', ``cpu-2core`` without a GPU."""
    if "gpu" in info:
        name = re.sub(r"^(nvidia|amd)\s+", "", info["gpu"].strip(), flags=re.IGNORECASE)
        return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
    return f"cpu-{info['cpu_cores_usable']}core"


def _versions(gpu: bool) -> dict:
    names = ["numpy", "scipy", "pandas", "pyarrow", "numba", "torch", "neurokit2", "matplotlib"]
    if gpu:
        names += ["cupy-cuda13x", "cupy-cuda12x", "cudf-cu13", "cudf-cu12", "rmm-cu13", "rmm-cu12", "numba-cuda"]
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    import pipeline

    out["pipeline"] = pipeline.__version__
    return out


def _meminfo_bytes(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            return int(re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE).group(1)) * 1024
    except (OSError, AttributeError):
        return None


def python_loop_ms() -> float:
    """Milliseconds for a fixed pure-Python workload (the median of three sums of ten million
    integers): how fast this machine's cores ran at that moment. The load average counts only this
    machine's own processes, while a shared virtual machine's cores also change speed from hour to
    hour with nothing else running on it, and every benchmark's times with them."""
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

