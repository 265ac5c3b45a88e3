"""How many CPU threads the pipeline's libraries use: the policy, in one place.

PyTorch's intra-op pool (OpenMP), MKL and Numba's parallel kernels each default to one thread per
CPU. When another process keeps a core busy, a parallel region then waits at its barrier for the
thread that shares that core, once per operator: measured on a 2-core machine, a 27 ms training
step took about 1 s (40×). The pipeline therefore uses half of the CPUs it may run on (at least
one): on 2 cores one thread, leaving the other to the browser, the dashboard server's own
thread and everything else; on machines with simultaneous multithreading, about one thread per
physical core. ``benchmarks/threads.py`` measures the effect.

The budget, in order: ``n`` given to :func:`limit_threads` (a worker's share of the machine),
``$ECG_THREADS``, ``$OMP_NUM_THREADS``, the policy above. An explicit ``n`` stays in force for
later calls without one in the same process, so that a worker's budget survives ``run_pipeline``.
"""
from __future__ import annotations

import os
import sys

ENV = "ECG_THREADS"
# Read by OpenMP, MKL and OpenBLAS when they load: libraries imported after limit_threads, and
# child processes, start with the budget too.
LIBRARY_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

_explicit: int | None = None


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads() -> int:
    """The policy: half of the available CPUs, at least one."""
    return max(1, available_cpus() // 2)


def resolve_threads(n: int | None = None) -> int:
    """The thread budget: ``n``, else an earlier explicit budget, else ``$ECG_THREADS``, else
    ``$OMP_NUM_THREADS``, else :func:`default_threads`."""
    if n is not None:
        return _positive(n, "threads")
    if _explicit is not None:
        return _explicit
    for name in (ENV, "OMP_NUM_THREADS"):
        if os.environ.get(name, "").strip():
            return _positive(os.environ[name], f"${name}")
    return default_threads()


def limit_threads(n: int | None = None) -> int:
    """Apply a thread budget (see :func:`resolve_threads`) to PyTorch, Numba, OpenMP and MKL; return it.

    PyTorch and Numba are set now when they are imported (Numba is imported for it); for libraries
    not yet loaded the budget goes into ``OMP_NUM_THREADS`` etc. Call it in the thread that will
    do the work: Numba's setting is per thread, and PyTorch applies its setting to a thread when
    that thread first runs a parallel operator.
    """
    global _explicit
    threads = resolve_threads(n)
    if n is not None:
        _explicit = threads
    for name in LIBRARY_ENV:
        os.environ[name] = str(threads)
    import numba

    # Numba first: starting its OpenMP pool resets the calling thread's OpenMP thread count,
    # which is also PyTorch's (they share the OpenMP runtime).
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(threads)
    return threads


def _positive(value, name: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"{name} must be a positive whole number of threads; got {value!r}")
    return number
