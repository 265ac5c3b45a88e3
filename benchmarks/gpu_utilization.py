"""How busy each GPU was while something ran: NVML's utilization counter, sampled in a thread.

    with GpuUtilization() as busy:
        ...                      # the work
    busy.mean()                  # {nvml index: mean % of time a kernel ran}, over the block

NVML's ``gpu`` utilization is the share of its last sample period (1/6 s to 1 s, by device) in
which at least one kernel ran: it says the GPU was never idle, not that its cores were full.
Without NVML (no nvidia-ml-py, no driver) nothing is sampled and ``mean`` is empty.
"""
from __future__ import annotations

import contextlib
import statistics
import threading


class GpuUtilization:
    def __init__(self, interval_s: float = 0.1):
        self.interval_s, self.samples, self._stop, self._thread = interval_s, {}, threading.Event(), None

    def __enter__(self) -> "GpuUtilization":
        with contextlib.suppress(Exception):  # no NVML: nothing to sample
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.samples = {i: [] for i in range(len(handles))}
            self._thread = threading.Thread(target=self._sample, args=(pynvml, handles), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            import pynvml

            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()

    def _sample(self, pynvml, handles) -> None:
        while not self._stop.wait(self.interval_s):
            for i, handle in enumerate(handles):
                with contextlib.suppress(Exception):
                    self.samples[i].append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

    def mean(self) -> dict[int, float]:
        return {i: round(statistics.fmean(s), 1) for i, s in self.samples.items() if s}
