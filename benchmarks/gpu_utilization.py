"""How busy each GPU was while something ran: NVML's utilization counter, sampled in a thread.

    with GpuUtilization() as busy:
        ...                      # the work
    busy.mean()                  # {nvml index: mean % of time a kernel ran}, over the block

NVML's ``gpu`` utilization is the share of its last sample period (1/6 s to 1 s, by device) in
which at least one kernel ran: it says the GPU was never idle, not that its cores were full.
Without NVML (no nvidia-ml-py, no driver) the sampler records nothing and ``mean`` is empty.
"""
from __future__ import annotations

import contextlib
import statistics
import threading


class GpuUtilization:
    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.samples: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list = []

    def __enter__(self) -> "GpuUtilization":
        with contextlib.suppress(Exception):  # no NVML: nothing to sample
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.samples = {i: [] for i in range(len(self._handles))}
        if self._handles:
            self._thread = threading.Thread(target=self._sample, name="gpu-utilization", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._handles:
            import pynvml

            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()

    def _sample(self) -> None:
        import pynvml

        while not self._stop.wait(self.interval_s):
            for i, handle in enumerate(self._handles):
                with contextlib.suppress(Exception):
                    self.samples[i].append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

    def mean(self) -> dict[int, float]:
        return {i: round(statistics.fmean(s), 1) for i, s in self.samples.items() if s}
